"""What every save and load must keep, checked on each rank of the system under test:

- a state dict's keys are the unwrapped model's fully qualified names (those of the part the rank holds, where each
  holds a part: pipeline stages): no wrapper prefix, nothing missing, nothing extra (its optimizer state, nested or
  flattened, names only those);
- where the save is rank-0-only (``rank0_only``, or a full state dict with ``cpu_offload``), the other ranks
  get empty dicts; where it offloads, every tensor is on the CPU;
- right after the load, the fresh system's full parameters, buffers and optimizer state are the saved ones,
  bit for bit (a round trip and a resharding move values, they compute nothing; an optimizer's floating-point
  state comes back in its parameter's dtype, :func:`cast_on_load`): every rank leaves a snapshot of
  what it holds, and each rank of the loaded system checks what it holds against them all.

A violation is recorded (:func:`report`), not raised: the ranks train on in step, the trainer puts what was
recorded into the trace (:func:`take`), and the oracle reports the first one as a ``checkpoint`` mismatch at the
pass it belongs to (the last pass before the save, or the pass right after the load).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


#: ``(kind, tensor, message, max_abs)`` of each violation since the last :func:`take`; kind is ``keys``,
#: ``rank0_only``, ``offload`` or ``loaded``.
_VIOLATIONS: list[tuple[str, str, str, float]] = []


def report(kind: str, tensor: str, message: str, max_abs: float = float("inf")) -> None:
    _VIOLATIONS.append((kind, tensor, message, max_abs))


def take() -> list[tuple[str, str, str, float]]:
    """The violations recorded since the last call."""
    out = list(_VIOLATIONS)
    _VIOLATIONS.clear()
    return out


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def expected_keys(case) -> set[str]:
    """The model state dict's keys: those of the case's model built plainly (no parallel API)."""
    from parityfuzz.run.build import build_model

    return set(build_model(case, 0).state_dict())


def optimizer_names(optim_sd: dict) -> set[str]:
    """The parameter names an optimizer state dict names: keys of its ``state`` and its groups' ``params``, or,
    flattened (``flatten_optimizer_state_dict``), the names inside its ``state.<name>.<key>`` and
    ``param_groups.<name>.<key>`` keys."""
    named = set(optim_sd.get("state", {})) if isinstance(optim_sd.get("state"), dict) else set()
    for group in optim_sd.get("param_groups", ()) if isinstance(optim_sd.get("param_groups"), list) else ():
        named |= set(group.get("params", ()))
    for key in optim_sd:
        head, _, rest = key.partition(".")
        if head in ("state", "param_groups") and rest:
            named.add(rest.rpartition(".")[0])
    return named


def check_keys(system, case, model_sd: dict, optim_sd: dict, where: str) -> None:
    """The keys of a model state dict and of the names in an optimizer state dict (FQN-keyed): the case's names
    this rank holds (:meth:`~parityfuzz.systems.base.System.holds`)."""
    want = {name for name in expected_keys(case) if system.holds(name)}
    got = set(model_sd)
    if got != want:
        report("keys", "model state dict", f"{where}: the model state dict's keys are not the model's names: "
               f"missing {sorted(want - got)}, unexpected {sorted(got - want)}")
    named = optimizer_names(optim_sd)
    if not named <= want:
        report("keys", "optimizer state dict", f"{where}: the optimizer state dict names {sorted(named - want)}, "
               "which are not the model's parameters")


def check_rank0_only(model_sd: dict, optim_sd: dict, where: str) -> bool:
    """On ranks other than 0, both dicts are empty; returns whether this rank holds the state."""
    if _rank() == 0:
        return True
    if model_sd or optim_sd:
        report("rank0_only", "state dict", f"{where}: rank {_rank()} got a non-empty state dict ({len(model_sd)} "
               f"model and {len(optim_sd)} optimizer entries); the save is rank 0's only")
    return False


def check_on_cpu(state: dict, where: str) -> None:
    for name, t in _tensors(state):
        local = t.to_local() if hasattr(t, "to_local") else t
        if local.device.type != "cpu":
            report("offload", name, f"{where}: {name} is on {local.device}, not offloaded to the CPU")
            return


def _tensors(state, prefix: str = ""):
    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, dict):
        for k, v in state.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            yield from _tensors(v, f"{prefix}[{i}]")


def check_saved(system, case, model_sd: dict, optim_sd: dict, where: str, rank0_only: bool,
                offloaded: bool) -> bool:
    """The invariants of a saved state dict; returns whether this rank holds it."""
    if rank0_only and not check_rank0_only(model_sd, optim_sd, where):
        return False
    check_keys(system, case, model_sd, optim_sd, where)
    if offloaded:
        check_on_cpu({"model": model_sd, "optim": optim_sd}, where)
    return True


# --------------------------------------------------------------------------- the loaded state is the saved one

def full_state(system) -> tuple[dict, dict]:
    """The system's full model and optimizer state dicts, parameters by name: one ``get_state_dict`` call, as users
    take it (alone, ``get_optimizer_state_dict`` fails with KeyError on an FSDP2 model an evaluation forward left
    unsharded under ``reshard_after_forward=False``; the registered parameters are then the unsharded compute
    copies, which the model's state dict hooks reshard).  A way whose system this call does not read gives its own
    (``state_<way>`` in its module: :func:`parityfuzz.checkpoint.state_of`)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(system.state_module(), system.optim, options=StateDictOptions(full_state_dict=True))


def snapshot(system, state=full_state) -> dict:
    """The system's full state (``state(system)``: :func:`full_state` or a way's own) as plain CPU tensors and
    values: parameters and buffers by case name, the optimizer's state and hyperparameters per parameter name."""
    model, optim = state(system)
    out = {f"model {name}": _plain(t) for name, t in model.items()}
    for param, state in optim.get("state", {}).items():
        for key, value in (state or {}).items():  # (ZeRO's global state holds None for a parameter without any)
            out[f"optimizer state {param}.{key}"] = _plain(value)
    for group in optim.get("param_groups", ()):
        hyper = {k: v for k, v in group.items() if k != "params"}
        for param in group.get("params", ()):
            out[f"optimizer group of {param}"] = hyper
    return out


def _plain(value):
    if isinstance(value, torch.Tensor):
        full = value.full_tensor() if hasattr(value, "full_tensor") else value
        return full.detach().cpu().clone()
    return value


def save_snapshot(system, directory: str, state=full_state) -> None:
    """Every rank's snapshot of what it holds (``snapshot.<rank>.pt``)."""
    torch.save(snapshot(system, state), os.path.join(directory, f"snapshot.{_rank()}.pt"))


def saved_snapshot(directory: str) -> dict:
    """What every rank of the saving system held, merged (a value every rank held is taken from the lowest rank)."""
    files = sorted((f for f in os.listdir(directory) if f.startswith("snapshot.") and f.endswith(".pt")),
                   key=lambda f: int(f.split(".")[1]))
    saved = {}
    for name in files:
        for key, value in torch.load(os.path.join(directory, name), weights_only=False).items():
            saved.setdefault(key, value)
    return saved


def snapshot_owner(entry: str) -> str:
    """The parameter or buffer a snapshot entry belongs to."""
    for prefix in ("model ", "optimizer group of "):
        if entry.startswith(prefix):
            return entry[len(prefix):]
    return entry[len("optimizer state "):].rpartition(".")[0]


def check_snapshot(system, directory: str, state=full_state) -> None:
    """What this rank holds after the load against what the saving ranks held, bit for bit; the first difference
    is the violation."""
    saved = saved_snapshot(directory)
    loaded = snapshot(system, state)
    missing = sorted(k for k in set(saved) - set(loaded) if system.holds(snapshot_owner(k)))
    extra = sorted(set(loaded) - set(saved))
    if missing or extra:
        report("loaded", (missing + extra)[0], f"after the load: missing {missing[:5]}, unexpected {extra[:5]} "
               "(against what was saved)")
        return
    for name in sorted(loaded):
        problem = _difference(cast_on_load(name, saved[name], loaded), loaded[name])
        if problem is not None:
            report("loaded", name, f"after the load: {name} {problem[0]}", problem[1])
            return


def cast_on_load(name: str, value, loaded: dict):
    """A saved snapshot entry as a load gives it back: an optimizer's floating-point state (but ``step``) in its
    parameter's dtype, as ``Optimizer.load_state_dict`` casts it (torch/optim/optimizer.py,
    ``Optimizer._process_value_according_to_param_policy``: floating-point state is "assumed to always match the
    type of params"; FSDP1's ``keep_low_precision_grads`` gives SGD a bfloat16 momentum buffer for float64
    parameters, which comes back float64: corpus/fsdp1/eba446d97f567bc0); anything else as saved."""
    if not (name.startswith("optimizer state ") and isinstance(value, torch.Tensor) and value.is_floating_point()) \
            or name.endswith(".step"):
        return value
    param = loaded.get("model " + snapshot_owner(name))
    return value.to(param.dtype) if isinstance(param, torch.Tensor) and param.is_floating_point() else value


def _difference(a, b) -> tuple[str, float] | None:
    """How a loaded value differs from the saved one, and by how much at most; None where it does not."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"is {b.dtype} {list(b.shape)}, saved {a.dtype} {list(a.shape)}", float("inf")
        if torch.equal(a, b) or (a.isnan().any() and torch.equal(a.nan_to_num(), b.nan_to_num())):
            return None
        diff = float((a.double() - b.double()).abs().max())
        return f"differs from what was saved in {int((a != b).sum())} of {a.numel()} elements", diff
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(k for k in set(a) | set(b) if _value(a.get(k)) != _value(b.get(k)))
        if not keys:
            return None
        return "has " + ", ".join(f"{k}={_value(b.get(k))!r} (saved {_value(a.get(k))!r})" for k in keys), float("inf")
    if _value(a) != _value(b):
        return f"is {_value(b)!r}, saved {_value(a)!r}", float("inf")
    return None


def _value(v):
    """A value as compared: one-element tensors as numbers, lists as tuples (a round trip may turn Adam's
    ``betas`` into a list, which works alike)."""
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return v.item()
    return tuple(_value(x) for x in v) if isinstance(v, (list, tuple)) else v


__all__ = ["cast_on_load", "check_keys", "check_on_cpu", "check_rank0_only", "check_saved", "check_snapshot",
           "full_state", "optimizer_names", "report", "save_snapshot", "saved_snapshot", "snapshot",
           "snapshot_owner", "take"]
