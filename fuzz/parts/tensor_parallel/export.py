"""Tensor parallelism in an exported script: each style's constructor call, printed from
:func:`parityfuzz.parts.tensor_parallel.style_call` (what the system constructs)."""

from __future__ import annotations

from parityfuzz.parts.tensor_parallel import LAYOUT_ARGUMENTS, style_call

#: Each layout name's placement, as the script writes it (:data:`.apply.PLACEMENTS`).
PLACEMENTS = {"replicate": "Replicate()", "shard_seq": "Shard(1)", "shard_last": "Shard(-1)"}

IMPORTS = ("from torch.distributed.tensor import Replicate, Shard\n"
           "from torch.distributed.tensor.experimental import implicit_replication\n"
           "from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,\n"
           "                                               RowwiseParallel, SequenceParallel, loss_parallel,\n"
           "                                               parallelize_module)\n")


def style_source(p) -> str:
    """The parallel style's constructor call."""
    name, kwargs = style_call(p)
    args = [f"{k}={PLACEMENTS[v] if k in LAYOUT_ARGUMENTS else repr(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(args)})"
