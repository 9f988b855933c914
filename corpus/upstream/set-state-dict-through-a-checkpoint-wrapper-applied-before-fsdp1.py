"""set_model_state_dict / set_optimizer_state_dict (full_state_dict=True) cannot load what get_state_dict returned
for the same FSDP1 model when an activation-checkpoint wrapper was applied before FSDP1 around a module that FSDP1
then wraps (CheckpointWrapper(FullyShardedDataParallel(Linear))): "Missing key(s) ... Unexpected key(s)" and
"Missing optimizer state for parameter ...", where set_state_dict documents loading get_state_dict's canonical FQNs.

    torchrun --nproc-per-node=2 set-state-dict-through-a-checkpoint-wrapper-applied-before-fsdp1.py   (CPU, gloo)

Sequential(Linear(4, 4)) with checkpoint_wrapper applied to model[0], then FSDP1 with
ModuleWrapPolicy({nn.Linear}) (use_orig_params=True), one SGD step with momentum; get_state_dict(full_state_dict=True)
gives canonical keys ("0.weight", "0.bias"); set_model_state_dict and set_optimizer_state_dict of those very dicts
into the same model and optimizer follow.  Rank 0 prints the keys and each load's outcome.
(state_dict.py _get_fqns strips "_checkpoint_wrapped_module." before walking the module tree, so it keeps the
"_fsdp_wrapped_module." segment that the wrapper forwards: "0._fsdp_wrapped_module.weight" is not canonical.)
Exit 1: a load raised (the bug); exit 0: both loaded.
Variants run: checkpoint_wrapper applied after FSDP1 (apply_activation_checkpointing on the wrapped model, giving
FSDP(CheckpointWrapper(Linear)); exit 0); without checkpoint_wrapper (exit 0); FSDP1's own FULL_STATE_DICT
model.state_dict / load_state_dict and FSDP.optim_state_dict / optim_state_dict_to_load (exit 0); sharded
(full_state_dict=False): the model loads, the optimizer fails the same way (exit 1); use_orig_params=False (exit 1:
"Unexpected key(s) in state_dict: "0._flat_param"" and "Missing optimizer state for parameter
'0._fsdp_wrapped_module._flat_param'").
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_state_dict, set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4))
model[0] = checkpoint_wrapper(model[0])  # before FSDP1: CheckpointWrapper(FSDP(Linear)) after wrapping
model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), use_orig_params=True,
             device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(2, 4)).sum().backward()
optim.step()

options = StateDictOptions(full_state_dict=True)
model_sd, optim_sd = get_state_dict(model, optim, options=options)
keys = f"model {sorted(model_sd)}, optimizer state {sorted(optim_sd['state'])}"
outcomes = {}
for name, load in [("set_model_state_dict", lambda m, o: set_model_state_dict(model, m, options=options)),
                   ("set_optimizer_state_dict", lambda m, o: set_optimizer_state_dict(model, optim, o,
                                                                                      options=options))]:
    try:
        load(*get_state_dict(model, optim, options=options))
        outcomes[name] = "loaded"
    except Exception as e:  # noqa: BLE001
        outcomes[name] = f"raised {type(e).__name__}: {' '.join(str(e).split())[:260]}   <-- BUG"
bug = any("BUG" in o for o in outcomes.values())
if rank == 0:
    print(f"get_state_dict keys: {keys}")
    for name, o in outcomes.items():
        print(f"{name}: {o}")
    print(f"torch {torch.__version__}: " + ("BUG: set_state_dict cannot load get_state_dict's state dict" if bug
                                             else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
