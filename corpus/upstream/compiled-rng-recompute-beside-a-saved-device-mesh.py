"""A compiled model holding a DTensor parameter (tensor parallelism) and an activation-checkpointed Dropout fails at
the first forward: AssertionError "expected all tensors_saved_with_vc_check to be Tensors, got types: [..., DeviceMesh]"
in AOTAutograd's save_from_forward.  The DTensor gradient's flattened form needs the DeviceMesh (an opaque object
since DeviceMesh is registered with register_opaque_type), so the partitioner saves it for backward among the saved
opaque objects, which go after the saved tensors in the forward outputs; functionalize_rng_ops (partitioners.py)
then appends the Dropout's saved RNG state "before the symints" only, i.e. after the opaque objects, so the tensor
slice the runtime reads ends on the mesh.  Eager, or without the checkpoint, trains.

    torchrun --nproc-per-node=2 compiled-rng-recompute-beside-a-saved-device-mesh.py   (CPU, gloo)

Model: Linear(4, 4) ColwiseParallel(output_layouts=Replicate()) over tp=2 -> Dropout(0.5) -> Linear(4, 1), float64;
the Dropout wrapped by apply_activation_checkpointing (checkpoint_wrapper, non-reentrant); torch.compile(model,
backend="aot_eager"); one forward and backward.  Prints the outcome without and with the checkpoint.
Exit 1: the checkpointed model raises (the bug); exit 0: both train.
Variants run: --nproc-per-node=1 (a one-rank mesh, exit 1); RowwiseParallel on the first Linear, or on an
Embedding(1, 4) with input_layouts=Replicate() (the fuzzer's case, also under FSDP1 over a (2, 2) mesh) (exit 1); the
DTensor parameter after the checkpoint instead (distribute_module on the head) (exit 1); CheckpointImpl.REENTRANT or
torch.utils.checkpoint.checkpoint(use_reentrant=False) in place of the wrapper (exit 1); ReLU, Identity, Linear or
x * 2 in place of the Dropout (exit 0); no tensor parallelism (exit 0); eager (exit 0); backend="inductor" (exit 0);
functionalize_rng_ops patched to insert the RNG states before the saved opaque objects (exit 0).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
bug = False
for checkpointed in (False, True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 1)).double()
    parallelize_module(model[0], mesh, ColwiseParallel(output_layouts=Replicate()))
    if checkpointed:
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, nn.Dropout))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    try:
        compiled(torch.randn(2, 4, dtype=torch.float64)).sum().backward()
        ok, msg = model[2].weight.grad is not None, "forward and backward ok"
    except AssertionError as e:
        ok, msg = False, f"AssertionError: {e}"
    bug |= not ok
    if rank == 0:
        print(f"Dropout {'checkpointed' if checkpointed else 'plain       '}: {msg}{'' if ok else '   <-- BUG'}",
              flush=True)
dist.destroy_process_group()
sys.exit(1 if bug else 0)
