"""How a case trains, whatever the family: steps, optimizer and its groups, loss, dtype, microbatches, inputs,
frozen parameters, evaluation passes; and the delays that perturb the system under test's timing.

What a family's API adds to the loop (FSDP2's accumulation switches, say) lives in the family's plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.errors import check
from parityfuzz.case.model import ModelSpec, under

OPTIMIZERS = ("sgd", "adam", "adamw")
ZERO_GRAD_MODES = ("none", "zeros", "alternate")
LOSSES = ("sum", "mean")
#: LR schedulers stepped after every optimizer step: StepLR(step_size=2, gamma=0.5), LinearLR(1.0 -> 0.1).
SCHEDULERS = ("", "step", "linear")
DTYPES = ("float64", "float32")
#: What data-parallel rank 0's first microbatch multiplies its loss by for its backward at ``train.overflow_at``:
#: enough to overflow float16 (at most 65504) under any loss scale.
OVERFLOW_SPIKE = 2.0 ** 24
#: The gradient scaler of the system under test: its family's (``""``), or ``torch.amp.GradScaler`` (``amp``).
SCALERS = ("", "amp")
#: ``torch.autocast("cpu"/"cuda", dtype=...)`` around each forward and its loss (the backward outside it, as the
#: autocast docs ask: "Backward passes under autocast are not recommended").
AUTOCASTS = ("", "bfloat16", "float16")


def overflow_spike(overflow_at: int, step: int, dp: int, micro: int) -> float:
    """What the backward of data-parallel rank ``dp``'s microbatch ``micro`` of ``step`` multiplies its loss by:
    :data:`OVERFLOW_SPIKE` on rank 0's first microbatch of step ``overflow_at`` (0: never), else 1."""
    return OVERFLOW_SPIKE if overflow_at and (step, dp, micro) == (overflow_at, 0, 0) else 1.0


@dataclass(frozen=True)
class ParamGroup:
    """An optimizer parameter group: the parameters of the modules at ``paths`` (and inside them), at
    ``lr_scale`` times the case's learning rate, with their own weight decay."""

    paths: tuple[str, ...]
    lr_scale: float = 1.0
    weight_decay: float = 0.0


@dataclass(frozen=True)
class Freeze:
    """The parameters of the module at ``path`` (and inside it) get ``requires_grad=False`` before the
    parallel API is applied, and ``requires_grad=True`` again at the start of step ``until`` (fine-tuning
    schedules); ``until=0``: frozen for the whole run."""

    path: str
    until: int = 0


@dataclass(frozen=True)
class TrainSpec:
    """Training loop settings.

    ``nesterov`` (SGD with momentum) and ``maximize`` (any optimizer) are the optimizers' own flags.
    ``zero_grad``: ``none`` = ``set_to_none=True`` every step, ``zeros`` =
    ``set_to_none=False``, ``alternate`` = as PyTorch's tests do
    (``set_to_none=(step % 2 == 0)``).  Inputs differ per data-parallel rank
    unless ``same_input``.  ``to_float64``: ``.to(torch.float64)`` on a float32
    model (after the parallel API where the family says so).  ``nonroot``: after
    each step, a second one whose forward and backward run through only the
    module at this path (fed inputs of the width and dtype it sees inside the
    model); the family says which modules may take such a pass.  ``autocast``: the dtype of an autocast region
    around every forward and its loss, in the system under test and the reference alike (``""``: none).

    Token losses as language-model training writes them (cross-entropy: an embedding model): ``pad`` is the share
    of target tokens set to ``F.cross_entropy``'s ``ignore_index`` (-100; never a sequence's first token, so a
    ``mean`` always has a token to average), ``pad_all_dp0`` makes every target of data-parallel rank 0's first
    microbatch of each step padding (a rank with nothing to learn from; ``sum`` only: the ``mean`` over no token is
    0/0), ``label_smoothing`` is ``F.cross_entropy``'s.

    fp16 loss scaling (``loss_scale``: the scaler's ``init_scale``; 0: none) as the AMP recipe writes it:
    ``scaler.scale(loss).backward()``, ``scaler.unscale_(optimizer)`` before clipping, ``scaler.step(optimizer)``,
    ``scaler.update()``; ``torch.amp.GradScaler``, or ``ShardedGradScaler`` where the family's system shards
    gradients.  ``overflow_at``: at that step (1 or later) data-parallel rank 0's first microbatch backpropagates
    its loss times 2**24, so its float16 gradients overflow: every rank must skip that step as the reference does.
    ``overflow_in``: the overflow as it happens in one place instead: the gradient reaching the output of the Linear
    at this path is multiplied by 2**24 in its first feature alone (there, not in the loss), so only that feature's
    weight row and bias overflow (its input needs no gradient: nothing flows on), on that rank; after the
    reduction the inf sits in the one shard that holds the row, and every rank must still skip.
    ``scaler``: ``amp`` scales the system under test with ``torch.amp.GradScaler`` where its family would take
    ``ShardedGradScaler`` (``""``): over DTensor gradients, whose inf flags DTensor's own handler reduces over the
    mesh (the family says where its gradients are DTensors: :attr:`parityfuzz.families.Family.amp_scaler`).
    """

    steps: int = 1
    optimizer: str = "sgd"
    lr: float = 0.01
    foreach: bool = False
    zero_grad: str = "none"
    batch: int = 1
    seq_len: int = 1
    loss: str = "sum"
    dtype: str = "float64"
    same_input: bool = False
    microbatches: int = 1
    to_float64: bool = False
    nonroot: str = ""
    momentum: float = 0.0
    nesterov: bool = False
    maximize: bool = False
    weight_decay: float = 0.0
    groups: tuple[ParamGroup, ...] = ()
    clip: float = 0.0
    scheduler: str = ""
    frozen: tuple[Freeze, ...] = ()
    eval: bool = False
    autocast: str = ""
    pad: float = 0.0
    pad_all_dp0: bool = False
    label_smoothing: float = 0.0
    loss_scale: float = 0.0
    overflow_at: int = 0
    overflow_in: str = ""
    scaler: str = ""

    def unscaled(self) -> "TrainSpec":
        """These settings without fp16 loss scaling and all that belongs to it (overflows, their form, the scaler)."""
        from dataclasses import replace

        return replace(self, loss_scale=0.0, overflow_at=0, overflow_in="", scaler="")

    def group_of(self, param: str) -> int | None:
        """The index in ``groups`` of the parameter group that takes the parameter named ``param`` (the first
        whose paths hold its module), or None for the default group."""
        module = param.rpartition(".")[0]
        return next((i for i, g in enumerate(self.groups) if under(module, g.paths)), None)

    def spike(self, step: int, dp: int, micro: int) -> float:
        """What the backward of data-parallel rank ``dp``'s microbatch ``micro`` of ``step`` multiplies its loss by."""
        return overflow_spike(self.overflow_at, step, dp, micro)

    def keeps_optimizer_state(self) -> bool:
        """Whether the optimizer keeps state per parameter (Adam's moments, SGD's momentum buffer)."""
        return self.optimizer in ("adam", "adamw") or bool(self.momentum)

    def frozen_at(self, param: str, step: int) -> bool:
        """Whether the parameter named ``param`` has ``requires_grad=False`` during ``step``."""
        module = param.rpartition(".")[0]
        return any(under(module, (f.path,)) and (f.until == 0 or step < f.until) for f in self.frozen)

    def unfreezes_at(self, step: int) -> bool:
        return any(f.until == step for f in self.frozen)

    def frozen_paths(self) -> frozenset[str]:
        return frozenset(f.path for f in self.frozen)


DELAY_POINTS = ("all_gather", "reduce_scatter", "after_forward", "before_step")


@dataclass(frozen=True)
class Delay:
    """``ms`` of sleep on ``rank`` in the system under test, at ``where`` (every time it is reached)."""

    rank: int
    where: str
    ms: int = 5


#: The Linears inside a layer that take the layer's own input (``TrainSpec.overflow_in`` may name them).
ENTRY_SUBMODULES = {"mlp": ("fc1",), "attention": ("q", "k", "v")}


def entry_linears(model: ModelSpec) -> list[str]:
    """The body's Linears that take the input of the module they sit in: a Linear node, an MLP's fc1, an attention's
    q, k and v (whose inputs need a gradient exactly where their layer's does)."""
    return [path for node_path, node in model.body.walk("body")
            for path in ([node_path] if node.kind == "linear" else
                         [f"{node_path}.{sub}" for sub in ENTRY_SUBMODULES.get(node.kind, ())])]


def input_requires_grad(model: ModelSpec, t: TrainSpec, path: str) -> bool:
    """Whether the activations reaching the module at ``path`` require grad in every pass of the training: the
    whole model's forwards and, for a module inside the non-root pass's, that pass's (fed fresh inputs)."""
    frozen = tuple(f.path for f in t.frozen)
    inside = bool(t.nonroot) and under(path, (t.nonroot,))
    return model.input_requires_grad(path, frozen) and (
        not inside or model.input_requires_grad(path, frozen, root=t.nonroot))


def validate_train(t: TrainSpec, model: ModelSpec) -> None:
    check(1 <= t.steps <= 50, "train.steps", f"must be in [1, 50], got {t.steps}")
    check(t.optimizer in OPTIMIZERS, "train.optimizer", f"must be one of {OPTIMIZERS}, got {t.optimizer!r}")
    check(0 < t.lr <= 1, "train.lr", f"must be in (0, 1], got {t.lr}")
    check(t.zero_grad in ZERO_GRAD_MODES, "train.zero_grad", f"must be one of {ZERO_GRAD_MODES}, got {t.zero_grad!r}")
    check(t.batch >= 1, "train.batch", f"must be >= 1, got {t.batch}")
    check(t.seq_len >= 1, "train.seq_len", f"must be >= 1, got {t.seq_len}")
    check(t.loss in LOSSES, "train.loss", f"must be one of {LOSSES}, got {t.loss!r}")
    check(t.dtype in DTYPES, "train.dtype", f"must be one of {DTYPES}, got {t.dtype!r}")
    check(1 <= t.microbatches <= 8, "train.microbatches", f"must be in [1, 8], got {t.microbatches}")
    if t.to_float64:
        check(t.dtype == "float32", "train.to_float64", "converts a float32 model: needs dtype 'float32'")
    check(t.momentum == 0 or (0 < t.momentum < 1 and t.optimizer == "sgd"), "train.momentum",
          f"must be 0, or in (0, 1) with sgd, got {t.momentum}")
    check(not t.nesterov or t.momentum > 0, "train.nesterov", "needs SGD with momentum (torch refuses it without)")
    check(0 <= t.weight_decay < 1, "train.weight_decay", f"must be in [0, 1), got {t.weight_decay}")
    check(t.clip >= 0, "train.clip", f"must be >= 0 (0: no clipping), got {t.clip}")
    check(t.autocast in AUTOCASTS, "train.autocast", f"must be one of {AUTOCASTS}, got {t.autocast!r}")
    # "CPU autocast ... only float32 is cast" (autocast_mode.cpp, is_autocast_eligible: floating point and not
    # double): a float64 model is left as it is, and autocast would be a no-op drawn as a dimension.
    check(not t.autocast or (t.dtype == "float32" and not t.to_float64), "train.autocast",
          "casts float32 work only (torch leaves float64 alone): needs dtype 'float32' without to_float64")
    tokens = model.input == "embedding"
    check(0 <= t.pad < 1 and (tokens or not t.pad), "train.pad",
          f"must be in [0, 1), and 0 unless the model takes tokens (cross-entropy), got {t.pad}")
    check(not t.pad_all_dp0 or (tokens and t.loss == "sum"), "train.pad_all_dp0",
          "needs a token model and the sum loss (the mean over no target token is 0/0)")
    check(0 <= t.label_smoothing < 1 and (tokens or not t.label_smoothing), "train.label_smoothing",
          f"must be in [0, 1), and 0 unless the model takes tokens (cross-entropy), got {t.label_smoothing}")
    check(t.loss_scale == 0 or (t.loss_scale >= 1 and t.autocast == "float16"), "train.loss_scale",
          f"must be 0, or an init_scale >= 1 under autocast float16 (what loss scaling is for), got {t.loss_scale}")
    check(not (t.loss_scale and t.nonroot), "train.loss_scale",
          "not with a non-root pass (DDP's non-root pass takes autograd.grad: nothing scales or unscales it)")
    check(t.overflow_at == 0 or (t.loss_scale and 1 <= t.overflow_at < t.steps), "train.overflow_at",
          f"must be 0, or a step in [1, steps={t.steps}) of a loss-scaled case, got {t.overflow_at}")
    check(t.scaler in SCALERS and (not t.scaler or t.loss_scale), "train.scaler",
          f"must be one of {SCALERS}, and '' without loss scaling, got {t.scaler!r}")
    if t.overflow_in:
        check(bool(t.overflow_at) and t.overflow_in in entry_linears(model), "train.overflow_in",
              f"must name a Linear of the body fed the input of its module (a Linear, an MLP's fc1, an attention's "
              f"q, k or v), with overflow_at set, got {t.overflow_in!r}")
        check(not input_requires_grad(model, t, t.overflow_in), "train.overflow_in",
              f"{t.overflow_in!r}'s input requires grad: the overflow would flow on to every earlier gradient (the "
              "loss spike's form), not stay in its own weight row")
    check(t.scheduler in SCHEDULERS, "train.scheduler", f"must be one of {SCHEDULERS}, got {t.scheduler!r}")
    paths = {p for p, _ in model.module_paths()}
    owners = model.param_modules()
    claimed: set[str] = set()
    for i, g in enumerate(t.groups):
        where = f"train.groups[{i}]"
        check(bool(g.paths), f"{where}.paths", "must name at least one module")
        for j, path in enumerate(g.paths):
            check(path in paths and path != "", f"{where}.paths[{j}]", f"no non-root module at path {path!r}")
        mine = {m for m in owners if under(m, g.paths)} - claimed
        check(bool(mine), f"{where}.paths", "holds no parameter an earlier group does not take")
        claimed |= mine
        check(0 < g.lr_scale <= 10, f"{where}.lr_scale", f"must be in (0, 10], got {g.lr_scale}")
        check(0 <= g.weight_decay < 1, f"{where}.weight_decay", f"must be in [0, 1), got {g.weight_decay}")
    for i, f in enumerate(t.frozen):
        where = f"train.frozen[{i}]"
        check(f.path in paths and f.path != "", f"{where}.path", f"no non-root module at path {f.path!r}")
        check(any(under(m, (f.path,)) for m in owners), f"{where}.path", f"{f.path!r} holds no parameter")
        check(0 <= f.until < t.steps, f"{where}.until", f"must be in [0, steps={t.steps}), got {f.until}")
    frozen = t.frozen_paths()
    if frozen:
        check(model.uses_params("", frozen), "train.frozen",
              "leaves no trainable parameter that every forward uses (backward needs a graph)")
    if t.nonroot:
        check(t.nonroot in paths and t.nonroot != "", "train.nonroot", f"no non-root module at path {t.nonroot!r}")
        check(model.uses_params(t.nonroot, frozen), "train.nonroot",
              f"{t.nonroot!r} has no trainable parameters every forward uses: a backward through it alone "
              "has no graph")


def validate_delays(delays: tuple[Delay, ...], world_size: int) -> None:
    for i, d in enumerate(delays):
        check(0 <= d.rank < world_size, f"delays[{i}].rank", f"must be a rank < {world_size}, got {d.rank}")
        check(d.where in DELAY_POINTS, f"delays[{i}].where", f"must be one of {DELAY_POINTS}, got {d.where!r}")
        check(0 <= d.ms <= 1000, f"delays[{i}].ms", f"must be in [0, 1000], got {d.ms}")
