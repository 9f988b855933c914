"""What the mixed-precision references share: each parameter kept twice, a master in the model's dtype that the
optimizer steps, and a compute copy in the dtype the forward runs in, re-cast from the master after every step
(as FSDP casts its sharded parameter at every all-gather)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn


class MasterCopies:
    """A mixin for :class:`~fuzz.systems.base.System` subclasses: :meth:`make_copies` in ``setup``; the
    optimizer, the trace and ``unfreeze`` see the masters."""

    masters: dict[str, nn.Parameter]
    compute: dict[str, nn.Parameter]

    def make_copies(self, model: nn.Module, compute_dtype: Callable[[str], torch.dtype]) -> None:
        """Masters (clones) and compute copies (in ``compute_dtype(name)``) of ``model``'s parameters; the
        compute copies replace the parameters in the model, tied ones staying tied."""
        self.masters, self.compute = {}, {}
        by_id: dict[int, nn.Parameter] = {}
        for name, p in model.named_parameters():
            self.masters[name] = nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
            by_id[id(p)] = self.compute[name] = nn.Parameter(p.detach().to(compute_dtype(name)),
                                                             requires_grad=p.requires_grad)
        for module in model.modules():
            for key, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[key] = by_id[id(p)]

    def named_parameters(self):
        yield from self.masters.items()

    def unfreeze(self, names: set[str]) -> None:
        super().unfreeze(names)  # the masters
        for name in names:
            self.compute[name].requires_grad_(True)

    def optimizer_step(self) -> None:
        super().optimizer_step()
        with torch.no_grad():
            for name, master in self.masters.items():
                self.compute[name].copy_(master)
