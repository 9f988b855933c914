"""The reference of an exported script, written out: DDP, or under mixed precision the harness's emulation of the
policy (:class:`parityfuzz.systems.mp_reference.FSDP2Precision`, :class:`parityfuzz.systems.fsdp1_mp.FSDP1Precision`),
copied by source and constructed with the case's arguments as literals.

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
        loss = loss_fn(resolve(inner, NONROOT)(x), y)
        loss.backward()
        model.finish_backward()
    return loss.detach()
'''

IMPORTS = "from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten\n"


def _emulated(case: Case) -> str:
    """``"fsdp2"``, ``"fsdp2_tp"`` or ``"fsdp1"`` where the case's reference emulates that mixed precision, else
    ``""``."""
    return {"ddp_mp": "fsdp2", "ddp_mp_tp": "fsdp2_tp", "ddp_mp_fsdp1": "fsdp1"}.get(case.reference_name(), "")


def refusal(case: Case) -> str | None:
    name = case.reference_name()
    if case.mixed_precision() and not _emulated(case):
        return f"mixed precision with the reference {name!r}, which the export does not write out"
    return None


def title(case: Case) -> str:
    return {"fsdp2": "replicated training doing what FSDP2's MixedPrecisionPolicy promises",
            "fsdp2_tp": "the tensor-parallel model, FSDP2's MixedPrecisionPolicy emulated over the data-parallel ranks",
            "fsdp1": "replicated training doing what FSDP1's MixedPrecision promises"}.get(_emulated(case), "DDP")


def uses_math(case: Case) -> bool:
    return _emulated(case) in ("fsdp2", "fsdp2_tp")


def imports(case: Case) -> str:
    return IMPORTS if _emulated(case) else ""


def source(case: Case) -> str:
    kind = _emulated(case)
    if not kind:
        return DDP
    from parityfuzz.systems import fsdp1_mp, fsdp2_tp, masters, mp_reference as mp

    shared = [mp._cast, mp.divide_factors, masters.Masters]
    if kind.startswith("fsdp2"):
        classes = [*shared, mp._PostBackward, mp._register_post_backward, mp._Group, mp.FSDP2Precision]
        classes += [fsdp2_tp.FSDP2PrecisionTP] if kind == "fsdp2_tp" else []
        construct = _fsdp2(case)
        where = "parityfuzz.systems.mp_reference" + (", parityfuzz.systems.fsdp2_tp" if kind == "fsdp2_tp" else "")
    else:
        classes = [*shared, fsdp1_mp._Unit, fsdp1_mp.FSDP1Precision]
        construct = _fsdp1(case)
        where = "parityfuzz.systems.fsdp1_mp"
    head = (f"# ---- the reference: {title(case)} (the harness's emulation, {where}, copied)\n\n\n")
    contexts = ("reference_step_context = implicit_replication  # the system's: a model only partly tensor parallel\n"
                f"reference_loss_context = {'loss_parallel' if case.plan.loss_parallel else 'contextlib.nullcontext'}\n"
                if kind == "fsdp2_tp" else "reference_step_context = reference_loss_context = contextlib.nullcontext\n")
    return (head + "\n\n".join(inspect.getsource(c) for c in classes) + "\n\n" + construct + "\n\n" + EMULATED
            + "\n\n" + contexts)


def _groups(case: Case) -> tuple[str, str]:
    """The shard and replicate groups' expressions (the script's mesh has the case's axis names)."""
    replicate = 'mesh.get_group("dp_replicate")' if "dp_replicate" in case.mesh.names else "None"
    return 'mesh.get_group("dp_shard")', replicate


def _dtype(name: str) -> str:
    return f"torch.{name}" if name else "None"


def _fsdp2(case: Case) -> str:
    """The policies and the construction; under tensor parallelism the plan's styles applied first (the system's
    calls, on the reference's own model)."""
    plan = case.plan
    tensor_parallel = _emulated(case) == "fsdp2_tp"
    styles = ""
    if tensor_parallel:
        from parityfuzz.export import fsdp2, fsdp2_tp

        styles = "".join(f"    parallelize_module({fsdp2._at(p.path).replace('model', 'inner', 1)}, mesh[\"tp\"], "
                         f"{fsdp2_tp.style_source(p)})\n" for p in plan.tp)
    policies = ",\n    ".join(
        f'dict(path="{w.path}", param_dtype={_dtype(w.param_dtype)}, reduce_dtype={_dtype(w.reduce_dtype)}, '
        f"output_dtype={_dtype(w.output_dtype)}, cast_forward_inputs={w.cast_forward_inputs})" for w in plan.wraps)
    return (f"#: Each fully_shard call's MixedPrecisionPolicy (the system under test's, above).\n"
            f"POLICIES = [\n    {policies},\n]\n\n\n"
            "def reference(inner, device, mesh):\n" + styles +
            f"    return FSDP2Precision{'TP' if tensor_parallel else ''}(inner, POLICIES, {', '.join(_groups(case))}, "
            f"unsynced={sorted(plan.no_sync)!r},\n"
            f"        reduce_scatter_unused={plan.reduce_scatter_unused}, no_all_reduce={plan.no_all_reduce})\n")


def _fsdp1(case: Case) -> str:
    from parityfuzz.run.build import build_model
    from parityfuzz.systems.fsdp1_mp import arguments

    shard, replicate = _groups(case)
    args = {**arguments(case, build_model(case)), "shard_group": shard, "replicate_group": replicate}
    units = args.pop("units")
    rendered = ",\n".join(f"        {k}={v if k.endswith('_group') else repr(v)}" for k, v in args.items())
    return (f"#: The modules FSDP1 makes instances of (the root: \"\"), by its wrapping policy's rule.\n"
            f"UNITS = {units!r}\n\n\n"
            "def reference(inner, device, mesh):\n"
            f"    return FSDP1Precision(\n        inner, UNITS,\n{rendered})\n")
