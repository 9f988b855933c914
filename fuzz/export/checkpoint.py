"""A checkpoint event written out (:mod:`parityfuzz.case.checkpoint`): after the event's step the system under test
saves its model, optimizer and LR scheduler the case's way, a fresh system of the same plan loads them, and
training goes on; the reference trains on uninterrupted (the round trip must change nothing).  The save and
load calls and the invariants every save and load must keep (the keys, rank-0-only and offloaded state dicts,
the loaded state bit for bit the saved one) are the harness's own functions (:mod:`parityfuzz.checkpoint`), copied
by source, so the script does what the fuzzer does.

A load into another plan, mesh, family or world size is refused: its reference takes the same turn through
another path, and a resume at another world size needs a second torchrun job.
"""

from __future__ import annotations

import inspect

from parityfuzz.case import Case
from parityfuzz.case.checkpoint import OPTIONS, reshard_kind
from parityfuzz.checkpoint import dcp, fsdp1, invariants, trusted

IMPORTS = ("import shutil\nimport tempfile\nfrom types import SimpleNamespace\n\n"
           "import torch.distributed.checkpoint as dcp\n"
           "from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,\n"
           "    get_optimizer_state_dict, get_state_dict, set_model_state_dict, set_optimizer_state_dict,\n"
           "    set_state_dict)\n")
FSDP1_IMPORTS = ("from torch.distributed.fsdp import (FullOptimStateDictConfig, FullStateDictConfig,\n"
                 "    FullyShardedDataParallel as FSDP, ShardedOptimStateDictConfig, ShardedStateDictConfig,\n"
                 "    StateDictType)\n")

#: Way -> the harness module holding its ``save_<way>``/``load_<way>`` and the helpers they call.
WAYS = {"dcp": (dcp, (dcp._get, dcp._set, dcp._describe)), "full": (dcp, (dcp._get, dcp._set, dcp._describe)),
        "fsdp1_full": (fsdp1, ()), "fsdp1_sharded": (fsdp1, ()), "fsdp1_local": (fsdp1, (fsdp1._local_file,))}

#: The invariants' functions the ways and the turn call (``expected_keys`` is the script's own: its model).
INVARIANTS = (invariants.report, invariants.take, invariants._rank, invariants.check_keys,
              invariants.check_rank0_only, invariants.check_on_cpu, invariants._tensors, invariants.check_saved,
              invariants.snapshot, invariants._plain, invariants.save_snapshot, invariants.check_snapshot,
              invariants._difference, invariants._value, trusted._barrier, trusted.save_scheduler,
              trusted.load_scheduler)


def refusal(case: Case) -> str | None:
    if case.checkpoint.rollback_at:
        return ("a rollback into the live system (the reference rolls back too, through its trusted path), which the "
                "export does not write out yet")
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
    return f"CHECKPOINT_STEP = {c.step}  # save after this many steps (0: no checkpoint event)\n" if c else \
        "CHECKPOINT_STEP = 0  # no checkpoint event\n"


TURN = '''
class System:
    """What the harness's checkpoint functions take: the system under test's model, optimizer and scheduler."""

    def __init__(self, model, optim, scheduler):
        self.model, self.optim, self.scheduler = model, optim, scheduler


def expected_keys(case):
    """The model state dict's keys: those of the model built plainly (no parallel API)."""
    return set(build_model(0).state_dict())


def checkpoint_directory():
    """A directory every rank sees: $CHECKPOINT_DIR (several nodes: a shared filesystem), else rank 0's temporary
    one."""
    where = [os.environ.get("CHECKPOINT_DIR") or (tempfile.mkdtemp(prefix="parityfuzz-ckpt-")
                                                  if dist.get_rank() == 0 else None)]
    dist.broadcast_object_list(where, src=0)
    os.makedirs(where[0], exist_ok=True)
    return where[0]


def checkpoint_turn(role, dp, device, mesh, model, inner, optim, scheduler, passes, named):
    """The checkpoint event after step CHECKPOINT_STEP - 1: the system under test saves the case's way (what the
    save broke is the last pass's), a fresh system of the same plan loads (what the load broke, and its
    parameters as loaded, are the next pass's); the reference trains on uninterrupted.  Returns the system to
    train on."""
    loaded = {"at": (CHECKPOINT_STEP, "loaded"), "loss": None, "grad": {},
              "local": {}}
    if role != "system":  # no checkpoint keeps gradients: the resumed system starts without them, and so does this
        optim.zero_grad(set_to_none=True)
        loaded["param"] = {name: whole(p) for name, p in named()}
    else:
        directory = checkpoint_directory()
        take()
        saving = System(model, optim, scheduler)
        save_snapshot(saving, directory)
        SAVE(saving, CASE, directory)
        save_scheduler(saving, directory)
        passes[-1]["violations"] = take()
        del saving, model, optim, scheduler
        model, inner, optim, scheduler = build(role, dp, device, mesh, step=CHECKPOINT_STEP)
        loading = System(model, optim, scheduler)
        LOAD(loading, CASE, directory)
        load_scheduler(loading, directory)
        check_snapshot(loading, directory)
        loaded["violations"] = take()
        dist.barrier()
        if dist.get_rank() == 0 and not os.environ.get("CHECKPOINT_DIR"):
            shutil.rmtree(directory, ignore_errors=True)
        loaded["param"] = parameters(model, [(case_name(n), p) for n, p in inner.named_parameters()])
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
             f"CASE = SimpleNamespace(checkpoint=SimpleNamespace(**{options!r}))  # what the functions read",
             f'FULL_FILE = "{dcp.FULL_FILE}"']
    functions, seen = [], set()
    for way, verb in ((c.save, "save"), (c.load_way, "load")):
        module, helpers = WAYS[way]
        for f in (*helpers, getattr(module, f"{verb}_{way}")):
            if f not in seen:
                seen.add(f)
                functions.append(f)
    body = ["_VIOLATIONS = []", *(inspect.getsource(f) for f in INVARIANTS), *(inspect.getsource(f) for f in functions),
            f"SAVE, LOAD = save_{c.save}, load_{c.load_way}", TURN]
    return "\n".join(lines) + "\n\n\n" + "\n\n".join(b.strip("\n") + "\n" for b in body)
