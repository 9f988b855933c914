"""The reference for FSDP1 under ``MixedPrecision``: replicated data parallelism that does what FSDP1's
mixed precision promises, written out (``ddp_mp_fsdp1``).

FSDP1's semantics differ from FSDP2's ``MixedPrecisionPolicy`` (:mod:`parityfuzz.parts.fully_shard.reference`), and this
reference models FSDP1's:

- **One gradient reduction per backward; one accumulation per instance call.**  FSDP1 reduces a unit's
  ``FlatParameter`` gradient once, after the backward has reached every call of the unit; each forward call
  of an instance makes fresh views of its unsharded parameter, so each call's gradient is added to the
  unsharded gradient on its own, in backward order and in that gradient's dtype (measured: a Linear instance
  called twice under ``no_sync()`` gives ``((b0 + a0) + b1) + a1`` in bf16, not ``(a0 + b0) + (a1 + b1)``).
  FSDP2 instead reduces at each call's post-backward and adds the reduced gradients in full precision.
  Under ``no_sync()`` the unsharded gradient stays in ``param_dtype`` (autograd's accumulation), whatever
  ``reduce_dtype`` says; FSDP2 keeps it in ``reduce_dtype``.
- **``NO_SHARD`` keeps one gradient, as DDP does**: the reduced gradient is the ``FlatParameter``'s ``.grad``,
  and a later backward (the next microbatch outside ``no_sync()``, a step after ``zero_grad(set_to_none=
  False)``) adds its local gradients to it, in its dtype, and reduces the sum again; the sharded strategies
  reduce each backward's gradient alone and add it to a full-precision sharded gradient.  Documented (issue 30
  audit item F7, decided): ``NO_SHARD`` replicates "similar to PyTorch's DistributedDataParallel" and
  synchronizes gradients "(via all-reduce) after the backward computation", and DDP all-reduces the
  ``.grad`` autograd accumulated into; the all-reduce runs in ``reduce_dtype`` ("the dtype for gradient
  reduction").  In exact arithmetic both paths give the same value (the existing gradient is the same on
  every rank); only the rounding differs, and it is the one those two documented statements imply.
- **Division**: FSDP1 divides by a power of two near sqrt(N) before summing and by the rest after, for every
  dtype (N: all data-parallel ranks, replicas included); FSDP2 averages fp32/bf16 in the collective.
- **``reduce_dtype`` left out follows ``param_dtype``** (FSDP2: the gradient's own dtype, the same thing).
- **Buffers are cast to ``buffer_dtype``** and stay so (FSDP2 leaves buffers alone).
- **No output cast**: FSDP1 has no ``output_dtype``; the loss is computed in ``param_dtype``, "the dtype for
  forward and backward computation" (``MixedPrecision``, ``torch/distributed/fsdp/api.py``), outputs included.
- **Where summation order comes from**: gloo sums an element in an order that depends on its position in
  the buffer, so each FSDP1 instance's gradients are reduced as FSDP1 lays them out: its ``FlatParameter``
  (the parameters its auto-wrap policy or nesting leaves it, in module order; with ``use_orig_params=True``
  each one aligned to 16 bytes of ``param_dtype`` and the whole padded to a multiple of the shard group),
  reduce-scattered over the shard group, all-reduced over the replicas: the reference is then bit for bit
  FSDP1's arithmetic, and the oracle's floor stays the model dtype's.  Which modules are instances is
  worked out here from the policy's documented rule (:func:`units`), not read from FSDP1.
- **Input casts**: the root casts its floating-point inputs when ``cast_root_forward_inputs`` (which FSDP1
  documents as taking precedence over the root's ``cast_forward_inputs``); other instances cast theirs when
  ``cast_forward_inputs``.  The plan gives every instance one policy, so every activation reaching a nested
  instance is already in ``param_dtype`` and only the root's cast is observable: the reference applies that
  one.
- **``keep_low_precision_grads``**: the gradients the optimizer sees are in the reduction dtype (as FSDP1
  documents); they are accumulated in full precision between reductions (a low-precision gradient left by
  the previous step is cast up first: both addends are ``reduce_dtype`` values, so no compared value changes).

The sharded parameters and the optimizer stay in the model's dtype (masters here); the compute copies are
re-cast from them after every step, as FSDP1 casts at every all-gather.

The emulation, :class:`FSDP1Precision`, knows nothing of cases (:func:`arguments` derives its arguments from
one): an exported script copies it by source.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils._pytree import tree_map

from parityfuzz.parts.fsdp1 import HYBRID
from parityfuzz.run.record import dtype_name, torch_dtype as dtype
from parityfuzz.parts.fsdp1.system import KIND_CLASSES
from parityfuzz.systems.masters import EmulatedReference, Masters, cast_floats, divide_factors


def units(model: nn.Module, plan) -> set[str]:
    """The paths of the modules FSDP1 makes instances of (the root, ``""``, always): those the plan names
    (manual nesting, ``lambda_auto_wrap_policy``), those of the named classes (``ModuleWrapPolicy``), or, for
    ``size_based_auto_wrap_policy``, bottom-up every non-root module whose parameters not already in a wrapped
    descendant number at least ``min_num_params`` (torch's ``_recursive_wrap``)."""
    if plan.wrapping in ("manual", "lambda"):
        return {""} | set(plan.wraps)
    if plan.wrapping == "module_class":
        classes = tuple(KIND_CLASSES[k] for k in plan.wrap_kinds)
        return {""} | {path for path, m in model.named_modules() if isinstance(m, classes)}
    found = {""}

    def visit(path: str, module: nn.Module) -> int:
        """Parameters wrapped at or below ``module``."""
        wrapped = sum(visit(f"{path}.{name}" if path else name, child) for name, child in module.named_children())
        total = sum(p.numel() for p in module.parameters())
        # size_based_auto_wrap_policy: "nonwrapped_numel" ("Parameter numel not yet wrapped") against min_num_params
        # (wrap.py); the ModuleList/ModuleDict skip is wrap.py's EXCLUDE_WRAP_MODULES default (layout only).
        if path and total - wrapped >= plan.min_num_params and not isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            found.add(path)
            return total
        return wrapped

    visit("", model)
    return found


class _Unit:
    """One FSDP1 instance's flat layout: its parameters' names in order, and each one's offset in the flat
    buffer (padding between and after)."""

    def __init__(self, path: str, names: list[str], numels: list[int], align: int, shard: int):
        self.path, self.names, self.offsets, total = path, names, [], 0
        for numel in numels:
            if align and total % align:
                total += align - total % align
            self.offsets.append(total)
            total += numel
        if align and total % shard:  # FSDP1 pads the aligned flat parameter to the shard group at creation
            total += shard - total % shard
        self.numel = total


class FSDP1Precision(Masters):
    """Replicated data parallelism doing what FSDP1's ``MixedPrecision`` promises (the module docstring).

    ``units``: the paths of FSDP1's instances (:func:`units`; ``""`` the root); ``compute_dtype``: the
    parameters' (``param_dtype``, else the model's); ``reduce_dtype``: the reduction's, resolved
    (``reduce_dtype``, else ``param_dtype``, else the model's); ``buffer_dtype``: None leaves buffers alone;
    ``cast_root_inputs``: the root casts its floating-point inputs to ``compute_dtype``; ``sharded``: a sharded
    strategy over more than one rank (else ``NO_SHARD``'s one gradient); ``align_bytes``: 16 under
    ``use_orig_params=True`` (each parameter's offset in the flat buffer), else 0; ``no_sync``: the non-last
    microbatches run under ``no_sync()`` (else every backward reduces).
    """

    def __init__(self, module: nn.Module, units: list[str], compute_dtype: torch.dtype, reduce_dtype: torch.dtype,
                 shard_group, replicate_group=None, *, buffer_dtype: torch.dtype | None = None,
                 cast_root_inputs: bool = False, keep_low_precision_grads: bool = False, sharded: bool = True,
                 align_bytes: int = 0, no_sync: bool = False):
        super().__init__(module, lambda name: compute_dtype)
        self.reduce_dtype = reduce_dtype
        self.shard_group, self.replicate_group = shard_group, replicate_group
        self.keep_low, self.sharded, self.accumulates = keep_low_precision_grads, sharded, no_sync
        if keep_low_precision_grads or not sharded:
            for master in self.masters.values():
                master.grad_dtype = None  # a low-precision gradient is kept (or accumulated) there
        # MixedPrecision.buffer_dtype: "FSDP casts them to buffer_dtype in the first forward pass and keeps them in
        # that dtype thereafter"; "Only floating point tensors are cast" (fsdp/api.py).
        if buffer_dtype:
            for m in module.modules():
                for key, b in list(m._buffers.items()):
                    if b is not None and b.is_floating_point():
                        m._buffers[key] = b.to(buffer_dtype)
        # MixedPrecision.cast_root_forward_inputs: "the root FSDP module casts its forward args and kwargs to
        # param_dtype, overriding the value of cast_forward_inputs" (fsdp/api.py); the harness passes no kwargs.
        if cast_root_inputs:
            cast = cast_floats(compute_dtype)
            module.register_forward_pre_hook(lambda m, args: tree_map(cast, args))
        self.units = self._layout(units, align_bytes // compute_dtype.itemsize)
        self.unsharded: dict[str, torch.Tensor] = {}  # sharded strategies: the accumulated unsharded gradients
        self._per_call_leaves(module)

    def _layout(self, paths: list[str], align: int) -> list[_Unit]:
        """Each instance's flat layout (see the module docstring); instances without parameters left out."""
        # Order only: torch documents no summation order and disclaims this layout ("Users should not author programs
        # relying on what data is present for a given original parameter in its sharded form", FSDP docstring); it
        # is FSDP1's, so that the comparison can be bit for bit (no value the documentation promises depends on it).
        owned: dict[str, list[str]] = {p: [] for p in sorted(paths)}  # the same order on every rank
        for name in self.compute:  # named_parameters order: module by module, as FSDP1 flattens
            module = name.rpartition(".")[0]
            owner = max((p for p in paths if not p or module == p or module.startswith(p + ".")), key=len)
            owned[owner].append(name)
        shard = dist.get_world_size(self.shard_group)
        return [_Unit(path, names, [self.compute[n].numel() for n in names], align, shard)
                for path, names in owned.items() if names]

    def _per_call_leaves(self, model: nn.Module) -> None:
        """Before each call of an instance, its parameters become fresh leaves (FSDP1's fresh views) whose
        gradient, once the call's backward is done, is added to the accumulated one (:meth:`_accumulate`)."""
        holders: dict[str, list[tuple[nn.Module, str]]] = {}
        for module in model.modules():
            for key, p in module._parameters.items():
                if p is not None:
                    name = next(n for n, c in self.compute.items() if c is p)
                    holders.setdefault(name, []).append((module, key))

        def pre_forward(unit: _Unit):
            def hook(module, args):
                for name in unit.names:
                    leaf = self.compute[name].detach().requires_grad_(self.compute[name].requires_grad)
                    if leaf.requires_grad and torch.is_grad_enabled():
                        leaf.register_hook(lambda g, name=name: self._accumulate(name, g))
                    for holder, key in holders[name]:
                        holder._parameters[key] = leaf
            return hook

        # FSDP "replaces managed modules' parameters with torch.Tensor views during forward and backward computation"
        # (fully_sharded_data_parallel.py). Order only: fresh views per call are FSDP1's summation order (torch
        # documents none), so that the comparison can be bit for bit (no documented value depends on it).
        for unit in self.units:
            model.get_submodule(unit.path).register_forward_pre_hook(pre_forward(unit))

    def _accumulate(self, name: str, grad: torch.Tensor) -> None:
        """Add one call's gradient where FSDP1 accumulates it: the unsharded gradient (sharded strategies), or
        the one gradient ``NO_SHARD`` keeps."""
        if grad.numel():
            self.local_scales[name] = max(self.local_scales.get(name, 0.0), float(grad.abs().max()))
        # no_sync: "gradients will be accumulated in module variables ... synchronized in the first forward-backward
        # pass after exiting the context" (fully_sharded_data_parallel.py): in param_dtype (fsdp/api.py).
        if self.sharded:
            held = self.unsharded.get(name)
            self.unsharded[name] = grad.clone() if held is None else held.add_(grad)
        else:  # NO_SHARD's one gradient, as DDP's: autograd accumulates into .grad, in .grad's dtype (see _reduce)
            master = self.masters[name]
            master.grad = grad.clone() if master.grad is None else master.grad.add_(grad)

    def finish_backward(self) -> None:
        # ShardingStrategy: gradients are synchronized "(via reduce-scatter) after the backward computation", NO_SHARD
        # "(via all-reduce) after the backward computation" (fsdp/api.py): once per backward.
        if self.syncing or not self.accumulates:
            self._reduce()

    def _reduce(self) -> None:
        """Reduce each instance's accumulated gradients where some rank has one of them (zeros for its
        parameters without one, as the flat gradient holds them): added, in the model's dtype, to the masters'
        (sharded strategies), or replacing the gradient (``NO_SHARD``); only for parameters some rank has a
        gradient for."""
        held = self.unsharded if self.sharded else {n: m.grad for n, m in self.masters.items() if m.grad is not None}
        # As DDP (NO_SHARD: "similar to PyTorch's DistributedDataParallel"): a parameter unused on a rank is reduced
        # as zeros ("marked as being ready to be reduced", distributed.py); unused everywhere, .grad stays None.
        names = list(self.compute)
        shown = torch.tensor([n in held for n in names], dtype=torch.float32)
        dist.all_reduce(shown)
        shown_names = {n for n, s in zip(names, shown.tolist()) if s}
        # FSDP1 averages like DDP (DDP: "the gradients between different nodes are averaged", distributed.py); the
        # pre/post split, for every dtype, is exact (power-of-two scaling): it changes no value.
        pre, post, _ = divide_factors(torch.float16, dist.get_world_size())
        for unit in self.units:
            if not shown_names.intersection(unit.names):
                continue
            flat = torch.zeros(unit.numel, dtype=self.reduce_dtype)
            for n, offset in zip(unit.names, unit.offsets):
                if n in held:
                    flat[offset:offset + held[n].numel()] = held[n].reshape(-1).to(self.reduce_dtype)
            full = self._reduce_flat(flat, pre, post)
            for n, offset in zip(unit.names, unit.offsets):
                if n not in shown_names:
                    continue
                master = self.masters[n]
                piece = full[offset:offset + master.numel()].view(master.shape)
                # NO_SHARD: "similar to PyTorch's DistributedDataParallel ... synchronizes them (via all-reduce) after
                # the backward computation" (fsdp/api.py): the all-reduced gradient, existing gradient included, is
                # the gradient (DDP all-reduces the .grad autograd accumulated into), reduced in reduce_dtype ("the
                # dtype for gradient reduction (i.e. reduce-scatter or all-reduce)", fsdp/api.py).
                if not self.sharded:  # the reduced gradient is the gradient; upcast unless kept low
                    master.grad = piece.clone() if self.keep_low else piece.to(master.dtype)
                    continue
                # keep_low_precision_grads=False: "FSDP upcasts gradients to full precision after the backward pass"
                # (fsdp/api.py); then accumulated "with any existing gradient" (fully_sharded_data_parallel.py).
                piece = piece.to(master.dtype)
                master.grad = piece if master.grad is None else master.grad.to(master.dtype).add_(piece)
                # keep_low_precision_grads: "If True, then FSDP keeps the gradients in the dtype used for gradient
                # reduction" (fsdp/api.py).
                if self.keep_low:
                    master.grad = master.grad.to(self.reduce_dtype)
        self.unsharded.clear()

    def _reduce_flat(self, flat: torch.Tensor, pre: float, post: float) -> torch.Tensor:
        """FSDP1's reduction of one flat gradient, returned whole: pre-divide, reduce-scatter (all-reduce under
        ``NO_SHARD``) summing over the shard group, all-reduce over the replicas, post-divide."""
        n = dist.get_world_size(self.shard_group)
        if pre not in (None, 1):
            flat.div_(pre)
        if self.sharded:
            flat = torch.nn.functional.pad(flat, (0, -flat.numel() % n))
            out = flat.new_empty(flat.numel() // n)
            dist.reduce_scatter_tensor(out, flat, group=self.shard_group)
        else:
            out = flat
            dist.all_reduce(out, group=self.shard_group)
        if self.replicate_group is not None:
            dist.all_reduce(out, group=self.replicate_group)
        if post not in (None, 1):
            out.div_(post)
        if self.sharded:
            full = out.new_empty(out.numel() * n)
            dist.all_gather_into_tensor(full, out, group=self.shard_group)
            out = full
        return out


def arguments(case, model: nn.Module) -> dict:
    """The emulation's arguments for ``case`` (but the module and the process groups), ``model`` built from it."""
    plan = case.plan
    mp = plan.precision
    master_dtype = next(model.parameters()).dtype
    shard_size = case.mesh.axis_size("dp_shard")
    replicas = case.mesh.axis_size("dp_replicate")
    return dict(units=sorted(units(model, plan)), compute_dtype=dtype(mp.param_dtype) or master_dtype,
                # MixedPrecision.reduce_dtype: "If this is None but param_dtype is not None, then this takes on the
                # param_dtype value" (fsdp/api.py).
                reduce_dtype=dtype(mp.reduce(dtype_name(master_dtype))),
                buffer_dtype=dtype(mp.buffer_dtype), cast_root_inputs=bool(mp.param_dtype and mp.cast_root_forward_inputs),
                keep_low_precision_grads=mp.keep_low_precision_grads,
                # FSDP1 runs any strategy over a shard group of one rank as NO_SHARD (_init_utils.py, _init_core_state:
                # it warns "switching to use NO_SHARD"), gradient accumulation and all,
                # and says they are "functionally equivalent" there: NO_SHARD's gradient handling is DDP's, as
                # documented (see _reduce).  A hybrid strategy whose shard groups have one rank but that has
                # replicas is a known bug of its own (hybrid-fsdp1-with-shards-of-one): it keeps the sharded path,
                # what HYBRID_SHARD documents ("FULL_SHARD within a node"); on a (1, 1) mesh it is one rank alone.
                sharded=plan.sharding != "NO_SHARD"
                and (shard_size > 1 or (plan.sharding in HYBRID and replicas > 1)),
                align_bytes=16 if plan.use_orig_params else 0, no_sync=plan.no_sync)


class FSDP1MixedPrecisionReference(EmulatedReference):
    name = "ddp_mp_fsdp1"

    @classmethod
    def sharded_reference_scaler(cls, case) -> bool:
        """``keep_low_precision_grads`` with a float16 reduction: the optimizer sees float16 gradients ("FSDP keeps
        the gradients in the dtype used for gradient reduction"), which FSDP1's ShardedGradScaler unscales and
        torch.amp.GradScaler refuses (a false alarm of the fault benchmark's seed-1 run: the reference raised)."""
        mp = case.plan.precision
        return bool(case.train.loss_scale and mp.keep_low_precision_grads and mp.reduce(case.train.dtype) == "float16")

    def emulate(self, model: nn.Module) -> FSDP1Precision:
        shard, replicate = self.mesh_groups()
        return FSDP1Precision(model, shard_group=shard, replicate_group=replicate, **arguments(self.case, model))
