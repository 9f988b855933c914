"""Validity rules of FSDP1 plans that torch's FullyShardedDataParallel documents (the per-rank control-flow rule
lives with the part's units: :func:`parityfuzz.parts.fsdp1.rank_flow_problem`).

Torch-free.
"""

from __future__ import annotations

from parityfuzz.rules import Rule, require

FORWARD_PREFETCH_STATIC_GRAPH = Rule(
    "fsdp1.forward-prefetch-static-graph",
    "forward_prefetch only for a model whose forwards run the same modules every iteration (no gate)",
    "torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel forward_prefetch: 'This "
    "should only be used for static-graph models since the prefetching follows the first iteration's execution "
    "order.'")

COMPILE_ORIG_PARAMS = Rule(
    "fsdp1.compile-orig-params",
    "torch.compile of an FSDP1 model only with use_orig_params=True",
    "torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel use_orig_params: '``True`` is "
    "required to use ``torch.compile()``.'")

RULES = (FORWARD_PREFETCH_STATIC_GRAPH, COMPILE_ORIG_PARAMS)


def check_rules(case) -> None:
    gates = case.model.gates()
    require(not (case.plan.forward_prefetch and gates), FORWARD_PREFETCH_STATIC_GRAPH, "plan.forward_prefetch",
            f"the gate at {gates[0] if gates else ''!r} runs its child on some forwards only")
    require(not case.compile or case.plan.use_orig_params, COMPILE_ORIG_PARAMS, "compile.backend",
            "the plan has use_orig_params=False")


__all__ = ["RULES", "check_rules"]
