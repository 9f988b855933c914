"""What a family's export module writes out for the shared script (:mod:`parityfuzz.export.script`): a module
of its own, so that a family's exporter never imports the script writer that imports the references."""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.run.calls import At, source


@dataclass(frozen=True)
class Parts:
    """What a family writes out: its imports; ``apply_plan(model, mesh, device)`` (returns the model to train);
    ``accumulate(model, micro, last)`` (a context around each microbatch, after its switches);
    ``after_backward(model, last)`` (its invariants); ``step_context()`` and ``loss_context()`` (contexts around the
    optimizer's zeroing and step, and around the loss and its backward); ``forward(model, batch)``;
    ``clip(model, params, max_norm)``; ``system_pass(model, x, y, scaler, spike, micro, last)`` (one
    microbatch's forward and backward, its loss returned); ``system_evaluate(model, x, y)`` (an evaluation
    forward's loss, under ``no_grad()`` and ``loss_context()``); ``gradients(model, named)`` and ``parameters(model, named)`` (what it
    holds, as ``{case name: whole(tensor)}``: a family whose parameters are not the model's own, FSDP1's flat
    ones, reads them its own way)."""

    imports: str
    apply_plan: str
    accumulate: str = "def accumulate(model, micro, last):\n    return contextlib.nullcontext()\n"
    after_backward: str = "def after_backward(model, last):\n    pass\n"
    contexts: str = "step_context = loss_context = contextlib.nullcontext\n"
    forward: str = "def forward(model, batch):\n    return model(batch)\n"
    clip: str = ("def clip(model, params, max_norm):\n"
                 "    torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], max_norm)\n")
    #: The function that builds the system under test's optimizer and scheduler from ``(name, parameter)`` pairs.
    optimizer: str = "make_optimizer"
    #: One microbatch's forward and backward of the system under test (its loss returned); a family that runs the
    #: whole step itself (a pipeline schedule) writes its own.
    system_pass: str = (
        "def system_pass(model, x, y, scaler, spike, micro, last):\n"
        "    with accumulate(model, micro, last), loss_context():\n"
        "        with autocast(x):\n"
        "            loss = loss_fn(forward(model, x), y)\n"
        '        sleep("after_forward")\n'
        "        backward_loss(scaler, loss, spike).backward()\n"
        "    after_backward(model, last)\n"
        "    return loss\n")
    system_evaluate: str = "def system_evaluate(model, x, y):\n    return loss_fn(forward(model, x), y)\n"
    records: str = ("def gradients(model, named):\n    return {name: whole(p.grad) for name, p in named}\n\n\n"
                    "def parameters(model, named):\n    return {name: whole(p) for name, p in named}\n")


def at(path: str) -> str:
    """The script's expression for the module at a case path of ``model``."""
    return source(At(path))


def function(signature: str, doc: str, lines: list[str], end: str = "") -> str:
    """A function's source: ``def signature:``, its docstring, ``lines`` (each may span lines), ``end``."""
    body = [f'    """{doc}"""'] + ["    " + line.replace("\n", "\n    ") for line in lines]
    return "\n".join([f"def {signature}:", *body, *([f"    {end}"] if end else [])]) + "\n"
