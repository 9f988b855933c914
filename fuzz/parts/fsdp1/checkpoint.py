"""FSDP1's own ways (``FullyShardedDataParallel.state_dict_type``), model and optimizer alike:

- ``fsdp1_full``: FULL_STATE_DICT (``FullStateDictConfig(offload_to_cpu, rank0_only)``) and
  ``FSDP.optim_state_dict``, written by rank 0 with ``torch.save``; loaded by every rank with ``torch.load``,
  ``load_state_dict`` and ``FSDP.optim_state_dict_to_load``;
- ``fsdp1_sharded``: SHARDED_STATE_DICT through ``dcp.save``; loaded by ``dcp.load`` into the fresh model's
  sharded state dict and, for the optimizer, ``load_sharded_optimizer_state_dict`` and
  ``FSDP.optim_state_dict_to_load`` (the recipe of FSDP1's documentation);
- ``fsdp1_local``: LOCAL_STATE_DICT (each rank's flat shards) and the optimizer's own state dict, a file per
  rank; loads only into the same plan and mesh.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardedOptimStateDictConfig, ShardedStateDictConfig, StateDictType

from parityfuzz.checkpoint.dcp import FULL_FILE
from parityfuzz.checkpoint.invariants import check_saved


def save_fsdp1_full(system, case, directory: str) -> None:
    c = case.checkpoint
    with FSDP.state_dict_type(system.model, StateDictType.FULL_STATE_DICT,
                              FullStateDictConfig(offload_to_cpu=c.cpu_offload, rank0_only=c.rank0_only),
                              FullOptimStateDictConfig(offload_to_cpu=c.cpu_offload, rank0_only=c.rank0_only)):
        model_sd = system.model.state_dict()
        optim_sd = FSDP.optim_state_dict(system.model, system.optim)
    where = f"FULL_STATE_DICT(offload_to_cpu={c.cpu_offload}, rank0_only={c.rank0_only})"
    holds = check_saved(system, case, model_sd, optim_sd, where, rank0_only=c.rank0_only, offloaded=c.cpu_offload)
    if dist.get_rank() == 0 and holds:
        torch.save({"model": model_sd, "optim": optim_sd}, os.path.join(directory, FULL_FILE))
    dist.barrier()


def load_fsdp1_full(system, case, directory: str) -> None:
    state = torch.load(os.path.join(directory, FULL_FILE), map_location="cpu", weights_only=False)
    with FSDP.state_dict_type(system.model, StateDictType.FULL_STATE_DICT):
        system.model.load_state_dict(state["model"], strict=case.checkpoint.strict)
        optim_sd = FSDP.optim_state_dict_to_load(system.model, system.optim, state["optim"])
    system.optim.load_state_dict(optim_sd)


def save_fsdp1_sharded(system, case, directory: str) -> None:
    with FSDP.state_dict_type(system.model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(),
                              ShardedOptimStateDictConfig()):
        model_sd = system.model.state_dict()
        optim_sd = FSDP.optim_state_dict(system.model, system.optim)
    check_saved(system, case, model_sd, optim_sd, "SHARDED_STATE_DICT", rank0_only=False, offloaded=False)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=os.path.join(directory, "dcp"))


def load_fsdp1_sharded(system, case, directory: str) -> None:
    from torch.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict

    path = os.path.join(directory, "dcp")
    with FSDP.state_dict_type(system.model, StateDictType.SHARDED_STATE_DICT):
        model_sd = system.model.state_dict()
        state = {"model": model_sd}
        dcp.load(state, checkpoint_id=path)
        system.model.load_state_dict(state["model"], strict=case.checkpoint.strict)
        optim = load_sharded_optimizer_state_dict(model_state_dict=state["model"], optimizer_key="optim",
                                                  storage_reader=dcp.FileSystemReader(path))
        optim_sd = FSDP.optim_state_dict_to_load(system.model, system.optim, optim["optim"])
    system.optim.load_state_dict(optim_sd)


#: What an exported script copies with the ways: the functions they call, the constants they read.
SCRIPT_HELPERS = {"fsdp1_local": ("_local_file",)}
SCRIPT_CONSTANTS = ("FULL_FILE",)


def _local_file(directory: str) -> str:
    return os.path.join(directory, f"local-{dist.get_rank()}.pt")


def save_fsdp1_local(system, case, directory: str) -> None:
    with FSDP.state_dict_type(system.model, StateDictType.LOCAL_STATE_DICT):
        model_sd = system.model.state_dict()
    torch.save({"model": model_sd, "optim": system.optim.state_dict()}, _local_file(directory))
    dist.barrier()


def load_fsdp1_local(system, case, directory: str) -> None:
    state = torch.load(_local_file(directory), map_location="cpu", weights_only=False)
    with FSDP.state_dict_type(system.model, StateDictType.LOCAL_STATE_DICT):
        system.model.load_state_dict(state["model"], strict=case.checkpoint.strict)
    system.optim.load_state_dict(state["optim"])
