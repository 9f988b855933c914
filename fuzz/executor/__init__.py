"""Runs cases on persistent rank processes: one pool per world size, started once (forked from a template that
imported torch: :mod:`parityfuzz.executor.zygote`), reused.

CPU + gloo by default; CUDA + NCCL when the machine has at least
``world_size`` GPUs.  A pool that saw an error, a crash or a hang is torn down
and started anew on its next use.
"""

from __future__ import annotations

import tempfile

from parityfuzz.case import Case
from parityfuzz.executor.devices import local_placement
from parityfuzz.executor.pool import PoolStartError, RankOutcome, RankPool


def auto_backend(world_size: int) -> str:
    """The backend a pool of this size gets here (:mod:`parityfuzz.executor.devices`)."""
    return local_placement(world_size).backend


def default_timeout(case: Case) -> float:
    """Seconds a case may take: generous for its size on a slow 2-core machine (a restart on a warm cache trains
    and compiles the system under test twice; every rank compiles its own graphs, 4 ranks on 2 cores in turn: a
    compiled 4-rank corpus file, replayed whole in 22 s here, went past its 34 s while the machine was busy twice
    over)."""
    compiling = 15.0 * case.world_size if case.compile else 0.0
    return (60.0 if case.compile.restart else 30.0) + 1.0 * case.train.steps * case.world_size + compiling


#: A rank past any of these is recycled after its case: torch leaks process groups in places (FSDP2 makes a
#: new post-forward mesh for each ``fully_shard(reshard_after_forward=<int>)``), and each holds threads and
#: descriptors.  Well under the usual 1024-descriptor limit.
RESOURCE_CEILING = {"threads": 160, "fds": 320, "rss_mib": 2048}


class Executor:
    def __init__(self, backend: str = "auto", timeout_s: float | None = None,
                 ceiling: dict | None = None, reuse_after_errors: bool = True, attach: str = "",
                 start_method: str = "forkserver"):
        self.backend = backend
        #: How local ranks start (:data:`parityfuzz.executor.pool.START_METHODS`).
        self.start_method = start_method
        #: Where ranks launched by torchrun attach (``HOST:PORT``, :mod:`parityfuzz.executor.attach`): then every
        #: pool is the torchrun job's ranks, never spawned here.
        self.attachment = None
        if attach:
            from parityfuzz.executor.attach import Attachment

            self.attachment = Attachment(attach)
        self.timeout_s = timeout_s
        self.ceiling = dict(RESOURCE_CEILING if ceiling is None else ceiling)
        #: Keep a pool whose ranks all raised errors in step (:class:`RankPool`); False: replace it after any.
        self.reuse_after_errors = reuse_after_errors
        self.pools: dict[int, RankPool] = {}
        self.restarts = 0  # pools replaced after an error, crash or hang
        self.recycles = 0  # pools replaced for growing past the resource ceiling
        self.reuses = 0  # failed cases after which the pool ran on
        #: How many cases the ranks of the last run that crashed had run before it (0: fresh ranks).
        self.crashed_after = 0

    def pool(self, world_size: int) -> RankPool:
        pool = self.pools.get(world_size)
        if pool is not None and pool.broken:
            pool.close()
            self.restarts += 1
            pool = None
        if pool is None and self.attachment is not None:
            from parityfuzz.executor.attach import AttachedPool

            pool = self.pools[world_size] = AttachedPool(self.attachment, world_size)
        if pool is None:
            placement = local_placement(world_size, self.backend)
            pool = self.pools[world_size] = RankPool(world_size, placement.backend, devices=placement.devices,
                                                     start_method=self.start_method)
        return pool

    def device_type(self, world_size: int) -> str:
        """The kind of device the ranks of a pool of this size run on: ``cuda`` under NCCL, else ``cpu`` (attached
        ranks: what they chose on their nodes)."""
        if self.attachment is not None:
            return "cuda" if self.pool(world_size).hello[0]["backend"] == "nccl" else "cpu"
        return local_placement(world_size, self.backend).device_type

    def run(self, case: Case, timeout_s: float | None = None,
            roles: tuple[str, ...] = ("reference", "system")) -> list[RankOutcome]:
        """Every rank's outcome of ``case`` run by ``roles``, on one pool: for a checkpoint event that
        resumes at another world size, use :meth:`run_segments`."""
        segments = self.run_segments(case, timeout_s, roles)
        if len(segments) > 1:
            raise ValueError("this case resumes at another world size: run_segments() runs it on two pools")
        return segments[0]

    def run_segments(self, case: Case, timeout_s: float | None = None,
                     roles: tuple[str, ...] = ("reference", "system"), probe: bool = False) -> list[list[RankOutcome]]:
        """Every rank's outcome of ``case`` run by ``roles``, per pool it runs on: one, or where its checkpoint
        event resumes at another world size, the pool that trains up to the save and the one that loads
        (the second only where the first finished).  A checkpoint event saves into a scratch directory made
        here and removed after; a restart on a warm cache (``compile.restart``) caches its compiled graphs there.
        ``probe=True`` also records what locating a divergence's origin needs
        (:func:`parityfuzz.run.train.run_system`)."""
        job = {"probe": True} if probe else {}
        if not case.checkpoint and not case.compile.restart:
            return [self._run(case.world_size, case, timeout_s, roles, job)]
        with tempfile.TemporaryDirectory(prefix="parityfuzz-scratch-") as scratch:
            resumed = case.resumed().world_size
            if resumed == case.world_size:
                return [self._run(case.world_size, case, timeout_s, roles, {**job, "scratch": scratch})]
            first = self._run(case.world_size, case, timeout_s, roles, {**job, "scratch": scratch, "segment": 0})
            if any(o.status != "ok" for o in first):
                return [first]
            return [first, self._run(resumed, case, timeout_s, roles, {**job, "scratch": scratch, "segment": 1})]

    def _run(self, world_size: int, case: Case, timeout_s: float | None, roles: tuple[str, ...],
             job: dict | None = None) -> list[RankOutcome]:
        timeout = timeout_s or self.timeout_s or default_timeout(case)
        pool = self.pool(world_size)
        before = pool.runs
        outcomes = pool.run(case.to_json(), timeout, roles, job)
        if any(o.status == "crash" for o in outcomes):
            self.crashed_after = before
        if any(o.status != "ok" for o in outcomes) and not pool.broken:
            if self.reuse_after_errors:
                self.reuses += 1
            else:
                pool.broken = True
        if not pool.broken and self._over_ceiling(pool):
            pool.recycle()
            del self.pools[world_size]
            self.recycles += 1
        return outcomes

    def _over_ceiling(self, pool: RankPool) -> bool:
        return any(r[k] > limit for r in pool.resources() for k, limit in self.ceiling.items())

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        if self.attachment is not None:
            self.attachment.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Executor", "PoolStartError", "RankOutcome", "RankPool", "auto_backend", "default_timeout"]
