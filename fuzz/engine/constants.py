"""Generation that depends on the seed alone.

Hypothesis (6.131 and later) draws, now and then, a constant found in the source of the *local* modules the
process has loaded (every module in ``sys.modules`` outside the standard library and site-packages: this
package, the tests, a conftest, a user's plug-in).  The cases a fuzz seed draws then depend on which modules
the process happened to import before, and on their source: a fixed-seed test shrank to 4 modules alone and to
7 after ``tests/test_cli.py`` had imported ``parityfuzz.frontends.report``, because its 13th case came out another.  A
seed must name one run wherever it runs, so parityfuzz fuzzes with that pool empty (Hypothesis's own global
constants stay: they depend on nothing of the process).

The pool is Hypothesis's internal state (``hypothesis.internal.conjecture.providers``); where a version lacks
it there is nothing to empty.  ``tests/test_fuzz_loop.py`` checks that a run's cases do not change when a module
full of constants is loaded, so an upgrade that moves the pool fails there, not silently.
"""

from __future__ import annotations

import contextlib
import threading

#: How many rounds are inside :func:`without_local_constants` now (several where rounds wait in threads of their
#: own: :mod:`parityfuzz.engine.resumable`), and the pool's getter they replaced: the first to enter empties the
#: pool, the last to leave restores it, in whatever order they leave.
_state = {"depth": 0, "original": None}
_lock = threading.Lock()


@contextlib.contextmanager
def without_local_constants():
    """Within: Hypothesis draws no constant from the loaded modules' source."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants

        original, cache = providers._get_local_constants, providers.CONSTANTS_CACHE.cache
    except (ImportError, AttributeError):  # a Hypothesis without local constants: generation is the seed's
        yield
        return
    with _lock:
        _state["depth"] += 1
        if _state["depth"] == 1:
            _state["original"] = original
            empty = Constants()
            cache.clear()  # drawn constants are cached per choice kind; the cache may hold the loaded modules' ones
            providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                providers._get_local_constants = _state["original"]
                cache.clear()
