"""The pipeline family's grid (:mod:`parityfuzz.case.seedgrids`): PyTorch's pipelining tests parametrize
``ScheduleClass`` over the schedules (``test/distributed/pipelining/test_schedule_multiproc.py``), each alone; the
grid crosses every schedule with the compositions the family draws."""

from parityfuzz.case.seedgrids import Grid
from parityfuzz.families.pipeline.schedules import SCHEDULES

GRIDS = (
    Grid("test_schedule_multiproc.py::ScheduleClass x composition", "pipeline", (
        ("ScheduleClass", tuple((cls, f"pp:schedule={name}") for name, (cls, _) in SCHEDULES.items())),
        ("composition", (("pp alone", ""), ("pp x dp_shard, fully_shard per stage", "pp:fully_shard*"),
                         ("activation checkpoints in stages", "ckpt=*"),
                         ("step() calls accumulated", "micro=*"))),
        ("microbatches", (("< stages", "pp:microbatches<stages"), ("= stages", "pp:microbatches=stages"),
                          ("> stages", "pp:microbatches>stages*"))))),
)
