"""Training settings.

float32 is drawn only with SGD.  In float32 the reference and FSDP2 differ
legitimately in the last bits: BLAS results depend on buffer alignment (FSDP2
computes with parameters that live in all-gather buffers) and at world size
>= 3 the ranks' gradients are summed in a different order.  SGD keeps that
noise small (measured: <= 7.5e-5 relative over 150 cases, see the oracle's
float32 tolerance), but Adam's per-element normalisation turns a near-zero
gradient's rounding into an O(lr) step.  float64 keeps the noise far below
Adam's eps, so every optimizer is drawn with it.

Gradient accumulation: 1-3 microbatches per step; on the non-last ones
gradient sync is turned off on all wrapped modules, only the root, a random
subset or none; ``set_is_last_backward``, ``set_reshard_after_backward`` and
an explicit ``unshard`` first are drawn independently, and on HSDP meshes
``set_requires_all_reduce(False)`` on the non-last microbatches.  Rare coins
also convert a float32 model to float64 after sharding and run the root
through a registered forward method, and add to each step a second pass
whose forward and backward run through only a wrapped non-root module.

Shrinking: one step, SGD at lr 0.01 without foreach, ``set_to_none=True``,
batch 1, sequence 1, sum loss, float64, different inputs per rank, one
microbatch, no accumulation controls, no non-root pass.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzz.case import LOSSES, OPTIMIZERS, ZERO_GRAD_MODES, TrainSpec

#: A rare coin: first choice False, so it shrinks to "off".
RARE = st.sampled_from((False, False, False, True))


@st.composite
def training(draw, max_steps: int = 10, wrapped: tuple[str, ...] = ("",), hsdp: bool = False,
             nonroot: tuple[str, ...] = ()) -> TrainSpec:
    """Training settings for a plan that wraps ``wrapped``; ``nonroot`` lists the wrapped non-root modules a
    second pass may run through alone (those with parameters every forward uses)."""
    optimizer = draw(st.sampled_from(OPTIMIZERS))
    dtype = draw(st.sampled_from(("float64", "float32")))
    micro = draw(st.integers(1, 3))
    mode = draw(st.sampled_from(("all", "root", "subset", "none")))
    if mode == "all":
        no_sync = tuple(wrapped)
    elif mode == "root":
        no_sync = ("",)
    elif mode == "subset":
        no_sync = tuple(p for p in wrapped if draw(st.booleans()))
    else:
        no_sync = ()
    return TrainSpec(
        steps=draw(st.integers(1, max_steps)),
        optimizer=optimizer,
        lr=draw(st.sampled_from((0.01, 0.1, 0.001))),
        foreach=draw(st.booleans()),
        zero_grad=draw(st.sampled_from(ZERO_GRAD_MODES)),
        batch=draw(st.integers(1, 4)),
        seq_len=draw(st.integers(1, 3)),
        loss=draw(st.sampled_from(LOSSES)),
        dtype=dtype,
        same_input=draw(st.booleans()),
        microbatches=micro,
        no_sync=no_sync if micro > 1 else (),
        is_last_backward=draw(RARE),
        reshard_after_backward=not draw(RARE),
        unshard_first=draw(RARE),
        # Always drawn, applied where legal (keeps the choice sequence stable while other fields shrink).
        to_float64=draw(RARE) and dtype == "float32",
        forward_method=draw(RARE),
        no_all_reduce=draw(RARE) and hsdp and micro > 1,
        # On a rare coin, always drawn (a stable choice sequence while the plan shrinks).
        nonroot=draw(st.sampled_from(nonroot)) if draw(RARE) and nonroot else "",
    )
