"""The composable family's plan written out: the ``fully_shard``, ``replicate`` (DDP-based),
``replicate_with_fsdp.replicate`` and ``checkpoint`` calls in the plan's order, ``set_requires_gradient_sync``
per microbatch, its optimizer split by kind of tensor under ``foreach`` and its clipping over mixed kinds, and its
invariants (parameters named as before, each parameter fully_shard manages a DTensor sharded on dim-0) as :class:`parityfuzz.families.composable.system.ComposableSystem` checks them."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.export.parts import Parts, function
from parityfuzz.parts.fully_shard import export as fully_shard_export
from parityfuzz.run.calls import statement
from parityfuzz.families.composable import ComposablePlan

IMPORTS = ("from torch.distributed._composable import checkpoint, replicate\n"
           "from torch.distributed.tensor.experimental import implicit_replication\n"
           "from torch.distributed._composable.replicate_with_fsdp import replicate as replicate_fsdp\n"
           "from torch.distributed.fsdp import fully_shard\n"
           "from torch.distributed.tensor import Replicate, Shard\n")

CHECKS = '''
class InvariantViolation(AssertionError):
    """The composed model is not in a state the APIs promise."""


def manager(path):
    """The path of the module whose data-parallel call manages the module at ``path`` (None: none)."""
    while True:
        if path in DATA_PARALLEL:
            return path
        if not path:
            return None
        path = path.rpartition(".")[0]


def check_managed(model, when, trainable_only=False):
    """Each parameter fully_shard manages is a DTensor sharded on dim-0 (its docstring's promise; the private
    replicate APIs promise no tensor type); after a backward, only those with a gradient computation (the
    docstring: "After gradient computation, FSDP frees the unsharded parameters")."""
    wrong = []
    for name, p in model.named_parameters():
        if DATA_PARALLEL[manager(name.rpartition(".")[0])] != "fully_shard":
            continue
        if trainable_only and not p.requires_grad:
            continue
        if not (isinstance(p, DTensor) and isinstance(p.placements[-1], Shard)):
            kind = f"DTensor{tuple(p.placements)}" if isinstance(p, DTensor) else type(p).__name__
            wrong.append(f"{name} (fully_shard) is {kind}")
    if wrong:
        raise InvariantViolation(f"{when}, parameters are not what fully_shard makes them: {'; '.join(wrong[:4])}")


def after_backward(model, last):
    """After the first backward (the DDP-based replicate initialises at the first forward; FSDP2 holds its
    parameters unsharded until the backward), the invariants again."""
    if not CHECKED:
        CHECKED.append(True)
        check_managed(model, "after the first backward", trainable_only=True)
'''

OPTIMIZER = '''
def kind_of(t):
    """What foreach kernels and clip_grad_norm_ need alike in one list: plain, or a DTensor's mesh."""
    mesh = getattr(t, "device_mesh", None)
    return ("plain",) if mesh is None else ("dtensor", id(mesh))


def system_optimizer(named):
    """The case's optimizer; under foreach each parameter group split by the kind of tensor it holds (foreach
    kernels refuse a list mixing plain tensors and DTensors; an elementwise optimizer steps alike in any grouping)."""
    groups = param_groups(named)
    if FOREACH:
        split = []
        for group in groups:
            kinds = {}
            for p in group["params"]:
                kinds.setdefault(kind_of(p), []).append(p)
            split += [{**group, "params": ps} for ps in kinds.values()]
        groups = split
    return make_optimizer(groups=groups)


def clip(model, params, max_norm):
    """clip_grad_norm_'s arithmetic over a list mixing kinds of tensors: each kind's norm as torch computes it,
    their 2-norm the total, every gradient scaled by max_norm / (total + 1e-6) clamped to 1."""
    kinds = {}
    for p in params:
        if p.grad is not None:
            kinds.setdefault(kind_of(p.grad), []).append(p.grad)
    if len(kinds) <= 1:
        return torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], max_norm)
    norms = []
    for grads in kinds.values():
        norm = torch.nn.utils.get_total_norm(grads)
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    coef = torch.clamp(max_norm / (torch.linalg.vector_norm(torch.stack(norms)) + 1e-6), max=1.0)
    for grads in kinds.values():
        for g in grads:
            g.mul_(coef.item())
'''


def refusal(case: Case) -> str | None:
    return None


def parts(case: Case) -> Parts:
    plan: ComposablePlan = case.plan
    gated = bool(case.model.gates())
    lines = ["names = [n for n, _ in model.named_parameters()]",
             "flat = mesh if mesh.ndim == 1 else mesh._flatten()",
             *[statement(c) for c in plan.calls(gated)],
             "after = [n for n, _ in model.named_parameters()]",
             "if after != names:",
             '    raise InvariantViolation(f"parameter names changed by composing: {sorted(set(names) ^ set(after))[:5]} "',
             '                             f"(order kept: {sorted(names) == sorted(after)})")',
             'check_managed(model, "after the calls")']
    apply_plan = function("apply_plan(model, mesh, device)", "The composable calls in the plan's order "
                          "(parityfuzz.families.composable.system).", lines, "return model")
    accumulate = fully_shard_export.switches_source(*plan.switch_calls(), "Gradient sync off on the non-last "
                                                    "microbatches (plan.no_sync), and the root's post-optimizer event "
                                                    "(plan.post_optim_event).")
    head = (f"DATA_PARALLEL = {plan.data_parallel()!r}  # the data-parallel call that takes effect on each module\n"
            "CHECKED = []\n")
    return Parts(imports=IMPORTS, apply_plan=head + CHECKS + "\n\n" + apply_plan, accumulate=accumulate,
                 after_backward="", clip=OPTIMIZER.strip() + "\n", optimizer="system_optimizer",
                 contexts="step_context = implicit_replication  # plain (replicate) and DTensor gradients meet in "
                          "foreach zeroing\nloss_context = contextlib.nullcontext\n")
