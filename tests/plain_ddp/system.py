"""The test-only ``plain_ddp`` family's system: DDP with the plan's arguments."""

from parityfuzz.systems.ddp import DDPSystem


class PlainDDPSystem(DDPSystem):
    name = "plain_ddp"

    def ddp_kwargs(self) -> dict:
        return {"bucket_cap_mb": self.case.plan.bucket_cap_mb, "broadcast_buffers": self.case.plan.broadcast_buffers}
