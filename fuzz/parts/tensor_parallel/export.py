"""Tensor parallelism in an exported script: the calls of
:func:`parityfuzz.parts.tensor_parallel.parallelize_calls` (what the system runs), printed."""

from __future__ import annotations

from parityfuzz.parts.tensor_parallel import parallelize_calls
from parityfuzz.run.calls import statement

IMPORTS = ("from torch.distributed.tensor import Replicate, Shard\n"
           "from torch.distributed.tensor.experimental import implicit_replication\n"
           "from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,\n"
           "                                               RowwiseParallel, SequenceParallel, loss_parallel,\n"
           "                                               parallelize_module)\n")


def plan_lines(styles, mesh: str = "tp_mesh", model: str = "model") -> list[str]:
    """The plan's ``parallelize_module`` calls as the script's lines (on the script's variables ``mesh`` and
    ``model``)."""
    return [statement(call, model) for call in parallelize_calls(styles, mesh)]
