"""System under test of the ``fsdp2_tp`` family: tensor parallelism, then activation checkpointing, then FSDP2
on the data-parallel sub-mesh — the order torchtitan's ``parallelize_*`` functions and PyTorch's 2-D tests use.

Each module of ``plan.tp`` gets ``parallelize_module`` on the ``tp`` sub-mesh with its style and layouts;
the rest is :class:`~parityfuzz.parts.fully_shard.system.FSDP2System` (checkpoints, ``fully_shard``, accumulation switches,
invariants) on the ``dp_shard`` or ``(dp_replicate, dp_shard)`` sub-mesh.  Under ``plan.loss_parallel`` the
loss and its backward run in ``loss_parallel()`` on vocabulary-sharded logits.
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.tensor import DTensor

from parityfuzz.parts.tensor_parallel import PREPARE
from parityfuzz.parts.tensor_parallel.apply import TensorParallel, apply_tensor_parallel, expected_placement
from parityfuzz.systems.base import InvariantViolation, resolve
from parityfuzz.parts.fully_shard.reference import FSDP2Precision, MixedPrecisionReference
from parityfuzz.parts.fully_shard.system import FSDP2System


class FSDP2TPSystem(TensorParallel, FSDP2System):
    name = "fsdp2_tp"
    count_collectives = True  # every rank of an SPMD plan issues the same collectives (checked per pass)

    def data_parallel_mesh(self):
        dp = tuple(a for a in self.case.mesh.names if a != "tp")
        mesh = self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)
        return mesh[dp if len(dp) > 1 else dp[0]]

    def wrap(self, model: nn.Module) -> nn.Module:
        apply_tensor_parallel(model, self.tp_mesh(), self.case.plan.tp)
        model = super().wrap(model)
        self.check_placements(model)
        return model

    def check_placements(self, model: nn.Module) -> None:
        """Invariant: every parameter of a parallelized module is a DTensor placed on the ``tp`` axis as its
        style says (colwise: dim 0; rowwise: a Linear's dim 1 and a replicated bias, an Embedding's dim 0;
        sequence parallel: replicated), whatever FSDP2 did on the data-parallel axes."""
        wrong = []
        for p in self.case.plan.tp:
            if p.style in PREPARE:  # converts inputs or outputs only
                continue
            module = resolve(model, p.path)
            kind = "Embedding" if isinstance(module, nn.Embedding) else "Linear"  # (FSDP2 renames the class)
            for name, param in module.named_parameters(recurse=False):
                expected = expected_placement(p.style, kind, name)
                names = getattr(getattr(param, "device_mesh", None), "mesh_dim_names", None) or ()
                got = param.placements[names.index("tp")] if isinstance(param, DTensor) and "tp" in names else None
                if got != expected:
                    wrong.append(f"{p.path}.{name}: {got}, {p.style} asks for {expected}")
        if wrong:
            raise InvariantViolation("tensor-parallel placements differ from the plan: " + "; ".join(wrong[:5]))


class FSDP2PrecisionTP(FSDP2Precision):
    """FSDP2's policy emulated over the data-parallel ranks of a tensor-parallel model: each parameter is a
    DTensor on ``tp``; its compute copy is cast, and its gradient reduced, as its tp-local tensor, then put back
    on ``tp`` with the parameter's placements.

    A gradient that is still ``Partial`` over ``tp`` (a parameter that TP replicates: a sequence-parallel norm's
    weight, a rowwise Linear's bias) is summed over the tp ranks first, in ``reduce_dtype``: the policy's
    docstring (``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``) says ``reduce_dtype`` "specifies the dtype
    for gradient reduction (i.e. reduce-scatter or all-reduce)", and this all-reduce is a gradient reduction
    FSDP2 issues.  FSDP2 on torch 2.13 runs it in the gradient's own dtype (``param_dtype``): pytorch#190626, a
    known bug (``corpus/known_bugs.toml``), not something this reference copies."""

    def local_gradient(self, name: str, grad, reduce_dtype=None):
        if not isinstance(grad, DTensor):
            return grad
        placements = self.masters[name].placements
        # Order only: the tp sum before the dp reduction (once, on a Partial gradient accumulated unsynced); torch
        # documents no summation order; this one is FSDP2's, so that the comparison can be bit for bit (no value the
        # documentation promises depends on it).
        if grad.placements != placements:  # a replicated parameter's Partial gradient: an all-reduce over tp
            # reduce_dtype: "the dtype for gradient reduction (i.e. reduce-scatter or all-reduce)" (_fsdp_api.py);
            # torch 2.13 runs this one in param_dtype (pytorch#190626, corpus/known_bugs.toml).
            if reduce_dtype is not None:
                grad = grad.to(reduce_dtype)
            grad = grad.redistribute(placements=placements)
        # fully_shard reduces "across data parallel workers" of its (data-parallel) mesh only (_fully_shard.py):
        # each tp-local shard is averaged over dp; tp placements are the parameter's.
        return grad.to_local()

    def distributed_gradient(self, name: str, local):
        master = self.masters[name]
        if not isinstance(master, DTensor):
            return local
        return DTensor.from_local(local, master.device_mesh, master.placements, run_check=False,
                                  shape=master.shape, stride=master.stride())


class MixedPrecisionTPReference(TensorParallel, MixedPrecisionReference):
    """The mixed-precision reference of a tensor-parallel case: the same tensor-parallel model (TP is checked
    against DDP without mixed precision), with FSDP2's policy emulated over the data-parallel ranks
    (:class:`FSDP2PrecisionTP`).  TP itself is not emulated: the real styles run here, as in the system."""

    name = "ddp_mp_tp"
    emulation = FSDP2PrecisionTP

    def setup(self, model: nn.Module) -> None:
        apply_tensor_parallel(model, self.tp_mesh(), self.case.plan.tp)
        super().setup(model)
