"""FSDP2's ``fully_shard`` as a plan part: which modules are wrapped (:class:`Wrap`, each with its
``MixedPrecisionPolicy``, :class:`Policy`), explicit prefetching, and the switches FSDP2 adds to a training loop
(gradient accumulation controls, 1F1B's early unshard, a registered forward method), on a 1-D ``(dp_shard,)`` or
HSDP ``(dp_replicate, dp_shard)`` mesh.  The fsdp2 family is this part alone; fsdp2_tp adds tensor parallelism;
the pipeline family gives each stage's ``fully_shard`` one :class:`Policy`.

Spec, checks, tags and printout here (torch- and Hypothesis-free).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from parityfuzz.case import dtypes
from parityfuzz.case.core import Case, Plan
from parityfuzz.case.dtypes import MP_DTYPES
from parityfuzz.case.errors import CaseError, check
from parityfuzz.case.model import check_paths, check_rank_gate_periods, children_first
from parityfuzz.parts.activation_checkpoint import (CHECKPOINT_APIS, ActivationCheckpoint, checkpoint_call,
                                                    checkpoint_tags)
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.run.calls import At, Call, Name, keywords, source

#: The meshes ``fully_shard`` is drawn on: 1-D, and HSDP (replicate over the first axis, shard over the second).
MESHES = (("dp_shard",), ("dp_replicate", "dp_shard"))

#: A :class:`Policy`'s dtype fields.
POLICY_DTYPES = ("param_dtype", "reduce_dtype", "output_dtype")


@dataclass(frozen=True)
class Policy:
    """A ``MixedPrecisionPolicy`` (dtype names from :data:`MP_DTYPES`, ``""`` for None; all at their defaults: no
    ``mp_policy`` argument)."""

    param_dtype: str = ""
    reduce_dtype: str = ""
    output_dtype: str = ""
    cast_forward_inputs: bool = True

    def active(self) -> bool:
        """Whether the policy differs from the default one."""
        return bool(self.param_dtype or self.reduce_dtype or self.output_dtype) or not self.cast_forward_inputs

    def compute(self, master: str) -> str:
        """The dtype a module under this policy computes in, its parameters being in ``master``."""
        return self.param_dtype or master

    def output(self, master: str) -> str:
        """The dtype of such a module's output."""
        return self.output_dtype or self.compute(master)

    def check(self, where: str) -> None:
        """The dtype fields name dtypes (``where``: the policy's field path, for the message)."""
        for key in POLICY_DTYPES:
            value = getattr(self, key)
            check(value == "" or value in MP_DTYPES, f"{where}.{key}",
                  f"must be '' (None) or one of {MP_DTYPES}, got {value!r}")

    def as_call(self, dtype_prefix: str = "torch.") -> Call:
        """The policy's constructor call (:mod:`parityfuzz.run.calls`), its arguments at their defaults left out."""
        return Call("MixedPrecisionPolicy", kwargs=tuple(
            [(k, Name(dtype_prefix + getattr(self, k))) for k in POLICY_DTYPES if getattr(self, k)]
            + ([] if self.cast_forward_inputs else [("cast_forward_inputs", False)])))

    def call(self, dtype_prefix: str = "") -> str:
        """The policy as its constructor call, for printouts (``dtype_prefix`` ``"torch."`` for source)."""
        return source(self.as_call(dtype_prefix))

    def features(self, least_precise: str) -> set[str]:
        """Tags of an active policy (``least_precise``: the case's least precise dtype) that do not depend on how
        many there are."""
        tags = {f"precision={least_precise}"}
        tags |= {f"mp_{k}" for k in ("reduce_dtype", "output_dtype") if getattr(self, k)}
        return tags | ({"mp_no_input_cast"} if not self.cast_forward_inputs else set())


@dataclass(frozen=True)
class Wrap:
    """``fully_shard`` applied to the module at ``path`` (``""`` is the root).

    ``offload``: ``CPUOffloadPolicy`` (``pin_memory`` only where there is an accelerator).
    ``param_dtype``, ``reduce_dtype``, ``output_dtype``, ``cast_forward_inputs``: the module's
    ``MixedPrecisionPolicy`` (:attr:`policy`; flat here, as the case's JSON has them).
    """

    path: str
    reshard_after_forward: Union[bool, int] = True
    offload: bool = False
    param_dtype: str = ""
    reduce_dtype: str = ""
    output_dtype: str = ""
    cast_forward_inputs: bool = True

    @property
    def policy(self) -> Policy:
        return Policy(self.param_dtype, self.reduce_dtype, self.output_dtype, self.cast_forward_inputs)

    def mixed_precision(self) -> bool:
        """Whether this module has a non-default ``MixedPrecisionPolicy``."""
        return self.policy.active()


@dataclass(frozen=True)
class Prefetch:
    """Explicit prefetching set on the wrapped module at ``path``: other wrapped modules to unshard early."""

    path: str
    forward: tuple[str, ...] = ()
    backward: tuple[str, ...] = ()


@dataclass(frozen=True)
class FullyShardPlan(Plan):
    """Which modules get ``fully_shard`` (children before parents) and how FSDP2 is driven (a family's plan
    subclasses it, naming the family).

    Accumulation over ``train.microbatches``: ``no_sync`` lists the wrapped modules whose gradient sync is
    off on the non-last microbatches; ``is_last_backward``, ``reshard_after_backward=False`` and
    ``no_all_reduce`` (HSDP) are set per microbatch; ``unshard_first``: every wrapped module's
    ``unshard(async_op=True)`` issued before the first forward of a step, handles left pending (1F1B).
    ``forward_method``: the root is called through ``forward_alt``, registered with
    ``register_fsdp_forward_method``.
    """

    wraps: tuple[Wrap, ...] = (Wrap(""),)
    checkpoints: tuple[ActivationCheckpoint, ...] = ()
    prefetch: tuple[Prefetch, ...] = ()
    #: ``set_reduce_scatter_unused_params(True)`` on every wrapped module: zero gradients for parameters a
    #: rank did not use, so the ranks' reduce-scatters match (needed by per-rank control flow).
    reduce_scatter_unused: bool = False
    no_sync: tuple[str, ...] = ()
    is_last_backward: bool = False
    reshard_after_backward: bool = True
    unshard_first: bool = False
    no_all_reduce: bool = False
    forward_method: bool = False
    #: ``set_post_optim_event`` on the root after every optimizer step, with an event recorded on the device's
    #: current stream (seed 000's ``test_post_optim_event``).  On CPU the event is ``torch.cpu.Event``, a stub
    #: whose ``wait_event`` does nothing: the root takes the event branch and trains as without it (what
    #: ``tests/test_training_loop_dimensions.py`` checks of torch on CPU).
    post_optim_event: bool = False

    def owner(self, path: str) -> str:
        """The wrapped module whose FSDP group holds the module at ``path``: itself or its nearest wrapped
        ancestor (the root, ``""``, is always wrapped)."""
        wrapped = {w.path for w in self.wraps}
        while path and path not in wrapped:
            path = path.rpartition(".")[0]
        return path

    def mixed_precision(self) -> bool:
        return any(w.mixed_precision() for w in self.wraps)

    def calls(self, mesh: str = "mesh") -> list[Call]:
        """The plan's torch calls (:mod:`parityfuzz.run.calls`), in order: the activation checkpoints applied
        before, ``fully_shard`` per wrap (children before parents, on the mesh the backend binds as ``mesh``), the
        checkpoints applied after, then the settings of the wrapped modules.  The system runs them, an exported
        script prints them."""
        out = [checkpoint_call(c) for c in self.checkpoints if c.before]
        out += [fully_shard_call(w, mesh) for w in children_first(self.wraps, lambda w: w.path)]
        out += [checkpoint_call(c) for c in self.checkpoints if not c.before]
        if self.reduce_scatter_unused:
            out.append(Call("set_reduce_scatter_unused_params", (True,), on=At("")))
        for p in self.prefetch:
            for direction, targets in (("forward", p.forward), ("backward", p.backward)):
                if targets:
                    out.append(Call(f"set_modules_to_{direction}_prefetch", ([At(t) for t in targets],), on=At(p.path)))
        if self.forward_method:
            out.append(Call("register_fsdp_forward_method", (At(""), "forward_alt")))
        return out


def switch_calls(plan: FullyShardPlan, microbatches: int) -> tuple[list, list]:
    """FSDP2's switches around each microbatch as calls (:mod:`parityfuzz.run.calls`): those at a step's first
    microbatch (the root's post-optimizer event, recorded on ``DEVICE``; 1F1B's all-gathers issued up front and
    left pending), and those at every microbatch (``last``: whether it is the step's last).  The system runs them,
    an exported script prints them; the backend binds ``model``, ``last``, ``DEVICE`` and ``set_post_optim_event``
    (:func:`parityfuzz.parts.fully_shard.system.set_post_optim_event`)."""
    first, every = [], []
    if plan.post_optim_event:  # recorded after the optimizer step: nothing runs in between
        first.append(Call("set_post_optim_event", (At(""), Name("DEVICE"))))
    if plan.unshard_first:  # 1F1B, as PyTorch's test does it: the forward waits for the pending all-gathers
        first += [Call("unshard", (), keywords(async_op=True), on=At(w.path)) for w in plan.wraps]
    if microbatches > 1:
        every += [Call("set_requires_gradient_sync", (Name("last"),), keywords(recurse=False), on=At(path))
                  for path in plan.no_sync]
        if not plan.reshard_after_backward:
            every.append(Call("set_reshard_after_backward", (Name("last"),), on=At("")))
    if plan.no_all_reduce:
        every.append(Call("set_requires_all_reduce", (Name("last"),), on=At("")))
    if plan.is_last_backward:
        every.append(Call("set_is_last_backward", (Name("last"),), on=At("")))
    return first, every


def fully_shard_call(w: Wrap, mesh: str = "mesh") -> Call:
    """``fully_shard`` of one wrap; ``reshard_after_forward`` always spelled out (its default, None, is False for
    the root, the case's default True), the policies only where they are not the defaults."""
    kwargs = [("mesh", Name(mesh)), ("reshard_after_forward", w.reshard_after_forward)]
    if w.offload:  # pinned memory only where there is an accelerator
        kwargs.append(("offload_policy", Call("CPUOffloadPolicy", kwargs=keywords(
            pin_memory=Call("torch.cuda.is_available")))))
    if w.mixed_precision():
        kwargs.append(("mp_policy", w.policy.as_call()))
    return Call("fully_shard", (At(w.path),), tuple(kwargs))


def validate(case: Case) -> None:
    """The plan's wraps, checkpoints, prefetching and switches on the case's model and mesh."""
    plan, model, mesh, t = case.plan, case.model, case.mesh, case.train
    kinds = dict(model.module_paths())
    seen = set()
    shard_size = mesh.axis_size("dp_shard")
    for i, w in enumerate(plan.wraps):
        where = f"plan.wraps[{i}]"
        check(w.path in kinds, f"{where}.path", f"no module at path {w.path!r}")
        check(w.path not in seen, f"{where}.path", f"module {w.path!r} is wrapped twice")
        seen.add(w.path)
        raf = w.reshard_after_forward
        if not isinstance(raf, bool):
            check(1 < raf < shard_size and shard_size % raf == 0, f"{where}.reshard_after_forward",
                  f"an int must be a non-trivial divisor of the shard group size {shard_size}, got {raf}")
        w.policy.check(where)
        if model.tie_head:
            check(w.path not in ("inp", "head"), f"{where}.path",
                  "tied embedding/head weights must stay in one group: do not wrap 'inp' or 'head' alone")
    check("" in seen, "plan.wraps", "the root ('') must be wrapped")
    check_paths([c.path for c in plan.checkpoints], kinds, "plan.checkpoints", "checkpointed")
    for i, c in enumerate(plan.checkpoints):
        where = f"plan.checkpoints[{i}]"
        check(c.api in CHECKPOINT_APIS, f"{where}.api", f"must be one of {CHECKPOINT_APIS}, got {c.api!r}")
        check(not (c.api != "composable" and c.path == ""), f"{where}.api",
              "only the composable API can checkpoint the root")
        check(not (c.reentrant and c.api == "composable"), f"{where}.reentrant",
              "the composable checkpoint has no reentrant form (checkpoint_wrapper's checkpoint_impl has)")
    checkpointing.check_rules(case)
    for i, p in enumerate(plan.prefetch):
        where = f"plan.prefetch[{i}]"
        check(p.path in seen, f"{where}.path", f"{p.path!r} is not a wrapped module")
        for key in ("forward", "backward"):
            for j, target in enumerate(getattr(p, key)):
                check(target in seen, f"{where}.{key}[{j}]", f"{target!r} is not a wrapped module")
    for i, path in enumerate(plan.no_sync):
        check(path in seen, f"plan.no_sync[{i}]", f"{path!r} is not a wrapped module")
    if plan.no_all_reduce:
        check("dp_replicate" in mesh.names and t.microbatches > 1, "plan.no_all_reduce",
              "needs an HSDP mesh and more than one microbatch")
    if t.to_float64:
        check(not plan.mixed_precision(), "train.to_float64",
              "not combined with mixed precision (the policy's dtypes are relative to the model's)")
    if t.nonroot:
        check(t.nonroot in seen - {""}, "train.nonroot", f"{t.nonroot!r} is not a wrapped non-root module")
    _validate_rank_gates(case)
    check(not plan.mixed_precision() or case.reference != "ddp", "reference",
          "plain DDP cannot model mixed precision: use the emulating reference 'ddp_mp'")
    inconsistent = dtypes.check_consistent(case)
    if inconsistent:
        raise CaseError(*inconsistent)


def _validate_rank_gates(case: Case) -> None:
    """Per-rank control flow: some rank uses the gated child on every forward, nothing inside it is wrapped
    (FSDP2 all-gathers a group on every rank), and the plan includes unused parameters in its reductions."""
    gates, rank_gates = case.model.gates(), case.model.rank_gates()
    check_rank_gate_periods(case.model, case.mesh.dp_size())
    for path in rank_gates:
        for i, w in enumerate(case.plan.wraps):
            check(not w.path.startswith(path + "."), f"plan.wraps[{i}].path",
                  f"{w.path!r} is inside the per-rank gate at {path}: ranks would all-gather it unevenly")
    check(bool(rank_gates) == case.plan.reduce_scatter_unused, "plan.reduce_scatter_unused",
          "is exactly what per-rank gates need: set with them, not without (it gives unused parameters zero "
          "gradients where DDP gives none)")
    if rank_gates:
        check(len(rank_gates) == len(gates), "model.body",
              "per-rank gates do not mix with step gates (a step gate's child unused on every rank would get a "
              "zero gradient from set_reduce_scatter_unused_params, none from DDP)")
        check(not case.train.nonroot, "train.nonroot",
              "not with per-rank gates (set_reduce_scatter_unused_params zeroes every group's gradients in a "
              "non-root pass)")


def features(case: Case) -> set[str]:
    """Tags of the plan's wraps, policies, checkpoints, prefetching and switches."""
    plan, t = case.plan, case.train
    tags = set()
    if plan.reduce_scatter_unused:
        tags.add("rank_flow")  # control flow that differs per rank
    wrapped = [w for w in plan.wraps if w.path]
    tags.add(f"wrapped={min(len(wrapped), 3)}{'+' if len(wrapped) > 3 else ''}")
    for w in plan.wraps:
        raf = w.reshard_after_forward
        tags.add("reshard=int" if not isinstance(raf, bool) else f"reshard={raf}")
        if w.offload:
            tags.add("offload")
    if plan.mixed_precision():
        for w in plan.wraps:
            tags |= w.policy.features(dtypes.precision(case))
        param_dtypes = {w.param_dtype or t.dtype for w in plan.wraps}
        tags.add("mp=mixed" if len(param_dtypes) > 1 else "mp=uniform")
    tags.update(checkpoint_tags(plan.checkpoints))
    if any(p.forward for p in plan.prefetch):
        tags.add("prefetch=forward")
    if any(p.backward for p in plan.prefetch):
        tags.add("prefetch=backward")
    if t.microbatches > 1:
        all_wrapped = {w.path for w in plan.wraps}
        tags.add("no_sync=" + ("none" if not plan.no_sync else "all" if set(plan.no_sync) == all_wrapped
                               else "root" if plan.no_sync == ("",) else "subset"))
    for flag in ("is_last_backward", "unshard_first", "forward_method", "no_all_reduce", "post_optim_event"):
        if getattr(plan, flag):
            tags.add(flag)
    if not plan.reshard_after_backward:
        tags.add("reshard_after_backward=False")
    return tags


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    """Notes on the wrapped, checkpointed and prefetching modules, and lines on how FSDP2 is driven."""
    plan, t = case.plan, case.train
    wraps = {w.path: w for w in plan.wraps}
    checkpoints = {c.path: c for c in plan.checkpoints}
    prefetch = {p.path: p for p in plan.prefetch}
    notes = {}
    for path in dict.fromkeys([*wraps, *checkpoints, *prefetch]):
        parts = []
        c = checkpoints.get(path)
        checkpointed = f"checkpoint[{c.api}{', REENTRANT' if c.reentrant else ''}]" if c else ""
        if c and c.before:
            parts.append(checkpointed)
        w = wraps.get(path)
        if w:
            parts.append(f"fully_shard(reshard_after_forward={w.reshard_after_forward}"
                         + (", offload=CPUOffloadPolicy()" if w.offload else "")
                         + (f", mp_policy={w.policy.call()}" if w.policy.active() else "") + ")")
        if c and not c.before:
            parts.append(checkpointed)
        p = prefetch.get(path)
        if p:
            parts += [f"prefetch {kind} {[x or '<root>' for x in getattr(p, kind)]}"
                      for kind in ("forward", "backward") if getattr(p, kind)]
        notes[path] = ", then ".join(parts)
    lines = []
    accum = []
    if t.microbatches > 1:
        accum.append(f"{t.microbatches} microbatches, gradient sync off on non-last ones for "
                     f"{[p or '<root>' for p in plan.no_sync] or 'no module'}")
    if plan.is_last_backward:
        accum.append("set_is_last_backward per microbatch")
    if not plan.reshard_after_backward:
        accum.append("set_reshard_after_backward(False) until the last microbatch")
    if plan.unshard_first:
        accum.append("every wrapped module's unshard(async_op=True) issued first, handles left pending (1F1B)")
    if plan.no_all_reduce:
        accum.append("set_requires_all_reduce(False) until the last microbatch")
    if accum:
        lines.append("accumulation: " + "; ".join(accum))
    if t.to_float64:
        lines.append("model.to(torch.float64) after fully_shard")
    if plan.forward_method:
        lines.append("root called through forward_alt, registered with register_fsdp_forward_method")
    if plan.reduce_scatter_unused:
        lines.append("set_reduce_scatter_unused_params(True) on every wrapped module")
    if plan.post_optim_event:
        lines.append("set_post_optim_event on the root with an event recorded after each optimizer step")
    return notes, lines
