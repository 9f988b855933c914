"""Strategies of the FSDP1 part: hybrid meshes, what a wrapping wraps, the call's other arguments and its
``MixedPrecision``; the families compose them (``strategies.fsdp1``, ``strategies.fsdp1_tp``).  Each shrinks in
its own order (see its docstring).
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import MeshSpec, ModelSpec, TrainSpec, under
from parityfuzz.case.dtypes import clashing
from parityfuzz.parts.activation_checkpoint import ActivationCheckpoint
from parityfuzz.parts.fsdp1 import WRAP_KINDS, Precision, rank_flow_problem
from parityfuzz.parts.fully_shard.strategy import wrappable_paths
from parityfuzz.strategies.coins import RARE

HSDP = ("dp_replicate", "dp_shard")


def hybrid_meshes(world_size: int) -> list[MeshSpec]:
    """Every ``(replicas, shard)`` factorization of the world size, the 2-D ones first."""
    shapes = [(world_size // s, s) for s in range(world_size, 0, -1) if world_size % s == 0]
    shapes.sort(key=lambda shape: 1 in shape)
    return [MeshSpec(shape, HSDP) for shape in shapes]


@st.composite
def wrapping(draw, model: ModelSpec, kind: str) -> dict:
    """What a wrapping kind wraps: paths (manual, lambda), module kinds or a parameter count.  Under per-rank
    control flow, instances that would issue collectives on some ranks only are left out
    (:func:`parityfuzz.parts.fsdp1.rank_flow_problem`); where no module kind fits, the wrapping is a lambda
    policy selecting nothing."""
    if kind in ("manual", "lambda"):
        wraps = [p for p in wrappable_paths(model) if draw(st.booleans())]
        if model.per_rank_flow():
            wraps = _fitting_rank_flow(model, wraps)
        return {"wraps": tuple(wraps)}
    if kind == "module_class":
        present = [k for k in WRAP_KINDS if k in {kind for _, kind in model.module_paths()}]
        kinds = draw(st.lists(st.sampled_from(present), min_size=1, max_size=2, unique=True))
        if model.per_rank_flow():
            kinds = _kinds_fitting_rank_flow(model, kinds)
            if not kinds:
                return {"wrapping": "lambda", "wraps": ()}
        return {"wrap_kinds": tuple(kinds)}
    return {"min_num_params": draw(st.sampled_from((1, 8, 30, 100)))}


def _kinds_fitting_rank_flow(model: ModelSpec, kinds: list[str]) -> list[str]:
    """``kinds`` without those whose instances per-rank control flow cannot run (as :func:`_fitting_rank_flow`)."""
    paths = dict(model.module_paths())
    while kinds:
        found = [p for p in paths if paths[p] in kinds]
        problem = rank_flow_problem(model, frozenset([""] + found))
        if problem is None:
            break
        kinds.remove(paths[problem[0] or min(found, key=lambda p: p.count("."))])
    return kinds


def _fitting_rank_flow(model: ModelSpec, wraps: list[str]) -> list[str]:
    """``wraps`` without the instances per-rank control flow cannot run: the offending one (or, where the root
    is, the shallowest other one, which gives its parameters back to the root) removed until none is."""
    while (problem := rank_flow_problem(model, frozenset([""] + wraps))) is not None:
        culprit = problem[0]
        wraps.remove(culprit if culprit else min(wraps, key=lambda p: p.count(".")))
    return wraps


@st.composite
def call_options(draw, model: ModelSpec, train, ignored: tuple[str, ...] = ()) -> dict:
    """The FSDP1 call's other arguments and how the loop drives it: prefetching, ``limit_all_gathers``,
    ``no_sync()`` accumulation, activation checkpointing (outside ignored modules), and on a rare coin CPU
    offload and/or ``sync_module_states``."""
    checkpoints = []
    for path in draw(st.lists(st.sampled_from([p for p, _ in model.module_paths() if p]), unique=True, max_size=2)):
        if not under(path, ignored):
            before = not draw(st.booleans())
            checkpoints.append(ActivationCheckpoint(path, api=draw(st.sampled_from(("wrapper", "apply"))) if before else "apply",
                                          before=before))
    return dict(backward_prefetch=draw(st.sampled_from(("BACKWARD_PRE", "BACKWARD_POST", ""))),
                # forward_prefetch only where every forward runs the same modules (parityfuzz.parts.fsdp1.rules)
                forward_prefetch=draw(st.booleans()) and not model.gates(),
                limit_all_gathers=draw(st.sampled_from((True, False))),
                no_sync=train.microbatches > 1 and draw(st.booleans()), checkpoints=tuple(checkpoints),
                **_offload_or_sync(draw))


def _offload_or_sync(draw) -> dict:
    """CPU offload, ``sync_module_states`` or both, on a coin rarer than rare: on a CPU machine FSDP1 refuses
    either, so such a case checks only the refusal (two rare coins made a fifth of a 20-minute run's cases
    expected errors)."""
    if not (draw(RARE) and draw(st.booleans())):
        return {"offload": False, "sync_module_states": False}
    which = draw(st.sampled_from(("offload", "sync_module_states", "both")))
    return {"offload": which != "sync_module_states", "sync_module_states": which != "offload"}


@st.composite
def precisions(draw, model: ModelSpec, train: TrainSpec) -> Precision:
    """FSDP1's ``MixedPrecision``: one policy for every instance of the plan.

    ``param_dtype`` bf16, fp16, fp32 (below a float64 model) or none; ``reduce_dtype`` none (FSDP1 then reduces
    in ``param_dtype``), fp32, the model's, bf16 or fp16; ``buffer_dtype`` none or one of those;
    ``keep_low_precision_grads`` where the optimizer takes gradients of another dtype than its parameters (SGD
    without foreach); ``cast_forward_inputs``; ``cast_root_forward_inputs=False`` only where the input is token
    ids (a dense input must be cast at the root: ``parityfuzz.parts.fsdp1``).

    Under an autocast region ``param_dtype`` is never the other low dtype (:func:`parityfuzz.case.dtypes.check_autocast`).
    Not drawn with ignored modules (an ignored module keeps its dtype and meets param_dtype activations) nor with
    ``train.to_float64``.

    Shrinking: toward no policy (the first coin), then bf16 compute with the other fields at torch's defaults.
    """
    if train.to_float64 or not draw(st.booleans()):
        return Precision()
    master = train.dtype
    low = tuple(d for d in ("bfloat16", "float16", "float32") if d != master and d not in clashing(train))
    param = draw(st.sampled_from(low + ("",)))
    dtypes = ("",) + tuple(dict.fromkeys(("float32", master, "bfloat16", "float16")))
    reduce = draw(st.sampled_from(dtypes))
    buffer = draw(st.sampled_from(dtypes))
    if not (param or reduce or buffer):
        param = low[0]
    keep_low = train.optimizer == "sgd" and not train.foreach and draw(st.booleans())
    root_cast = True if model.input != "embedding" else not draw(st.booleans())
    return Precision(param_dtype=param, reduce_dtype=reduce, buffer_dtype=buffer, keep_low_precision_grads=keep_low,
                     cast_forward_inputs=draw(st.booleans()), cast_root_forward_inputs=root_cast)
