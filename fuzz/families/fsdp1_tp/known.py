"""Preconditions of the known torch bugs of the fsdp1_tp family (``corpus/known_bugs.toml`` names them
``fsdp1_tp:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug
can show in it."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.model import under
from parityfuzz.parts.fsdp1 import runs_unsharded, units
from parityfuzz.families.fsdp1_tp import split_sizes


def fsdp1_no_shard_tensor_parallel_orig_params(case: Case) -> bool:
    return runs_unsharded(case) and case.plan.use_orig_params and any(p.style in ("colwise", "rowwise", "sequence")
                                                           for p in case.plan.tp)


def fsdp1_empty_tensor_parallel_shard(case: Case) -> bool:
    """A tensor-parallel module whose split dimension is smaller than tp (its shard is empty on the last tp ranks),
    where the parameters of some FSDP1 instance are all such modules' (its FlatParameter is then empty there); a
    size-based policy's instances are not known up front. (A rowwise Linear's replicated bias keeps a unit
    non-empty; not told apart here.)"""
    empty = [path for path, size in split_sizes(case).items() if size < case.mesh.axis_size("tp")]
    if not empty:
        return False
    found = units(case)
    if found is None:
        return True
    held_by = case.model.param_modules()
    for unit in found:
        deeper = [v for v in found if v != unit and under(v, (unit,))]
        held = [m for m in held_by if under(m, (unit,)) and not under(m, deeper)]
        if held and all(under(m, empty) for m in held):
            return True
    return False


def fsdp1_no_sync_tensor_parallel_orig_params(case: Case) -> bool:
    """no_sync() with use_orig_params=True over DTensor parameters (any tensor-parallel style makes them, a one-rank
    tp mesh included) under a sharded strategy (unsharded, fsdp1_no_shard_tensor_parallel_orig_params fails first)."""
    return (case.plan.no_sync and case.plan.use_orig_params and not runs_unsharded(case)
            and any(p.style in ("colwise", "rowwise", "sequence") for p in case.plan.tp))


def fsdp1_clipping_tensor_parallel_parameters(case: Case) -> bool:
    return case.train.clip > 0 and any(p.style in ("colwise", "rowwise") for p in case.plan.tp)


def fsdp1_over_a_frozen_tensor_parallel_parameter(case: Case) -> bool:
    """FSDP1 sharding (use_orig_params=True) over a tensor-parallel parameter (colwise, rowwise, or the
    replicated weight of SequenceParallel's norm) frozen on some step."""
    plan = case.plan
    return (plan.use_orig_params and plan.sharding != "NO_SHARD" and case.mesh.axis_size("dp_shard") > 1
            and any(p.style in ("colwise", "rowwise", "sequence") and case.train.frozen_at(f"{p.path}.weight", step)
                    for p in plan.tp for step in range(case.train.steps)))


def sharded_round_trip(case: Case) -> bool:
    """A sharded optimizer state dict loaded into FSDP1 (use_orig_params=True: _shard_orig_param_state) on a
    tensor-parallel mesh through set_state_dict, whatever wrote it (a DCP save, full or sharded, or FSDP1's SHARDED
    one); not FSDP1's own SHARDED recipe (:func:`sharded_recipe` fails first)."""
    c = case.checkpoint
    return (bool(c) and case.family == "fsdp1_tp" and case.plan.use_orig_params
            and c.save in ("dcp", "fsdp1_sharded") and c.load_way == "dcp" and case.mesh.axis_size("tp") > 1)


def sharded_recipe(case: Case) -> bool:
    """FSDP1's SHARDED recipe (load_sharded_optimizer_state_dict) over a dp sub-mesh smaller than the world."""
    c = case.checkpoint
    return bool(c) and case.family == "fsdp1_tp" and c.load_way == "fsdp1_sharded" and case.world_size > \
        case.mesh.axis_size("dp_shard")


def _dtensor_parameters(case: Case) -> bool:
    """Some parameter is a DTensor (every parameter-holding style makes one, a one-rank tp mesh included)."""
    return any(p.style in ("colwise", "rowwise", "sequence") for p in case.plan.tp)


def full_state_dict(case: Case) -> bool:
    """FSDP1's own FULL_STATE_DICT save (FSDP.optim_state_dict) over DTensor parameters: its optimizer state keeps
    them tp-sharded, unpicklable or tied to the writer's tp group."""
    c = case.checkpoint
    return bool(c) and case.family == "fsdp1_tp" and c.save == "fsdp1_full" and _dtensor_parameters(case)


def set_full_model_state_dict(case: Case) -> bool:
    """DSD's full model state dict (plain full tensors) loaded under FSDP1's FULL_STATE_DICT (by
    set_state_dict(full_state_dict=True), or FSDP1's own full load) into FSDP1 over DTensor parameters."""
    c = case.checkpoint
    return (bool(c) and case.family == "fsdp1_tp" and c.save == "full" and c.load_way in ("full", "fsdp1_full")
            and _dtensor_parameters(case))


def compiled_tensor_parallel_unit_after_another_shape(case: Case) -> bool:
    """The model compiled, and a tensor-parallel block (attention or MLP) that is an FSDP1 instance of its own
    (FSDP1's forward is a graph break: the block's forward is a frame of its own) after a block of the same kind
    whose size or tensor-parallel styles differ: Dynamo compiles the kind's forward a second time with other
    shapes, marks them dynamic (automatic dynamic shapes), and the later block's DTensor ops hash SymInt sizes.
    The shrunk case needed all of it: eager, FSDP1 at the root alone, the blocks the other way round, or both
    blocks parallelized alike, train."""
    if not case.compile:
        return False
    found = units(case)
    blocks = [(path, node) for path, node in case.model.body.walk("body") if node.kind in ("attention", "mlp")]

    def shape(path, node) -> tuple:
        styles = sorted((p.path[len(path):], p.style) for p in case.plan.tp if under(p.path, (path,)))
        return node.heads, node.hidden, tuple(styles)

    for i, (path, node) in enumerate(blocks):
        parallel = any(under(p.path, (path,)) for p in case.plan.tp)
        if parallel and (found is None or path in found) and any(
                other.kind == node.kind and shape(q, other) != shape(path, node) for q, other in blocks[:i]):
            return True
    return False


def compiled_tensor_parallel_linears_of_two_styles(case: Case) -> bool:
    """The model or a block compiled (before or after wrapping), holding a colwise and a rowwise module that are each
    a frame of their own: FSDP1's unshard graph-breaks, so ``nn.Linear.forward`` is one where the Linear is an FSDP1
    instance, or where the instance holding it is a ``torch.nn.Sequential`` with only such containers between them
    (Dynamo starts no frame in ``torch.nn``'s own forwards: fsdp1_tp/23a7cf7e, one instance over both Linears);
    compiled for one style and recompiled for the other with automatic dynamic shapes, AOTAutograd's trace of
    F.linear over DTensors with symbolic sizes never ends.  Eager, ``dynamic=False``, no TP, FSDP1 at the root alone,
    the instance a module of the harness's own (one MLP: one frame) or use_orig_params=False train (measured); two
    Linears of one style but other sizes probably recompile too (not measured); two such modules of other sizes do
    (:func:`_recompiled_for_other_sizes`)."""
    c = case.compile
    if not c or c.form not in ("model", "blocks_after", "blocks_before"):
        return False
    found = units(case)
    nodes = dict(case.model.body.walk("body"))

    def own_frame(path: str) -> bool:
        if found is None or path in found:
            return True
        holder = path.rpartition(".")[0]
        while holder and holder not in found:
            if nodes.get(holder) is None or nodes[holder].kind != "seq":
                return False
            holder = holder.rpartition(".")[0]
        return bool(holder) and nodes[holder].kind == "seq"

    return len({p.style for p in case.plan.tp if p.style in ("colwise", "rowwise") and own_frame(p.path)
                and under(p.path, c.roots)}) > 1 or _recompiled_for_other_sizes(case, found)


def _recompiled_for_other_sizes(case: Case, found) -> bool:
    """The other way to a recompile: two modules of one kind of the harness's own (an MLP, an attention: one
    ``forward``, one code object), each holding a colwise or rowwise module, each a frame of its own, of other
    sizes (another hidden width, or another input width).  Each is a frame where the modules are compiled one by
    one, or where the whole model is compiled and an FSDP1 instance below the root breaks the graph (fsdp1_tp/
    94962756: two MLPs of hidden widths 2 and 4, each colwise fc1 and rowwise fc2, the norm after them an
    instance; the same hidden widths, FSDP1 at the root alone, TP on one MLP only, or eager, train; either MLP
    as the instance, or the MLPs compiled one by one, fail alike)."""
    c = case.compile
    if c.form == "model" and (found is None or not set(found) - {""}):
        return False  # FSDP1 at the root alone: one frame, nothing recompiled (measured)
    nodes = dict(case.model.body.walk("body"))
    sizes: dict[str, set] = {}
    for p in case.plan.tp:
        holder = p.path.rpartition(".")[0]
        node = nodes.get(holder)
        if p.style in ("colwise", "rowwise") and node is not None and node.kind != "seq" \
                and under(holder, c.roots):
            sizes.setdefault(node.kind, set()).add((node, case.model.input_width(holder)))
    return any(len(s) > 1 for s in sizes.values())
