"""A pool of persistent rank processes for one world size."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from parityfuzz.executor.worker import worker_main

#: After one rank fails, how long the others get to answer before they count as hung.
ERROR_GRACE_S = 2.0


class PoolStartError(RuntimeError):
    pass


#: How rank processes start: ``forkserver``, forked from a template that imported torch once
#: (:mod:`parityfuzz.executor.zygote`), or ``spawn``, each a fresh interpreter importing torch (where the platform
#: has no fork, and for the benchmark's comparison).
START_METHODS = ("forkserver", "spawn")


def start_context(method: str = "forkserver"):
    """The multiprocessing context ranks start in (``forkserver`` where the platform has it, else ``spawn``)."""
    import sys

    from parityfuzz.executor import zygote

    if method == "forkserver" and "forkserver" in mp.get_all_start_methods() and sys.platform == "linux":
        os.environ[zygote.DRIVER] = str(os.getpid())  # (read by the server this process starts: zygote.py)
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([zygote.__name__])
        return ctx
    return mp.get_context("spawn")


@dataclass
class RankOutcome:
    """What one rank did with one case.

    ``status``: ``ok`` (``result`` holds its traces), ``error`` (``error`` holds
    role/type/message/traceback), ``crash`` (the process died: ``exitcode``,
    negative for a signal) or ``hang`` (no answer in time).  ``log`` is the tail
    of the rank's output for crashes and hangs (stack dumps included).
    """

    rank: int
    status: str
    result: object = None
    error: dict = field(default_factory=dict)
    exitcode: int | None = None
    log: str = ""


def process_resources(pid: int) -> dict:
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.strip()
    return {"rss_mib": round(int(status["VmRSS"].split()[0]) / 1024, 1), "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def _tail(path: str, limit: int = 6000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def in_step(states: list[dict | None]) -> bool:
    """Whether the ranks' process groups agree after a failed case (``_collective_state`` of each rank): every
    rank made as many groups, and issued as many collectives on each group as every other rank holding it."""
    if not states or any(s is None for s in states):
        return False
    if len({s["groups_made"] for s in states}) != 1:
        return False
    seen: dict[str, int] = {}
    for s in states:
        for name, count in s["collectives"].items():
            if seen.setdefault(name, count) != count:
                return False
    return True


class RankPool:
    """``world_size`` rank processes joined in one process group, reused across cases.

    After a crash or a hang the pool is ``broken`` (its process group may be
    wedged) and must be closed and replaced.  After errors it is kept only
    where every rank raised one outside the collectives and their process
    groups are in step (:func:`in_step`): then no rank is inside a collective
    and the next case may start on the same ranks, which saves the ~2 s a
    respawn costs (shrinking an error runs dozens of failing candidates).
    """

    def __init__(self, world_size: int, backend: str, start_timeout_s: float = 120.0, pg_timeout_s: float = 300.0,
                 devices: tuple[int, ...] = (), start_method: str = "forkserver"):
        self.world_size = world_size
        self.backend = backend
        self.devices = devices or tuple(range(world_size))  # each rank's CUDA device under NCCL
        self.broken = False
        self.busy = False  # a case is in flight (an interrupt may land mid-case)
        self.runs = 0  # cases these ranks ran (an earlier case's damage may crash a later one)
        self.dir = tempfile.mkdtemp(prefix=f"parityfuzz-ws{world_size}-")
        ctx = start_context(start_method)
        forked = ctx.get_start_method() == "forkserver"
        self.conns, self.procs, self.logs = [], [], []
        store = os.path.join(self.dir, "store")
        try:
            for r in range(world_size):
                parent, child = ctx.Pipe()
                log = os.path.join(self.dir, f"rank{r}.log")
                p = ctx.Process(target=worker_main, name=f"parityfuzz-rank{r}", daemon=True,
                                args=(r, world_size, store, child, backend, log, os.getpid(), pg_timeout_s,
                                      self.devices[r], dict(os.environ) if forked else None))
                p.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(p)
                self.logs.append(log)
            self._await_ready(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for r, conn in enumerate(self.conns):
            left = deadline - time.monotonic()
            if left <= 0 or not conn.poll(left):
                raise PoolStartError(f"rank {r} of {self.world_size} did not start in {timeout:.0f}s:\n{_tail(self.logs[r])}")
            try:
                conn.recv()
            except EOFError:
                raise PoolStartError(f"rank {r} died while starting:\n{_tail(self.logs[r])}") from None

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def resources(self) -> list[dict]:
        """Each rank's resident MiB, threads and open descriptors (Linux /proc; empty elsewhere)."""
        out = []
        for pid in self.pids():
            try:
                out.append(process_resources(pid))
            except (OSError, KeyError, ValueError):
                return []
        return out

    def run(self, payload: str, timeout_s: float, roles: tuple[str, ...] = ("reference", "system"),
            job: dict | None = None) -> list[RankOutcome]:
        """Send one case (JSON) to every rank, to be run by each of ``roles``, and collect their outcomes.
        ``job`` says which segment of a checkpoint event to run, and where to save (:func:`parityfuzz.run.train.run_system`)."""
        assert not self.broken, "a broken pool must be replaced"
        self.busy = True
        for conn in self.conns:
            conn.send(("run", payload, roles, job or {}))
        deadline = time.monotonic() + timeout_s
        outcomes: dict[int, RankOutcome] = {}
        pending = set(range(self.world_size))
        first_failure_at = None
        while pending:
            limit = deadline if first_failure_at is None else min(deadline, first_failure_at + ERROR_GRACE_S)
            handles = {h: r for r in pending for h in self._handles(r)}
            ready = wait(list(handles), timeout=max(0.0, limit - time.monotonic()))
            if not ready:
                break
            for r in {handles[h] for h in ready} & pending:
                outcome = self._collect(r)
                if outcome is None:
                    continue
                outcomes[r] = outcome
                pending.discard(r)
                if outcome.status != "ok" and first_failure_at is None:
                    first_failure_at = time.monotonic()
        for r in pending:
            outcomes[r] = RankOutcome(r, "hang")
        self.busy = False
        self.runs += 1
        states = [o.error.pop("collectives", None) for o in outcomes.values() if o.status == "error"]
        if any(o.status != "ok" for o in outcomes.values()) and not (len(states) == self.world_size
                                                                      and in_step(states)):
            self.broken = True
            self._dump_stacks(pending)
            for o in outcomes.values():
                if o.status in ("crash", "hang"):
                    o.log = self._log(o.rank)
        return [outcomes[r] for r in range(self.world_size)]

    def _handles(self, r: int) -> list:
        """What to wait on for rank ``r``'s answer or death: its connection and its process."""
        return [self.conns[r], self.procs[r].sentinel]

    def _log(self, r: int) -> str:
        """The tail of rank ``r``'s output (its stacks, after :meth:`_dump_stacks`)."""
        return _tail(self.logs[r])

    def _collect(self, r: int) -> RankOutcome | None:
        conn, proc = self.conns[r], self.procs[r]
        if conn.poll():
            try:
                kind, body = conn.recv()
            except (EOFError, OSError):
                pass  # the rank died; report it below
            else:
                return RankOutcome(r, "ok", result=body) if kind == "ok" else RankOutcome(r, "error", error=body)
        if proc.is_alive():
            return None
        proc.join()
        return RankOutcome(r, "crash", exitcode=proc.exitcode)

    def _dump_stacks(self, ranks) -> None:
        for r in ranks:
            if self.procs[r].is_alive():
                try:
                    os.kill(self.procs[r].pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        if ranks:
            time.sleep(0.3)

    def recycle(self) -> None:
        """Replace healthy ranks grown past the resource ceiling (:class:`parityfuzz.executor.Executor`)."""
        self.close()

    def close(self, graceful: bool = True) -> None:
        """Stop every rank: ask politely when healthy, then SIGTERM, then SIGKILL."""
        if graceful and not self.broken and not self.busy:
            for conn in self.conns:
                try:
                    conn.send(("stop",))
                except (OSError, ValueError):
                    pass
            for p in self.procs:
                p.join(3.0)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []
        shutil.rmtree(self.dir, ignore_errors=True)
