"""Mixed precision of the pipeline family: one FSDP2 ``MixedPrecisionPolicy`` given to every stage's ``fully_shard``
(as torchtitan gives one policy to each stage's ``fully_shard`` calls), on a mesh with a ``dp_shard`` axis; under
``shard_units`` to each unit's ``fully_shard`` too, as torchtitan gives it to each block's and the stage's.

Every stage is the root of its own ``fully_shard`` tree.  It computes in ``param_dtype`` (the model's dtype without
one), casts the floating-point inputs it receives to it where ``cast_forward_inputs`` (the first stage the model's
input, every later one the activation the stage before it sent), and casts its output to ``output_dtype`` where
one is set; ``reduce_dtype`` reduces its gradients and, since every microbatch but a step's last runs with gradient
sync off (``PipelineStage.backward_maybe_with_nosync``), accumulates them ("If also gradient reduction is disabled
via set_requires_gradient_sync, then FSDP will accumulate gradients using reduce_dtype", ``MixedPrecisionPolicy``).
So, as dtypes go, the pipelined model is one wrapped module: every layer sees ``param_dtype``, the loss is computed
on the last stage's output dtype, parameters and gradients stay in the model's dtype.  Units inside a stage add
casts at their boundaries (to ``output_dtype``, back to ``param_dtype`` by the next unit): ``output_dtype`` is
float32 or the model's dtype, never less precise than ``param_dtype``, so each such round trip is exact, forward and
backward, and the one-group-per-stage emulation stays bit for bit (the validation refuses the plans where the next
unit would not cast back).

Torch-free.
"""

from __future__ import annotations

from parityfuzz.case import dtypes
from parityfuzz.case.core import Case
from parityfuzz.case.errors import check


def validate_precision(case: Case) -> None:
    """The policy's dtypes are dtype names; a policy needs a ``dp_shard`` axis (it is ``fully_shard``'s argument)
    and no ``tp`` one (not drawn yet: the reference would have to emulate the policy over tensor-parallel
    shards); every stage sees one dtype: a stage that computes in another dtype than the floating-point input it
    receives (the model's input for the first; the output of the stage before for the others) must cast it."""
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    mp.check("plan.precision")
    if not mp.active():
        return
    check("dp_shard" in case.mesh.names, "plan.precision",
          "a MixedPrecisionPolicy is fully_shard's argument: it needs a 'dp_shard' mesh axis")
    check("tp" not in case.mesh.names, "plan.precision",
          "not drawn with tensor parallelism yet (the reference does not emulate the policy over tp shards)")
    check(not case.train.to_float64, "train.to_float64",
          "not combined with mixed precision (the policy's dtypes are relative to the model's)")
    compute, output = mp.compute(master), mp.output(master)
    if case.model.input != "embedding":
        check(mp.cast_forward_inputs or compute == master, "plan.precision.cast_forward_inputs",
              f"the first stage computes in {compute} but receives the model's {master} input: it must cast it")
    # a later stage receives the stage before's output; under shard_units a later unit the unit before's
    units = case.plan.shard_units and any(len(u) > 1 for u in case.plan.stage_units(case.model))
    if case.plan.cuts or units:
        check(mp.cast_forward_inputs or output == compute, "plan.precision.cast_forward_inputs",
              f"a stage (or a unit) computes in {compute} but receives the {output} output of the one before: it "
              "must cast it")
        # FSDP2 casts inputs to param_dtype only ("cast_forward_inputs: ... whether FSDP should cast the forward's
        # floating-point input tensors to param_dtype or not", MixedPrecisionPolicy): without one there is no cast
        check(bool(mp.param_dtype) or output == compute, "plan.precision.output_dtype",
              f"a stage (or a unit) computes in {compute} (no param_dtype) but sends the next its {output} output, "
              "which it would not cast (FSDP2 casts forward inputs to param_dtype only): the next one's layers "
              "would see two dtypes")


def promise(case: Case) -> dtypes.Promise:
    """Parameters, buffers and gradients in the model's dtype (FSDP2 keeps sharded parameters and their gradients
    in the original dtype); the loss, a training or an evaluation pass's, in the last stage's output dtype."""
    if not case.mixed_precision():
        return dtypes.promise(case, generic=True)
    master = dtypes.model_dtype(case)
    return dtypes.Promise(state=master, outputs={"": case.plan.precision.output(master)}, flows=dtypes.flows(case))


def precision(case: Case) -> str:
    """The least precise dtype the case computes, reduces or outputs in."""
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    names = [master] + ([d for d in (mp.param_dtype, mp.reduce_dtype, mp.output_dtype) if d]
                        if mp.active() else [])
    return max(names, key=dtypes.MP_DTYPES.index)


def describe_precision(case: Case) -> str:
    """The policy as the system writes it, for the case printout (``""``: none)."""
    mp = case.plan.precision
    return mp.call("torch.") if mp.active() else ""


def precision_features(case: Case) -> set[str]:
    """The fsdp2 family's mixed-precision tags (one policy: always uniform)."""
    mp = case.plan.precision
    return mp.features(precision(case)) | {"mp=uniform"} if mp.active() else set()


def fully_shard_groups(case: Case) -> list[dict]:
    """The system's ``fully_shard`` calls (:func:`parityfuzz.families.pipeline.calls.stage_calls`), in its order, as
    the emulation's groups (each ``{"path": ...}``; a stage's, whose path in the stage module is ``""``, named
    ``stage <index>`` with its top-level ``modules``): under ``shard_units`` each top-level module of a stage
    (torchtitan's blocks), then the stage over them.  Each call casts its own inputs and outputs and reduces its own
    parameters (the earlier call on a submodule keeps those: ``fully_shard``), so a reference that gave a stage one
    group where the system nests the units would cast and reduce otherwise (a float16 reduction summed in another
    order: the 30-minute run of seed 2851528193)."""
    from parityfuzz.families.pipeline.calls import stage_calls

    out: list[dict] = []
    for index, units in enumerate(case.plan.stage_units(case.model)):
        for call in stage_calls(case, index):
            if call.fn == "fully_shard":
                path = call.args[0].path
                out.append({"path": path} if path else {"path": f"stage {index}", "modules": list(units)})
    return out
