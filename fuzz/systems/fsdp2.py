"""System under test: FSDP2 ``fully_shard`` applied per the case's plan."""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.fsdp import fully_shard

from fuzz.systems.base import System


class FSDP2System(System):
    name = "fsdp2"

    def wrap(self, model: nn.Module) -> nn.Module:
        mesh = self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)
        # Children before parents: deepest paths first, the root ("") last.
        for w in sorted(self.case.plan.wraps, key=lambda w: -w.path.count(".") - (w.path != "")):
            fully_shard(model.get_submodule(w.path), mesh=mesh, reshard_after_forward=w.reshard_after_forward)
        return model
