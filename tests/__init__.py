

def subprocess_environ(**extra: str) -> dict:
    """``os.environ`` for a process a test starts, plus ``extra``, without the pytest-xdist worker variables of the run
    the test is in: a pytest run started from a worker would otherwise take itself for one (and share no schedule)."""
    import os

    return {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}, **extra}
