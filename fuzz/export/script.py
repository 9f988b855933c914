"""The writer of an exported script: its header, imports and constants, then the parts in order: the model, the
data, the plan (a family's module supplies its code: :class:`parityfuzz.export.parts.Parts`), the reference, the
checkpoint event, and the training loop, the comparison and the main function every script shares
(:mod:`parityfuzz.export.runtime`)."""

from __future__ import annotations

import dataclasses
import json
import textwrap

from parityfuzz import families
from parityfuzz.case import dtypes
from parityfuzz.case import Case
from parityfuzz.export import checkpoint, reference, runtime
from parityfuzz.export.model import model_source
from parityfuzz.export.parts import Parts
from parityfuzz.frontends.show import describe_case


def refusal(case: Case) -> str | None:
    """What of the training spec or the reference the export does not write out yet, or None."""
    return reference.refusal(case) or checkpoint.refusal(case)


def _py(value) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _system(case: Case):
    """The family's system-under-test class (what it does, its class attributes say)."""
    from parityfuzz.systems import system_class

    return system_class(families.get(case.family).system)


def _reference(case: Case):
    """The case's reference class."""
    from parityfuzz.systems import system_class

    return system_class(case.reference_name())


def constants(case: Case) -> str:
    t, m = case.train, case.model
    promise = dtypes.promise(case)
    groups = [(tuple(g.paths), g.lr_scale, g.weight_decay) for g in t.groups]
    extra = {"momentum": t.momentum, "nesterov": t.nesterov} if t.optimizer == "sgd" else {}
    from parityfuzz.judge.expected import expectation
    from parityfuzz.judge.verify import tolerance

    rows = [
        ("SEED", case.seed, "initial weights; inputs and dropout masks are keyed by it too"),
        ("WORLD_SIZE", case.world_size, ""),
        ("MESH_SHAPE", tuple(case.mesh.shape), ""),
        ("MESH_NAMES", tuple(case.mesh.names), ""),
        ("DP_INDEX", [case.mesh.dp_index(r) for r in range(case.world_size)],
         "each rank's data-parallel index: the ranks of one tp group share a batch"),
        ("STEPS", t.steps, ""), ("MICROBATCHES", t.microbatches, ""),
        ("BATCH", t.batch, ""), ("SEQ_LEN", t.seq_len, ""),
        ("EMBEDDING", m.input == "embedding", "token ids in, logits over the vocabulary out (cross-entropy)"),
        ("VOCAB", m.vocab, ""), ("IN_WIDTH", m.in_dim, ""), ("OUT_WIDTH", m.output_width(""), ""),
        ("SAME_INPUT", t.same_input, "every rank gets the same batch"),
        ("LOSS", t.loss, "the loss's reduction"),
        ("PAD", t.pad, "share of target tokens set to ignore_index=-100 (never a sequence's first)"),
        ("PAD_ALL_DP0", t.pad_all_dp0, "every target of data-parallel rank 0's first microbatch is padding"),
        ("LABEL_SMOOTHING", t.label_smoothing, "cross_entropy's label_smoothing"),
        ("LOSS_SCALE", t.loss_scale, "the gradient scaler's init_scale (0: no loss scaling)"),
        ("SHARDED_SCALER", _system(case).sharded_scaler and t.scaler != "amp",
         "the system under test scales with ShardedGradScaler (its gradients are sharded), the reference with "
         "torch.amp.GradScaler"),
        ("REFERENCE_SHARDED_SCALER", _reference(case).sharded_reference_scaler(case),
         "the reference scales with ShardedGradScaler too (float16 gradients, which only it unscales, or gradients "
         "it does not reduce, whose infs the system's ShardedGradScaler syncs across ranks)"),
        ("OVERFLOW_AT", t.overflow_at, "the step whose backward on data-parallel rank 0 overflows (0: none)"),
        ("OVERFLOW_IN", t.overflow_in, "the Linear whose first output feature's gradient overflows there (x 2**24), "
                                       "instead of the loss (''): its weight row alone"),
        ("ZERO_GRAD", t.zero_grad, "none: set_to_none=True; zeros: False; alternate: True on even steps"),
        ("TO_FLOAT64", t.to_float64, ".to(torch.float64) on the float32 model (the reference before DDP, the "
                                     "system under test where its family says)"),
        ("CONVERTS_AFTER_WRAP", _system(case).converts_after_wrap,
         "the system under test converts to float64 after its plan is applied (else before)"),
        ("FROZEN", tuple((f.path, f.until) for f in t.frozen),
         "(module, step): its parameters have requires_grad=False until that step (0: throughout)"),
        ("EVAL", t.eval, "after each step, a forward in eval mode under no_grad: its loss is compared"),
        ("AUTOCAST", t.autocast or None, "torch.autocast dtype around every forward and its loss (None: none)"),
        ("COMPILE_SPEC", (case.compile.backend, case.compile.form, tuple(case.compile.paths), case.compile.restart),
         "torch.compile of the system under test: (backend, form, module paths, restarted on a warm cache); "
         "backend '': eager"),
        ("NONROOT", t.nonroot, "after each step, a second one through only the module at this path"),
        ("NONROOT_IN_WIDTH", m.input_width(t.nonroot) if t.nonroot else None, "its input's width (None: token ids)"),
        ("NONROOT_OUT_WIDTH", m.output_width(t.nonroot) if t.nonroot else None, ""),
        ("CLIP", t.clip, "clip_grad_norm_ to this total norm before each step (0: none)"),
        ("LR", t.lr, ""), ("WEIGHT_DECAY", t.weight_decay, ""), ("FOREACH", t.foreach, ""),
        ("MAXIMIZE", t.maximize, ""), ("OPTIMIZER_EXTRA", extra, ""),
        ("GROUPS", groups, "parameter groups: (module paths, lr scale, weight decay)"),
        ("SCHEDULER", t.scheduler, "step: StepLR(step_size=2, gamma=0.5); linear: LinearLR(1.0 -> 0.1)"),
        ("SCALE_GROUPS", tolerance(case).scale_groups, "(module, block): Linears inside a block share its scale"),
        ("DELAYS", {r: {d.where: d.ms / 1000 for d in case.delays if d.rank == r}
                    for r in sorted({d.rank for d in case.delays})},
         "per rank, seconds of sleep in the system under test at each point (timing perturbations)"),
        ("EXPECTED_ERROR", {device: (e.type, e.match) for device in ("cpu", "cuda")
                            if (e := expectation(case, device)) is not None},
         "per device type: the error torch must raise on every rank (exception type, regular expression)"),
    ]
    lines = [f"{name} = {_py(value)}" + (f"  # {note}" if note else "") for name, value, note in rows]
    lines.append(checkpoint.constants(case).strip("\n"))
    lines += [
        f"DTYPE = torch.{t.dtype}  # the model's dtype as built",
        f"INPUT_DTYPE = torch.{dtypes.activation_dtype(case, '')}",
        f"NONROOT_INPUT_DTYPE = torch.{dtypes.activation_dtype(case, t.nonroot) if t.nonroot else 'float32'}",
        f"OPTIMIZER = torch.optim.{ {'sgd': 'SGD', 'adam': 'Adam', 'adamw': 'AdamW'}[t.optimizer] }",
        f"PROMISE = {_py(dataclasses.asdict(promise))}  # the dtypes the system under test must produce, and which "
        "ranks run alike",
        f"MODEL_DTYPE = {_py(dtypes.model_dtype(case))}  # the dtype the model trains in: its rounding floors the "
        "tolerance",
        f"UNPINNED_DTYPE = {_py(dtypes.unpinned_dtype(case))}  # the dtype, below MODEL_DTYPE, whose rounding "
        "the reference does not pin (compiled code, an order of summation): allowed too ('': none)",
    ]
    return "\n".join(lines) + "\n"


def render(case: Case, parts: Parts, source: str = "") -> str:
    """The whole script."""
    tree = textwrap.indent(describe_case(case), "    ")
    header = f'''#!/usr/bin/env python3
"""parityfuzz case {case.case_id()} ({case.family}){f", from {source}" if source else ""}, as a standalone script.

    torchrun --nproc-per-node={case.world_size} {{this file}}

CPU ranks over gloo, or CUDA ranks over NCCL where {case.world_size} GPUs are present.  It trains the reference
({reference.title(case)}), the system under test and the reference again from weights perturbed by 2 ulps
(a sample of the rounding noise), then
compares every rank's loss, every gradient and parameter: present alike, in the promised dtype, equal across
ranks bit for bit, within K * noise + FLOOR_ULPS * eps * scale of the reference; a divergence is measured
again against NOISE_SAMPLES perturbed runs before it is reported.  Exit code 0: the system under
test trains like the reference; 1: it does not (the first divergence is printed) or a rank failed.

The case:
{tree}
"""
'''
    body = [
        header,
        "from __future__ import annotations\n\nimport contextlib\nimport math\nimport os\nimport re\nimport sys\n"
        "import time\nfrom collections.abc import Sequence\nfrom dataclasses import dataclass, field\n"
        "from datetime import timedelta\n\nimport torch\n"
        "import torch.distributed as dist\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "from torch.distributed.device_mesh import init_device_mesh\nfrom torch.distributed.fsdp import FSDPModule\n"
        "from torch.distributed.tensor import DTensor\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        + parts.imports + reference.imports(case) + checkpoint.imports(case),
        constants(case),
        model_source(case),
        runtime.data(),
        "# ---- the system under test: the plan, written out\n\n" + "\n\n".join(
            (parts.apply_plan, parts.accumulate, parts.after_backward, parts.forward, parts.contexts, parts.clip,
             parts.system_pass, parts.system_evaluate, parts.records, f"SYSTEM_OPTIMIZER = {parts.optimizer}\n")),
        reference.source(case),
        checkpoint.source(case),
        runtime.train(),
        runtime.compare(),
        runtime.MAIN,
    ]
    return "\n\n".join(b.strip("\n") + "\n" for b in body if b)

