"""Zero-bubble pipeline schedules over stages fully_shard'ed with MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32) add consecutive microbatches' weight gradients in bfloat16 (stage_backward_weight's
`weight.grad += dw`) before FSDP moves them to its float32 accumulator, where the policy documents that with gradient
sync disabled (as the pipeline stage does per microbatch) "FSDP will accumulate gradients using reduce_dtype".

    torchrun --nproc-per-node=4 pipeline-zero-bubble-fsdp-accumulates-in-param-dtype.py   (CPU, gloo)

pp 2 x dp_shard 2: four stages of Linear(8, 8) + Tanh, two per pp rank, each fully_shard'ed over its dp_shard pair
with the policy; each dp rank has its own batch; one step() over 2 microbatches. The control,
ScheduleInterleaved1F1B, runs the same per-microbatch bfloat16 backward and accumulates in float32 as documented.
Prints, per stage, whether ScheduleInterleavedZeroBubble's reduced float32 gradients equal the control's bit for bit,
and the largest relative difference (stages whose two weight steps run back to back differ; a stage whose schedule
puts an input step between them matches).
Exit 1: they differ (the bug); exit 0: they are equal.
Variants run: reduce_dtype unset (accumulation in bfloat16 promised and done by both, exit 0); 1 microbatch (exit 0);
4 microbatches (exit 1); ScheduleInterleaved1F1B against itself (deterministic, exit 0); ScheduleDualPipeV with 4
microbatches in place of ScheduleInterleavedZeroBubble (exit 1, stage 3 differs); ScheduleZBVZeroBubble in its
place (2 microbatches: exit 0; 4 microbatches: exit 1, stage 1 differs).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
pp, dp = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)])
x, y = torch.randn(2, 8, 8)[dp], torch.randn(2, 8, 8)[dp]  # one batch per dp rank


def grads(schedule_cls):
    mine = [pp, pp + 2]
    copies = {s: fully_shard(copy.deepcopy(model[s]), mesh=mesh["dp"], mp_policy=policy,
                             reshard_after_forward=False) for s in mine}
    stages = [PipelineStage(copies[s], s, 4, torch.device("cpu"), group=mesh["pp"].get_group()) for s in mine]
    schedule = schedule_cls(stages, n_microbatches=2, loss_fn=lambda out, tgt: F.mse_loss(out.float(), tgt))
    schedule.step(x if 0 in mine else None, target=y if 3 in mine else None)
    local = {s: [p.grad.full_tensor() for p in copies[s].parameters()] for s in mine}
    gathered = [None] * 4
    dist.all_gather_object(gathered, local)
    return {s: g for rank_grads in gathered for s, g in rank_grads.items()}  # every stage's reduced grads


documented, split = grads(ScheduleInterleaved1F1B), grads(ScheduleInterleavedZeroBubble)
bug = False
for s in range(4):
    same = all(torch.equal(a, b) for a, b in zip(split[s], documented[s]))
    rel = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(split[s], documented[s]))
    bug |= not same
    if dist.get_rank() == 0:
        print(f"stage {s}: grads ({split[s][0].dtype}) " + ("equal the control's" if same else
              f"differ from the control's, max relative difference {rel:.1e}   <-- BUG"))
if dist.get_rank() == 0:
    print(f"torch {torch.__version__}: " + ("BUG: ScheduleInterleavedZeroBubble accumulates microbatches in bfloat16"
                                            if bug else "ok: microbatches are accumulated in reduce_dtype"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
