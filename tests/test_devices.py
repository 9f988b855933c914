"""Device selection (parityfuzz.executor.devices): CUDA/NCCL where this fuzzer's share of the GPUs holds one per
rank, CPU/gloo otherwise.  This machine has no GPU: the logic is tested on counts, and the executor's wiring with
torch's device count patched (the ranks themselves are never started on a GPU here)."""

from __future__ import annotations

import pytest

from parityfuzz import executor as executor_module
from parityfuzz.executor import Executor
from parityfuzz.executor.devices import fuzzer_share, place


def test_no_gpu_means_cpu_ranks_over_gloo():
    p = place(2, gpus=0)
    assert (p.backend, p.devices, p.device_type) == ("gloo", (), "cpu") and "0 of 0 GPUs" in p.why


@pytest.mark.parametrize("world_size, gpus, index, count, devices", [
    (1, 1, 0, 1, (0,)),
    (2, 2, 0, 1, (0, 1)),
    (2, 8, 0, 4, (0, 1)), (2, 8, 3, 4, (6, 7)),  # four fuzzers, two GPUs each
    (3, 8, 1, 2, (4, 5, 6)),  # two fuzzers: GPUs 4-7 are the second's
    (2, 3, 0, 2, ()), (2, 3, 1, 2, (1, 2)),  # three GPUs, two fuzzers: one for the first, two for the second
    (4, 8, 1, 4, ()), (2, 1, 0, 1, ()),  # fewer GPUs than ranks: CPU
])
def test_each_fuzzer_runs_on_its_own_gpus_or_on_cpu(world_size, gpus, index, count, devices):
    p = place(world_size, gpus, index, count)
    assert p.devices == devices and p.backend == ("nccl" if devices else "gloo"), p


def test_a_forced_backend():
    assert place(2, gpus=8, backend="gloo").backend == "gloo"
    with pytest.raises(ValueError, match="nccl needs 2 GPUs; this fuzzer has 1 of 1"):
        place(2, gpus=1, backend="nccl")


def test_the_fuzzer_share_comes_from_pytest_xdist():
    assert fuzzer_share({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (3, 4)
    assert fuzzer_share({}) == (0, 1)


def test_the_executor_starts_its_pools_where_the_placement_says(monkeypatch):
    import torch

    started = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setattr(executor_module, "RankPool",
                        lambda ws, backend, devices=(), start_method="": started.append((ws, backend, devices)) or object())
    ex = Executor()
    ex.pool(2)
    ex.pool(4)
    assert started == [(2, "nccl", (2, 3)), (4, "gloo", ())]
    assert (ex.device_type(2), ex.device_type(4)) == ("cuda", "cpu")
    assert executor_module.auto_backend(1) == "nccl"
