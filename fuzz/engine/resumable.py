"""A Hypothesis round that a schedule's slice can pause and a later slice resume, where it stopped.

Hypothesis has no way to suspend a run and resume it: a run is one call.  An adaptive schedule
(:mod:`parityfuzz.engine.schedule`) gives a target many short slices, and a round cut at the end of each would start
the next slice from a fresh seed and from small examples, so a target's rounds would never reach their targeting
phase (hill-climbing on near misses, halfway through a round of :data:`parityfuzz.engine.fuzzer.ROUND_CASES`).  So a
target's round runs in a thread of its own (:class:`RoundThread`); at the end of a slice its property waits
(:meth:`RoundThread.pause`) before the next case, and the next slice of that target lets it go on.

One thread runs at a time, by hand-off: the driver (the thread that runs the schedule) waits while a round runs,
and a round waits while the driver does anything else.  Every call a round makes on the executor runs on the driver
(:class:`OnDriver`), never in the round's thread: the signal handlers raise Ctrl-C and SIGTERM there, in the thread
that waits on the ranks, exactly as when a round runs on the driver itself.  An interrupt that lands in the driver
while a round runs reaches the round as the exception of the executor call it is waiting for, or, between calls,
by :data:`parityfuzz.engine.fuzzer.interrupt_requested` (checked before every case); the round then records what it
found, as it does without threads, and the driver raises the interrupt once the round has ended.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

#: The round thread the current thread is (None on the driver).
_current = threading.local()


class RoundEnded(Exception):
    """Raised by :meth:`RoundThread.pause` when the driver ends the round instead of resuming it."""


class RoundThread:
    """Runs ``body()`` (one Hypothesis round) in a thread that hands control back and forth with the driver.

    The driver calls :meth:`resume` (the first time, it starts the thread); it returns ``("paused", None)`` when the
    round paused at the end of a slice, or ``("done", result)`` when ``body`` returned (its exception, if it raised,
    is raised on the driver).  The round calls :meth:`pause`, which returns what the driver resumed it with, and
    :meth:`call`, which runs a function on the driver.
    """

    def __init__(self, body: Callable[[], Any], name: str, on_interrupt: Callable[[], None] = lambda: None):
        self._body = body
        self._on_interrupt = on_interrupt
        self._thread = threading.Thread(target=self._main, name=f"parityfuzz round {name}", daemon=True)
        # Round -> driver: a message, and its event; driver -> round: a reply, and its event.
        self._message: tuple = ()
        self._posted = threading.Event()
        self._reply: tuple = ()
        self._replied = threading.Event()
        self.started = False
        self.paused = False
        self.finished = False

    # -- the driver's side --

    def resume(self, value: Any = None) -> tuple[str, Any]:
        """Let the round go on (``value`` is what its :meth:`pause` returns) until it pauses or ends."""
        assert not self.finished
        if not self.started:
            self.started = True
            self._thread.start()
            return self._serve()
        return self._go_on(("ok", value))

    def end(self) -> tuple[str, Any]:
        """End a paused round: its :meth:`pause` raises :class:`RoundEnded`; returns as :meth:`resume` does."""
        return self._go_on(("raise", RoundEnded()))

    def _go_on(self, reply: tuple) -> tuple[str, Any]:
        """Answer the paused round's :meth:`pause` with ``reply`` and serve it until it pauses again or ends."""
        assert self.paused
        self.paused = False
        self._answer(reply)
        return self._serve()

    def _serve(self) -> tuple[str, Any]:
        interrupted: BaseException | None = None
        while True:
            try:
                self._posted.wait()
            except KeyboardInterrupt as e:  # the round is busy outside the executor: it sees the flag at its next case
                interrupted = interrupted or e
                self._on_interrupt()
                continue
            self._posted.clear()
            kind, body = self._message
            if kind == "call":
                fn, args, kwargs = body
                try:
                    reply = ("ok", fn(*args, **kwargs))
                except KeyboardInterrupt as e:
                    interrupted = interrupted or e
                    self._on_interrupt()
                    reply = ("raise", e)
                except BaseException as e:  # noqa: BLE001 - the round's call raises it
                    reply = ("raise", e)
                self._answer(reply)
            elif kind == "paused":
                if interrupted is not None:  # (the round pauses only before a case: the flag stops it there first)
                    self._answer(("raise", KeyboardInterrupt("interrupted")))
                    continue
                self.paused = True
                return "paused", None
            else:  # "done"
                self.finished = True
                self._thread.join()
                ok, result = body
                if not ok:
                    raise result
                if interrupted is not None:
                    raise interrupted
                return "done", result

    def _answer(self, reply: tuple) -> None:
        self._reply = reply
        while True:
            try:
                self._replied.set()  # (idempotent: set again where an interrupt landed inside it)
                return
            except KeyboardInterrupt:
                self._on_interrupt()

    # -- the round's side --

    def _main(self) -> None:
        _current.thread = self
        try:
            out = (True, self._body())
        except BaseException as e:  # noqa: BLE001 - raised on the driver
            out = (False, e)
        self._post(("done", out), wait=False)

    def pause(self) -> Any:
        """Wait for the driver's next :meth:`resume` (its value) or :meth:`end` (:class:`RoundEnded`)."""
        return self._post(("paused", None))

    def call(self, fn: Callable, *args, **kwargs) -> Any:
        """``fn(*args, **kwargs)`` run on the driver."""
        return self._post(("call", (fn, args, kwargs)))

    def _post(self, message: tuple, wait: bool = True) -> Any:
        self._replied.clear()
        self._message = message
        self._posted.set()
        if not wait:
            return None
        self._replied.wait()
        kind, value = self._reply
        if kind == "raise":
            raise value
        return value


def current() -> RoundThread | None:
    """The round thread running now, or None on the driver."""
    return getattr(_current, "thread", None)


class OnDriver:
    """An executor whose methods, called from a round thread, run on the driver (:meth:`RoundThread.call`); from
    the driver, directly.  Attributes that are not methods are read where they are asked."""

    def __init__(self, executor):
        self._executor = executor

    def __getattr__(self, name: str):
        attr = getattr(self._executor, name)
        thread = current()
        if thread is None or not callable(attr):
            return attr
        return lambda *args, **kwargs: thread.call(attr, *args, **kwargs)
