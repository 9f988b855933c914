"""Where a pool's ranks run: CUDA devices under NCCL where this fuzzer's share of the GPUs holds one per rank,
else CPU processes under gloo (the default on a machine without GPUs).

Several fuzzers on one machine (pytest-xdist workers, ``PYTEST_XDIST_WORKER=gw<i>`` of
``PYTEST_XDIST_WORKER_COUNT``) split its GPUs evenly: worker ``i`` of ``n`` on ``g`` GPUs owns devices
``[i * g // n, (i + 1) * g // n)`` and runs a world size on them only if they are enough, so no two fuzzers
share a GPU (8 GPUs, 4 workers: world size 2 on GPUs 0-1, 2-3, 4-5, 6-7; world size 4 falls back to CPU).
Pure: :func:`place` takes the counts, :func:`fuzzer_share` reads the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    backend: str  # "nccl" or "gloo"
    #: The CUDA device of each rank (empty on CPU).
    devices: tuple[int, ...]
    why: str

    @property
    def device_type(self) -> str:
        return "cuda" if self.backend == "nccl" else "cpu"


def fuzzer_share(environ=os.environ) -> tuple[int, int]:
    """``(index, count)`` of this fuzzer among those sharing the machine (pytest-xdist's workers), else (0, 1)."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    count = int(environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return min(index, count - 1), max(count, 1)


def place(world_size: int, gpus: int, index: int = 0, count: int = 1, backend: str = "auto") -> Placement:
    """The placement of a pool of ``world_size`` ranks for fuzzer ``index`` of ``count`` on a machine with
    ``gpus`` GPUs; ``backend`` ``"gloo"`` or ``"nccl"`` forces one (NCCL without enough GPUs is an error)."""
    first, stop = index * gpus // count, (index + 1) * gpus // count
    enough = stop - first >= world_size
    if backend == "gloo" or (backend == "auto" and not enough):
        why = ("gloo asked for" if backend == "gloo" else
               f"{stop - first} of {gpus} GPUs are this fuzzer's ({count} share the machine), {world_size} needed")
        return Placement("gloo", (), why)
    if not enough:
        raise ValueError(f"backend nccl needs {world_size} GPUs; this fuzzer has {stop - first} of {gpus}")
    return Placement("nccl", tuple(range(first, first + world_size)),
                     f"GPUs {first}-{first + world_size - 1} of {gpus} (fuzzer {index + 1} of {count})")


def local_placement(world_size: int, backend: str = "auto") -> Placement:
    """:func:`place` for this machine's GPUs and this fuzzer's share of them."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return place(world_size, gpus, *fuzzer_share(), backend=backend)
