"""Cases of the ``fsdp1`` family: one ``FullyShardedDataParallel`` call (with nested instances or an auto-wrap
policy) on a 1-D or hybrid mesh, trained against DDP.

Drawn in this order: world size, sharding strategy (and for the hybrid ones how FSDP1 gets its groups, then
the mesh: every factorization of the world size, ``(n, 1)`` and ``(1, n)`` included), the wrapping kind, the
model (tied embedding/head weights only where wrapping names modules by path, so that they stay in one unit),
what the wrapping wraps, ``use_orig_params``, the generic training spec (without parameter groups or frozen
modules under ``use_orig_params=False``: FSDP1 flattens each unit into one parameter), mixed precision
(the FSDP1 part's strategies, :mod:`parityfuzz.parts.fsdp1.strategy`), on a rare coin an ignored module (not under mixed precision; given as a
module or as its parameters through ``ignored_states``), prefetching and ``limit_all_gathers``, gradient
accumulation under ``no_sync()``, activation checkpointing, the seed and delays.

On a rare coin the model's gates are per-rank gates (control flow that differs per data-parallel rank), with
the wrapping kept to instances every rank runs alike (not size wrapping, whose instances the case cannot
name).

``CPUOffload`` and/or ``sync_module_states`` on a coin rarer than rare: on a machine without an accelerator
FSDP1 refuses both, and the case then expects that error (:mod:`parityfuzz.judge.expected`).  Not drawn: non-root passes
(tensor parallelism is the ``fsdp1_tp`` family's).

Shrinking: toward world size 2, ``FULL_SHARD``, manual wrapping of the root alone, ``use_orig_params=True``,
torch's defaults for the other arguments, a one-Linear model and one step.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case, MeshSpec, under
from parityfuzz.families.fsdp1 import FSDP1Plan
from parityfuzz.parts.fsdp1 import HYBRID, HYBRID_VIA, SHARDINGS, WRAPPINGS, checkpoint_flow_problem, rank_flow_problem
from parityfuzz.parts.fsdp1.strategy import HSDP, call_options, hybrid_meshes, precisions, wrapping
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.coins import RARE
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import models
from parityfuzz.strategies.training import training

@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    ws = draw(world_sizes(allowed))
    sharding = draw(st.sampled_from(SHARDINGS))
    # torch's own groups (auto) only one time in five: on a CPU machine they are (n, 1), a known torch bug
    via = draw(st.sampled_from(HYBRID_VIA[:2] * 2 + HYBRID_VIA[2:])) if sharding in HYBRID else ""
    if via == "auto":  # torch's own groups: one per machine, one rank per node on a CPU machine
        mesh = MeshSpec((ws, 1), HSDP)
    elif via:
        mesh = draw(st.sampled_from(hybrid_meshes(ws)))
    else:
        mesh = MeshSpec((ws,), ("dp_shard",))
    rank_flow = draw(RARE) and ws > 1  # control flow that differs per rank (in models with gates)
    kinds = [k for k in (WRAPPINGS[1:] if via == "auto" else WRAPPINGS) if not (rank_flow and k == "size")]
    kind = draw(st.sampled_from(kinds))
    # Tied weights must stay in one unit: only where the wrapping names modules by path (wrappable_paths).
    model = draw(models(max_depth, rank_period=ws if rank_flow else 0, tie=kind in ("manual", "lambda")))
    wraps = draw(wrapping(model, kind))
    kind = wraps.pop("wrapping", kind)
    use_orig_params = draw(st.sampled_from((True, False)))
    if swarm is not None and swarm & {"compile", "unfreeze"}:  # what FSDP1 needs for them (rule
        use_orig_params = True  # fsdp1.compile-orig-params; one requires_grad per flat parameter otherwise)
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    if not use_orig_params:
        train = dataclasses.replace(train, groups=(), frozen=())
    precision = draw(precisions(model, train))
    instances = frozenset([""] + list(wraps.get("wraps", ())) + [p for p, k in model.module_paths()
                                                                  if k in wraps.get("wrap_kinds", ())])
    if model.per_rank_flow():  # freezes that leave an instance no parameter every rank trains (rank_flow_problem)
        frozen = list(train.frozen)
        while frozen and rank_flow_problem(model, instances, frozenset(f.path for f in frozen)) is not None:
            frozen.pop()
        train = dataclasses.replace(train, frozen=tuple(frozen))
    ignored = ()
    # not with clipping (it differs per rank) nor mixed precision (parityfuzz.parts.fsdp1)
    if draw(RARE) and not train.clip and not precision.active():
        nested = wraps.get("wraps", ())
        rank_gates = model.rank_gates()
        frozen = frozenset(f.path for f in train.frozen)
        candidates = [p for p, _ in model.module_paths() if p and model.uses_params(p)
                      and not any(under(w, (p,)) for w in nested) and not (model.tie_head and p in ("inp", "head"))
                      and model.uses_params("", frozen | {p}) and not under(p, rank_gates)  # parityfuzz.parts.fsdp1
                      and not (rank_gates and rank_flow_problem(
                          model, frozenset(u for u in instances if not (u and under(u, (p,)))), frozen | {p}))]
        if candidates:
            ignored = (draw(st.sampled_from(candidates)),)
    ignored_via = draw(st.sampled_from(("modules", "states"))) if ignored else "modules"
    options = draw(call_options(model, train, ignored))
    if model.per_rank_flow():  # no checkpointed region with a per-rank gate and an instance (checkpoint_flow_problem)
        options["checkpoints"] = tuple(c for c in options["checkpoints"]
                                       if checkpoint_flow_problem(model, instances, (c.path,)) is None)
    plan = FSDP1Plan(sharding=sharding, hybrid_via=via, use_orig_params=use_orig_params, wrapping=kind, **wraps,
                     ignored=ignored, ignored_via=ignored_via, precision=precision, **options)
    return finish(draw, world_size=ws, model=model, mesh=mesh, plan=plan, train=train, system=system,
                  reference=reference, perturb=perturb, swarm=swarm)
