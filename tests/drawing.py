"""Drawing from a strategy in a test, as a fuzz run draws (shared by the tests that search for a rare draw)."""

from hypothesis import given, seed
from hypothesis.errors import NoSuchExample

from parityfuzz.engine.generation import without_local_constants


class _Found(Exception):
    def __init__(self, example):
        self.example = example


def find(strategy, condition, settings):
    """The first of up to ``settings.max_examples`` draws of ``strategy`` from a fixed seed that meets
    ``condition`` (``NoSuchExample`` if none), drawn as a fuzz run draws: plain generation, with no constant taken
    from the loaded modules' source (:mod:`parityfuzz.engine.generation`).  Not Hypothesis's ``find``, whose search
    met a rare draw in one process and not in another: a CI run found no overflowing step among fsdp2's first 3000
    draws where the same code found one at draw 2010 in a fresh process (the pool of constants differs with what a
    process loaded).  ``settings`` should name ``max_examples``: Hypothesis's generation depends on it, and
    pytest's profile (the plugin's "dev" or "ci") sets another default than a plain process."""
    @seed(0)
    @settings
    @given(strategy)
    def search(example):
        if condition(example):
            raise _Found(example)

    with without_local_constants():
        try:
            search()
        except _Found as found:
            return found.example
    raise NoSuchExample(f"no draw of {settings.max_examples} met the condition")
