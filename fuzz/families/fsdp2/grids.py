"""The seed tests' grids about the fsdp2 family (:mod:`parityfuzz.case.seedgrids`)."""

from parityfuzz.case.seedgrids import Grid, flag

RESHARD = ("reshard_after_forward", (("True", "reshard=True"), ("False", "reshard=False"), ("2", "reshard=int")))
RESHARD_AFTER_BACKWARD = ("reshard_after_backward", (("True", ""), ("False", "reshard_after_backward=False")))
#: ``@test_compiled_fsdp(compile_compute_on_module=Transformer)``: the test runs eagerly and again with each block's
#: compute compiled after ``fully_shard``.
COMPILED = ("compiled", (("eager", ""), ("compute_on_module", "compile=blocks_after")))

GRIDS = (
    Grid("test_fully_shard_training.py::test_train_parity_multi_group", "fsdp2", (
        RESHARD, flag("delay_after_forward", "delay=after_forward"), flag("delay_before_all_gather", "delay=all_gather"),
        flag("delay_before_reduce_scatter", "delay=reduce_scatter"), flag("delay_before_optim", "delay=before_step"),
        COMPILED)),
    Grid("test_fully_shard_training.py::test_train_parity_multi_group_cpu_offload_eager", "fsdp2", (
        ("offload_policy", (("CPUOffloadPolicy", "offload"),)), flag("delay_after_forward", "delay=after_forward"),
        flag("delay_before_all_gather", "delay=all_gather"), flag("delay_before_reduce_scatter", "delay=reduce_scatter"))),
    Grid("test_fully_shard_training.py::test_train_parity_with_activation_checkpointing", "fsdp2", (
        RESHARD, ("checkpoint_impl", (("composable", "ckpt=composable/*"), ("utils", "ckpt=apply/*"),
                                      ("wrapper", "ckpt=wrapper/*"))), COMPILED)),
    Grid("test_fully_shard_training.py::test_gradient_accumulation", "fsdp2", (
        ("microbatches", (("2+", "micro=*"),)), RESHARD, RESHARD_AFTER_BACKWARD,
        ("offload_policy", (("OffloadPolicy", ""), ("CPUOffloadPolicy", "offload"))))),
    Grid("test_fully_shard_training.py::test_1f1b_microbatching", "fsdp2", (
        flag("use_explicit_unshard", "unshard_first"), RESHARD_AFTER_BACKWARD)),
    Grid("test_fully_shard_training.py::test_post_optim_event", "fsdp2", (
        ("post_optim_event", (("set", "post_optim_event"),)),)),
)
