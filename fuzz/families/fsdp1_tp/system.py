"""System under test of the ``fsdp1_tp`` family: tensor parallelism (the ``fsdp2_tp`` family's styles on the
``tp`` sub-mesh), then :class:`~parityfuzz.parts.fsdp1.system.FSDP1System` with ``device_mesh`` the ``dp_shard`` sub-mesh.

FSDP1 flattens each rank's tensor-parallel shards (its DTensor extension): the sharded parameters it exposes
are plain pieces of them, ``summon_full_params`` gives them back as DTensors over ``tp``, and the gradients put
together from the flat shards (:func:`parityfuzz.parts.fsdp1.system._flat_gradients`) are each rank's tensor-parallel
shard, put back on ``tp`` with the parameter's placements before the trace records them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from parityfuzz.systems.base import case_name
from parityfuzz.parts.fsdp1.system import FSDP1System
from parityfuzz.parts.tensor_parallel.apply import TensorParallel, apply_tensor_parallel


class FSDP1TPSystem(TensorParallel, FSDP1System):
    name = "fsdp1_tp"

    device_mesh = "dp_mesh"

    def names(self, model: nn.Module) -> dict:
        mesh = self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)
        return {**super().names(model), "dp_mesh": mesh["dp_shard"]}

    def wrap(self, model: nn.Module) -> nn.Module:
        apply_tensor_parallel(model, self.tp_mesh(), self.case.plan.tp)
        self._placements = {case_name(n): (p.device_mesh, p.placements, p.shape, p.stride())
                            for n, p in model.named_parameters() if isinstance(p, DTensor)}
        return super().wrap(model)

    def gradients(self) -> dict[str, torch.Tensor | None]:
        grads = super().gradients()
        for name, (mesh, placements, shape, stride) in self._placements.items():
            local = grads.get(name)
            if local is not None and not isinstance(local, DTensor):
                grads[name] = DTensor.from_local(local, mesh, placements, run_check=False, shape=shape,
                                                 stride=stride)
        return grads
