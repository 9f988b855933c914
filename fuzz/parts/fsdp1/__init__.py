"""FSDP1 (``FullyShardedDataParallel``) as a plan part: one wrapper call around the whole model, with one of its
five sharding strategies and a wrapping (nested instances by hand, or an auto-wrap policy), its ``MixedPrecision``
(:class:`Precision`), ignored modules, prefetching and ``no_sync()``.  The fsdp1 family is this part alone (on a
``(dp_shard,)`` or hybrid mesh); fsdp1_tp adds tensor parallelism.

Spec, checks, tags and printout here (torch- and Hypothesis-free); validity rules in :mod:`.rules`, strategies in
:mod:`.strategy`, the system in :mod:`.system`, the emulating reference of ``MixedPrecision`` in :mod:`.reference`,
the export in :mod:`.export`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parityfuzz.case import dtypes
from parityfuzz.case.checkpoint import Way
from parityfuzz.case.core import Case, ExpectedError, Plan
from parityfuzz.case.errors import check
from parityfuzz.case.model import check_paths, check_rank_gate_periods, under
from parityfuzz.parts.activation_checkpoint import ActivationCheckpoint, checkpoint_tags
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.parts.fsdp1 import rules as fsdp1_rules

SHARDINGS = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
HYBRID = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
#: How a hybrid strategy gets its groups: ``device_mesh=``, ``process_group=(intra, inter)``, or neither.
HYBRID_VIA = ("mesh", "groups", "auto")
#: ``manual``: nested ``FullyShardedDataParallel`` on ``wraps`` (children first), then the root;
#: ``module_class``: ``ModuleWrapPolicy`` over the modules of kinds ``wrap_kinds``; ``size``:
#: ``size_based_auto_wrap_policy`` with ``min_num_params``; ``lambda``: ``lambda_auto_wrap_policy`` selecting
#: the modules at ``wraps``.
WRAPPINGS = ("manual", "module_class", "size", "lambda")
#: ``BackwardPrefetch`` member, ``""`` for None.
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "")
#: Module kinds (``ModelSpec.module_paths``) a ``ModuleWrapPolicy`` may name: each has its own class.
WRAP_KINDS = ("linear", "mlp", "attention", "seq", "block", "residual", "twice", "scale", "gate", "layernorm",
              "rmsnorm", "embedding")
#: Checkpointing APIs FSDP1 composes with; after wrapping only ``apply`` (``apply_activation_checkpointing``
#: reaches the module inside its FSDP1 wrapper).
CHECKPOINT_APIS = ("wrapper", "apply")
#: How the ignored modules reach FSDP1: ``ignored_modules=[modules]`` or ``ignored_states=[their parameters]``.
IGNORED_VIA = ("modules", "states")


#: Dtypes FSDP1's ``MixedPrecision`` may name here (``""``: None).


@dataclass(frozen=True)
class Precision:
    """FSDP1's ``MixedPrecision``, the same on every instance of the plan (all fields at their defaults: no
    ``mixed_precision`` argument).  FSDP1's semantics, not FSDP2's (``parityfuzz.parts.fsdp1.reference``): a
    ``reduce_dtype`` left out follows ``param_dtype``; buffers are cast to ``buffer_dtype``; outputs are never
    cast back; ``keep_low_precision_grads`` leaves the optimizer gradients in the reduction dtype."""

    param_dtype: str = ""
    reduce_dtype: str = ""
    buffer_dtype: str = ""
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True

    def active(self) -> bool:
        return bool(self.param_dtype or self.reduce_dtype or self.buffer_dtype)

    def compute(self, master: str) -> str:
        return self.param_dtype or master

    def reduce(self, master: str) -> str:
        """The dtype gradients are reduced in."""
        return self.reduce_dtype or self.param_dtype or master


@dataclass(frozen=True)
class FSDP1WrapPlan(Plan):
    """One ``FullyShardedDataParallel`` call on the root (and, for manual wrapping, one per module in
    ``wraps``, children first), and how the training loop drives it.

    ``ignored``: modules FSDP1 leaves alone, given as ``ignored_modules`` or (``ignored_via="states"``) as
    their parameters through ``ignored_states``.  ``offload``: ``CPUOffload(offload_params=True)``.
    ``sync_module_states``: each rank other than 0 starts from other weights; FSDP1 must broadcast rank 0's.
    ``no_sync``: the non-last microbatches of a step run under ``no_sync()``.  ``checkpoints``:
    ``checkpoint_wrapper`` / ``apply_activation_checkpointing`` before FSDP1 (or after, ``apply`` only).
    ``precision``: ``mixed_precision=MixedPrecision(...)`` on every instance.  A family's plan subclasses it,
    naming the family.
    """

    sharding: str = "FULL_SHARD"
    hybrid_via: str = ""
    use_orig_params: bool = True
    wrapping: str = "manual"
    wraps: tuple[str, ...] = ()
    wrap_kinds: tuple[str, ...] = ()
    min_num_params: int = 0
    ignored: tuple[str, ...] = ()
    ignored_via: str = "modules"
    offload: bool = False
    backward_prefetch: str = "BACKWARD_PRE"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True
    sync_module_states: bool = False
    no_sync: bool = False
    checkpoints: tuple[ActivationCheckpoint, ...] = ()
    precision: Precision = Precision()

    def mixed_precision(self) -> bool:
        return self.precision.active()


#: FSDP1's own state-dict types as checkpoint ways (:mod:`.checkpoint`), beside torch's state-dict APIs.
CHECKPOINT_WAYS = {"fsdp1_full": Way("file", "parityfuzz.parts.fsdp1.checkpoint"),
                   "fsdp1_sharded": Way("dcp", "parityfuzz.parts.fsdp1.checkpoint"),
                   "fsdp1_local": Way("local", "parityfuzz.parts.fsdp1.checkpoint")}

MESHES = (("dp_shard",), ("dp_replicate", "dp_shard"))


def promise(case: Case) -> dtypes.Promise:
    """FSDP1's dtypes: parameters in the model's dtype; buffers in ``buffer_dtype``; gradients in the model's
    dtype, or with ``keep_low_precision_grads`` in the reduction dtype (as FSDP1 documents it); outputs, never
    cast back, in ``param_dtype``."""
    if not case.mixed_precision():
        return dtypes.promise(case, generic=True)
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    return dtypes.Promise(state=master, outputs={"": mp.compute(master)}, flows=dtypes.flows(case),
                          buffers=mp.buffer_dtype or master,
                          grads=mp.reduce(master) if mp.keep_low_precision_grads else master)


def expected_error(case: Case, device_type: str) -> ExpectedError | None:
    """On a machine without an accelerator FSDP1 refuses CPU offload (it pins memory on the accelerator: a CPU build of
    torch and a CUDA build without a GPU word the error differently) and
    ``sync_module_states`` (it broadcasts from the accelerator), with these errors, when it wraps.  Anywhere,
    a LOCAL state dict of instances given a ``device_mesh`` is refused at the save ("DeviceMesh is not
    compatible with LOCAL_STATE_DICT. Please set state_dict_type to SHARDED_STATE_DICT")."""
    if device_type == "cpu" and case.plan.sync_module_states:  # checked first when both are set
        return ExpectedError("ValueError", "`sync_module_states=True`, which requires them to be on GPU")
    if device_type == "cpu" and case.plan.offload:  # (a CUDA build without a GPU says it in its own words)
        return ExpectedError("RuntimeError", "Cannot access accelerator device when none is available"
                                             "|Found no NVIDIA driver on your system")
    if case.checkpoint.save == "fsdp1_local" and case.family == "fsdp1" and case.plan.sharding in HYBRID \
            and case.plan.hybrid_via == "mesh":
        return ExpectedError("RuntimeError", "DeviceMesh is not compatible with LOCAL_STATE_DICT")
    return None


def precision(case: Case) -> str:
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    names = [master] + [d for d in (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) if d]
    return max(names, key=dtypes.MP_DTYPES.index)


def validate_plan(case: Case) -> None:
    """The FSDP1 call's arguments against the case (its mesh's axes checked by the family)."""
    plan, model, mesh, t = case.plan, case.model, case.mesh, case.train
    fsdp1_rules.check_rules(case)
    checkpointing.check_rules(case)
    kinds = dict(model.module_paths())
    hybrid = plan.sharding in HYBRID
    if hybrid:
        check(plan.hybrid_via in HYBRID_VIA, "plan.hybrid_via", f"must be one of {HYBRID_VIA}, got {plan.hybrid_via!r}")
        if plan.hybrid_via == "auto":
            check(plan.wrapping != "manual", "plan.hybrid_via",
                  "torch builds hybrid groups itself only under an auto-wrap policy (manual wrapping raises)")
            check(mesh.shape == (mesh.size, 1), "mesh.shape",
                  f"torch's own hybrid groups on a CPU machine are one rank per node: ({mesh.size}, 1)")
    else:
        check(plan.hybrid_via == "", "plan.hybrid_via", f"only for {HYBRID}")
    check(plan.wrapping in WRAPPINGS, "plan.wrapping", f"must be one of {WRAPPINGS}, got {plan.wrapping!r}")
    check_paths(list(plan.wraps), kinds, "plan.wraps", "wrapped")
    check("" not in plan.wraps, "plan.wraps", "the root is always wrapped: list only non-root modules")
    check(not plan.wraps or plan.wrapping in ("manual", "lambda"), "plan.wraps", "only manual and lambda wrapping name modules")
    for i, kind in enumerate(plan.wrap_kinds):
        check(kind in WRAP_KINDS, f"plan.wrap_kinds[{i}]", f"must be one of {WRAP_KINDS}, got {kind!r}")
    check(bool(plan.wrap_kinds) == (plan.wrapping == "module_class"), "plan.wrap_kinds",
          "module_class wrapping names the kinds it wraps, the others none")
    check((plan.min_num_params > 0) == (plan.wrapping == "size"), "plan.min_num_params",
          "size wrapping needs min_num_params >= 1, the others none")
    check_paths(list(plan.ignored), kinds, "plan.ignored", "ignored")
    rank_gates = model.rank_gates()
    for i, path in enumerate(plan.ignored):
        check(path != "", f"plan.ignored[{i}]", "the root cannot be ignored")
        check(not under(path, rank_gates), f"plan.ignored[{i}]", "not inside a per-rank gate: the trace cannot "
              "tell a rank's own copy without a gradient (a rank that did not run it) from a missing one")
        check(model.uses_params(path), f"plan.ignored[{i}]", f"{path!r} holds no parameters to ignore")
        check(not (model.tie_head and path in ("inp", "head")), f"plan.ignored[{i}]",
              "a tied embedding/head weight would be ignored on one side only")
        for w in plan.wraps:
            check(not under(w, (path,)), f"plan.ignored[{i}]",
                  f"{path!r} holds the wrapped {w!r}: an ignored module holds no FSDP1 wrapper")
    check(plan.ignored_via in IGNORED_VIA, "plan.ignored_via", f"must be one of {IGNORED_VIA}, got {plan.ignored_via!r}")
    check(plan.ignored or plan.ignored_via == "modules", "plan.ignored_via", "only with ignored modules")
    if plan.ignored:
        check(not t.clip, "train.clip", "not with ignored modules: each rank's total gradient norm counts its own "
              "copy of them, so the clipping differs per rank and even the reference's replicas disagree")
        left_out = frozenset(plan.ignored) | frozenset(f.path for f in t.frozen)
        check(model.uses_params("", left_out), "plan.ignored",
              "the modules left to FSDP1 must hold a trainable parameter that every forward uses: the reference, "
              "DDP ignoring the same modules, never syncs a microbatch in which none of its parameters gets a "
              "gradient (its replicas then disagree)")
    check(plan.backward_prefetch in BACKWARD_PREFETCH, "plan.backward_prefetch",
          f"must be one of {BACKWARD_PREFETCH}, got {plan.backward_prefetch!r}")
    check_paths([c.path for c in plan.checkpoints], kinds, "plan.checkpoints", "checkpointed")
    for i, c in enumerate(plan.checkpoints):
        where = f"plan.checkpoints[{i}]"
        check(c.path != "", f"{where}.path", "FSDP1's checkpoint APIs do not take the root")
        check(c.api in CHECKPOINT_APIS, f"{where}.api", f"must be one of {CHECKPOINT_APIS}, got {c.api!r}")
        check(c.before or c.api == "apply", f"{where}.api",
              "after FSDP1, checkpointing goes through apply_activation_checkpointing")
        check(not under(c.path, plan.ignored), f"{where}.path", "inside an ignored module")
    check(not plan.no_sync or t.microbatches > 1, "plan.no_sync", "needs more than one microbatch")
    check(not t.nonroot, "train.nonroot", "not drawn for FSDP1 (a nested instance run alone)")
    if not plan.use_orig_params:
        # FSDP1 flattens each unit's parameters into one FlatParameter: the optimizer sees only those.
        check(not t.groups, "train.groups", "use_orig_params=False: the optimizer sees flat parameters only")
        check(not t.frozen, "train.frozen",
              "use_orig_params=False flattens parameters with one requires_grad per unit")
    _validate_rank_flow(case)
    _validate_precision(case)


def units(case: Case) -> frozenset[str] | None:
    """The paths of the modules FSDP1 makes instances of (the root, ``""``, always), where the plan says them
    up front: the nested or lambda-selected modules, or the modules of the named kinds; None for
    ``size_based_auto_wrap_policy``, whose choice depends on parameter counts."""
    plan = case.plan
    if plan.wrapping in ("manual", "lambda"):
        return frozenset(("",) + plan.wraps)
    if plan.wrapping == "module_class":
        return frozenset([""] + [p for p, kind in case.model.module_paths() if kind in plan.wrap_kinds])
    return None


def rank_flow_problem(model, found: frozenset[str], left_out: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """``(instance path, why)`` for an FSDP1 instance at ``found`` that per-rank control flow would break, or
    None: an instance inside a per-rank gate is all-gathered by some ranks only; one whose own parameters a
    forward may leave unused (or that are ``left_out``: ignored by FSDP1, or frozen on some step) reduces its
    gradient only on the ranks whose backward reaches it, and a non-root one whose output needs no gradient on
    some rank is all-gathered for backward there only (FSDP1 registers its pre-backward unshard on outputs that
    require grad).  Either way the ranks' collectives differ (a hang, or gloo's abort on mismatched sizes).
    FSDP1 documents no per-rank control flow: it fixes "an order over the handles, which should be the same
    across ranks" (torch/distributed/fsdp/_exec_order_utils.py)."""
    gates = model.rank_gates()
    for u in sorted(found):
        if u and under(u, gates):
            return u, f"the instance at {u!r} is a per-rank gate or inside one"
        deeper = frozenset(v for v in found if v != u and under(v, (u,)))
        if not model.uses_params(u, deeper | left_out):
            return u, (f"the instance at {u!r} holds no parameter of its own that every forward uses (frozen and "
                       "ignored ones do not count)")
    return None


def checkpoint_flow_problem(model, found: frozenset[str], checkpointed: tuple[str, ...]) -> str | None:
    """Why one of the ``checkpointed`` modules breaks the ranks' order of collectives under per-rank control
    flow, or None: a checkpointed region holding both a per-rank gate and an FSDP1 instance.  Its recomputation
    runs at the first unpacking of a saved activation in the region's backward, and whether that comes before or
    after the instance's pre-backward unshard depends on what the gate ran, so the instance's all-gathers differ
    per rank (a hang in the issue-30 run: corpus/fsdp1/4511e36c0e5e71d7).  Same documentation as
    :func:`rank_flow_problem`."""
    gates = model.rank_gates()
    for c in checkpointed:
        gated = [g for g in gates if under(g, (c,))]
        inner = [u for u in sorted(found) if u and under(u, (c,))]
        if gated and inner:
            return (f"the checkpointed module {c!r} holds the per-rank gate {gated[0]!r} and the instance "
                    f"{inner[0]!r}: its recomputation and that instance's pre-backward unshard come in an order "
                    "that depends on the gate")
    return None


def reentrant_flow_problem(model, path: str) -> str | None:
    """Why a reentrant checkpoint at ``path`` breaks the ranks' order of collectives under per-rank control flow, or
    None: its region holds a per-rank gate, or sits inside one.  Its recompute runs a nested backward
    (torch/utils/checkpoint.py, ``CheckpointFunction.backward`` calls ``torch.autograd.backward``), whose gradients
    for the instance's flat parameter fire FSDP1's post-backward hook and its reduction there, beside the outer
    backward's; whether it does depends on what the gate ran, so the ranks' reductions differ (hangs, or a gloo size
    mismatch, under every sharding strategy, NO_SHARD too; with the non-reentrant implementation, or the gate alike
    on every rank, the same plans train).  Same documentation as :func:`rank_flow_problem`."""
    for gate in model.rank_gates():
        if under(gate, (path,)) or under(path, (gate,)):
            where = "holds" if under(gate, (path,)) else "sits inside"
            return (f"the reentrant checkpoint at {path!r} {where} the per-rank gate {gate!r}: its nested backward "
                    "runs FSDP1's post-backward reduction on the ranks whose gate ran only")
    return None


def _validate_rank_flow(case: Case) -> None:
    """Per-rank control flow (a gate keyed by the data-parallel index): some rank uses each gated child, and
    every FSDP1 instance issues its collectives on every rank (:func:`rank_flow_problem`)."""
    if not case.model.per_rank_flow():
        return
    check_rank_gate_periods(case.model, case.mesh.dp_size())
    found = units(case)
    check(found is not None, "plan.wrapping", "not size with per-rank control flow: which modules become "
          "instances depends on parameter counts, so the case cannot say none sits inside a per-rank gate")
    ignored = frozenset(case.plan.ignored)
    found = frozenset(u for u in found if not (u and under(u, ignored)))  # (auto-wrapping skips ignored modules)
    problem = rank_flow_problem(case.model, found, ignored | case.train.frozen_paths())
    check(problem is None, "plan.wrap_kinds" if case.plan.wrapping == "module_class" else "plan.wraps",
          f"with per-rank control flow {problem and problem[1]}: the ranks' collectives would differ")
    problem = checkpoint_flow_problem(case.model, found, tuple(c.path for c in case.plan.checkpoints))
    check(problem is None, "plan.checkpoints", f"with per-rank control flow {problem}: the ranks' collectives "
          "would differ")
    for i, c in enumerate(case.plan.checkpoints):
        problem = reentrant_flow_problem(case.model, c.path) if c.reentrant else None
        check(problem is None, f"plan.checkpoints[{i}].reentrant",
              f"with per-rank control flow {problem}: the ranks' collectives would differ")


def _validate_precision(case: Case) -> None:
    mp, plan, t = case.plan.precision, case.plan, case.train
    for name in ("param_dtype", "reduce_dtype", "buffer_dtype"):
        value = getattr(mp, name)
        check(value in ("",) + dtypes.MP_DTYPES, f"plan.precision.{name}", f"must be one of {dtypes.MP_DTYPES} or ''")
    if not mp.active():
        check(mp == Precision(), "plan.precision", "flags without a dtype: leave them at their defaults")
        return
    check(case.reference != "ddp", "reference",
          "plain DDP cannot model mixed precision: use the emulating reference 'ddp_mp_fsdp1'")
    check(not t.to_float64, "train.to_float64", "not combined with mixed precision (its dtypes are the model's)")
    check(not plan.ignored, "plan.ignored", "not with mixed precision: an ignored module keeps its dtype, so "
          "the activations reaching it (in param_dtype) do not match its weights")
    dense = case.model.input != "embedding"
    check(not (mp.param_dtype and dense and not mp.cast_root_forward_inputs), "plan.precision.cast_root_forward_inputs",
          "a dense input must be cast to param_dtype at the root (FSDP1 documents that the root's "
          "cast_root_forward_inputs decides, whatever its cast_forward_inputs)")
    if mp.keep_low_precision_grads:
        check(t.optimizer == "sgd" and not t.foreach, "plan.precision.keep_low_precision_grads",
              "only with SGD without foreach: Adam and the foreach kernels refuse gradients of another dtype "
              "than their parameters")


def features(case: Case) -> set[str]:
    plan = case.plan
    tags = {f"sharding={plan.sharding}", f"wrapping={plan.wrapping}", f"use_orig_params={plan.use_orig_params}",
            f"backward_prefetch={plan.backward_prefetch or 'None'}"}
    if plan.hybrid_via:
        tags.add(f"hybrid_via={plan.hybrid_via}")
    for flag in ("forward_prefetch", "sync_module_states", "no_sync", "offload"):
        if getattr(plan, flag):
            tags.add(flag)
    if not plan.limit_all_gathers:
        tags.add("limit_all_gathers=False")
    if plan.ignored:
        tags.add("ignored_modules" if plan.ignored_via == "modules" else "ignored_states")
    if case.model.per_rank_flow():
        tags.add("rank_flow")  # control flow that differs per rank
    if plan.wraps:
        tags.add(f"wrapped={min(len(plan.wraps), 3)}{'+' if len(plan.wraps) > 3 else ''}")
    tags.update(checkpoint_tags(plan.checkpoints))
    mp = plan.precision
    if mp.active():
        tags.add("mixed_precision")
        tags.update(f"{n}={getattr(mp, n)}" for n in ("param_dtype", "reduce_dtype", "buffer_dtype") if getattr(mp, n))
        tags.update(flag for flag in ("keep_low_precision_grads", "cast_forward_inputs") if getattr(mp, flag))
        if not mp.cast_root_forward_inputs:
            tags.add("cast_root_forward_inputs=False")
    return tags


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    plan = case.plan
    args = [f"sharding_strategy={plan.sharding}", f"use_orig_params={plan.use_orig_params}"]
    if plan.hybrid_via:
        args.append({"mesh": "device_mesh=<2-D mesh>", "groups": "process_group=(intra, inter)",
                     "auto": "torch's own hybrid groups"}[plan.hybrid_via])
    if plan.wrapping == "module_class":
        args.append(f"auto_wrap_policy=ModuleWrapPolicy({list(plan.wrap_kinds)})")
    elif plan.wrapping == "size":
        args.append(f"auto_wrap_policy=size_based_auto_wrap_policy(min_num_params={plan.min_num_params})")
    elif plan.wrapping == "lambda":
        args.append(f"auto_wrap_policy=lambda_auto_wrap_policy({[p for p in plan.wraps]})")
    if plan.ignored:
        args.append(f"ignored_modules={list(plan.ignored)}" if plan.ignored_via == "modules"
                    else f"ignored_states=<the parameters of {list(plan.ignored)}>")
    if plan.offload:
        args.append("cpu_offload=CPUOffload(offload_params=True)")
    if plan.backward_prefetch != "BACKWARD_PRE":
        args.append(f"backward_prefetch={plan.backward_prefetch or None}")
    for flag, default in (("forward_prefetch", False), ("limit_all_gathers", True), ("sync_module_states", False)):
        if getattr(plan, flag) != default:
            args.append(f"{flag}={getattr(plan, flag)}")
    mp = plan.precision
    if mp.active():
        parts = [f"{f.name}={getattr(mp, f.name)}" for f in dataclasses.fields(mp)
                 if getattr(mp, f.name) != f.default]
        args.append(f"mixed_precision=MixedPrecision({', '.join(parts)})")
    notes = {"": f"FullyShardedDataParallel({', '.join(args)})"}
    if plan.wrapping == "manual":
        for path in plan.wraps:
            notes[path] = "FullyShardedDataParallel(same arguments)"
    for c in plan.checkpoints:
        api = ("checkpoint_wrapper" if c.api == "wrapper" else "apply_activation_checkpointing") + \
            ("(checkpoint_impl=REENTRANT)" if c.reentrant else "")
        notes[c.path] = (f"{api}, then " + notes[c.path]) if c.before and c.path in notes else \
            (f"{notes[c.path]}, then {api}" if c.path in notes else f"{api} ({'before' if c.before else 'after'} FSDP1)")
    lines = []
    if plan.no_sync:
        lines.append("accumulation: the non-last microbatches under no_sync()")
    if plan.sync_module_states:
        lines.append("ranks other than 0 start from other weights; sync_module_states must broadcast rank 0's")
    if case.train.clip:
        lines.append("FSDP.clip_grad_norm_ for clipping")
    return notes, lines


#: The training-loop dimensions this family does not take (:attr:`parityfuzz.families.Family.unsupported`).
UNSUPPORTED = {
    "nonroot": "a nested FullyShardedDataParallel instance runs only inside its root's forward: FSDP1 documents no "
               "forward of a non-root instance alone (the root's lazy init and its streams are the root's)",
    "post_optim_event": "set_post_optim_event is FSDP2's (FSDPModule); FSDP1 has no post-optimizer event",
}


def runs_unsharded(case: Case) -> bool:
    """FSDP1 runs as NO_SHARD: asked to, or its shard group has one rank (it then switches: a hybrid strategy's
    group, or the dp sub-mesh of fsdp1_tp's (dp_shard=1, tp) mesh)."""
    return case.plan.sharding == "NO_SHARD" or case.mesh.axis_size("dp_shard") == 1
