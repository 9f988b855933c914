"""The reference of an exported script, written out: DDP, or under mixed precision the harness's emulation of the
policy, written by the export module of the family whose record names that reference (:func:`writer`: FSDP2's
``MixedPrecisionPolicy`` emulation by :mod:`parityfuzz.parts.fully_shard.export`, on a tensor-parallel model by
:mod:`parityfuzz.families.fsdp2_tp.export`, FSDP1's ``MixedPrecision`` by :mod:`parityfuzz.parts.fsdp1.export`), copied by
source and constructed with the case's arguments as literals.

The script's training loop calls the same functions whatever the reference: ``reference`` builds it over the
plainly built model, ``reference_thawed`` after frozen parameters are unfrozen, ``reference_parameters`` (what
the optimizer steps and what is compared), ``reference_backward`` (a microbatch's backward, inside ``no_sync()``
but on the last), ``reference_stepped`` (after the optimizer step), ``reference_local`` (the local gradients'
magnitudes the emulation saw), ``reference_nonroot`` (a pass through only the module at ``NONROOT``), and the
contexts ``reference_step_context`` (zeroing and stepping) and ``reference_loss_context`` (the loss and its
backward).  Under tensor parallelism (``ddp_mp_tp``) the reference is the same tensor-parallel model, the
emulation reducing each parameter's tp-local gradient, with the system's contexts.
"""

from __future__ import annotations

import importlib
import inspect

from parityfuzz.case import Case

DDP = '''
# ---- the reference: DDP


def reference(inner, device, mesh):
    return ddp(inner, device)


def reference_thawed(model, inner, device, mesh):
    """DDP built anew, as its documentation asks of a changed requires_grad."""
    return ddp(inner, device)


def reference_parameters(model, inner):
    return [(case_name(n), p) for n, p in inner.named_parameters()]


def reference_backward(model, loss):
    loss.backward()


def reference_stepped(model):
    pass


def reference_local(model):
    return {}  # DDP's local gradients are watched by hooks on its parameters


def reference_nonroot(model, inner, x, y):
    return averaged_nonroot(inner, x, y)


reference_step_context = reference_loss_context = contextlib.nullcontext
'''

EMULATED = '''
def reference_thawed(model, inner, device, mesh):
    model.thaw()
    return model


def reference_parameters(model, inner):
    return list(model.masters.items())


def reference_backward(model, loss):
    loss.backward()
    model.finish_backward()


def reference_stepped(model):
    model.stepped()


def reference_local(model):
    return model.take_local_scales()


def reference_nonroot(model, inner, x, y):
    with reference_loss_context():
        with autocast(x):
            loss = loss_fn(resolve(inner, NONROOT)(x), y)
        loss.backward()
        model.finish_backward()
    return loss.detach()
'''

IMPORTS = "from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten\n"


def writer(case: Case):
    """The export module of the family whose record names the case's reference, where it writes that reference
    out: ``reference_title(case)`` and ``reference_source(case)`` (where it is copied from, the classes, the
    construction, the contexts), or ``reference_text(case)`` (every function).  None: the script's DDP, which the plain
    references are."""
    name = case.reference_name()
    if name == "ddp":
        return None
    from parityfuzz import families

    owner = next((f for f in families.records() if name in f.systems), None)
    module = importlib.import_module(owner.export) if owner is not None and owner.export else None
    return module if module is not None and (hasattr(module, "reference_source")
                                             or hasattr(module, "reference_text")) else None


def refusal(case: Case) -> str | None:
    if case.mixed_precision() and writer(case) is None:
        return f"mixed precision with the reference {case.reference_name()!r}, which the export does not write out"
    return None


def title(case: Case) -> str:
    w = writer(case)
    return w.reference_title(case) if w else "DDP"


def imports(case: Case) -> str:
    return IMPORTS if writer(case) else ""


#: One microbatch's forward and backward of the reference (its loss returned), inside ``no_sync()`` but on the last.
REFERENCE_PASS = '''
def reference_pass(model, x, y, scaler, spike, last):
    with contextlib.nullcontext() if last else model.no_sync(), reference_loss_context():
        with autocast(x):
            loss = loss_fn(model(x), y)
        reference_backward(model, backward_loss(scaler, loss, spike))
    return loss


def reference_evaluate(model, x, y):
    return loss_fn(model(x), y)
'''


def source(case: Case) -> str:
    """The reference's functions; a writer whose reference is DDP driven its own way (``reference_pass``: the
    pipeline family's microbatches) writes them all (``reference_text``)."""
    w = writer(case)
    if w is None:
        return DDP + REFERENCE_PASS
    if hasattr(w, "reference_text"):
        return w.reference_text(case)
    head, classes, construct, contexts = w.reference_source(case)
    return (f"# ---- the reference: {w.reference_title(case)} (the harness's emulation, {head}, copied)\n\n\n"
            + "\n\n".join(inspect.getsource(c) for c in classes) + "\n\n" + construct + "\n\n" + EMULATED
            + "\n\n" + contexts + REFERENCE_PASS)


def groups(case: Case) -> tuple[str, str]:
    """The shard and replicate groups' expressions (the script's mesh has the case's axis names)."""
    replicate = 'mesh.get_group("dp_replicate")' if "dp_replicate" in case.mesh.names else "None"
    return 'mesh.get_group("dp_shard")', replicate


def dtype_literal(name: str) -> str:
    return f"torch.{name}" if name else "None"
