"""Training settings: what a user's training loop has.

Every optimizer (SGD with or without momentum, Adam, AdamW) in float64 and float32, with weight decay,
several parameter groups with their own learning rate and weight decay, gradient clipping on the full
gradient, an LR scheduler stepped every step, frozen parameters (for the whole run, or for the first steps
and then unfrozen: fine-tuning schedules), and an evaluation forward under ``torch.no_grad()`` after every
step.  The oracle's tolerance comes from measured noise, so Adam's per-element normalisation of rounding in
float32 is judged by what it does to this very case.  The loss is a mean or a sum over its terms; a summed
loss divides the drawn learning rate by its number of terms, so SGD steps stay as stable as with a mean and
training stays comparable up to the last step.

A float32 model trains under an autocast region (``torch.autocast``, bfloat16 or float16) around each forward and its
loss in about one case in three, the backward outside it, as users write it.  A token model's cross-entropy has
padding (``ignore_index``), a rank whose microbatch is all padding, and label smoothing (:data:`PAD`,
:data:`PAD_ALL_DP0`, :data:`LABEL_SMOOTHING`).  Under float16 autocast the loss is scaled (:data:`LOSS_SCALE`), with a
step whose float16 gradients overflow on one rank (:data:`OVERFLOWS`).

Gradient accumulation over 1-3 microbatches per step (what the parallel API does on the non-last ones is
its family's draw).  Rare coins also convert a float32 model to float64 (``.to(torch.float64)``) and add to
each step a second pass whose forward and backward run through only a non-root module the family offers.

Shrinking: one step, SGD at lr 0.01 without momentum, weight decay or foreach, ``set_to_none=True``, batch
1, sequence 1, sum loss, float64, different inputs per rank, one microbatch, one parameter group, no clipping, scheduler or frozen parameters, no non-root or evaluation pass, no autocast, padding, label smoothing or loss scaling.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import LOSSES, OPTIMIZERS, ZERO_GRAD_MODES, Freeze, ModelSpec, ParamGroup, TrainSpec, under
from parityfuzz.case.training import entry_linears, input_requires_grad
from parityfuzz.strategies.coins import RARE

#: An autocast region around forward and loss in 1 case of 3 (where the model is float32), bfloat16 twice as often
#: as float16; shrinks to none.
AUTOCAST = st.sampled_from(("", "", "", "", "", "", "bfloat16", "bfloat16", "float16"))
#: Token losses (a model that takes tokens: cross-entropy): padding in 1 case of 3 (a quarter or half of the target
#: tokens ignored), a data-parallel rank whose first microbatch is all padding in 1 summed case of 6, label
#: smoothing in 1 case of 3; each shrinks to none.
PAD = st.sampled_from((0.0, 0.0, 0.0, 0.0, 0.25, 0.5))
PAD_ALL_DP0 = st.sampled_from((False, False, False, False, False, True))
LABEL_SMOOTHING = st.sampled_from((0.0, 0.0, 0.0, 0.0, 0.1, 0.3))
#: fp16 loss scaling in 1 float16-autocast case of 2 (init_scale 2**8 or 2**16), with a step that overflows on one
#: rank in half of those that have a second step; shrinks to none.  Under a swarm configuration the overflow happens
#: in the loss or, half the time, in one feature of a Linear's output gradient (``TrainSpec.overflow_in``).
LOSS_SCALE = st.sampled_from((0.0, 0.0, 2.0 ** 8, 2.0 ** 16))
OVERFLOWS = st.booleans()

#: Under a swarm configuration (:mod:`parityfuzz.strategies.swarm`) a dimension switched on is drawn with these
#: (each shrinks to off, as the coins above); one switched off is not drawn.
ON = {
    "autocast": st.sampled_from(("", "bfloat16", "bfloat16", "float16", "float16")),
    "loss_scale": st.sampled_from((0.0, 2.0 ** 8, 2.0 ** 16, 2.0 ** 16)),
    "overflow": st.sampled_from((False, True, True, True)),
    "pad": st.sampled_from((0.0, 0.25, 0.5)),
    "pad_all_dp0": st.sampled_from((False, False, True)),
    "label_smoothing": st.sampled_from((0.0, 0.1, 0.3)),
    "eval": st.sampled_from((False, True, True, True)),
    "nonroot": st.sampled_from((False, True, True, True)),
    "to_float64": st.sampled_from((False, True, True, True)),
    "unfreeze": st.sampled_from((False, True, True, True)),
}
#: What a dimension switched off leaves.
OFF = {"autocast": "", "loss_scale": 0.0, "overflow": False, "pad": 0.0, "pad_all_dp0": False, "label_smoothing": 0.0,
       "eval": False, "nonroot": False, "to_float64": False}
#: The dimensions that need a float32 model (autocast casts float32 work only; .to(float64) converts one).
FLOAT32 = frozenset(("autocast", "loss_scale", "overflow", "to_float64"))


def _holding_params(model: ModelSpec) -> list[str]:
    """Non-root module paths with parameters at or below them (what a group or a freeze can name)."""
    owners = model.param_modules()
    return [p for p, _ in model.module_paths() if p and any(under(m, (p,)) for m in owners)]


@st.composite
def _groups(draw, model: ModelSpec) -> tuple[ParamGroup, ...]:
    """Up to two parameter groups besides the default one, each taking parameters no earlier group took."""
    holding = _holding_params(model)
    picks = draw(st.lists(st.sampled_from(holding), min_size=1, max_size=2)) if draw(RARE) else []
    owners, claimed, groups = model.param_modules(), set(), []
    for path in picks:
        lr_scale = draw(st.sampled_from((2.0, 0.5, 0.1)))
        weight_decay = draw(st.sampled_from((0.0, 0.05)))
        mine = {m for m in owners if under(m, (path,))} - claimed
        if mine:
            claimed |= mine
            groups.append(ParamGroup((path,), lr_scale=lr_scale, weight_decay=weight_decay))
    return tuple(groups)


@st.composite
def _frozen(draw, model: ModelSpec, steps: int, unfreeze: bool | None = None) -> tuple[Freeze, ...]:
    """Up to two frozen modules, each for the whole run or until a later step; dropped where they would
    leave no trainable parameter every forward uses.  ``unfreeze``: True, some frozen until a later step (the
    dimension switched on: a freeze drawn with a high probability); False, frozen for the whole run only; None,
    either."""
    holding = _holding_params(model)
    coin = ON["unfreeze"] if unfreeze else RARE
    picks = draw(st.lists(st.sampled_from(holding), unique=True, min_size=1, max_size=2)) if draw(coin) else []
    frozen = []
    for path in picks:
        until = draw(st.sampled_from((0, 1, 2) if unfreeze is None else (1, 2) if unfreeze else (0,)))
        candidate = frozen + [Freeze(path, until=until if until < steps else 0)]
        if model.uses_params("", frozenset(f.path for f in candidate)):
            frozen = candidate
    return tuple(frozen)


@st.composite
def training(draw, model: ModelSpec, *, max_steps: int = 10, nonroot: tuple[str, ...] = (),
             swarm: frozenset[str] | None = None) -> TrainSpec:
    """Training settings for ``model``; ``nonroot`` lists the modules a non-root pass may run through (the
    family's choice; those without trainable parameters every forward uses are left out here).  ``swarm``: the
    training-loop dimensions switched on (:mod:`parityfuzz.strategies.swarm`): each drawn with a high probability,
    the others not at all, and what they need drawn with them (a float32 model, float16 autocast for loss scaling,
    a second step for an overflow or an unfreeze); None: each dimension by its own coin, as before swarms."""
    on = (lambda name: True) if swarm is None else swarm.__contains__
    optimizer = draw(st.sampled_from(OPTIMIZERS))
    dtype = draw(st.sampled_from(("float64", "float32")))
    if swarm is not None and swarm & FLOAT32:
        dtype = "float32"
    micro = draw(st.integers(1, 3))
    steps = draw(st.integers(1, max_steps))
    if swarm is not None and swarm & {"overflow", "unfreeze"}:
        steps = max(steps, min(2, max_steps))
    frozen = draw(_frozen(model, steps, unfreeze=None if swarm is None else on("unfreeze")))
    trainable = frozenset(f.path for f in frozen)
    nonroot = tuple(p for p in nonroot if p and model.uses_params(p, trainable))
    momentum = draw(st.sampled_from((0.0, 0.9, 0.5)))
    clip = draw(st.sampled_from((1.0, 0.1)))
    lr = draw(st.sampled_from((0.01, 0.1, 0.001)))
    batch, seq_len, loss = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.sampled_from(LOSSES))
    if loss == "sum":  # a summed loss scales the step by its number of terms: keep SGD as stable as with a mean
        lr /= batch * seq_len * (1 if model.input == "embedding" else model.output_width(""))

    def coin(key: str, legacy: st.SearchStrategy, dimension: str = ""):
        """The value of ``key``: its legacy coin without a configuration, else :data:`ON`'s coin (always drawn, so
        the choice sequence stays put while the switches shrink) where its dimension is switched on."""
        if swarm is None:
            return draw(legacy)
        value = draw(ON[key])
        return value if (dimension or key) in swarm else OFF[key]

    to_float64 = coin("to_float64", RARE) and dtype == "float32"
    autocast = coin("autocast", AUTOCAST)
    tokens = model.input == "embedding"
    pad, pad_all_dp0 = coin("pad", PAD, "token_loss"), coin("pad_all_dp0", PAD_ALL_DP0, "token_loss")
    smoothing = coin("label_smoothing", LABEL_SMOOTHING, "token_loss")
    loss_scale, overflows = coin("loss_scale", LOSS_SCALE), coin("overflow", OVERFLOWS)
    if swarm is not None and to_float64 and (autocast or loss_scale or overflows):
        # a float64 model or low-precision work: both switched on, one side by a coin (shrinking keeps autocast's)
        to_float64 = draw(st.booleans())
        if to_float64:
            autocast, loss_scale, overflows = "", 0.0, False
    nonroot = draw(st.sampled_from(nonroot)) if coin("nonroot", RARE) and nonroot else ""
    if swarm is not None and nonroot and (loss_scale or overflows):
        # a non-root pass (DDP's reference of it is unscaled) or loss scaling: both switched on, one side by a coin
        if draw(st.booleans()):
            loss_scale, overflows = 0.0, False
        else:
            nonroot = ""
    if swarm is not None and (loss_scale or overflows):  # what loss scaling is for, drawn with it
        autocast, loss_scale = "float16", loss_scale or 2.0 ** 16
    overflow_at = draw(st.integers(1, steps - 1)) if loss_scale and overflows and steps > 1 else 0
    train = TrainSpec(
        steps=steps,
        optimizer=optimizer,
        lr=lr,
        foreach=draw(st.booleans()),
        zero_grad=draw(st.sampled_from(ZERO_GRAD_MODES)),
        batch=batch,
        seq_len=seq_len,
        loss=loss,
        dtype=dtype,
        same_input=draw(st.booleans()),
        microbatches=micro,
        # Always drawn, applied where legal (keeps the choice sequence stable while other fields shrink).
        to_float64=to_float64,
        nonroot=nonroot,
        momentum=momentum if optimizer == "sgd" else 0.0,
        weight_decay=draw(st.sampled_from((0.0, 0.01, 0.1))),
        groups=draw(_groups(model)),
        clip=clip if draw(RARE) else 0.0,
        scheduler=draw(st.sampled_from(("", "", "step", "linear"))),
        frozen=frozen,
        eval=coin("eval", RARE),
        autocast=autocast if dtype == "float32" and not to_float64 else "",
        pad=pad if tokens else 0.0,
        pad_all_dp0=pad_all_dp0 and tokens and loss == "sum",
        label_smoothing=smoothing if tokens else 0.0,
    )
    if train.autocast == "float16" and not train.nonroot:  # what loss scaling is for; DDP's non-root pass is unscaled
        train = dataclasses.replace(train, loss_scale=loss_scale, overflow_at=overflow_at)
    return draw(_overflow_form(model, train)) if swarm is not None and train.overflow_at else train


@st.composite
def _overflow_form(draw, model: ModelSpec, train: TrainSpec) -> TrainSpec:
    """How the overflow happens (half the time, where the model has a Linear whose input needs no gradient: a Linear,
    an MLP's fc1, an attention's q, k or v first in the body): in the loss (every gradient overflows, on every rank
    after the reduction), or in one feature of that Linear's output gradient (its weight row alone: after the
    reduction in one rank's shard); shrinks to the loss."""
    rows = [p for p in entry_linears(model) if not input_requires_grad(model, train, p)]
    if not rows or not draw(st.booleans()):
        return train
    return dataclasses.replace(train, overflow_in=draw(st.sampled_from(rows)))
