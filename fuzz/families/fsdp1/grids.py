"""The seed tests' grids about the fsdp1 family (:mod:`parityfuzz.case.seedgrids`)."""

from parityfuzz.case.seedgrids import Grid, flag

GRIDS = (
    Grid("test_fsdp_state_dict.py (state_dict_type x rank0_only_and_offload)", "fsdp1", (
        ("state_dict_type", (("full", "ckpt_save=fsdp1_full"), ("sharded", "ckpt_save=fsdp1_sharded"),
                             ("local", "ckpt_save=fsdp1_local"))),
        flag("rank0_only_and_offload", "ckpt_rank0_only&ckpt_cpu_offload"))),
)
