"""Validity rules of composable plans (``plan.applies``): which orders and nestings of ``fully_shard``, the two
``replicate`` APIs and ``checkpoint`` on one module tree torch documents, or documents refusing.

A plan outside them is either a refusal torch does not document (its error would be the plan's fault, not a
finding) or a composition whose training torch promises nothing about.  The refusals torch does document (the
same API twice on a module; a ``replicate`` on a module ``fully_shard`` manages) are valid plans whose expected
error the case carries (:meth:`parityfuzz.families.composable.ComposablePlan.refusal`).

Torch-free.
"""

from __future__ import annotations

from parityfuzz.case.model import under
from parityfuzz.rules import Rule, require

SECOND_CALL = Rule(
    "composable.second-call",
    "a second data-parallel call on one module repeats an API or is a replicate after fully_shard (the two "
    "refusals torch documents)",
    "torch/distributed/_composable/contract.py: 'Each distinct composable distributed API can only be applied to "
    "a module once'; torch/distributed/_composable/replicate.py and replicate_with_fsdp.py: 'Cannot apply "
    "`replicate()` on a Module already managed by `fully_shard`'")
BOTTOM_UP = Rule(
    "composable.bottom-up",
    "no data-parallel call on a module inside one that fully_shard or replicate_with_fsdp already took",
    "torch/distributed/fsdp/_fully_shard/_fully_shard.py: fully_shard: 'Calling fully_shard on module constructs "
    "one group that includes the parameters in module.parameters() except those already assigned to a group from "
    "an earlier call on a submodule. This means that fully_shard should be called bottom-up on your model.' "
    "(replicate_with_fsdp shares that initialisation)")
EVERY_PARAMETER_MANAGED = Rule(
    "composable.every-parameter-managed",
    "every parameter is reached by a data-parallel call",
    "torch/nn/parallel/distributed.py: DistributedDataParallel: 'This container provides data parallelism by "
    "synchronizing gradients across each model replica' (of the module it wraps; fully_shard likewise groups "
    "module.parameters()): a parameter outside every call trains on each rank's own batch")
REPLICATE_HAS_PARAMETERS = Rule(
    "composable.replicate-has-parameters",
    "the DDP-based replicate manages some parameter",
    "torch/nn/parallel/distributed.py: DistributedDataParallel raises 'DistributedDataParallel is not needed when "
    "a module doesn't have any parameter that requires a gradient.'")
REPLICATE_PARAMETERS_FIXED = Rule(
    "composable.replicate-parameters-fixed",
    "the parameters the DDP-based replicate manages do not change requires_grad during training",
    "torch/nn/parallel/distributed.py: DistributedDataParallel: 'This module assumes all parameters are "
    "registered in the model by the time it is created. No parameters should be added nor removed later.' (the "
    "DDP-based replicate builds its DDP at the first forward, from the parameters that require gradients then)")
TIED_WEIGHTS_ONE_MANAGER = Rule(
    "composable.tied-weights-one-manager",
    "a tied embedding/head weight stays with one data-parallel call",
    "torch/distributed/fsdp/_fully_shard/_fully_shard.py: fully_shard groups 'the parameters in "
    "module.parameters() except those already assigned to a group': one parameter, one group (a weight shared "
    "between two calls would be reduced by both)")

RULES = (SECOND_CALL, BOTTOM_UP, EVERY_PARAMETER_MANAGED, REPLICATE_HAS_PARAMETERS, REPLICATE_PARAMETERS_FIXED,
         TIED_WEIGHTS_ONE_MANAGER)

DATA_PARALLEL = ("fully_shard", "replicate", "replicate_fsdp")
#: The data-parallel APIs whose initialisation takes the parameters at once (bottom-up application).
EAGER = ("fully_shard", "replicate_fsdp")


def check_calls(plan) -> None:
    """The order and nesting of the plan's calls (whatever the model): :data:`SECOND_CALL`, :data:`BOTTOM_UP`."""
    applied: dict[str, list[str]] = {}
    for i, c in enumerate(plan.applies):
        where = f"plan.applies[{i}]"
        before = applied.setdefault(c.path, [])
        parallel = [a for a in before if a in DATA_PARALLEL]
        if c.api in DATA_PARALLEL and parallel:
            documented = c.api in parallel or (c.api in ("replicate", "replicate_fsdp") and parallel == ["fully_shard"])
            require(documented, SECOND_CALL, f"{where}.api", f"{c.api} after {parallel} on {c.path!r}")
        for j, earlier in enumerate(plan.applies[:i]):
            inside = earlier.path != c.path and under(c.path, (earlier.path,))
            require(not (c.api in DATA_PARALLEL and earlier.api in EAGER and inside), BOTTOM_UP, f"{where}.path",
                    f"{c.path!r} is inside {earlier.path!r}, which plan.applies[{j}] already gave to {earlier.api}")
        before.append(c.api)


def check_training(case) -> None:
    """What the calls manage against the model and the training (for a plan torch does not refuse)."""
    plan, model, t = case.plan, case.model, case.train
    owners = model.param_modules()
    for path in owners:
        require(plan.manager(path) is not None, EVERY_PARAMETER_MANAGED, "plan.applies",
                f"no data-parallel call reaches the parameters of {path!r}")
    for path, api in plan.data_parallel().items():
        if api != "replicate":
            continue
        mine = [m for m in owners if plan.manager(m) == path]
        require(bool(mine), REPLICATE_HAS_PARAMETERS, "plan.applies", f"replicate on {path!r} would manage none")
        require(not any(under(m, (f.path,)) or under(f.path, (m,)) for m in mine for f in t.frozen),
                REPLICATE_PARAMETERS_FIXED, "train.frozen",
                f"freezes parameters the DDP-based replicate on {path!r} manages")
    if model.tie_head:
        require(plan.manager("inp") == plan.manager("head"), TIED_WEIGHTS_ONE_MANAGER, "plan.applies",
                f"inp is managed from {plan.manager('inp')!r}, head from {plan.manager('head')!r}")


__all__ = ["RULES", "check_calls", "check_training"]
