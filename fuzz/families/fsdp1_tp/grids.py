"""The seed tests' grids about the fsdp1_tp family (:mod:`parityfuzz.case.seedgrids`)."""

from parityfuzz.case.seedgrids import Grid

GRIDS = (
    Grid("test_fsdp_tp_integration.py::test_fsdp_tp_integration", "fsdp1_tp", (
        ("cpu_offload", (("False", ""), ("True", "offload"))),
        ("sharding_strategy", (("FULL_SHARD", "sharding=FULL_SHARD"), ("SHARD_GRAD_OP", "sharding=SHARD_GRAD_OP"))),
        ("use_orig_params", (("False", "use_orig_params=False"), ("True", "use_orig_params=True"))))),
)
