"""A checkpoint event: the system under test saves its model and optimizer after ``step`` steps, a fresh system
(the same family and plan, or another plan, mesh, family or world size) loads them, and training goes on to
the end; the whole run is compared with the reference.

Ways to save and load (:func:`ways`, from the family records), each a public torch API:

- ``dcp``: ``torch.distributed.checkpoint.state_dict.get_state_dict`` (model and optimizer, sharded unless
  ``full_state_dict``) and ``dcp.save``; loaded by ``dcp.load`` into the fresh system's own state dict and
  ``set_state_dict``;
- ``full``: ``get_state_dict(full_state_dict=True)``, ``torch.save`` on rank 0 (every rank holds the full dict
  unless ``cpu_offload``, which leaves the others empty); loaded by ``torch.load`` on every rank, or on rank 0
  alone with ``broadcast_from_rank0``, and ``set_state_dict(full_state_dict=True)``;
- ``fsdp1_full``, ``fsdp1_sharded``, ``fsdp1_local``: FSDP1's ``state_dict_type`` FULL (``rank0_only``,
  ``offload_to_cpu``; ``torch.save``/``torch.load``), SHARDED (through DCP) and LOCAL (a file per rank), with
  ``FSDP.optim_state_dict`` / ``FSDP.optim_state_dict_to_load`` (LOCAL: the optimizer's own state dict);
- ``zero``: ``ZeroRedundancyOptimizer.consolidate_state_dict(to=0)`` and ``state_dict()`` on rank 0 with the DDP
  module's state dict, ``torch.save``/``torch.load``, ZeRO's ``load_state_dict`` (its own format, parameters by
  index: it loads into ZeRO only).

A save and a load way of one *format* fit together: a checkpoint FSDP1 saved SHARDED loads through DCP into
FSDP2, a FULL one through ``set_state_dict``.

Which reference the run is compared with: where the load resumes the same world size, mesh and plan, the
reference trains uninterrupted (the strictest oracle: the round trip must change nothing).  Where it reshards,
the reference takes the same turn through a trusted path (its full plain tensors, ``torch.save`` and
``torch.load``, bit for bit) into the reference of the resumed case, which needs a reference holding plain
tensors (not the tensor-parallel mixed-precision one) and a model without per-rank control flow (the ranks'
data-parallel places change).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parityfuzz.case.errors import CaseError, check
from parityfuzz.case.mesh import MeshSpec
from parityfuzz.case.plan import Plan

if TYPE_CHECKING:
    from parityfuzz.case.core import Case

@dataclass(frozen=True)
class Way:
    """A way to save and load: the ``format`` it writes and reads, and the ``module`` holding its ``save_<name>`` and
    ``load_<name>`` (with, for the exported script, ``SCRIPT_HELPERS``: way -> the functions they call, and
    ``SCRIPT_CONSTANTS``: the names of the module constants they read).  A family's record lists its ways
    (:attr:`parityfuzz.families.Family.checkpoint_ways`); a part or the family itself holds their code."""

    format: str
    module: str


#: The ways of torch's state-dict APIs, which any family whose state those APIs take may list.
STATE_DICT_WAYS = {"dcp": Way("dcp", "parityfuzz.checkpoint.dcp"), "full": Way("file", "parityfuzz.checkpoint.dcp")}


def ways() -> dict[str, Way]:
    """Every way some family saves or loads, by name."""
    from parityfuzz import families

    return {name: way for f in families.records() for name, way in f.checkpoint_ways.items()}


def way_families(way: str) -> tuple[str, ...]:
    """The families that can save or load ``way``."""
    from parityfuzz import families

    return tuple(f.name for f in families.records() if way in f.checkpoint_ways)


def checkpoint_families() -> tuple[str, ...]:
    """The families whose cases take checkpoint events (their state is what the state-dict APIs take)."""
    from parityfuzz import families

    return tuple(f.name for f in families.records() if f.checkpoint_ways)


def fsdp1_families() -> tuple[str, ...]:
    """The families built on FSDP1 (those that save FSDP1's own state dicts)."""
    return way_families("fsdp1_full")

#: The boolean options that are off by default.
OPTIONS = ("full_state_dict", "cpu_offload", "rank0_only", "broadcast_from_rank0", "separate", "flatten_optimizer")


@dataclass(frozen=True)
class Checkpoint:
    """Save after ``step`` steps (0: no event) with ``save``, load with ``load`` (``""``: the same way) into a
    fresh system of the resumed case: ``world_size``, ``mesh`` and ``plan`` where given, else the case's own.

    Options, where the ways take them: ``full_state_dict`` (``dcp`` save), ``cpu_offload`` (``StateDictOptions``;
    FSDP1 FULL's ``offload_to_cpu``), ``rank0_only`` (FSDP1 FULL), ``broadcast_from_rank0`` (``full`` load),
    ``strict`` (the load's), ``separate`` (``dcp`` and ``full``: the model's and the optimizer's state dicts
    through ``get/set_model_state_dict`` and ``get/set_optimizer_state_dict``, model first, as torchtitan and
    torchtune take them, instead of ``get/set_state_dict``), ``flatten_optimizer`` (``dcp`` and ``full``, save and load:
    ``StateDictOptions.flatten_optimizer_state_dict``, which torch gives "to support optimizer resharding for MPMD,
    e.g., pipeline parallelism": needed where a pipelined system saves or loads).

    ``rollback_at``: instead of loading into a fresh system right after the save, the live system trains on to
    this step and then loads the checkpoint into its own model, optimizer and scheduler, as a job rolls back after
    a loss spike (0: a fresh system loads at ``step``).  The reference rolls back the same way through its trusted
    path; both go on training from ``rollback_at`` with the state of ``step``.
    """

    step: int = 0
    save: str = "dcp"
    load: str = ""
    full_state_dict: bool = False
    cpu_offload: bool = False
    rank0_only: bool = False
    broadcast_from_rank0: bool = False
    strict: bool = True
    separate: bool = False
    flatten_optimizer: bool = False
    rollback_at: int = 0
    world_size: int = 0
    mesh: MeshSpec | None = None
    plan: Plan | None = None

    def __bool__(self) -> bool:
        return self.step > 0

    @property
    def load_way(self) -> str:
        return self.load or self.save


def reference(case: Case):
    """The registration of ``case``'s reference (:class:`parityfuzz.families.Registration`): its traits."""
    from parityfuzz import families

    return families.registration(case.reference_name())


def saves_from(case: Case) -> list[str]:
    """The ways ``case``'s system can save (and load, into the same plan)."""
    local = not getattr(case.plan, "use_orig_params", False)
    return [w for w in ways() if case.family in way_families(w) and (w != "fsdp1_local" or local)]


def resumed(case: Case) -> Case:
    """The case the load resumes: the checkpoint's world size, mesh and plan where it gives them."""
    c = case.checkpoint
    return dataclasses.replace(case, world_size=c.world_size or case.world_size, mesh=c.mesh or case.mesh,
                               plan=c.plan or case.plan)


def reshards(case: Case) -> bool:
    """Whether the resumed case differs from the case (another world size, mesh or plan)."""
    r = resumed(case)
    return (r.world_size, r.mesh, r.plan) != (case.world_size, case.mesh, case.plan)


def validate_checkpoint(case: Case) -> None:
    """Check the checkpoint event against the case (the resumed case is validated by its family)."""
    from parityfuzz import families
    from parityfuzz.case.mesh import validate_mesh

    c = case.checkpoint
    if not c:
        check(c == Checkpoint(), "checkpoint.step", "0 means no checkpoint event: give a step in [1, steps) "
              "or leave the other checkpoint fields out")
        return
    check(1 <= c.step < case.train.steps, "checkpoint.step",
          f"must be in [1, steps={case.train.steps}): save after some step, train on after the load")
    check(c.rollback_at == 0 or c.step < c.rollback_at < case.train.steps, "checkpoint.rollback_at",
          f"must be 0, or a step in (step={c.step}, steps={case.train.steps}): train on, roll back, train on")
    check(not case.expect_error, "checkpoint", "a case torch must refuse does not train to a checkpoint")
    check(not case.train.loss_scale, "checkpoint", "not with loss scaling: the checkpoint keeps no gradient scaler "
          "(its scale after a skipped step), so a loaded system would scale otherwise than the uninterrupted one")
    check(not reference(case).rank_local, "checkpoint",
          "this case holds tensors with a value per rank (FSDP1's ignored modules): a checkpoint keeps one copy")
    for key, way in (("save", c.save), ("load", c.load_way)):
        check(way in ways(), f"checkpoint.{key}", f"must be one of {sorted(ways())}, got {way!r}")
    r = resumed(case)
    check(case.family in way_families(c.save), "checkpoint.save",
          f"{c.save!r} saves only from the families {list(way_families(c.save))}, not {case.family!r}")
    formats = {name: way.format for name, way in ways().items()}
    check(formats[c.load_way] == formats[c.save], "checkpoint.load",
          f"{c.load_way!r} reads the {formats[c.load_way]} format, {c.save!r} writes the {formats[c.save]} one")
    check(c.world_size >= 0, "checkpoint.world_size", f"must be >= 1 (0: the case's), got {c.world_size}")
    if c.mesh is None:
        check(r.mesh.size == r.world_size, "checkpoint.mesh", f"world size {r.world_size} needs its own mesh")
    try:
        validate_mesh(r.mesh, r.world_size, families.get(r.family).meshes)
    except CaseError as e:
        raise CaseError(f"checkpoint.{e.field}", f"(in the resumed case) {e.message}") from None
    check(not case.system or r.family == case.family, "checkpoint.plan",
          f"the named system under test {case.system!r} runs {case.family!r} plans only")
    check(r.family in way_families(c.load_way), "checkpoint.load",
          f"{c.load_way!r} loads only into the families {list(way_families(c.load_way))}, not {r.family!r}")
    if c.save == "fsdp1_local":
        check(not reshards(case), "checkpoint.save",
              "a LOCAL state dict holds this plan's own flat shards: it loads only into the same plan and mesh")
        check(not getattr(case.plan, "use_orig_params", False), "checkpoint.save",
              "FSDP1 saves LOCAL state dicts of flat parameters only (use_orig_params=False)")
    check(not c.full_state_dict or c.save == "dcp", "checkpoint.full_state_dict",
          "an option of the 'dcp' save (the 'full' way always saves full state dicts)")
    check(not c.cpu_offload or c.save in ("dcp", "full", "fsdp1_full"), "checkpoint.cpu_offload",
          f"{c.save!r} takes no offload option")
    check(not c.rank0_only or c.save == "fsdp1_full", "checkpoint.rank0_only", "an option of 'fsdp1_full'")
    check(not c.separate or {c.save, c.load_way} & {"dcp", "full"}, "checkpoint.separate",
          "an option of the 'dcp' and 'full' ways")
    check(not c.flatten_optimizer or {c.save, c.load_way} <= {"dcp", "full"}, "checkpoint.flatten_optimizer",
          "an option of get_state_dict and set_state_dict: the 'dcp' and 'full' ways, on both sides")
    if families.get(case.family).check_checkpoint is not None:  # what a family's own state dicts need
        families.get(case.family).check_checkpoint(c, case, "")
    check(not c.broadcast_from_rank0 or c.load_way == "full", "checkpoint.broadcast_from_rank0",
          "an option of the 'full' load")
    check(not c.broadcast_from_rank0 or r.family not in fsdp1_families(), "checkpoint.broadcast_from_rank0",
          "documented for DTensor state only, not FSDP1's ShardedTensor")
    try:
        families.get(r.family).validate(r)
    except CaseError as e:
        raise CaseError(f"checkpoint.{e.field}", f"(in the resumed case) {e.message}") from None
    if families.get(r.family).check_checkpoint is not None:  # (once the resumed plan is known valid)
        families.get(r.family).check_checkpoint(c, r, "checkpoint.")
    if c.rollback_at:
        check(not reshards(case), "checkpoint.rollback_at",
              "a rollback loads into the live system: the same world size, mesh and plan")
        check(reference(case).rolls_back, "checkpoint.rollback_at",
              f"the reference rolls back through its module's state dict; {case.reference_name()!r} trains tensors "
              "that one does not hold (sharded ones, or an emulation's master weights)")
        check_rollback(case)
    if reshards(case):
        for which, c_ in (("the case", case), ("the resumed case", r)):
            check(reference(c_).plain, "checkpoint.plan",
                  f"resharding takes the reference through its plain full tensors; {which}'s reference "
                  f"{c_.reference_name()!r} holds sharded ones")
        check(not case.model.rank_gates() or (r.world_size, r.mesh) == (case.world_size, case.mesh),
              "checkpoint.mesh", "a model with per-rank control flow keeps its mesh (the ranks' places change)")


def stateless_at_the_save(case: Case) -> tuple[str, ...]:
    """The frozen paths whose parameters have no optimizer state at the save and some by the rollback: frozen
    during the steps before ``until``, so through the save (after step ``step - 1``) where ``until >= step``, and
    trained at a live step before ``rollback_at`` where ``until < rollback_at`` (none without a rollback)."""
    c = case.checkpoint
    return tuple(f.path for f in case.train.frozen if c.step <= f.until < c.rollback_at)


def check_rollback(case: Case) -> None:
    """A rollback (a load into the live, already stepped optimizer) through ``set_optimizer_state_dict`` never meets a
    parameter with optimizer state in the live optimizer and none in the checkpoint (frozen through the save, trained
    after it): torch documents neither replacing nor keeping that state.  ``set_optimizer_state_dict``: 'Load the
    optimizers state_dict. The counterpart of ``get_optimizer_state_dict``' (nothing on state the loaded dict lacks);
    ``StateDictOptions``: '``strict``: the ``strict`` option when ``set_state_dict`` calls model.load_state_dict()'
    (the model's only).  In 2.13 the full-state-dict load keeps the live entries (``_load_optim_state_dict`` merges),
    the sharded load replaces them, and ``strict=True`` raises 'Missing optimizer state for parameter'."""
    c, t = case.checkpoint, case.train
    late = stateless_at_the_save(case)
    check(not (c.rollback_at and t.keeps_optimizer_state() and late and c.load_way in ("full", "dcp")),
          "checkpoint.rollback_at",
          f"{', '.join(late)} is frozen at the save (step {c.step}) and trained before the rollback at step "
          f"{c.rollback_at}, with a {t.optimizer} optimizer that keeps state: torch documents neither replacing nor "
          "keeping live optimizer state the loaded state dict lacks (set_optimizer_state_dict, StateDictOptions)")


def reshard_kind(case: Case) -> str:
    """How the load reshards: ``""`` (not at all), ``world_size`` (the same plan on another world size),
    ``mesh`` (another mesh, same family), ``plan`` (another plan of the same family and mesh), or
    ``<family>-><family>``."""
    r = resumed(case)
    if not reshards(case):
        return ""
    if r.family != case.family:
        return f"{case.family}->{r.family}"
    if r.plan == case.plan:
        return "world_size" if r.world_size != case.world_size else "mesh"
    return "plan"


def checkpoint_features(case: Case) -> set[str]:
    """Feature tags of the checkpoint event (none without one)."""
    c = case.checkpoint
    if not c:
        return set()
    r = resumed(case)
    tags = {f"ckpt_save={c.save}", f"ckpt_load={c.load_way}"}
    tags.update(f"ckpt_{k}" for k in OPTIONS if getattr(c, k))
    if not c.strict:
        tags.add("ckpt_non_strict")
    kind = reshard_kind(case)
    if kind:
        tags.add(f"ckpt_reshard={kind}")
    if r.world_size != case.world_size:
        tags.add(f"ckpt_ws={case.world_size}->{r.world_size}")
    if r.mesh.names != case.mesh.names:
        tags.add(f"ckpt_mesh={','.join(case.mesh.names)}->{','.join(r.mesh.names)}")
    return tags


def describe_checkpoint(case: Case) -> list[str]:
    """Lines of the case printout about the checkpoint event."""
    c = case.checkpoint
    if not c:
        return []
    options = [f"{k}=True" for k in OPTIONS if getattr(c, k)] + ([] if c.strict else ["strict=False"])
    lines = [f"checkpoint after step {c.step - 1}: saved the {c.save!r} way, loaded the {c.load_way!r} way"
             + (f" ({', '.join(options)})" if options else "") + " into a fresh system"]
    if reshards(case):
        r = resumed(case)
        lines.append(f"  resumed as: {r.family} family, world size {r.world_size}, mesh {r.mesh.label()}, "
                     f"plan {_plan_json(r.plan)}")
    return lines


def _plan_json(plan) -> str:
    import json

    from parityfuzz.case.codec import to_jsonable

    return json.dumps(to_jsonable(plan), sort_keys=True)
