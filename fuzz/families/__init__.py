"""System families: one record each, one registry, torch-free.

A family is a way of training in parallel (``fsdp2``, ``fsdp2_tp``, ``fsdp1``, ``fsdp1_tp``, ``zero``,
``composable``, ``pipeline``).  Its folder here holds all of it: its plan type, validation, feature tags,
reference rule and printout, and its :class:`Family` record (``FAMILY`` in the folder's ``__init__``), torch-free,
which names every other layer by module: its strategy, its systems (with their traits as references,
:class:`Registration`), its export writer, its checkpoint ways, the torch modules its test faults may patch, and its
known bugs' preconditions (``known.py``), each in the folder or in a shared part (``parityfuzz.parts``).  Every
registry that maps a family to a layer is derived from these records (:func:`records`): the systems', the
export's, the rank isolation's and the fuzz targets (``fuzz/test_families.py``).

A family is registered as an entry point of the group :data:`ENTRY_POINTS` (``name = "module"``, the module
whose ``FAMILY`` is its record): parityfuzz's own in its ``pyproject.toml``, a package's own in its, so that adding
a family is one folder and one line.  A family that is not installed (a test's) is registered at run time by
:func:`register`.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Callable

#: The entry-point group through which installed packages register families (``name = "module"``).
ENTRY_POINTS = "parityfuzz.families"


def installed() -> dict[str, str]:
    """The families installed packages register, ``{name: module}``, in name order (entry points carry none);
    ``RuntimeError`` where there are none, as when the package was installed before its families were entry
    points."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINTS)}
    if not found:
        raise RuntimeError(f"no parityfuzz families are installed (entry-point group {ENTRY_POINTS!r}): reinstall "
                           "the package (pip install -e .) so that its metadata lists them")
    return dict(sorted(found.items()))


#: Family name -> the module whose ``FAMILY`` is its record: the installed ones, then those registered at run time.
MODULES = installed()

#: Families registered from outside the package (:func:`register`), ``name=module`` joined by commas: an
#: environment variable, so that the ranks (spawned processes) and a pytest subprocess see them too.
ENVIRONMENT = "PARITYFUZZ_FAMILIES"


def _environment() -> dict[str, str]:
    """The families the environment registers, ``{name: module}``."""
    return dict(item.partition("=")[::2] for item in os.environ.get(ENVIRONMENT, "").split(",") if item)


def _set_environment(entries: dict[str, str]) -> None:
    if entries:
        os.environ[ENVIRONMENT] = ",".join(f"{k}={v}" for k, v in entries.items())
    else:
        os.environ.pop(ENVIRONMENT, None)


def load_environment() -> None:
    """Register the families the environment names (:data:`ENVIRONMENT`): at import, and again in a rank forked from
    a process that imported this module before the driver registered them (:mod:`parityfuzz.executor.zygote`)."""
    for name, module in _environment().items():
        MODULES.setdefault(name, module)


load_environment()


def register(name: str, module: str) -> None:
    """Register the family whose record is ``module``'s ``FAMILY`` under ``name``, in this process and in every
    process it starts from now on (ranks spawned later, a pytest subprocess)."""
    if MODULES.get(name, module) != module:
        raise ValueError(f"family {name!r} is already registered as {MODULES[name]}")
    MODULES[name] = module
    _set_environment({**_environment(), name: module})


def unregister(name: str) -> None:
    """Undo :func:`register` (tests)."""
    MODULES.pop(name, None)
    _set_environment({k: v for k, v in _environment().items() if k != name})


@dataclass(frozen=True)
class Registration:
    """A registered system: its class (``"module:Class"``) and what the torch-free side must know of it where it
    is a case's reference (the checkpoint rules read these; a plain string registers a system with none of them).
    """

    target: str
    #: Its parameters are plain full tensors, so it can take a resharding turn through the trusted path (a load
    #: into another world size, mesh or plan).
    plain: bool = False
    #: Its module's state dict holds everything it trains, so it can roll back through it: not the
    #: mixed-precision emulations, whose master weights that state dict does not hold (a live load of it leaves
    #: the masters as trained).
    rolls_back: bool = False
    #: Some of its tensors hold a value per rank by design (FSDP1's ignored modules, neither sharded nor reduced):
    #: a checkpoint keeps one copy of a plain tensor (DCP deduplicates, full state dicts are rank 0's), so no round
    #: trip can keep them.
    rank_local: bool = False


#: The systems no family owns: the generic reference.
GENERIC_SYSTEMS = {"ddp": Registration("parityfuzz.systems.ddp:DDPSystem", plain=True, rolls_back=True)}


def registrations() -> dict[str, Registration]:
    """Every registered system by name: :data:`GENERIC_SYSTEMS` and each family's (a family's plain string is a
    :class:`Registration` without traits)."""
    out = dict(GENERIC_SYSTEMS)
    for family in records():
        out.update({name: entry if isinstance(entry, Registration) else Registration(entry)
                    for name, entry in family.systems.items()})
    return out


def registration(name: str) -> Registration:
    """The registration of the system ``name`` (a generic or family system; a plug-in's or a ``module:attribute``
    one has no traits)."""
    return registrations().get(name) or Registration(name)


@dataclass(frozen=True)
class Family:
    """What the torch-free side knows of a family."""

    name: str
    #: The plan dataclass (a :class:`parityfuzz.case.core.Plan` subclass whose ``family`` is ``name``).
    plan_type: type
    #: The axis sets its meshes may have (names from :data:`parityfuzz.case.mesh.AXES`).
    meshes: tuple[tuple[str, ...], ...]
    #: The registered system (``parityfuzz.systems``) that applies its plan.
    system: str
    #: The module (``strategies/``) whose ``cases`` strategy draws its cases.
    strategy: str
    #: ``reference(case)``: the registered system its cases are compared with.
    reference: Callable
    #: ``validate(case)``: raise ``CaseError`` for a plan that does not fit the case (the generic parts are
    #: checked before).
    validate: Callable
    #: ``features(case)``: the family's own feature tags.
    features: Callable
    #: ``describe(case)``: ``(notes per module path, lines about the plan)`` for the case printout.
    describe: Callable
    #: ``promise(case)``: the dtypes the case promises (:class:`parityfuzz.case.dtypes.Promise`) and ``precision(case)``:
    #: its least precise dtype, where the family's mixed precision is not FSDP2's ``MixedPrecisionPolicy``.
    promise: Callable | None = None
    precision: Callable | None = None
    #: ``expected_error(case, device_type)``: the :class:`parityfuzz.case.ExpectedError` torch raises for this case on
    #: this kind of device (``"cpu"``, ``"cuda"``), or None: documented refusals that depend on the machine.
    expected_error: Callable | None = None
    #: The fuzz target's claim (``fuzz/test_families.py``): what the family's systems must do.
    target: str = ""
    #: The systems the family brings, ``{registered name: "module:Class" or Registration}`` (its system under
    #: test, and the references only it uses, with their traits); the systems registry is the union of these and
    #: :data:`GENERIC_SYSTEMS`.
    systems: dict = field(default_factory=dict)
    #: The module (``fuzz/export/``) that writes out its plan (``refusal(case)``, ``parts(case)``).
    export: str = ""
    #: Torch namespaces, and ``(module, class)`` pairs, whose attributes its systems or its test faults may patch
    #: on a rank: the rank restores them after every case (:mod:`parityfuzz.executor.isolation`).
    patchable: tuple[str, ...] = ()
    patchable_classes: tuple[tuple[str, str], ...] = ()
    #: The validity rules its plans obey (:mod:`parityfuzz.rules`), and the hand-written grids of PyTorch's own
    #: tests about it (:mod:`parityfuzz.case.seedgrids`: how much of each a run covered).
    rules: tuple = ()
    seed_grids: tuple = ()
    #: ``"module:function"``: a strategy ``(case, world sizes)`` drawing ``{world_size, mesh, plan}`` of this family
    #: for a case of any family, which a checkpoint load may resume into (``""``: none is offered).
    resume: str = ""
    #: The ways its systems save and load checkpoints, by name (:class:`parityfuzz.case.checkpoint.Way`).
    checkpoint_ways: dict = field(default_factory=dict)
    #: The model leaves (:class:`parityfuzz.case.model.Node` kinds) no plan of it takes, each with torch's reason:
    #: the generic validation refuses them (:meth:`parityfuzz.case.Case.validate`), its strategy draws none, nor
    #: does a checkpoint strategy for a case of another family that it resumes into this one.
    refused_leaves: dict[str, str] = field(default_factory=dict)
    #: Whether each rank of its system holds a part of the model of its own (pipeline stages), so that its state
    #: dicts hold that part only: the checkpoint strategy draws the options that needs, which ``check_checkpoint``
    #: requires.
    partial_state: bool = False
    #: ``(checkpoint event, the case of this family it saves from or loads into, the field prefix: "" or
    #: "checkpoint.") -> None``: raises :class:`parityfuzz.case.CaseError` where an event its system saves or loads
    #: breaks what the family's state dicts need (its own validity rules); None: nothing beyond the ways'.
    check_checkpoint: Callable | None = None
    #: The ``torch.compile`` forms its system supports (:data:`parityfuzz.case.compiled.FORMS`); none: say why in
    #: ``missing["compiles"]``.
    compiles: tuple[str, ...] = ()
    #: ``(case) -> [[path, ...], ...]``: where a ``blocks_*`` form must compile at least one module of each list (a
    #: pipeline rank's stages: every rank proves it compiled), what its strategy draws from first; None: anywhere.
    compile_groups: Callable | None = None
    #: Whether its system's gradients are all DTensors, so that ``torch.amp.GradScaler`` may scale it as well as
    #: ``ShardedGradScaler`` (``TrainSpec.scaler``): DTensor reduces the inf flags over the mesh itself
    #: (``torch.distributed.tensor._dispatch.found_inf_reduce_handler``).
    amp_scaler: bool = False
    #: The training-loop dimensions (:data:`parityfuzz.case.dimensions.TABLE`) it does not take, each with torch's
    #: reason (or the harness's, said so): the strategies draw every other one (:mod:`parityfuzz.strategies.swarm`)
    #: and a run reports each one's share of the family's cases.
    unsupported: dict = field(default_factory=dict)
    #: Whether its system hands modules views of its own storage as their parameters in the forward (FSDP1's flat
    #: parameter) rather than leaf tensors: autocast caches the casts of leaf tensors only
    #: (:func:`parityfuzz.case.dtypes.check_autocast`).
    view_parameters: bool = False
    #: The layers it does not supply, each with the reason (``{"export": "..."}``): a test checks that every
    #: family supplies every layer or says why not here.
    missing: dict = field(default_factory=dict)


def get(name: str) -> Family:
    """The family registered as ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in MODULES:
        raise KeyError(f"unknown family {name!r} (known: {', '.join(sorted(MODULES))})")
    return importlib.import_module(MODULES[name]).FAMILY


def records() -> list[Family]:
    """Every registered family's record, in registration order."""
    return [get(name) for name in MODULES]


#: The layers a family record names (a test checks each is supplied or said missing).
LAYERS = ("strategy", "systems", "export", "patchable", "known", "checkpoint", "rules", "seed_grids", "compiles")


__all__ = ["ENTRY_POINTS", "ENVIRONMENT", "GENERIC_SYSTEMS", "LAYERS", "MODULES", "Family", "Registration", "get",
           "installed", "load_environment", "records", "register", "registration", "registrations", "unregister"]
