"""Counting the collectives a rank issues: what ``CommDebugMode`` counts, without its module tracker.

``CommDebugMode`` also tracks which module issued each collective, and its module hooks fail on some plans
(an ``IndexError`` in ``_fw_set_module_hook`` with nested composable checkpoints); the trace only needs the
counts per op.
"""

from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

#: Operator namespaces of collectives: c10d's (what ``torch.distributed`` calls, FSDP2's all-gathers and
#: reduce-scatters) and the functional collectives' (DTensor's redistributions).
NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")
#: Ops in those namespaces that move no data between ranks.
NOT_COLLECTIVES = ("wait_tensor", "wait", "monitored_barrier", "_wrap_tensor_autograd")


class CollectiveCounter(TorchDispatchMode):
    """Within the context, ``counts`` holds ``{"namespace.op": number}`` of every collective issued."""

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func._overloadpacket
        if func.namespace in NAMESPACES and packet.__name__ not in NOT_COLLECTIVES:
            self.counts[f"{func.namespace}.{packet.__name__}"] += 1
        return func(*args, **(kwargs or {}))
