"""The interface every system implements, and what they share."""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from parityfuzz.case import Case, TrainSpec
from parityfuzz.run import scaling


@dataclass
class RankContext:
    """What a rank process offers a system: its place in the world and cached meshes."""

    rank: int
    world_size: int
    device: torch.device
    _meshes: dict = field(default_factory=dict)

    def mesh(self, shape: tuple[int, ...], names: tuple[str, ...]):
        """A device mesh of this shape, created once per rank process (creating meshes leaks groups)."""
        key = (tuple(shape), tuple(names))
        if key not in self._meshes:
            from torch.distributed.device_mesh import init_device_mesh

            self._meshes[key] = init_device_mesh(self.device.type, tuple(shape), mesh_dim_names=tuple(names))
        return self._meshes[key]

    def release_groups(self) -> int:
        """Destroy every process group except the default one and those of cached meshes; return how many.

        Torch creates groups behind the API (FSDP2 builds a fresh post-forward
        mesh for every ``fully_shard(reshard_after_forward=<int>)`` call), and
        each gloo group holds threads and descriptors.  Destroyed groups still
        referenced by torch's caches linger, so the executor also recycles a
        pool whose ranks grow past its resource ceiling.
        """
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _world

        keep = {dist.group.WORLD}
        for mesh in self._meshes.values():
            keep.update(mesh.get_all_groups())
        stale = [pg for pg in list(_world.pg_map) if pg not in keep]
        for pg in stale:
            dist.destroy_process_group(pg)
        return len(stale)


def make_optimizer(train: TrainSpec, named_params) -> torch.optim.Optimizer:
    """The case's optimizer over ``(case name, parameter)`` pairs, in the case's parameter groups (a group
    takes the parameters of its modules; the rest form the default group)."""
    cls, param_groups, kwargs = optimizer_parts(train, named_params)
    return cls(param_groups, **kwargs)


def optimizer_parts(train: TrainSpec, named_params) -> tuple[type, list[dict], dict]:
    """``(optimizer class, parameter groups, defaults)`` of the case's optimizer (what a wrapper such as
    ``ZeroRedundancyOptimizer`` takes apart)."""
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[train.optimizer]
    default: list = []
    grouped: list[list] = [[] for _ in train.groups]
    for name, p in named_params:
        index = train.group_of(name)
        (default if index is None else grouped[index]).append(p)
    param_groups = [{"params": default}] if default else []
    param_groups += [{"params": params, "lr": train.lr * g.lr_scale, "weight_decay": g.weight_decay}
                     for g, params in zip(train.groups, grouped)]
    extra = {"momentum": train.momentum, "nesterov": train.nesterov} if train.optimizer == "sgd" else {}
    return cls, param_groups, dict(lr=train.lr, weight_decay=train.weight_decay, foreach=train.foreach,
                                   maximize=train.maximize, **extra)


def make_scheduler(train: TrainSpec, optim: torch.optim.Optimizer):
    """The case's LR scheduler (stepped after every optimizer step), or None."""
    if train.scheduler == "step":
        return torch.optim.lr_scheduler.StepLR(optim, step_size=2, gamma=0.5)
    if train.scheduler == "linear":
        return torch.optim.lr_scheduler.LinearLR(optim, start_factor=1.0, end_factor=0.1, total_iters=train.steps)
    return None


#: Attributes through which wrapper modules (``CheckpointWrapper``, FSDP1's ``FullyShardedDataParallel``,
#: ``torch.compile``'s ``OptimizedModule``) hold the module they wrap; they appear in parameter names as prefixes.
WRAPPER_ATTRS = ("_checkpoint_wrapped_module", "_fsdp_wrapped_module", "_orig_mod")


def case_name(name: str) -> str:
    """A parameter or buffer name as the case names it: wrapper prefixes taken out."""
    for attr in WRAPPER_ATTRS:
        name = name.replace(attr + ".", "")
    return name


def resolve(model: nn.Module, path: str) -> nn.Module:
    """The module at a case path, looking through any wrapper on the way."""
    module = model
    for part in [p for p in path.split(".") if p]:
        module = unwrap(getattr(module, part))
    return unwrap(module)


def holder(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    """``(module, attribute)`` that holds the (unwrapped) module at a non-root case path: its parent, or the
    innermost wrapper around it; setting that attribute replaces the module in the tree."""
    parent_path, _, name = path.rpartition(".")
    owner, attr = resolve(model, parent_path), name
    child = getattr(owner, attr)
    while (wrapped := _wrapped(child)) is not None:
        owner, (attr, child) = child, wrapped
    return owner, attr


def _wrapped(module: nn.Module) -> tuple[str, nn.Module] | None:
    """``(attribute, inner module)`` where ``module`` is a wrapper, else None."""
    for attr in WRAPPER_ATTRS:
        inner = module._modules.get(attr) if isinstance(module, nn.Module) else None
        if isinstance(inner, nn.Module):
            return attr, inner
    return None


def unwrap(module: nn.Module) -> nn.Module:
    """The module inside any wrappers around ``module``."""
    while (wrapped := _wrapped(module)) is not None:
        module = wrapped[1]
    return module


class InvariantViolation(AssertionError):
    """The system under test left the model in a state its contract rules out (reported as an ERROR verdict)."""


class System:
    """One way to train a case's model.

    The trainer calls, per step: :meth:`zero_grad`, :meth:`forward_backward`,
    :meth:`gradients`, :meth:`optimizer_step`, :meth:`parameters`.  Subclasses
    usually only override :meth:`wrap`; :meth:`gradients` and
    :meth:`parameters` return tensors keyed by the original module's parameter
    names: plain tensors hold the full value, DTensors may be sharded (the
    trainer records each rank's piece and the driver assembles them).
    """

    name = "base"

    def __init__(self, case: Case, ctx: RankContext, role: str = "system"):
        self.case = case
        self.ctx = ctx
        self.role = role  # "reference" or "system"; delays perturb only the system under test
        self.delays = {d.where: d.ms / 1000 for d in case.delays if d.rank == ctx.rank} if role == "system" else {}
        self._local_scales: dict[str, float] = {}  # see _watch_local_gradients
        self._watched: set[int] = set()

    # -- set-up
    def wrap(self, model: nn.Module) -> nn.Module:
        """Apply the parallel API to ``model``; return the module to call."""
        raise NotImplementedError

    def inner(self) -> nn.Module:
        """The module whose parameter names are the case's names (unwrapped)."""
        return self.model

    def state_module(self) -> nn.Module:
        """The module whose state dict a checkpoint takes (``get_state_dict``'s model): the module to call, unless
        the system's ranks call parts of it that no one module holds."""
        return self.model

    def holds(self, name: str) -> bool:
        """Whether this rank's state dict holds the case's parameter or buffer ``name`` (every one, unless each rank
        holds a part of the model: :attr:`parityfuzz.families.Family.partial_state`)."""
        return True

    #: Whether ``train.to_float64`` converts the model after :meth:`wrap` (else before).
    converts_after_wrap = False
    #: The system under test's :class:`parityfuzz.systems.compiled.Compiler` where the case compiles it.
    compiler = None
    #: Whether the trainer counts the collectives of each pass (a dispatch mode; slows every op down, so
    #: only systems whose collectives follow from their plan in ways worth checking turn it on).
    count_collectives = False
    #: Whether the system under test scales its loss with ``ShardedGradScaler`` (its gradients are sharded: FSDP)
    #: rather than ``torch.amp.GradScaler`` (references always take the latter, as DDP does).
    sharded_scaler = False
    #: The case's gradient scaler (``train.loss_scale``), or None.
    scaler = None
    #: What the backward running now multiplies its loss by (``TrainSpec.spike``: the trainer sets it).
    spike = 1.0

    def setup(self, model: nn.Module) -> None:
        """Apply the case to ``model``: the dtype conversion, ``torch.compile`` of the system under test
        (:mod:`parityfuzz.systems.compiled`; the reference stays eager) and :meth:`wrap`; then the optimizer."""
        model = model.to(self.ctx.device)
        to_float64 = self.case.train.to_float64
        if to_float64 and not self.converts_after_wrap:
            model = model.to(torch.float64)
        if self.role == "system" and self.case.compile:
            from parityfuzz.systems.compiled import Compiler

            self.compiler = Compiler(self.case.compile, resolve)
            model = self.compiler.before(model)
        self.model = self.wrap(model)
        if to_float64 and self.converts_after_wrap:
            self.model.to(torch.float64)
        if self.compiler is not None:
            self.model = self.compiler.after(self.model, self.inner())
        self.optim = self.make_optimizer()
        self.scheduler = make_scheduler(self.case.train, self.optim)
        self.scaler = self.make_scaler()
        if self.role != "system":
            self._watch_local_gradients()
        for where, name in (("all_gather", "all_gather_single"), ("reduce_scatter", "reduce_scatter_single")):
            if where in self.delays:
                _delay_collective(name, self.delays[where])  # undone by the rank's isolation snapshot

    def make_scaler(self):
        """The gradient scaler of the case's loss scaling, or None: sharded for a system under test whose
        gradients are (:attr:`sharded_scaler`), and for a reference that needs one (:meth:`sharded_reference_scaler`)."""
        sharded = (self.sharded_scaler and self.case.train.scaler != "amp" if self.role == "system"
                   else self.sharded_reference_scaler(self.case))
        return scaling.make_scaler(self.case.train.loss_scale, self.ctx.device.type, sharded)

    @classmethod
    def sharded_reference_scaler(cls, case) -> bool:
        """Whether this reference scales with ``ShardedGradScaler``, the same arithmetic as ``torch.amp.GradScaler``
        over replicated gradients, which a reference, as DDP, takes otherwise.  Where its optimizer sees float16
        gradients under ``case``'s loss scaling (``torch.amp.GradScaler`` refuses them, "Attempting to unscale FP16
        gradients"; ``ShardedGradScaler``'s ``unscale_`` passes ``allow_fp16=True``), or where some of its
        gradients are not reduced across ranks while the system under test's ``ShardedGradScaler`` syncs their
        infs and NaNs ("Sync inf/nan for scaled gradient tensors on any torch.device ... across nodes", its
        docstring)."""
        return False

    def make_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer the case's training spec names, over :meth:`named_parameters`."""
        return make_optimizer(self.case.train, self.named_parameters())

    def named_parameters(self):
        """The case's parameter names (checkpoint wrappers looked through)."""
        for name, p in self.inner().named_parameters():
            yield case_name(name), p

    def buffers(self) -> dict[str, torch.Tensor]:
        """The model's buffers, as ``buffer:<name>`` (recorded with the parameters)."""
        return {"buffer:" + case_name(n): b for n, b in self.inner().named_buffers()}

    def _watch_local_gradients(self) -> None:
        """Hooks recording each trainable parameter's largest local gradient magnitude (what this rank computed,
        before any reduction across ranks): the size of the terms a reduction sums, whose rounding the oracle's
        floor must cover even where the reduced gradient cancels to something small."""
        def hook(grad, name):
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            if local.numel():
                value = float(local.detach().abs().max())
                self._local_scales[name] = max(self._local_scales.get(name, 0.0), value)

        for name, p in self.named_parameters():
            if p.requires_grad and id(p) not in self._watched:
                self._watched.add(id(p))
                p.register_hook(functools.partial(hook, name=name))

    def local_gradient_scales(self) -> dict[str, float]:
        """What the local-gradient hooks saw since the last call (reference systems only; else empty)."""
        scales, self._local_scales = self._local_scales, {}
        return scales

    def elsewhere(self, what: str) -> frozenset[str]:
        """Names of the case's tensors other ranks hold and this one does not, by design (recorded by ownership: a
        pipeline stage's parameters, gradients and buffers on the ranks of other stages), for ``what`` in
        ``"grad"`` (parameter names) and ``"param"`` (parameter and ``buffer:`` names)."""
        return frozenset()

    def rank_local(self) -> frozenset[str]:
        """Names of the tensors each rank holds a value of its own for, by design (FSDP1's ignored modules):
        recorded per rank, compared rank by rank, exempt from the replica check."""
        return frozenset()

    # -- one step
    def zero_grad(self, step: int) -> None:
        mode = self.case.train.zero_grad
        self.optim.zero_grad(set_to_none=(mode == "none") or (mode == "alternate" and step % 2 == 0))

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy against token ids (padding ignored, with the case's label smoothing), else mean squared
        error against ``target`` cast to the output's dtype; reduced by ``train.loss`` (sum or mean)."""
        if not target.is_floating_point():
            return F.cross_entropy(out.flatten(0, -2), target.flatten(), reduction=self.case.train.loss,
                                   label_smoothing=self.case.train.label_smoothing)
        return F.mse_loss(out, target.to(out.dtype), reduction=self.case.train.loss)

    #: Whether the forward/backward running now is the last of its step (True outside :meth:`microbatch`:
    #: a non-root or evaluation pass).
    last = True

    @contextlib.contextmanager
    def microbatch(self, index: int, last: bool):
        """Context for one forward/backward of a step: :attr:`last` says, for its duration, whether it is the
        step's last, and the system's :meth:`accumulation` context is entered."""
        self.last = last
        try:
            with self.accumulation(index, last):
                yield
        finally:
            self.last = True

    def accumulation(self, index: int, last: bool):
        """What the parallel API does around one microbatch (gradient accumulation hooks in here)."""
        return contextlib.nullcontext()

    def forward(self, batch: torch.Tensor, module: nn.Module | None = None) -> torch.Tensor:
        """The model's forward, or ``module``'s (a non-root pass)."""
        return (self.model if module is None else module)(batch)

    def autocast(self):
        """The case's autocast region (``train.autocast``), or none."""
        dtype = self.case.train.autocast
        if not dtype:
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=getattr(torch, dtype))

    def forward_loss(self, batch: torch.Tensor, target: torch.Tensor, module: nn.Module | None = None) -> torch.Tensor:
        """The forward (of the model, or of ``module``: a non-root pass) and its loss, inside the case's autocast
        region, as users write it (the backward outside)."""
        with self.autocast():
            return self.loss(self.forward(batch, module), target)

    def forward_backward(self, batch: torch.Tensor, target: torch.Tensor, path: str | None = None) -> torch.Tensor:
        """A forward and backward through the model, or with ``path`` through only the (wrapped, non-root)
        module there: a non-root pass.  Returns the loss."""
        loss = self.forward_loss(batch, target, None if path is None else resolve(self.inner(), path))
        self._sleep("after_forward")
        self.backward(loss)
        return loss.detach()

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, or under loss scaling ``scaler.scale(loss * spike).backward()``."""
        scaling.backward_loss(self.scaler, loss, self.spike).backward()

    def gradients(self) -> dict[str, torch.Tensor | None]:
        return {n: p.grad for n, p in self.named_parameters()}

    def optimizer_step(self) -> bool:
        """Clip the gradients' total norm (``train.clip``), step the optimizer, then the LR scheduler; under loss
        scaling unscale first and step through the scaler.  Returns whether the scaler skipped the step
        (:func:`parityfuzz.run.scaling.step_skipped`)."""
        self._sleep("before_step")
        scaler, skipped = self.scaler, False
        if scaler is not None:
            scaler.unscale_(self.optim)
            skipped = scaling.step_skipped(scaler, self.optim)
        if self.case.train.clip:
            self.clip_gradients(self.case.train.clip)
        if scaler is None:
            self.optim.step()
        else:
            scaler.step(self.optim)
            scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        return skipped

    def clip_gradients(self, max_norm: float) -> None:
        """Scale the gradients so that their total norm is at most ``max_norm``."""
        grads = [p for _, p in self.named_parameters() if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(grads, max_norm)

    def unfreeze(self, names: set[str]) -> None:
        """Set ``requires_grad=True`` on the parameters with these case names (``train.frozen`` ends).

        FSDP2 modules (``fully_shard``, ``replicate_with_fsdp``) are resharded first, as ``fully_shard``'s
        docstring asks: "To modify the parameters between forward and backward, the registered parameters must be
        the sharded parameters. For ``False`` or an ``int``, this can be done by manually resharding via
        :meth:`reshard`" (an evaluation forward under ``no_grad`` leaves them unsharded: no backward reshards
        them).  Without it the harness changed unsharded parameters that FSDP2 does not look at, outside the
        documented use, and reported what followed as torch bugs."""
        self.reshard()
        for name, p in self.named_parameters():
            if name in names:
                p.requires_grad_(True)
        if self.role != "system":
            self._watch_local_gradients()

    def before_live_load(self) -> None:
        """Ready the trained system for a checkpoint loaded into it (a rollback): no checkpoint keeps gradients, so
        they are dropped (a fresh system starts without them too), and FSDP2 modules are resharded first, as
        ``fully_shard``'s docstring asks of any change to the registered parameters ("the registered parameters
        must be the sharded parameters"; an evaluation forward leaves them unsharded)."""
        self.reshard()
        self.optim.zero_grad(set_to_none=True)

    def reshard(self) -> None:
        """Reshard every FSDP2 module (``fully_shard``, ``replicate_with_fsdp``): ``FSDPModule.reshard``: "This
        method is *not* recursive." (_fully_shard.py)."""
        from torch.distributed.fsdp import FSDPModule

        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    def evaluate(self, batch: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """An evaluation forward: eval mode (no dropout), under ``torch.no_grad()``; returns the loss
        (:meth:`evaluation_loss`)."""
        self.model.eval()
        try:
            with torch.no_grad():
                return self.evaluation_loss(batch, target)
        finally:
            self.model.train()

    def evaluation_loss(self, batch: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The evaluation forward's loss (a system that runs its forward its own way, a pipeline schedule, says
        how)."""
        return self.forward_loss(batch, target)

    def parameters(self) -> dict[str, torch.Tensor]:
        return dict(self.named_parameters())

    def _sleep(self, where: str) -> None:
        if where in self.delays:
            time.sleep(self.delays[where])


def _delay_collective(name: str, seconds: float) -> None:
    import torch.distributed as dist

    original = getattr(dist, name)

    @functools.wraps(original)
    def delayed(*args, **kwargs):
        time.sleep(seconds)
        return original(*args, **kwargs)

    setattr(dist, name, delayed)
