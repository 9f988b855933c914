"""The pipeline family's grid (:mod:`parityfuzz.case.seedgrids`): PyTorch's pipelining tests parametrize
``ScheduleClass`` over the schedules (``test/distributed/pipelining/test_schedule_multiproc.py``), each alone; the
grid crosses every schedule with the compositions the family draws."""

from parityfuzz.case.seedgrids import Grid
from parityfuzz.families.pipeline.schedules import SCHEDULES

GRIDS = (
    Grid("test_schedule_multiproc.py::ScheduleClass x composition", "pipeline", (
        ("ScheduleClass", tuple((cls, f"pp:schedule={name}") for name, (cls, _) in SCHEDULES.items())),
        ("composition", (("pp alone", ""), ("pp x dp_shard, fully_shard per stage", "pp:fully_shard*"),
                         ("pp x tp, styles per stage", "axes=pp,tp"),
                         ("pp x dp_shard x tp", "axes=pp,dp_shard,tp"),
                         ("schedule.eval between steps", "eval"),
                         ("blocks compiled before the split", "compile=blocks_before"),
                         ("activation checkpoints in stages", "ckpt=*"),
                         ("mixed precision per stage", "mp=uniform"),
                         ("step() calls accumulated", "micro=*"))),
        ("microbatches", (("< stages", "pp:microbatches<stages"), ("= stages", "pp:microbatches=stages"),
                          ("> stages", "pp:microbatches>stages*"))))),
)
