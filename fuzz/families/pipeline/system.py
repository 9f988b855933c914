"""System under test of the ``pipeline`` family, and its reference.

:class:`PipelineSystem`, applied in torchtitan's order: split the model into this rank's stages
(:class:`Stage`: each stage keeps the top-level modules it owns, under their own names), apply the plan's
tensor-parallel styles of the stage's modules on the ``tp`` axis where the mesh has one, ``fully_shard`` each stage
over the ``dp_shard`` axis where the mesh has one (the plan's activation checkpoints of the stage's modules applied
before or after, as each says), wrap each in a ``PipelineStage`` on the ``pp`` group, build the
plan's schedule with the case's loss and ``scale_grads``.  A step is ``schedule.step`` (under ``loss_parallel()``
where the plan says): the input where this rank holds the first stage, the target and a list for the losses where
it holds the last.  The optimizer steps this rank's
parameters; gradient clipping takes the norm over every stage (each rank's local norm, summed over the ``pp``
group, as torchtitan's ``clip_grad_norm_`` does: ``clip_grad_norm_`` alone would see only this rank's stages).

:class:`PipelineReference`: DDP over all ranks (a pipeline's ranks share their batch, so this averages over the
data-parallel ranks) running the plan's microbatches one after another, each one's loss backpropagated on its own,
each ``step()``'s share of the gradients divided by the microbatch count where ``scale_grads``;
:class:`PipelineMixedPrecisionReference` the same under the plan's ``MixedPrecisionPolicy``, through the emulation
of FSDP2's policy with one group per stage.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn

from parityfuzz.case.dtypes import promise
from parityfuzz.case.model import under
from parityfuzz.families.pipeline import SCHEDULES, rank_modules
from parityfuzz.families.pipeline.precision import fully_shard_groups
from parityfuzz.run.build import Block
from parityfuzz.run.record import torch_dtype
from parityfuzz.systems.base import System, case_name, optimizer_parts
from parityfuzz.systems.ddp import DDPSystem
from parityfuzz.families.pipeline.calls import stage_calls
from parityfuzz.parts.activation_checkpoint.apply import apply_checkpoint
from parityfuzz.parts.tensor_parallel.apply import TensorParallel, plain_loss, torch_names as tp_names
from parityfuzz.run import calls
from parityfuzz.systems.masters import EmulatedReference
from parityfuzz.parts.fully_shard.reference import FSDP2Precision, policy_arguments
from parityfuzz.parts.fully_shard.system import torch_names as fully_shard_names


class Stage(nn.Module):
    """One pipeline stage of the case's model: the top-level modules it owns (the same module objects: no copy),
    under the names the whole model gives them (``inp``, ``body.<child>``, ``head``), run as the model runs them."""

    def __init__(self, model: nn.Module, names: list[str]):
        super().__init__()
        if "inp" in names:
            self.inp = model.inp
        body = [n.partition(".")[2] for n in names if n.startswith("body.")]
        if "body" in names:
            self.body = model.body
        elif body:
            self.body = Block([(n, model.body.get_submodule(n)) for n in body])
            self.body.partial = True  # (some children of the model's body: its output is no output of the model's)
        if "head" in names:
            self.head = model.head

    def forward(self, x):
        for name in ("inp", "body", "head"):
            if hasattr(self, name):
                x = getattr(self, name)(x)
        return x


class _Held(nn.Module):
    """This rank's stages as one module for what looks at the whole (train/eval mode, resharding, the probe),
    whose submodules are named as the case names them (each stage's own root left out)."""

    def __init__(self, stages: list[nn.Module]):
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        for stage in self.stages:
            for name, module in stage.named_modules(memo, prefix, remove_duplicate):
                if name:
                    yield name, module


def chunk_loss(loss_fn, dim: int):
    """The schedule's ``loss_fn`` where it splits the input along ``dim``: the schedules split a target along its
    dimension 0 whatever the input's ``args_chunk_spec`` (``_TARGET_CHUNK_SPEC``), so the target goes in with ``dim``
    moved first (``target.movedim(dim, 0)``) and each microbatch's is moved back here (the very view
    ``tensor_split`` along ``dim`` gives)."""
    return loss_fn if dim == 0 else lambda output, target: loss_fn(output, target.movedim(0, dim))


def pipeline_loss_total(losses: list[torch.Tensor]) -> torch.Tensor:
    """The step's recorded loss: the microbatch losses added in order (the same arithmetic in both systems)."""
    total = losses[0].detach().clone()
    for loss in losses[1:]:
        total = total + loss.detach()
    return total


def clip_over_pipeline(params: list, max_norm: float, dtype: torch.dtype, group) -> None:
    """Clip by the norm of every stage's gradients: this rank's norm (over its data-parallel shards too), squared,
    summed over the pipeline's ranks (``group``), as torchtitan's ``clip_grad_norm_`` does under pipelining."""
    from torch.distributed.tensor import DTensor

    params = [p for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params]) if params else torch.zeros((), dtype=dtype)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    norm = norm.to(dtype) ** 2
    dist.all_reduce(norm, group=group)
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm.sqrt())


class PipelineSystem(TensorParallel, System):
    name = "pipeline"

    def wrap(self, model: nn.Module) -> nn.Module:
        case, plan, spec = self.case, self.case.plan, self.case.mesh
        mesh = self.ctx.mesh(spec.shape, spec.names)
        pp = spec.axis_size("pp")
        self.pp_group = mesh["pp"].get_group()
        units = plan.stage_units(case.model)
        self.count = len(units)
        self.mine = plan.stages_of(pp, spec.coords(self.ctx.rank)["pp"])
        everything = {"grad": {case_name(n) for n, _ in model.named_parameters()}}
        everything["param"] = everything["grad"] | {"buffer:" + case_name(n) for n, _ in model.named_buffers()}
        modules = []
        names = {**fully_shard_names(), **tp_names(), "apply_checkpoint": apply_checkpoint,
                 "tp_mesh": mesh["tp"] if "tp" in spec.names else None,
                 "dp_mesh": mesh["dp_shard"] if "dp_shard" in spec.names else None}
        for index in self.mine:  # (the stage keeps the whole model's paths)
            module = Stage(model, units[index])
            calls.run(stage_calls(case, index), {**names, "model": module})
            modules.append(module)
        self.stage_modules = modules
        self.held_units = rank_modules(case)[spec.coords(self.ctx.rank)["pp"]]
        self.state_view = Stage(model, self.held_units)  # (not a module of _Held: each module is in it once)
        mine_names = {"grad": {n for n, _ in self.named_parameters()}}
        mine_names["param"] = mine_names["grad"] | set(self.buffers())
        self._elsewhere = {what: frozenset(everything[what] - mine_names[what]) for what in everything}
        self.has_first, self.has_last = 0 in self.mine, self.count - 1 in self.mine
        self.last_rank = next(r for r in range(pp) if self.count - 1 in plan.stages_of(pp, r))
        self.get_mesh = lambda names, layout: mesh[names if len(names) > 1 else names[0]]
        self.schedule = self._schedule()
        return _Held(modules)

    def _schedule(self):
        """A ``PipelineStage`` around each of this rank's stage modules, and the plan's schedule over them; a stage
        given a DTensor activation finds its mesh by the axis names (``get_mesh``: "used during dynamic DTensor
        inference")."""
        from torch.distributed import pipelining
        from torch.distributed.pipelining.microbatch import TensorChunkSpec

        plan = self.case.plan
        stages = [pipelining.PipelineStage(module, index, self.count, self.ctx.device, group=self.pp_group,
                                           get_mesh=self.get_mesh)
                  for index, module in zip(self.mine, self.stage_modules)]
        cls = getattr(pipelining, SCHEDULES[plan.schedule][0])
        split = {"args_chunk_spec": (TensorChunkSpec(plan.split_dim),)} if plan.split_dim else {}
        return cls(stages[0] if plan.layout() == "single" else stages, n_microbatches=plan.microbatches,
                   loss_fn=chunk_loss(self.loss, plan.split_dim), scale_grads=plan.scale_grads, **split)

    def unfreeze(self, names: set[str]) -> None:
        """The stages and the schedule built anew around the same modules once parameters are unfrozen: a
        ``PipelineStage`` infers its inputs' and outputs' metadata (requires_grad among it) once, at the first
        step ("Dynamic mode: Metadata is inferred from the first microbatch at runtime", ``PipelineStage``), so a
        stage input that starts to require grad is a change torch does not promise to see, as DDP's docstring says
        of its own construction-time state (the DDP systems rebuild likewise)."""
        super().unfreeze(names)
        self.schedule = self._schedule()

    def state_module(self) -> nn.Module:
        """This rank's stages as one module named as the whole model is (what torchtitan merges the stages' state dicts
        into): the same module objects, so that FSDP2's state-dict hooks on the modules holding its parameters run."""
        return self.state_view

    def holds(self, name: str) -> bool:
        return under(name, self.held_units)

    def reshard(self) -> None:
        """Each stage's ``fully_shard`` (the stage modules are no module of :class:`_Held`'s, which names their
        submodules only)."""
        from torch.distributed.fsdp import FSDPModule

        for module in self.stage_modules:
            if isinstance(module, FSDPModule):
                module.reshard()

    def named_parameters(self):
        for module in self.stage_modules:
            for name, p in module.named_parameters():
                yield case_name(name), p

    def buffers(self) -> dict[str, torch.Tensor]:
        return {"buffer:" + case_name(n): b for m in self.stage_modules for n, b in m.named_buffers()}

    def elsewhere(self, what: str) -> frozenset[str]:
        return self._elsewhere[what]

    def make_optimizer(self) -> torch.optim.Optimizer:
        """The case's optimizer over this rank's parameters (an empty group where its stages hold none)."""
        cls, groups, kwargs = optimizer_parts(self.case.train, self.named_parameters())
        return cls(groups or [{"params": []}], **kwargs)

    def forward_backward(self, batch, target, path=None):
        """One ``schedule.step``; returns the last stage's microbatch losses added up, sent to every rank of the
        pipeline."""
        with self._loss_context():
            return self._run(self.schedule.step, batch, target)

    def evaluation_loss(self, batch, target):
        """``schedule.eval`` ("calling forward only"; eval mode, ``torch.no_grad()`` and the loss context are
        :meth:`evaluate`'s, as torchtitan's validation runs it); its microbatch losses added up as a step's are."""
        return self._run(self.schedule.eval, batch, target)

    def _run(self, call, batch, target):
        losses: list[torch.Tensor] = []
        args = (batch,) if self.has_first else ()
        kwargs = {"target": target.movedim(self.case.plan.split_dim, 0), "losses": losses} if self.has_last else {}
        call(*args, **kwargs)
        total = pipeline_loss_total([plain_loss(loss) for loss in losses]) if self.has_last else torch.zeros(
            (), dtype=torch_dtype(promise(self.case).output("")), device=self.ctx.device)
        dist.broadcast(total, group=self.pp_group, group_src=self.last_rank)
        return total

    def clip_gradients(self, max_norm: float) -> None:
        clip_over_pipeline([p for _, p in self.named_parameters()], max_norm, torch_dtype(self.case.train.dtype),
                           self.pp_group)


class PipelineReference(DDPSystem):
    name = "pipeline_reference"

    def forward_backward(self, batch, target, path=None):
        """The plan's microbatches (the input split along ``plan.split_dim``, as the schedules split it) one after another,
        DDP's sync on the last.  ``scale_grads`` makes a ``step()`` train as if its loss were the mean over its
        microbatches ("This setting should match the configuration of your loss_fn, which may either average
        losses (scale_grads=True) or sum losses (scale_grads=False)", ``schedules.py``): one call per optimizer
        step divides the gradients by the microbatch count afterwards; where the training loop accumulates several
        calls (``train.microbatches``) each microbatch's loss is divided before its backward, so that only that
        call's share is scaled."""
        plan = self.case.plan
        return microbatches_in_turn(self.model, batch, target, plan.microbatches, plan.split_dim, plan.scale_grads,
                                    self.case.train.microbatches > 1, self.forward_loss, self.backward)

    def evaluation_loss(self, batch, target):
        return forward_only(self.forward_loss, batch, target, self.case.plan.microbatches, self.case.plan.split_dim)


class PipelineMixedPrecisionReference(EmulatedReference):
    """:class:`PipelineReference` under the plan's ``MixedPrecisionPolicy``: the unsplit model through the emulation
    of FSDP2's policy (:class:`~parityfuzz.parts.fully_shard.reference.FSDP2Precision`) with a group per ``fully_shard``
    call (:func:`~parityfuzz.families.pipeline.precision.fully_shard_groups`: one per stage, its top-level modules,
    the stage's input cast where it reaches the first, its output where it leaves the last; under ``shard_units``
    each of those modules' own first), reducing over the ``dp_shard`` group as each call does.

    A ``step()``'s microbatches run one after another with gradient sync off on all but the last (the schedules
    turn it off for every microbatch and reduce once after the last: ``PipelineStage.backward_maybe_with_nosync``,
    ``perform_reduce_grad``), so the gradients accumulate in ``reduce_dtype`` where it is set ("If also gradient
    reduction is disabled via set_requires_gradient_sync, then FSDP will accumulate gradients using
    reduce_dtype", ``MixedPrecisionPolicy``) and are reduced once per ``step()``, whatever the training loop
    accumulates (each ``step()`` reduces).  ``scale_grads`` divides that ``step()``'s reduced gradients by the
    microbatch count, in the model's dtype (where the schedules divide the sharded gradients), before they are
    added to what earlier ``step()`` calls of the optimizer step left.

    The order of a ``step()``'s microbatches' backwards is the schedule's, which torch does not document
    (``ScheduleLoopedBFS`` runs them last to first, the zero-bubble schedules defer weight steps): under a
    low-precision accumulation (a ``reduce_dtype`` or ``param_dtype`` below the model's) the sum's rounding depends
    on it.  The reference adds them in microbatch order and its noise samples (the perturbed references) in the
    reverse one, so that the measured noise holds the rounding of another order, as it holds that of the weights'
    last bits: a difference within it is no finding (the 30-minute run of seed 20261210 met LoopedBFS's reverse
    order as a bfloat16 ulp under reduce_dtype=bfloat16), one beyond it is (the accumulation dtype is documented:
    a float32 reduce_dtype's sum in bfloat16 stands 1e-3 away from a float32 sum in any order)."""

    name = "pipeline_mp_reference"

    def emulate(self, model: nn.Module) -> FSDP2Precision:
        case = self.case
        policies = [{**group, **policy_arguments(case.plan.precision)} for group in fully_shard_groups(case)]
        shard, _ = self.mesh_groups()
        return FSDP2Precision(model, policies, shard, unsynced=[p["path"] for p in policies])

    def accumulation(self, index: int, last: bool):
        return contextlib.nullcontext()  # (every step() reduces: see the class docstring)

    def forward_backward(self, batch, target, path=None):
        def backward(loss):
            self.backward(loss)
            self.model.finish_backward()

        plan = self.case.plan
        return emulated_microbatches_in_turn(self.model, batch, target, plan.microbatches, plan.split_dim,
                                             plan.scale_grads, self.forward_loss, backward,
                                             reverse=self.role == "perturbed_reference")

    def evaluation_loss(self, batch, target):
        return forward_only(self.forward_loss, batch, target, self.case.plan.microbatches, self.case.plan.split_dim)


def forward_only(forward_loss, batch, target, n: int, dim: int) -> torch.Tensor:
    """An evaluation pass of the references: the ``n`` microbatches (along ``dim``) forward only, their losses added
    up."""
    return pipeline_loss_total([forward_loss(x, y) for x, y in zip(batch.tensor_split(n, dim),
                                                                    target.tensor_split(n, dim))])


def microbatches_in_turn(model, batch, target, n, dim, scale_grads, accumulating, forward_loss, backward):
    """The reference's ``step()``: the input and target split along ``dim`` into ``n`` microbatches (as the
    schedules split the input, ``torch.tensor_split``, and :func:`chunk_loss` the target),
    each one's loss backpropagated on its own, DDP's sync on the last; where ``scale_grads`` this call's share of
    the gradients divided by ``n``: afterwards where one call makes the optimizer step, else each loss before its
    backward (``accumulating``).  Returns the losses added up (:func:`pipeline_loss_total`)."""
    scaled = scale_grads and n > 1
    losses = []
    for index, (x, y) in enumerate(zip(batch.tensor_split(n, dim), target.tensor_split(n, dim))):
        with contextlib.nullcontext() if index == n - 1 else model.no_sync():
            loss = forward_loss(x, y)
            backward(loss / n if scaled and accumulating else loss)
        losses.append(loss)
    if scaled and not accumulating:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.div_(n)
    return pipeline_loss_total(losses)


def emulated_microbatches_in_turn(emulation, batch, target, n, dim, scale_grads, forward_loss, backward,
                                  reverse: bool = False):
    """:class:`PipelineMixedPrecisionReference`'s ``step()``: the input and target split along ``dim`` into ``n``
    microbatches, each
    one's loss backpropagated on its own (``backward`` also ends the emulation's backward), gradient sync off but on
    the last run; where ``scale_grads`` the master gradients this call reduced divided by ``n`` before what earlier
    calls left is added back.  ``reverse``: the microbatches run last to first (the noise samples': see the class).
    Returns the losses added up in microbatch order (:func:`pipeline_loss_total`)."""
    masters = emulation.masters
    earlier = {name: m.grad for name, m in masters.items()} if scale_grads and n > 1 else {}
    for name in earlier:
        masters[name].grad = None
    pairs = list(zip(batch.tensor_split(n, dim), target.tensor_split(n, dim)))
    order = list(range(n))[::-1] if reverse else list(range(n))
    losses = [None] * n
    for turn, index in enumerate(order):
        x, y = pairs[index]
        with contextlib.nullcontext() if turn == n - 1 else emulation.no_sync():
            loss = forward_loss(x, y)
            backward(loss)
        losses[index] = loss
    for name, before in earlier.items():
        grad = masters[name].grad
        if grad is not None:
            grad.div_(n)
        masters[name].grad = grad if before is None else before if grad is None else before.add_(grad)
    return pipeline_loss_total(losses)
