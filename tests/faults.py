"""Test-only systems under test: FSDP2 with one injected fault each, wrong only in one situation.

Cases name them as ``tests.faults:ClassName``; rank processes import this
module by that name.
"""

from __future__ import annotations

import os
import time

import torch.nn as nn

from fuzz.build import Twice
from fuzz.systems.fsdp2 import FSDP2System


class _GradDropper(FSDP2System):
    """Zeroes the real gradients of the parameters ``doomed`` picks, before they are read and stepped."""

    def doomed(self, module: nn.Module) -> bool:
        raise NotImplementedError

    def gradients(self):
        seen = set()
        for module in self.inner().modules():
            if self.doomed(module):
                for p in module.parameters():
                    if p.grad is not None and id(p) not in seen:
                        seen.add(id(p))
                        p.grad.zero_()
        return super().gradients()


class OddLinearGradDrop(_GradDropper):
    """Loses the gradient of any Linear whose output width is odd."""

    def doomed(self, module):
        return isinstance(module, nn.Linear) and module.out_features % 2 == 1


class TwiceGradDrop(_GradDropper):
    """Loses the gradient of any module that is called twice in one forward."""

    def doomed(self, module):
        return isinstance(module, Twice)


class _MisbehaveOnRank(FSDP2System):
    """Misbehaves in the first forward/backward on ``RANK``; correct elsewhere."""

    RANK = 1

    def misbehave(self) -> None:
        raise NotImplementedError

    def forward_backward(self, batch):
        if self.ctx.rank == self.RANK:
            self.misbehave()
        return super().forward_backward(batch)


class RaiseOnRank1(_MisbehaveOnRank):
    def misbehave(self):
        raise RuntimeError("injected failure on rank 1")


class ExitOnRank0(_MisbehaveOnRank):
    RANK = 0

    def misbehave(self):
        os._exit(3)


class AbortOnRank1(_MisbehaveOnRank):
    def misbehave(self):
        os.abort()


class SleepOnRank1(_MisbehaveOnRank):
    def misbehave(self):
        time.sleep(3600)
