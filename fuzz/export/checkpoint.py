"""A checkpoint event written out (:mod:`parityfuzz.case.checkpoint`): after the event's step the system under test
saves its model, optimizer and LR scheduler the case's way, a fresh system of the same plan loads them, and
training goes on; the reference trains on uninterrupted (the round trip must change nothing).  The save and
load calls and the invariants every save and load must keep (the keys, rank-0-only and offloaded state dicts,
the loaded state bit for bit the saved one) are the harness's own functions (:mod:`parityfuzz.checkpoint`), copied
by source, so the script does what the fuzzer does.  A rollback (``rollback_at``) loads into the live system
instead, a few steps after the save, and the reference rolls back too, through the harness's trusted path
(:mod:`parityfuzz.checkpoint.trusted`, copied).

A load into another plan, mesh, family or world size is refused: its reference takes the same turn through
another path, and a resume at another world size needs a second torchrun job.  So is a rollback under mixed
precision (the reference's trusted turn goes through its emulation's master weights).
"""

from __future__ import annotations

import importlib
import inspect

from parityfuzz.case import Case
from parityfuzz.case.checkpoint import OPTIONS, reshard_kind, ways
from parityfuzz.checkpoint import invariants, state_of, trusted

IMPORTS = ("import shutil\nimport tempfile\nfrom types import SimpleNamespace\n\n"
           "import torch.distributed.checkpoint as dcp\n"
           "from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,\n"
           "    get_optimizer_state_dict, get_state_dict, set_model_state_dict, set_optimizer_state_dict,\n"
           "    set_state_dict)\n")
FSDP1_IMPORTS = ("from torch.distributed.fsdp import (FullOptimStateDictConfig, FullStateDictConfig,\n"
                 "    FullyShardedDataParallel as FSDP, ShardedOptimStateDictConfig, ShardedStateDictConfig,\n"
                 "    StateDictType)\n")

#: The invariants' functions the ways and the turn call (``expected_keys`` is the script's own: its model).
INVARIANTS = (invariants.report, invariants.take, invariants._rank, invariants.optimizer_names, invariants.check_keys,
              invariants.check_rank0_only, invariants.check_on_cpu, invariants._tensors, invariants.check_saved,
              invariants.full_state, invariants.snapshot, invariants._plain, invariants.save_snapshot,
              invariants.saved_snapshot, invariants.snapshot_owner, invariants.cast_on_load, invariants.check_snapshot,
              invariants._difference, invariants._value, trusted._barrier, trusted.save_scheduler,
              trusted.load_scheduler)


def refusal(case: Case) -> str | None:
    if case.checkpoint.rollback_at and case.mixed_precision():
        return ("a rollback with a mixed-precision reference (its trusted turn goes through the emulation's master "
                "weights), which the export does not write out yet")
    if case.checkpoint and reshard_kind(case):
        return (f"a checkpoint loaded into another {reshard_kind(case).replace('_', ' ')} (its reference takes the "
                "turn too; another world size needs a second torchrun job), which the export does not write out yet")
    return None


def imports(case: Case) -> str:
    if not case.checkpoint:
        return ""
    ways = {case.checkpoint.save, case.checkpoint.load_way}
    return IMPORTS + (FSDP1_IMPORTS if ways & {"fsdp1_full", "fsdp1_sharded", "fsdp1_local"} else "")


def constants(case: Case) -> str:
    c = case.checkpoint
    if not c:
        return "CHECKPOINT_STEP = ROLLBACK_AT = 0  # no checkpoint event\n"
    return (f"CHECKPOINT_STEP = {c.step}  # save after this many steps (0: no checkpoint event)\n"
            f"ROLLBACK_AT = {c.rollback_at}  # load into the live systems after this many (0: a fresh one loads)\n")


TURN = '''
class System:
    """What the harness's checkpoint functions take: a system's model, optimizer and scheduler (and for the
    reference's trusted turn its plain module and device)."""

    def __init__(self, model, optim, scheduler, inner=None, device=None):
        self.model, self.optim, self.scheduler, self._inner = model, optim, scheduler, inner
        self.ctx = SimpleNamespace(device=device)

    def inner(self):
        return self._inner

    def state_module(self):
        """The module a checkpoint takes: the model, or a pipelined model's stages as one (Pipelined.state_module)."""
        return self.model.state_module() if hasattr(self.model, "state_module") else self.model

    def holds(self, name):
        """Whether this rank holds ``name``: every rank the whole model, a pipeline rank its stages'."""
        return self.model.holds(name) if hasattr(self.model, "holds") else True


def expected_keys(case):
    """The model state dict's keys: those of the model built plainly (no parallel API)."""
    return set(build_model(0).state_dict())


def checkpoint_directory(role):
    """A directory of its own for ``role``'s checkpoint that every rank sees: under $CHECKPOINT_DIR (several nodes:
    a shared filesystem), else under rank 0's temporary one."""
    where = [os.environ.get("CHECKPOINT_DIR") or (tempfile.mkdtemp(prefix="parityfuzz-ckpt-")
                                                  if dist.get_rank() == 0 else None)]
    dist.broadcast_object_list(where, src=0)
    os.makedirs(os.path.join(where[0], role), exist_ok=True)
    return os.path.join(where[0], role)


SAVED = {}  # role -> the directory a rollback's save left, until its load


def save_turn(role, holder, passes):
    """The save after step CHECKPOINT_STEP - 1 into a new directory, returned: the system under test's the case's
    way (what it broke is the last pass's), a rolled-back reference's through its trusted path."""
    directory = checkpoint_directory(role)
    take()
    with discarded_on_error(directory):
        if role == "system":
            save_snapshot(holder, directory, SAVE_STATE)
            SAVE(holder, CASE, directory)
            save_scheduler(holder, directory)
            passes[-1]["violations"] = take()
        else:
            trusted_save(holder, directory)
    return directory


@contextlib.contextmanager
def discarded_on_error(directory):
    """The checkpoint's temporary directory removed where a save or load raises (a torch bug's case), as the
    normal end of load_turn removes it; $CHECKPOINT_DIR's is kept."""
    try:
        yield
    except BaseException:
        if not os.environ.get("CHECKPOINT_DIR"):
            shutil.rmtree(os.path.dirname(directory), ignore_errors=True)
        raise


def load_turn(role, holder, directory, loaded):
    """What save_turn left in ``directory`` loaded into ``holder`` (what the system under test's load broke is
    ``loaded``'s); the directory removed unless it is $CHECKPOINT_DIR's."""
    take()
    with discarded_on_error(directory):
        if role == "system":
            LOAD(holder, CASE, directory)
            load_scheduler(holder, directory)
            check_snapshot(holder, directory, LOAD_STATE)
            loaded["violations"] = take()
        else:
            trusted_load(holder, directory)
    dist.barrier()
    if dist.get_rank() == 0 and not os.environ.get("CHECKPOINT_DIR"):
        shutil.rmtree(os.path.dirname(directory), ignore_errors=True)


def checkpoint_turn(at, role, dp, device, mesh, model, inner, optim, scheduler, passes, named):
    """The checkpoint event after step ``at`` - 1.  Without ROLLBACK_AT: at CHECKPOINT_STEP the system under test
    saves the case's way, a fresh system of the same plan loads (what the load broke, and its parameters as
    loaded, are the next pass's), and the reference trains on uninterrupted.  With it, a rollback: at
    CHECKPOINT_STEP both save (the reference its plain state dicts), train on, and at ROLLBACK_AT load into
    themselves, as the harness does (System.before_live_load: FSDP2 modules resharded, gradients dropped).
    Returns the system to train on."""
    if ROLLBACK_AT and at == CHECKPOINT_STEP:
        SAVED[role] = save_turn(role, System(model, optim, scheduler, inner, device), passes)
        return model, inner, optim, scheduler
    loaded = {"at": (at, "loaded"), "loss": None, "grad": {}, "local": {}}
    if role != "system" and not ROLLBACK_AT:  # no checkpoint keeps gradients: the resumed system starts without them
        optim.zero_grad(set_to_none=True)
    elif ROLLBACK_AT:
        if role == "system":
            reshard(model)
        optim.zero_grad(set_to_none=True)
        load_turn(role, System(model, optim, scheduler, inner, device), SAVED.pop(role), loaded)
    else:
        directory = save_turn(role, System(model, optim, scheduler), passes)
        del model, optim, scheduler
        model, inner, optim, scheduler = build(role, dp, device, mesh, step=CHECKPOINT_STEP)
        load_turn(role, System(model, optim, scheduler), directory, loaded)
    loaded["param"] = (parameters(model, [(case_name(n), p) for n, p in inner.named_parameters()])
                       if role == "system" else {name: whole(p) for name, p in named()})
    loaded["param"].update({"buffer:" + case_name(n): whole(b) for n, b in inner.named_buffers()})
    passes.append(loaded)
    return model, inner, optim, scheduler
'''


def source(case: Case) -> str:
    """The checkpoint section of the script: the event's options, the harness's save and load functions for its
    ways and the invariants, and the turn itself."""
    c = case.checkpoint
    if not c:
        return ""
    options = {k: getattr(c, k) for k in (*OPTIONS, "strict")}
    lines = ["# ---- the checkpoint event: the harness's save, load and invariants (parityfuzz.checkpoint), copied",
             f"CASE = SimpleNamespace(checkpoint=SimpleNamespace(**{options!r}))  # what the functions read"]
    functions, constants = [], {}
    for way, verb in ((c.save, "save"), (c.load_way, "load")):
        module = importlib.import_module(ways()[way].module)  # its helpers, constants and functions, copied
        constants.update({name: getattr(module, name) for name in getattr(module, "SCRIPT_CONSTANTS", ())})
        for f in (*(getattr(module, h) for h in getattr(module, "SCRIPT_HELPERS", {}).get(way, ())),
                  getattr(module, f"{verb}_{way}"), state_of(way)):
            if f not in functions and f is not invariants.full_state:
                functions.append(f)
    lines += [f"{name} = {value!r}" for name, value in constants.items()]
    trusted_turn = [inspect.getsource(f).replace(f"def {f.__name__}(", f"def trusted_{f.__name__}(", 1)
                    for f in (trusted.save, trusted.load)] if c.rollback_at else []
    body = ["_VIOLATIONS = []", *(inspect.getsource(f) for f in INVARIANTS), *(inspect.getsource(f) for f in functions),
            *trusted_turn, f"SAVE, LOAD = save_{c.save}, load_{c.load_way}",
            f"SAVE_STATE, LOAD_STATE = {state_of(c.save).__name__}, {state_of(c.load_way).__name__}", TURN]
    return "\n".join(lines) + "\n\n\n" + "\n\n".join(b.strip("\n") + "\n" for b in body)
