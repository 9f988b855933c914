"""The schedules of ``torch.distributed.pipelining`` the family draws (torch-free)."""

#: Schedule name -> (torch class in ``torch.distributed.pipelining``, stage layout).
SCHEDULES = {
    "gpipe": ("ScheduleGPipe", "single"),
    "1f1b": ("Schedule1F1B", "single"),
    "looped_bfs": ("ScheduleLoopedBFS", "loop"),
    "interleaved_1f1b": ("ScheduleInterleaved1F1B", "loop"),
    "interleaved_zero_bubble": ("ScheduleInterleavedZeroBubble", "loop"),
    "zbv": ("ScheduleZBVZeroBubble", "v"),
    "dualpipev": ("ScheduleDualPipeV", "v"),
}

#: The schedules that split a stage's backward into its input and weight parts (``stage_backward_input`` and
#: ``stage_backward_weight``).
SPLIT_BACKWARD = ("interleaved_zero_bubble", "zbv", "dualpipev")
