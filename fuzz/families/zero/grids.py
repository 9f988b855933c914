"""The seed tests' grids about the zero family (:mod:`parityfuzz.case.seedgrids`)."""

from parityfuzz.case.seedgrids import Grid, flag

GRIDS = (
    Grid("test_zero_redundancy_optimizer.py::test_local_optimizer_parity", "zero", (
        ("optimizer_class", (("Adam", "opt=adam"), ("AdamW", "opt=adamw"), ("SGD", "opt=sgd"))),
        flag("maximize", "maximize"))),
    Grid("test_zero_redundancy_optimizer.py::test_ddp_zero_overlap", "zero", (
        ("hook", (("hook_with_zero_step", "zero:overlap=hook"), ("interleaved", "zero:overlap=interleaved"))),
        flag("gradient_as_bucket_view", "zero:gradient_as_bucket_view"), flag("static_graph", "zero:static_graph"))),
)
