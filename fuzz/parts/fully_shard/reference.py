"""The mixed-precision reference: replicated data parallelism that does what FSDP2's
``MixedPrecisionPolicy`` promises, written out step by step.

A plain fp32 DDP run is no reference for a bf16 run: the two differ by bf16
rounding everywhere.  This reference keeps every parameter whole on every rank
and reproduces the policy's arithmetic, not FSDP2's code:

- Parameter groups are the ``fully_shard`` calls': a parameter belongs to the deepest
  wrapped module above it.  Each group has a compute copy of its parameters in its
  ``param_dtype`` and master copies in the model's dtype; the optimizer steps
  the masters and the compute copies are re-cast from them after every step.
- Forward hooks on each wrapped module cast floating-point inputs to
  ``param_dtype`` (when ``cast_forward_inputs``) and outputs to ``output_dtype``.
- A group's post-backward runs where FSDP2 runs it: when the gradients of a
  call's inputs are computed (once per call: a module called twice reduces
  twice), and at the end of the backward for every group not left in
  post-backward (inputs that needed no gradient, or a gradient that reached
  one of its outputs after its last post-backward).  There a group that synchronises reduces its gradients in
  ``reduce_dtype`` (``None`` when it equals ``param_dtype``; then the gradient's
  own dtype) the way FSDP2 divides them: fp32/bf16 average over the shard group
  and then over the replicate group (the ``AVG`` op); other dtypes divide by a
  power of two near sqrt(N) before summing and by the rest after (against
  fp16 overflow).  The result is cast to the master dtype and added to the
  master gradient.
- A group that does not synchronise keeps its gradient: in ``reduce_dtype``
  when that is set (the first unsynchronised gradient is cast up, later ones
  are added to it), else in the compute dtype where autograd accumulates it.

The emulation, :class:`FSDP2Precision`, is a module that knows nothing of cases (the policies are its
arguments): an exported script copies it by source (:mod:`parityfuzz.export.precision`).
:class:`MixedPrecisionReference` trains a case through it.

What remains between this and FSDP2 is BLAS rounding, which the measured noise covers (the oracle's floor
is the model dtype's: the tolerance of ``fuzz/judge/verify.py``).  Torch documents no summation order; the
emulation reproduces FSDP2's low-precision one (its collectives, buffer layout and autograd graph) so
that a comparison can be bit for bit.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from parityfuzz.parts.fully_shard import POLICY_DTYPES, Policy
from parityfuzz.run.record import torch_dtype as dtype
from parityfuzz.systems.masters import EmulatedReference, Masters, cast_floats, divide_factors


class _PostBackward(torch.autograd.Function):
    """Identity on a module call's inputs whose backward runs the group's post-backward (as FSDP2 does).

    One per call: fully_shard's "N chunk calls produce N reduce-scatters for that group" is worded for a grouped
    ``fully_shard([a, b])``; a module called twice gets the same per-call hook, not a separate promise."""

    @staticmethod
    def forward(ctx, callback, *inputs):
        ctx.callback = callback
        return tuple(x.view_as(x) for x in inputs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.callback()
        return (None,) + grads


def _register_post_backward(args, kwargs, callback):
    leaves, spec = tree_flatten((args, kwargs))
    idx = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.requires_grad]
    if idx and torch.is_grad_enabled():
        for i, out in zip(idx, _PostBackward.apply(callback, *(leaves[i] for i in idx))):
            leaves[i] = out
    return tree_unflatten(leaves, spec)


class _Group:
    """One ``fully_shard`` call's parameters and policy, as FSDP2 resolves it against the master dtype."""

    def __init__(self, policy: dict, master_dtype: torch.dtype):
        self.path = policy["path"]
        #: The modules the call wraps: its one module, or a pipeline stage's consecutive top-level modules (the
        #: stage's inputs reach the first, its output leaves the last).
        self.modules = tuple(policy.get("modules") or (self.path,))
        self.names: list[str] = []
        # MixedPrecisionPolicy.param_dtype: "the dtype for forward/backward computation ... If this is None, then
        # the unsharded parameter uses the original dtype." (_fsdp_api.py)
        self.policy_param_dtype = param = policy.get("param_dtype")
        self.param_dtype = param if param not in (None, master_dtype) else master_dtype
        # A reduce_dtype equal to param_dtype is the gradients' own (compute) dtype: None here changes no value.
        reduce = policy.get("reduce_dtype")
        self.reduce_dtype = None if reduce == param else reduce
        self.output_dtype = policy.get("output_dtype")
        self.cast_forward_inputs = policy.get("cast_forward_inputs", True)
        #: Reduce-scattered local pieces not yet all-reduced (HSDP), by parameter name.
        self.partial: dict[str, torch.Tensor] = {}


class FSDP2Precision(Masters):
    """Replicated data parallelism doing what FSDP2's ``MixedPrecisionPolicy`` promises (the module docstring).

    ``policies``: one dict per ``fully_shard`` call, ``path`` (``""``: the root, always one, unless ``modules`` says
    otherwise) and the policy's ``param_dtype``, ``reduce_dtype``, ``output_dtype`` (torch dtypes or None) and
    ``cast_forward_inputs``; ``modules``, where one call wraps a run of consecutive modules of the model as one (a
    pipeline stage: ``path`` is then only its name), their paths in order.
    ``unsynced``: the paths whose gradient sync is off on a step's non-last microbatches
    (``set_requires_gradient_sync(False)``); ``reduce_scatter_unused``: ``set_reduce_scatter_unused_params(True)``;
    ``no_all_reduce``: HSDP's ``set_requires_all_reduce(False)`` on the non-last microbatches.
    """

    def __init__(self, module: nn.Module, policies: list[dict], shard_group, replicate_group=None,
                 unsynced=(), reduce_scatter_unused: bool = False, no_all_reduce: bool = False):
        master_dtype = next(module.parameters()).dtype
        self.groups = [_Group(policy, master_dtype) for policy in policies]
        # fully_shard makes "one group that includes the parameters ... except those already assigned to a group from
        # an earlier call on a submodule" (_fully_shard.py): bottom-up, the deepest owns it (tied weights: one group);
        # where two calls name one module (a pipeline stage over its top-level modules, each sharded first), the
        # earlier call (``policies`` is in call order).
        by_path: dict = {}
        for g in self.groups:
            for path in g.modules:
                by_path.setdefault(path, g)

        def owner(name):
            path = name.rpartition(".")[0]
            while path and path not in by_path:
                path = path.rpartition(".")[0]
            return by_path[path]

        super().__init__(module, lambda name: owner(name).param_dtype)
        for name in self.masters:
            owner(name).names.append(name)
        self.shard_group, self.replicate_group = shard_group, replicate_group
        self.unsynced, self.reduce_scatter_unused, self.no_all_reduce = set(unsynced), reduce_scatter_unused, \
            no_all_reduce
        for g in self.groups:
            first, last = module.get_submodule(g.modules[0]), module.get_submodule(g.modules[-1])
            # prepend: param_dtype is "the dtype for forward/backward computation" (_fsdp_api.py), and a TP style's
            # input collective is part of this module's forward (and backward) computation, so it runs in param_dtype
            # (a cast after it once made a false alarm: tests/test_tensor_parallel.py).
            first.register_forward_pre_hook(self._pre_forward_hook(g), with_kwargs=True, prepend=True)
            last.register_forward_hook(self._post_forward_hook(g))
        self.accumulated: dict[str, torch.Tensor] = {}
        self._state: dict[int, str] = {}  # group -> "pre-backward" / "post-backward" in the current backward

    def _post_forward_hook(self, g: _Group):
        """Cast outputs to ``output_dtype``; a gradient reaching an output puts the group in pre-backward (as
        FSDP2's pre-backward hook does), so the final callback runs its post-backward again if needed."""
        # MixedPrecisionPolicy.output_dtype: "the dtype for casting floating-point forward outputs" (_fsdp_api.py);
        # per invocation for grouped modules (_fully_shard.py).
        cast = cast_floats(g.output_dtype) if g.output_dtype else None

        def pre_backward(grad):
            self._state[id(g)] = "pre-backward"

        def hook(module, args, out):
            if cast is not None:
                out = tree_map(cast, out)
            if torch.is_grad_enabled():
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        t.register_hook(pre_backward)
            return out
        return hook

    def _pre_forward_hook(self, g: _Group):
        # MixedPrecisionPolicy.cast_forward_inputs: "whether FSDP should cast the forward's floating-point input
        # tensors to param_dtype ... the cast is applied per module, before each module's forward." (_fsdp_api.py)
        cast = cast_floats(g.policy_param_dtype) if g.cast_forward_inputs and g.policy_param_dtype else None

        def hook(module, args, kwargs):
            if cast is not None:
                args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)
            # No post-backward node for a module without parameters: order only (the node would change only how
            # autograd sums the input's gradient); torch documents no summation order; this one is FSDP2's, so
            # that the comparison can be bit for bit (no value the documentation promises depends on it).
            if not g.names:
                return args, kwargs
            # fully_shard: "After gradient computation, FSDP ... reduce-scatters the unsharded gradients"; "N chunk
            # calls produce N reduce-scatters for that group" (_fully_shard.py): per call, leftovers at the end.
            return _register_post_backward(args, kwargs, lambda: self._post_backward(g))
        return hook

    def finish_backward(self) -> None:
        """FSDP2's final callback: the post-backward of every group not in post-backward (inputs that needed no
        gradient; a gradient that reached one of its outputs after its last post-backward)."""
        for g in self.groups:
            if self._state.get(id(g)) != "post-backward" or (g.partial and (self.syncing or not self.no_all_reduce)):
                self._post_backward(g, final=True)
        self._state.clear()

    def _post_backward(self, g: _Group, final: bool = False) -> None:
        """One post-backward of group ``g``; ``final``: from the final callback, where held sums with no new
        gradient are all-reduced at last."""
        self._state[id(g)] = "post-backward"
        # FSDPModule.set_requires_gradient_sync: "gradient accumulation *without communication*. For HSDP, this
        # controls both reduce-scatter and all-reduce together." (_fully_shard.py; each listed path, recurse=False)
        sync = self.syncing or g.path not in self.unsynced
        # MixedPrecisionPolicy.reduce_dtype: "If also gradient reduction is disabled via set_requires_gradient_sync,
        # then FSDP will accumulate gradients using reduce_dtype." (_fsdp_api.py); None: autograd's compute dtype.
        acc = self.accumulated
        for name in g.names:
            p = self.compute[name]
            if name in acc and p.grad is not None:
                acc[name] += p.grad
                p.grad = None
            if not sync and g.reduce_dtype is not None and p.grad is not None and p.grad.dtype != g.reduce_dtype:
                acc[name] = p.grad.to(g.reduce_dtype)
                p.grad = None
        if not sync:
            return
        # FSDPModule.set_reduce_scatter_unused_params: "include zero gradients for parameters that did not receive a
        # gradient in backward" (_fully_shard.py); without it such parameters are not reduced.
        unused = self.reduce_scatter_unused
        all_reduce = self.syncing or not self.no_all_reduce
        # FSDPModule.set_requires_all_reduce: "gradient accumulation with only reduce-scatter but not all-reduce for
        # HSDP" (_fully_shard.py): a held sum with no new gradient is all-reduced too (FSDP2 fails: corpus/known_bugs.toml),
        # by the end of the backward. Order only: a held sum is added to the first reduction of the syncing
        # backward that carries a gradient for its parameter (else all-reduced in the final callback); torch
        # documents no order of these additions; this one is FSDP2's, so that the comparison can be bit for bit
        # (all-reducing it at a first post-backward without a gradient once rounded a bf16 sum another way:
        # corpus/fsdp2/f99fed4c77cb6ff3.json).
        names = [n for n in g.names if n in acc or self.compute[n].grad is not None
                 or (unused and self.compute[n].requires_grad) or (all_reduce and final and n in g.partial)]
        if not names:
            return
        grads = [self.local_gradient(n, acc.pop(n) if n in acc else self.compute[n].grad
                                     if self.compute[n].grad is not None else torch.zeros_like(self.compute[n]),
                                     g.reduce_dtype)
                 for n in names]
        for name in names:
            self.compute[name].grad = None
        # reduce_dtype: "the dtype for gradient reduction (i.e. reduce-scatter or all-reduce). If this is None ...,
        # then the reduction uses the compute dtype." (_fsdp_api.py)
        reduced = self._reduce(names, grads, g.reduce_dtype or grads[0].dtype, g, all_reduce)
        # param_dtype: "The optimizer step uses the sharded parameter in the original dtype" (_fsdp_api.py): the
        # reduced gradient is cast to it and, like any .grad, accumulated.
        for name, piece in zip(names, reduced):
            master = self.masters[name]
            piece = self.distributed_gradient(name, piece.to(master.dtype))
            master.grad = piece if master.grad is None else master.grad.add_(piece)

    def local_gradient(self, name: str, grad: torch.Tensor, reduce_dtype: torch.dtype | None) -> torch.Tensor:
        """The tensor of parameter ``name``'s gradient that this rank reduces (a subclass's hook: all of it;
        ``reduce_dtype``: the group's, for a subclass whose gradients need a reduction of their own first)."""
        return grad

    def distributed_gradient(self, name: str, local: torch.Tensor) -> torch.Tensor:
        """The master gradient of parameter ``name`` from its reduced local tensor (the inverse hook)."""
        return local

    def _reduce(self, names: list[str], grads: list[torch.Tensor], reduce_dtype: torch.dtype, g: _Group,
                all_reduce: bool = True) -> list[torch.Tensor]:
        """Average ``grads`` over all ranks with FSDP2's collectives, buffer layout and division.

        Gloo sums an element in an order that depends on its position in the
        buffer, so the reduce-scatter input is laid out as FSDP2 lays it out:
        row ``r`` holds rank ``r``'s dim-0 chunk of every gradient (padded).
        The reduced shards are all-gathered back into whole gradients (exact).
        On HSDP with ``all_reduce`` off (``set_requires_all_reduce(False)``) the
        reduce-scattered shard is kept in ``reduce_dtype`` (each parameter's
        piece under its name: microbatches may reduce different parameters) and
        added before the next all-reduce; nothing reaches the masters until then.
        """
        # HSDP (fully_shard mesh: "sharded across the 1st dim and replicated across the 0th dim"): reduce-scatter,
        # then all-reduce: "gradient reduction (i.e. reduce-scatter or all-reduce)" in reduce_dtype (_fsdp_api.py).
        n = dist.get_world_size(self.shard_group)
        replicas = dist.get_world_size(self.replicate_group) if self.replicate_group is not None else 1
        # Averaged over all data-parallel ranks (DDP: "the gradients between different nodes are averaged",
        # distributed.py); the power-of-two pre/post split is exact (no value changes short of fp16 overflow).
        pre, post, op = divide_factors(reduce_dtype, n * replicas)
        # Order only: torch documents no summation order (nor this buffer layout); the layout is FSDP2's, so that
        # the comparison can be bit for bit (no value the documentation promises depends on it).
        rows, widths = [], []
        for x in grads:
            x = x.reshape(x.shape[0], math.prod(x.shape[1:])).to(reduce_dtype)  # (an empty TP shard too)
            x = torch.nn.functional.pad(x, (0, 0, 0, -x.shape[0] % n)).reshape(n, -1)
            rows.append(x)
            widths.append(x.shape[1])
        buf = torch.cat(rows, dim=1)
        if pre not in (None, 1):
            buf.div_(pre)
        if n > 1:
            out = torch.empty(buf.shape[1], dtype=reduce_dtype, device=buf.device)
            dist.reduce_scatter_tensor(out, buf.reshape(-1), op=op, group=self.shard_group)
        else:
            out = buf[0].clone()
        if self.replicate_group is not None:
            # The held sums stay in reduce_dtype: it "specifies the dtype for gradient reduction" (_fsdp_api.py), and
            # they are partial results of that reduction, still to be all-reduced.
            for name, piece in zip(names, out.split(widths)):
                if not all_reduce:
                    g.partial[name] = piece.clone() if name not in g.partial else g.partial[name].add_(piece)
                elif name in g.partial:
                    piece += g.partial.pop(name)
            if not all_reduce:
                return []
            dist.all_reduce(out, op=op, group=self.replicate_group)
        if post not in (None, 1):
            out.div_(post)
        full = torch.empty(n * out.numel(), dtype=reduce_dtype, device=out.device)
        dist.all_gather_into_tensor(full, out, group=self.shard_group)
        pieces = full.reshape(n, -1).split(widths, dim=1)
        return [p.reshape(-1)[:x.numel()].reshape(x.shape) for p, x in zip(pieces, grads)]


def policy_arguments(policy: Policy) -> dict:
    """A policy as an entry of the emulation's ``policies`` argument has it (torch dtypes, None for ``""``)."""
    return {**{k: dtype(getattr(policy, k)) for k in POLICY_DTYPES}, "cast_forward_inputs": policy.cast_forward_inputs}


def policies(case) -> list[dict]:
    """The emulation's ``policies`` argument: the case's ``fully_shard`` calls."""
    return [{"path": w.path, **policy_arguments(w.policy)} for w in case.plan.wraps]


class MixedPrecisionReference(EmulatedReference):
    name = "ddp_mp"
    emulation = FSDP2Precision

    def emulate(self, model: nn.Module) -> FSDP2Precision:
        plan = self.case.plan
        shard, replicate = self.mesh_groups()
        return self.emulation(model, policies(self.case), shard, replicate, unsynced=plan.no_sync,
                              reduce_scatter_unused=plan.reduce_scatter_unused, no_all_reduce=plan.no_all_reduce)
