"""The ``fsdp1`` family: ``FullyShardedDataParallel`` (FSDP1) around the whole model, with one of its five
sharding strategies and a wrapping (nested instances by hand, or an auto-wrap policy), trained like DDP.

FSDP1 is one wrapper call with a policy, not a ``fully_shard`` per module: the plan holds that call's
arguments.  Meshes: ``(dp_shard,)`` for ``FULL_SHARD``, ``SHARD_GRAD_OP`` and ``NO_SHARD``;
``(dp_replicate, dp_shard)`` for the hybrid strategies, whose groups FSDP1 gets three ways
(``hybrid_via``): a 2-D ``device_mesh``, an ``(intra, inter)`` process-group pair, or neither (``auto``:
torch builds its own, one intra-node group per machine: a ``(world, 1)`` mesh on a CPU machine, where it
counts one device).

The reference is DDP; with ``ignored`` modules, DDP told to ignore the same parameters (FSDP1 neither shards
nor reduces them: each rank trains its own copy, and the trace records them per rank).
"""

from __future__ import annotations

from dataclasses import dataclass

from fuzz.case.core import Case, Plan
from fuzz.case.errors import check
from fuzz.case.model import check_paths, under
from fuzz.families import Family
from fuzz.families.fsdp2 import Checkpoint

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


@dataclass(frozen=True)
class FSDP1Plan(Plan):
    """One ``FullyShardedDataParallel`` call on the root (and, for manual wrapping, one per module in
    ``wraps``, children first), and how the training loop drives it.

    ``ignored``: ``ignored_modules``.  ``offload``: ``CPUOffload(offload_params=True)``.
    ``sync_module_states``: each rank other than 0 starts from other weights; FSDP1 must broadcast rank 0's.
    ``no_sync``: the non-last microbatches of a step run under ``no_sync()``.  ``checkpoints``:
    ``checkpoint_wrapper`` / ``apply_activation_checkpointing`` before FSDP1 (or after, ``apply`` only).
    """

    family = "fsdp1"

    sharding: str = "FULL_SHARD"
    hybrid_via: str = ""
    use_orig_params: bool = True
    wrapping: str = "manual"
    wraps: tuple[str, ...] = ()
    wrap_kinds: tuple[str, ...] = ()
    min_num_params: int = 0
    ignored: tuple[str, ...] = ()
    offload: bool = False
    backward_prefetch: str = "BACKWARD_PRE"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True
    sync_module_states: bool = False
    no_sync: bool = False
    checkpoints: tuple[Checkpoint, ...] = ()


MESHES = (("dp_shard",), ("dp_replicate", "dp_shard"))


def reference(case: Case) -> str:
    """DDP; DDP ignoring the ignored modules' parameters where the plan has some."""
    return "ddp_ignoring" if case.plan.ignored else "ddp"


def validate(case: Case) -> None:
    plan, model, mesh, t = case.plan, case.model, case.mesh, case.train
    kinds = dict(model.module_paths())
    check(plan.sharding in SHARDINGS, "plan.sharding", f"must be one of {SHARDINGS}, got {plan.sharding!r}")
    hybrid = plan.sharding in HYBRID
    check(mesh.names == (MESHES[1] if hybrid else MESHES[0]), "mesh.names",
          f"{plan.sharding} runs on a {MESHES[1] if hybrid else MESHES[0]} mesh, got {mesh.names}")
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
    for i, path in enumerate(plan.ignored):
        check(path != "", f"plan.ignored[{i}]", "the root cannot be ignored")
        check(model.uses_params(path), f"plan.ignored[{i}]", f"{path!r} holds no parameters to ignore")
        check(not (model.tie_head and path in ("inp", "head")), f"plan.ignored[{i}]",
              "a tied embedding/head weight would be ignored on one side only")
        for w in plan.wraps:
            check(not under(w, (path,)), f"plan.ignored[{i}]",
                  f"{path!r} holds the wrapped {w!r}: an ignored module holds no FSDP1 wrapper")
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
    check(not case.model.per_rank_flow(), "model.body", "per-rank control flow is not drawn for FSDP1 yet")


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
        tags.add("ignored_modules")
    if plan.wraps:
        tags.add(f"wrapped={min(len(plan.wraps), 3)}{'+' if len(plan.wraps) > 3 else ''}")
    tags.update(f"ckpt={c.api}/{'before' if c.before else 'after'}" for c in plan.checkpoints)
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
        args.append(f"ignored_modules={list(plan.ignored)}")
    if plan.offload:
        args.append("cpu_offload=CPUOffload(offload_params=True)")
    if plan.backward_prefetch != "BACKWARD_PRE":
        args.append(f"backward_prefetch={plan.backward_prefetch or None}")
    for flag, default in (("forward_prefetch", False), ("limit_all_gathers", True), ("sync_module_states", False)):
        if getattr(plan, flag) != default:
            args.append(f"{flag}={getattr(plan, flag)}")
    notes = {"": f"FullyShardedDataParallel({', '.join(args)})"}
    if plan.wrapping == "manual":
        for path in plan.wraps:
            notes[path] = "FullyShardedDataParallel(same arguments)"
    for c in plan.checkpoints:
        api = "checkpoint_wrapper" if c.api == "wrapper" else "apply_activation_checkpointing"
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


FAMILY = Family(name="fsdp1", plan_type=FSDP1Plan, meshes=MESHES, system="fsdp1", strategy="strategies.fsdp1",
                reference=reference, validate=validate, features=features, describe=describe)
