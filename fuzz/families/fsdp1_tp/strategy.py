"""Cases of the ``fsdp1_tp`` family: tensor parallelism, then one FSDP1 call on the ``dp_shard`` sub-mesh of a
``(dp_shard, tp)`` mesh (PyTorch's FSDP1 + TP tests' order).

Drawn in this order: world size (2 or more, 4 first), the mesh (a data-parallel axis of several ranks first; a
dp of 1 included), the sharding strategy (``FULL_SHARD``, ``SHARD_GRAD_OP``, ``NO_SHARD``), the wrapping kind,
the model (mostly a transformer-shaped stack, :func:`parityfuzz.parts.tensor_parallel.strategy.transformer_models`;
never tied), what the wrapping wraps, ``use_orig_params`` (True in three cases of four: what PyTorch asks for with TP), the training spec, the
tensor-parallel styles (:mod:`parityfuzz.parts.tensor_parallel.strategy`), then the FSDP1 call's other arguments
(``parityfuzz.parts.fsdp1.strategy.call_options``).

Not drawn: hybrid strategies, mixed precision, ignored modules, per-rank control flow, and tensor-parallel
dimensions the ``tp`` axis does not divide, which FSDP1 refuses (``parityfuzz.families.fsdp1_tp``; the corpus
keeps cases of them).

Shrinking: toward world size 4 on a (2, 2) mesh, ``FULL_SHARD``, manual wrapping of the root alone, a
transformer stack, the TP plan's simplest styles.
"""

from __future__ import annotations

import dataclasses

from hypothesis import assume
from hypothesis import strategies as st

from parityfuzz.case import Case, MeshSpec
from parityfuzz.parts.fsdp1 import WRAPPINGS
from parityfuzz.families.fsdp1_tp import SHARDINGS, FSDP1TPPlan, uneven_shards
from parityfuzz.strategies.cases import finish
from parityfuzz.parts.fsdp1.strategy import call_options, wrapping
from parityfuzz.parts.tensor_parallel.strategy import OFTEN, sequence_for_tp, tp_plans, tp_training, transformer_models
from parityfuzz.strategies.models import LEAVES, models
from parityfuzz.strategies.training import training


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    # 4 ranks first and a data-parallel axis of several ranks first: with one (2 ranks), FSDP1 switches to
    # NO_SHARD, where a known torch bug ends most cases at their second forward.
    ws = draw(st.sampled_from(sorted((w for w in allowed if w >= 2), key=lambda w: (w != 4, w)) or [2]))
    tps = sorted((t for t in range(2, ws + 1) if ws % t == 0), key=lambda t: (t == ws, t))
    tp = draw(st.sampled_from(tps))
    mesh = MeshSpec((ws // tp, tp), ("dp_shard", "tp"))
    sharding = draw(st.sampled_from(SHARDINGS))
    kind = draw(st.sampled_from(WRAPPINGS))
    model = draw(transformer_models()) if draw(OFTEN) else \
        draw(models(max_depth, leaves=LEAVES + ("rmsnorm",), tie=False))
    wraps = draw(wrapping(model, kind))
    kind = wraps.pop("wrapping", kind)
    use_orig_params = draw(st.sampled_from((True, True, True, False)))
    if swarm is not None and swarm & {"compile", "unfreeze"}:  # what FSDP1 needs for them (rule
        use_orig_params = True  # fsdp1.compile-orig-params; one requires_grad per flat parameter otherwise)
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    if not use_orig_params:
        train = dataclasses.replace(train, groups=(), frozen=())
    train = draw(sequence_for_tp(train, tp))
    styles, loss_parallel = draw(tp_plans(model, tp, train.seq_len))
    train = tp_training(train, loss_parallel, low_precision=False)  # the family has no TP reference for it
    plan = FSDP1TPPlan(sharding=sharding, use_orig_params=use_orig_params, wrapping=kind, **wraps, tp=styles,
                       loss_parallel=loss_parallel, **draw(call_options(model, train)))
    case = finish(draw, world_size=ws, model=model, mesh=mesh, plan=plan, train=train, system=system,
                  reference=reference, perturb=perturb, swarm=swarm)
    assume(not uneven_shards(case))  # FSDP1 refuses them: corpus cases keep that, the fuzzer looks elsewhere
    return case
