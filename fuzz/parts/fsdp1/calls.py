"""FSDP1's plan as torch calls (:mod:`parityfuzz.run.calls`): what
:class:`~parityfuzz.parts.fsdp1.system.FSDP1System` runs and the export prints.  Torch-free.

In order: the activation checkpoints applied before wrapping, ``kwargs`` (the arguments every
``FullyShardedDataParallel`` instance of the plan takes), ``policy`` (the root's auto-wrap policy), the manual
nested instances (children first, each replacing its module in its parent: ``wrap_at``), the root instance, the
checkpoints applied after (``apply_activation_checkpointing`` reaching into the instances, as torchtune does).
"""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.model import children_first
from parityfuzz.parts.activation_checkpoint import checkpoint_call
from parityfuzz.parts.fsdp1 import HYBRID
from parityfuzz.run.calls import At, Call, Let, Name, keywords

#: The class each module kind ``ModuleWrapPolicy`` may name, as the backends bind it: ``torch.nn``'s, or the
#: model's own (:mod:`parityfuzz.run.build`, which an exported script defines where the model has that kind).
KIND_CLASSES = {"linear": "nn.Linear", "seq": "nn.Sequential", "layernorm": "nn.LayerNorm", "rmsnorm": "nn.RMSNorm",
                "embedding": "nn.Embedding", "mlp": "MLP", "attention": "Attention", "block": "Block",
                "residual": "Residual", "twice": "Twice", "scale": "Scale", "gate": "Gate"}


def wrap_calls(case: Case, mesh: str = "") -> list:
    """The plan's calls; ``mesh``: the name of a ``device_mesh`` the backend binds (fsdp1_tp: its ``dp_shard``
    sub-mesh), else the case's own where a hybrid plan takes one."""
    plan = case.plan
    out: list = [checkpoint_call(c) for c in plan.checkpoints if c.before]
    out.append(Let("kwargs", Call("dict", kwargs=arguments(plan, mesh))))
    out.append(Let("policy", policy(case)))
    if plan.wrapping == "manual":
        out += [Call("wrap_at", (Name("model"), path, Name("FSDP")), splat=Name("kwargs"))
                for path in children_first(plan.wraps)]
    out.append(Let("model", Call("FSDP", (Name("model"),), keywords(auto_wrap_policy=Name("policy")),
                                 splat=Name("kwargs"))))
    out += [checkpoint_call(c) for c in plan.checkpoints if not c.before]
    return out


def arguments(plan, mesh: str = "") -> tuple:
    """The keyword arguments of every instance."""
    prefetch = Name(f"BackwardPrefetch.{plan.backward_prefetch}") if plan.backward_prefetch else None
    kwargs = [("sharding_strategy", Name(f"ShardingStrategy.{plan.sharding}")),
              ("use_orig_params", plan.use_orig_params), ("device_id", Name("device")),
              ("backward_prefetch", prefetch), ("forward_prefetch", plan.forward_prefetch),
              ("limit_all_gathers", plan.limit_all_gathers), ("sync_module_states", plan.sync_module_states)]
    if plan.ignored:
        modules = [At(p) for p in plan.ignored]
        kwargs.append(("ignored_modules", modules) if plan.ignored_via == "modules"
                      else ("ignored_states", Call("parameters_of", tuple(modules))))
    if plan.offload:
        kwargs.append(("cpu_offload", Call("CPUOffload", kwargs=keywords(offload_params=True))))
    if plan.precision.active():
        kwargs.append(("mixed_precision", mixed_precision(plan.precision)))
    if mesh:
        kwargs.append(("device_mesh", Name(mesh)))
    elif plan.sharding in HYBRID and plan.hybrid_via == "mesh":
        kwargs.append(("device_mesh", Name("mesh")))
    elif plan.sharding in HYBRID and plan.hybrid_via == "groups":
        kwargs.append(("process_group", tuple(Call("get_group", (axis,), on=Name("mesh"))
                                              for axis in ("dp_shard", "dp_replicate"))))
    return tuple(kwargs)


def mixed_precision(mp) -> Call:
    """``MixedPrecision`` with the fields that differ from its defaults (the spec's are torch's)."""
    default = type(mp)()
    kwargs = [(k, Name(f"torch.{getattr(mp, k)}")) for k in ("param_dtype", "reduce_dtype", "buffer_dtype")
              if getattr(mp, k)]
    kwargs += [(k, getattr(mp, k)) for k in ("keep_low_precision_grads", "cast_forward_inputs",
                                             "cast_root_forward_inputs") if getattr(mp, k) != getattr(default, k)]
    return Call("MixedPrecision", kwargs=tuple(kwargs))


def policy(case: Case):
    """The root's ``auto_wrap_policy`` (None: the manual nesting alone)."""
    plan = case.plan
    if plan.wrapping == "module_class":
        # a model class the model does not build has no instance to match (nor a class in an exported script)
        kinds = {node.kind for _, node in case.model.body.walk("body")}
        return Call("ModuleWrapPolicy", ({Name(KIND_CLASSES[k]) for k in plan.wrap_kinds
                                          if KIND_CLASSES[k].startswith("nn.") or k in kinds},))
    if plan.wrapping == "size":
        return Call("functools.partial", (Name("size_based_auto_wrap_policy"),),
                    keywords(min_num_params=plan.min_num_params))
    if plan.wrapping == "lambda":
        return Call("functools.partial", (Name("lambda_auto_wrap_policy"),),
                    keywords(lambda_fn=Call("one_of", tuple(At(p) for p in plan.wraps))))
    return None


__all__ = ["KIND_CLASSES", "arguments", "mixed_precision", "policy", "wrap_calls"]
