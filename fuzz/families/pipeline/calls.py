"""Each pipeline stage's torch calls (:mod:`parityfuzz.run.calls`), which
:class:`~parityfuzz.families.pipeline.system.PipelineSystem` runs on the stage module and the export prints in
``stage_module``.  Torch-free."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.model import under
from parityfuzz.parts.activation_checkpoint import checkpoint_call
from parityfuzz.parts.fully_shard import Wrap, fully_shard_call
from parityfuzz.parts.tensor_parallel import parallelize_calls


def stage_calls(case: Case, index: int) -> list:
    """Stage ``index``'s calls on its module (bound as ``model``; the paths are the whole model's, which the stage
    keeps): the tensor-parallel styles of its modules on ``tp_mesh``; the activation checkpoints applied before
    ``fully_shard`` (all of them without a ``dp_shard`` axis); with one, ``fully_shard`` on ``dp_mesh`` of each of
    its top-level modules under ``shard_units`` (torchtitan's blocks), then of the stage, each under the plan's
    policy; then the checkpoints applied after."""
    plan = case.plan
    units = plan.stage_units(case.model)[index]
    sharded = "dp_shard" in case.mesh.names
    out = parallelize_calls([p for p in plan.tp if under(p.path, units)]) if "tp" in case.mesh.names else []
    held = [c for c in plan.checkpoints if under(c.path, units)]
    out += [checkpoint_call(c) for c in held if c.before or not sharded]
    if sharded:
        mp = plan.precision

        def shard(path: str, reshard_after_forward: bool):
            return fully_shard_call(Wrap(path, reshard_after_forward, param_dtype=mp.param_dtype,
                                         reduce_dtype=mp.reduce_dtype, output_dtype=mp.output_dtype,
                                         cast_forward_inputs=mp.cast_forward_inputs), "dp_mesh")

        out += [shard(unit, plan.unit_reshard_after_forward) for unit in units] if plan.shard_units else []
        out.append(shard("", plan.reshard_after_forward))
        out += [checkpoint_call(c) for c in held if not c.before]
    return out


__all__ = ["stage_calls"]
