"""The reference of an exported script, written out: DDP, or under mixed precision the harness's emulation of the
policy (:class:`fuzz.systems.mp_reference.FSDP2Precision`, :class:`fuzz.systems.fsdp1_mp.FSDP1Precision`),
copied by source and constructed with the case's arguments as literals.

The script's training loop calls the same seven functions whatever the reference: ``reference`` builds it over
the plainly built model, ``reference_thawed`` after frozen parameters are unfrozen, ``reference_parameters`` (what
the optimizer steps and what is compared), ``reference_backward`` (a microbatch's backward, inside ``no_sync()``
but on the last), ``reference_stepped`` (after the optimizer step), ``reference_local`` (the local gradients'
magnitudes the emulation saw) and ``reference_nonroot`` (a pass through only the module at ``NONROOT``).
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
    loss = loss_fn(resolve(inner, NONROOT)(x), y)
    loss.backward()
    model.finish_backward()
    return loss.detach()
'''

IMPORTS = "from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten\n"


def _emulated(case: Case) -> str:
    """``"fsdp2"`` or ``"fsdp1"`` where the case's reference emulates that mixed precision, else ``""``."""
    return {"ddp_mp": "fsdp2", "ddp_mp_fsdp1": "fsdp1"}.get(case.reference_name(), "")


def refusal(case: Case) -> str | None:
    name = case.reference_name()
    if name == "ddp_mp_tp":
        return ("mixed precision under tensor parallelism (its reference emulates the policy on the tensor-parallel "
                "model), which the export does not write out yet")
    if case.mixed_precision() and not _emulated(case):
        return f"mixed precision with the reference {name!r}, which the export does not write out"
    return None


def title(case: Case) -> str:
    return {"fsdp2": "replicated training doing what FSDP2's MixedPrecisionPolicy promises",
            "fsdp1": "replicated training doing what FSDP1's MixedPrecision promises"}.get(_emulated(case), "DDP")


def uses_math(case: Case) -> bool:
    return _emulated(case) == "fsdp2"


def imports(case: Case) -> str:
    return IMPORTS if _emulated(case) else ""


def source(case: Case) -> str:
    kind = _emulated(case)
    if not kind:
        return DDP
    from parityfuzz.systems import fsdp1_mp, masters, mp_reference as mp

    shared = [mp._cast, mp.divide_factors, masters.Masters]
    if kind == "fsdp2":
        classes = [*shared, mp._PostBackward, mp._register_post_backward, mp._Group, mp.FSDP2Precision]
        construct = _fsdp2(case)
        where = "fuzz.systems.mp_reference"
    else:
        classes = [*shared, fsdp1_mp._Unit, fsdp1_mp.FSDP1Precision]
        construct = _fsdp1(case)
        where = "fuzz.systems.fsdp1_mp"
    head = (f"# ---- the reference: {title(case)} (the harness's emulation, {where}, copied)\n\n\n")
    return head + "\n\n".join(inspect.getsource(c) for c in classes) + "\n\n" + construct + "\n\n" + EMULATED


def _groups(case: Case) -> tuple[str, str]:
    """The shard and replicate groups' expressions (the script's mesh has the case's axis names)."""
    replicate = 'mesh.get_group("dp_replicate")' if "dp_replicate" in case.mesh.names else "None"
    return 'mesh.get_group("dp_shard")', replicate


def _dtype(name: str) -> str:
    return f"torch.{name}" if name else "None"


def _fsdp2(case: Case) -> str:
    plan = case.plan
    policies = ",\n    ".join(
        f'dict(path="{w.path}", param_dtype={_dtype(w.param_dtype)}, reduce_dtype={_dtype(w.reduce_dtype)}, '
        f"output_dtype={_dtype(w.output_dtype)}, cast_forward_inputs={w.cast_forward_inputs})" for w in plan.wraps)
    return (f"#: Each fully_shard call's MixedPrecisionPolicy (the system under test's, above).\n"
            f"POLICIES = [\n    {policies},\n]\n\n\n"
            "def reference(inner, device, mesh):\n"
            f"    return FSDP2Precision(inner, POLICIES, {', '.join(_groups(case))}, unsynced={sorted(plan.no_sync)!r},\n"
            f"                          reduce_scatter_unused={plan.reduce_scatter_unused}, "
            f"no_all_reduce={plan.no_all_reduce})\n")


def _fsdp1(case: Case) -> str:
    from parityfuzz.build import build_model
    from parityfuzz.systems.fsdp1_mp import arguments

    shard, replicate = _groups(case)
    args = {**arguments(case, build_model(case)), "shard_group": shard, "replicate_group": replicate}
    units = args.pop("units")
    rendered = ",\n".join(f"        {k}={v if k.endswith('_group') else repr(v)}" for k, v in args.items())
    return (f"#: The modules FSDP1 makes instances of (the root: \"\"), by its wrapping policy's rule.\n"
            f"UNITS = {units!r}\n\n\n"
            "def reference(inner, device, mesh):\n"
            f"    return FSDP1Precision(\n        inner, UNITS,\n{rendered})\n")
