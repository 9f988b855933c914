"""Hypothesis's generation as parityfuzz runs it: cases that depend on the seed alone, each drawn afresh.

**No local constants.**  Hypothesis (6.131 and later) draws, now and then, a constant found in the source of the
*local* modules the process has loaded (every module in ``sys.modules`` outside the standard library and
site-packages: this package, the tests, a conftest, a user's plug-in).  The cases a fuzz seed draws then depend on
which modules the process happened to import before, and on their source: a fixed-seed test shrank to 4 modules
alone and to 7 after ``tests/test_cli.py`` had imported ``parityfuzz.frontends.report``, because its 13th case came
out another.  A seed must name one run wherever it runs, so parityfuzz fuzzes with that pool empty (Hypothesis's
own global constants stay: they depend on nothing of the process).

**No span mutations.**  After each case it generates, Hypothesis runs up to five *mutations* of it: the case's
choices with one span copied over another of the same label (the same value at two places, cheap to try where a
test takes microseconds).  Here a case trains a model on several ranks for a fraction of a second to seconds, and
a mutation keeps the case's first choices, its swarm configuration (:mod:`parityfuzz.strategies.swarm`): up to
five in six of a run's cases repeated the training-loop dimensions of the case before them.  A run of 80 cases
saw a supported dimension in 2-6% of them on some seeds where the strategy draws it in 15-30% (the real fuzz loop,
every case judged at once: ``tests/test_fuzz_loop.py``); without the mutations each case is a fresh draw and the
shares stay near the strategy's.  Shrinking is Hypothesis's own, untouched.

**Shrinking ends with its budget.**  Once a round's shrink budget is spent, its property counts every untried case
as passing without running it, but Hypothesis's shrinker would go on through its passes: each candidate a draw of a
case from the strategy (tens of milliseconds here, where a test's draw usually takes microseconds), hundreds of
them, 8 s past the budget in a test whose budget was 4 s.  Hypothesis has no public limit on shrinking time (its
engine stops on its own after five minutes), so the round tells its engine, through :func:`shrinking_until`, to
stop as its own limits do: with the smallest failure found so far.

All three are Hypothesis's internal state (``hypothesis.internal.conjecture``); where a version lacks one there is
nothing to turn off (and shrinking then runs to Hypothesis's own end).  ``tests/test_fuzz_loop.py`` checks that a
run's cases do not change when a module full of constants is loaded, and that a short run's dimension shares stay
near the strategy's, so an upgrade that moves either fails there, not silently; ``tests/test_round_keeps.py`` that
a target with a finding ends by its deadline.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

#: Per patched attribute ``(owner, name)``: how many rounds are inside its patch now (several where rounds wait in
#: threads of their own: :mod:`parityfuzz.engine.resumable`), and the value they replaced: the first to enter
#: patches, the last to leave restores, in whatever order they leave.
_state: dict[tuple, list] = {}
_lock = threading.Lock()


@contextlib.contextmanager
def _patched(owner, name: str, value, on_change=lambda: None):
    """``owner.name`` is ``value`` while any round is inside (``on_change``: called at each patch and restore)."""
    with _lock:
        depth = _state.setdefault((owner, name), [0, None])
        depth[0] += 1
        if depth[0] == 1:
            depth[1] = getattr(owner, name)
            setattr(owner, name, value)
            on_change()
    try:
        yield
    finally:
        with _lock:
            depth[0] -= 1
            if depth[0] == 0:
                setattr(owner, name, depth[1])
                on_change()


@contextlib.contextmanager
def without_local_constants():
    """Within: Hypothesis draws no constant from the loaded modules' source."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
        providers._get_local_constants, providers.CONSTANTS_CACHE.cache  # noqa: B018 - present in this version
    except (ImportError, AttributeError):  # a Hypothesis without local constants: generation is the seed's
        yield
        return
    empty = Constants()
    # (drawn constants are cached per choice kind; the cache may hold the loaded modules' ones)
    with _patched(providers, "_get_local_constants", lambda: empty, providers.CONSTANTS_CACHE.cache.clear):
        yield


@contextlib.contextmanager
def without_span_mutations():
    """Within: Hypothesis runs no span mutations after a generated case (each case is a fresh draw)."""
    try:
        from hypothesis.internal.conjecture.engine import ConjectureRunner
        ConjectureRunner.generate_mutations_from  # noqa: B018 - present in this version
    except (ImportError, AttributeError):
        yield
        return
    with _patched(ConjectureRunner, "generate_mutations_from", lambda self, data: None):
        yield


#: Per thread (a round runs in its own where a schedule resumes it): whether its shrink budget is spent.
_shrinks = threading.local()


def _ending_spent_shrinks(test_function):
    """``ConjectureRunner.test_function``, after which the engine stops where this thread's round says its shrink
    budget is spent (as the engine stops at its own limits: ``exit_with``, keeping the failures found so far)."""
    from hypothesis.internal.conjecture.engine import ExitReason

    def ending(self, data):
        test_function(self, data)
        spent = getattr(_shrinks, "spent", None)
        if spent is not None and spent():
            self.exit_with(ExitReason.very_slow_shrinking)
    return ending


@contextlib.contextmanager
def shrinking_until(spent: Callable[[], bool]):
    """Within (in this thread): Hypothesis's engine stops once ``spent()`` holds after a test call."""
    try:
        from hypothesis.internal.conjecture.engine import ConjectureRunner, ExitReason
        ConjectureRunner.test_function, ConjectureRunner.exit_with, ExitReason.very_slow_shrinking  # noqa: B018
    except (ImportError, AttributeError):
        yield
        return
    before = getattr(_shrinks, "spent", None)
    _shrinks.spent = spent
    try:
        # (the wrapper is built from the attribute as it is; it is set only by the first round to enter)
        with _patched(ConjectureRunner, "test_function", _ending_spent_shrinks(ConjectureRunner.test_function)):
            yield
    finally:
        _shrinks.spent = before


@contextlib.contextmanager
def fuzzing(shrink_spent: Callable[[], bool] = lambda: False):
    """Generation as a fuzz round runs it: no local constants, no span mutations, and (in this thread) shrinking
    stops once ``shrink_spent()`` holds."""
    with without_local_constants(), without_span_mutations(), shrinking_until(shrink_spent):
        yield
