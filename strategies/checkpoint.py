"""Checkpoint events (:mod:`parityfuzz.case.checkpoint`) for a drawn case: save after a drawn step one of the ways its
family can, load one of the ways that read that format into the resumed case, with drawn options.

What the load resumes, in shrinking order:

- the same world size, mesh and plan (most cases: the reference trains on uninterrupted);
- the same plan at another world size (1-D meshes);
- an FSDP2 plan on an FSDP2 mesh of the same or another world size (2-D to 1-D, FSDP+TP to FSDP, FSDP1 to FSDP2,
  composable to FSDP2);
- plain DDP (the composable family's DDP-based ``replicate`` on the root).

Resharding is drawn only where the reference can take the trusted turn (no mixed precision, no per-rank control
flow); a resumed case that its family refuses falls back to the same plan.  One event in three is a rollback (the
live system trains on and loads the checkpoint into itself: :data:`ROLLBACK`), decided before the case is drawn,
so that the case is one whose reference can roll back, and nothing reshards.
A pipelined system (a family with ``partial_state``) on either side flattens the optimizer state dicts and does not
gather to rank 0 alone.  A case drawn compiled in the ``model`` form (whose state dict no load takes) compiles
blocks instead, where its family compiles them.  Shrinking: toward the first step, the ``dcp`` way, no options,
no resharding, no rollback.
"""

from __future__ import annotations

import dataclasses
import importlib

from hypothesis import assume
from hypothesis import strategies as st

from parityfuzz import families
from parityfuzz.case import Case, CaseError, MeshSpec, dimensions
from parityfuzz.case.compiled import Compile, validate_compile
from parityfuzz.case.mesh import DEFAULT_WORLD_SIZES
from parityfuzz.case.checkpoint import (checkpoint_families, Checkpoint, check_rollback, reference,
                                        reshards as resharding, saves_from, ways)
from parityfuzz.strategies.compiled import blocks

#: A rollback (the live system loads the checkpoint a few steps after the save) in 1 event of 3 that can take one.
ROLLBACK = st.sampled_from((False, False, True))


def reshards() -> tuple[str, ...]:
    """What a load may resume, in shrinking order: the same plan, the same plan at another world size, or a plan
    of a family whose record offers one (:attr:`parityfuzz.families.Family.resume`)."""
    return ("none", "world_size") + tuple(f.name for f in families.records() if f.resume)


def _taken_by(kind: str, family: str) -> tuple[str, ...] | None:
    """The dimensions a case of ``family`` may draw where its load resumes ``kind`` (:func:`reshards`): those the
    family of the resumed plan takes, where that is another family (None: any)."""
    if kind in ("none", "world_size", family):
        return None
    return dimensions.supported(families.get(kind))


def _refused_leaves(kind: str, family: str) -> tuple[str, ...]:
    """The model leaves a case of ``family`` may not hold where its load resumes ``kind`` (:func:`reshards`): those
    the family of the resumed plan refuses, where that is another family."""
    return () if kind in ("none", "world_size", family) else tuple(families.get(kind).refused_leaves)


def _reads(kind: str, family: str) -> bool:
    """Whether a load resuming ``kind`` (:func:`reshards`) can read a format ``family`` saves in (ZeRO's own
    format: only ZeRO's plans), so that no case is drawn for a resume its load must then refuse."""
    if kind in ("none", "world_size"):
        return True
    formats = {w.format for w in families.get(family).checkpoint_ways.values()}
    return any(w.format in formats for w in families.get(kind).checkpoint_ways.values())


def _takes(family: str, dimension: str) -> bool:
    return dimension in dimensions.supported(families.get(family))


def _narrow(among: tuple[str, ...]) -> tuple[str, ...]:
    """The dimensions fewer than half of the families ``among`` take (and at least one does), in table order."""
    counts = {d: sum(_takes(f, d) for f in among) for d in dimensions.NAMES}
    return tuple(d for d in dimensions.NAMES if 0 < counts[d] < len(among) / 2)


def ways_into(case: Case, fmt: str) -> list[str]:
    return [w for w in saves_from(case) if ways()[w].format == fmt]


def can_reshard(case: Case) -> bool:
    return (not case.mixed_precision() and not case.model.rank_gates()
            and reference(case).plain)


def kinds() -> st.SearchStrategy[str]:
    """What a load resumes (:func:`reshards`, read when drawn: a family registered after import counts), drawn
    before the case where the case's own draws follow it (:func:`checkpointed_cases`)."""
    return st.sampled_from(reshards())


@st.composite
def resumes(draw, case: Case, world_sizes: tuple[int, ...], kind: str | None = None) -> dict:
    """``world_size``, ``mesh`` and ``plan`` of the resumed case (``{}``: the case's own); ``kind``: what it resumes
    (:func:`reshards`), drawn here where None."""
    kind = (draw(kinds()) if kind is None else kind) if can_reshard(case) else "none"
    if case.system and kind not in ("none", "world_size", case.family):
        kind = "none"  # a named system under test runs its own family's plans
    others = [w for w in world_sizes if w != case.world_size and w > 1]
    if kind == "world_size":
        if len(case.mesh.shape) != 1 or not others:
            return {}
        ws = draw(st.sampled_from(others))
        return {"world_size": ws, "mesh": MeshSpec((ws,), case.mesh.names)}
    if kind == "none":
        return {}
    module, _, function = families.get(kind).resume.partition(":")
    out = draw(getattr(importlib.import_module(module), function)(case, [case.world_size] + others))
    return {**out, "world_size": out["world_size"] if out["world_size"] != case.world_size else 0}


def _rollback_ok(case: Case) -> bool:
    try:
        check_rollback(case)
    except CaseError:
        return False
    return True


@st.composite
def checkpoints(draw, case: Case, world_sizes: tuple[int, ...] = (2, 4), rollback: bool | None = None,
                kind: str | None = None) -> Case:
    """``case`` (trained for at least 2 steps) with a checkpoint event; validated.  ``rollback``: True, a rollback
    where the case can take one (nothing reshards then), False never; None: :data:`ROLLBACK`'s coin.  ``kind``: what
    the load resumes where it can (:func:`resumes`)."""
    least = 3 if rollback else 2  # (a rollback needs a step after the save to roll back from)
    if case.train.steps < least:
        case = dataclasses.replace(case, train=dataclasses.replace(case.train, steps=least))
    if case.train.loss_scale:  # the checkpoint keeps no gradient scaler (validate_checkpoint)
        case = dataclasses.replace(case, train=case.train.unscaled())
    step = draw(st.integers(1, case.train.steps - (2 if rollback else 1)))
    save = draw(st.sampled_from(saves_from(case)))
    # (flattened where it may be: a pipelined system on either side needs it, and the options are drawn below)
    event = Checkpoint(step=step, save=save, flatten_optimizer=save in ("dcp", "full"))
    try:  # a plan its family keeps only without an event (ZeRO's overlap, late group, reload) is not spent here
        dataclasses.replace(case, checkpoint=event, compile=Compile()).validate()
    except CaseError:
        assume(False)
    resume = draw(resumes(case, world_sizes, kind)) if save != "fsdp1_local" and not rollback else {}
    into = dataclasses.replace(event, **resume)
    way = ways_into(dataclasses.replace(case, checkpoint=into).resumed(), ways()[save].format)
    try:  # (its compile is checked apart, below; loaded one of the ways the resumed family reads the format in)
        if way:
            dataclasses.replace(case, checkpoint=dataclasses.replace(into, load="" if save in way else way[0]),
                                compile=Compile()).validate()
            event = into
    except CaseError:
        pass  # refused (or no way reads the format there): the event resumes the same plan (and may roll back)
    resumed = dataclasses.replace(case, checkpoint=event).resumed()
    load = draw(st.sampled_from(ways_into(resumed, ways()[save].format)))
    options = {}
    if save == "dcp":
        options["full_state_dict"] = draw(st.booleans())
    if save in ("dcp", "full", "fsdp1_full"):
        options["cpu_offload"] = draw(st.booleans())
    if save == "fsdp1_full":
        options["rank0_only"] = draw(st.booleans())
    if load == "full" and resumed.family not in ("fsdp1", "fsdp1_tp"):
        options["broadcast_from_rank0"] = draw(st.booleans())
    if {save, load} & {"dcp", "full"}:
        options["separate"] = draw(st.booleans())
    partial = any(families.get(f).partial_state for f in (case.family, resumed.family))
    # a pipelined system's optimizer state is flattened (validate_checkpoint); an option of the dcp and full ways
    options["flatten_optimizer"] = {save, load} <= {"dcp", "full"} and (partial or draw(st.booleans()))
    if partial and options.get("full_state_dict"):  # (only rank 0 would get the state dict: not its stages')
        options["cpu_offload"] = False
    options["strict"] = not draw(st.booleans())
    rollback = draw(ROLLBACK) if rollback is None else rollback  # into the live system, a few steps on: where
    # nothing reshards, steps are left
    event = dataclasses.replace(event, load="" if load == save else load, **options)
    if (rollback and not resharding(dataclasses.replace(case, checkpoint=event)) and step + 1 < case.train.steps
            and reference(case).rolls_back):
        # (where a freeze ends between the save and the rollback torch leaves the load undefined:
        # case.checkpoint.check_rollback; an earlier rollback then)
        valid = [r for r in range(step + 1, case.train.steps)
                 if _rollback_ok(dataclasses.replace(case, checkpoint=dataclasses.replace(event, rollback_at=r)))]
        if valid:
            event = dataclasses.replace(event, rollback_at=draw(st.sampled_from(valid)))
    case = dataclasses.replace(case, checkpoint=event)
    if case.compile.restart:  # the harness restarts a whole run, not a resumed segment (validate_compile)
        case = dataclasses.replace(case, compile=dataclasses.replace(case.compile, restart=False))
    if case.compile.form == "model":  # (its state dict's keys carry a prefix no load takes: validate_compile) a
        family = families.get(case.family)  # compile of blocks instead, where the family compiles them
        forms = [f for f in family.compiles if f != "model"]
        blocked = Compile()
        if forms:
            blocked = draw(blocks(case, draw(st.sampled_from(forms)), family.compile_groups, case.compile.backend))
        case = dataclasses.replace(case, compile=blocked)
    if case.compile:  # compiled as the case was drawn, where the resumed case compiles the same way
        try:
            validate_compile(case)
            case.validate()  # (the resumed case's own compile rules: a pipeline's every rank holds a compiled module)
        except CaseError as e:
            if not e.field.startswith(("compile", "checkpoint.compile")):
                raise
            case = dataclasses.replace(case, compile=Compile())
    return case.validate()


@st.composite
def checkpointed_cases(draw, world_sizes: tuple[int, ...] = DEFAULT_WORLD_SIZES, max_steps: int = 10, max_depth: int = 2,
                       families: tuple[str, ...] | None = None, system: str = "") -> Case:
    """A case of one of ``families`` (default: every family that takes checkpoint events, through
    ``get_state_dict`` or FSDP1's state dicts), with an event.  ``system``: a system under test of the family's own (a plug-in, a test-only fault); its
    cases resume within the family."""
    from parityfuzz.judge.expected import expectation
    from parityfuzz.strategies.cases import cases

    among = families or checkpoint_families()
    # A dimension only a few of the families take (nonroot: two of seven) came up in 2-4% of the target's cases:
    # one case in three favours one of them, drawn first, then a family that takes it and a resume that keeps it,
    # with the dimension switched on in the case's swarm configuration.
    narrow = _narrow(among)
    favour = draw(st.sampled_from((None,) * 2 * len(narrow) + narrow)) if narrow else None
    family = draw(st.sampled_from([f for f in among if favour is None or _takes(f, favour)]))
    # A rollback is decided first, and then drawn with what it needs (a reference that rolls back through its
    # module's state dict: no mixed precision nor autocast), rather than left to the cases that happen to have it.
    rollback = draw(ROLLBACK)
    # What the load resumes is decided first as well: drawn after the case, at the end of a long choice sequence,
    # Hypothesis's first few hundred cases gave the later kinds next to nothing (resumes into pipeline stages: 0 of
    # 300 checkpoint cases, against 29 into FSDP2; the kinds' shares fell with their place in the list).
    kind = draw(kinds().filter(lambda k: _reads(k, family) and (favour is None or
                                                               favour in (_taken_by(k, family) or (favour,)))))
    # A resume into another family's plan is refused where that family does not take a dimension the case drew
    # (the event then resumes the same plan): such a case draws only the dimensions both families take.
    drawn = cases(family=family, world_sizes=world_sizes, max_steps=max_steps, max_depth=max_depth, system=system,
                  within=_taken_by(kind, family), require=(favour,) if favour else ())
    refused = () if system else _refused_leaves(kind, family)
    if refused:  # (the resume's validation would refuse the model: the case would keep its own plan)
        drawn = drawn.filter(lambda c: not any(n.kind in refused for _, n in c.model.body.walk("body")))
    case = draw(drawn.filter(lambda c: reference(c).rolls_back) if rollback else drawn)
    # A case torch refuses (an expected error) trains to no checkpoint, and one with tensors of a value per rank
    # (FSDP1's ignored modules) cannot keep them through any: not spent here.
    assume(expectation(case, "cpu") is None and not reference(case).rank_local)
    return draw(checkpoints(case, world_sizes, rollback, kind))
