"""Preconditions of the known torch bugs of the FSDP1 families (fsdp1, and fsdp1_tp where a record says so)
(``corpus/known_bugs.toml`` names them ``fsdp1:<function>``): what the shrunk cases of each bug needed. Each
takes a case and says whether the bug can show in it."""

from __future__ import annotations

from parityfuzz.case import dtypes
from parityfuzz.case import Case
from parityfuzz.case.checkpoint import fsdp1_families, stateless_at_the_save
from parityfuzz.case.mesh import chunk_leaves_a_rank_empty
from parityfuzz.case.model import PARAM_KINDS, under
from parityfuzz.parts.fsdp1 import HYBRID, runs_unsharded, units
from parityfuzz.systems.compiled.known import checkpointed_paths, local_outputs_handed_on, outputs_of


def hybrid_fsdp1_with_shards_of_one(case: Case) -> bool:
    return (case.plan.sharding in HYBRID and case.mesh.axis_size("dp_shard") == 1
            and case.mesh.axis_size("dp_replicate") > 1)


def clipping_float64_gradients(case: Case) -> bool:
    """Clipping a float64 model where FSDP1 shards (all-NO_SHARD, asked for or through a one-rank shard group,
    delegates to torch.nn.utils.clip_grad_norm_, which clips it)."""
    return (case.train.clip > 0 and (case.train.dtype == "float64" or case.train.to_float64)
            and not runs_unsharded(case))


def flat_unit_unused_in_the_last_backward(case: Case) -> bool:
    return (not case.plan.use_orig_params and bool(case.model.gates())
            and (case.train.zero_grad != "none" or case.train.microbatches > 1))


def _skips_a_step(case: Case, gate: str) -> bool:
    """Whether the gate at ``gate`` leaves its child unused for some whole step (every microbatch of it): a per-rank
    gate may, a step gate does where on every microbatch of some step it or a gate around it skips (each reads
    the same forward index: a gate of period 2 inside one of period 3 runs its child on every sixth forward)."""
    chain = [node for path, node in case.model.body.walk("body")
             if node.kind == "gate" and (path == gate or gate.startswith(path + "."))]
    if any(node.by_rank for node in chain):
        return True
    n = case.train.microbatches
    return any(all(any((step * n + micro) % node.period for node in chain) for micro in range(n))
               for step in range(case.train.steps))


def flat_params_unused_in_a_step(case: Case) -> bool:
    """use_orig_params=False and a parameter unused for a whole step (a gate that skips every microbatch of one)."""
    return not case.plan.use_orig_params and any(_skips_a_step(case, g) for g in case.model.gates())


def no_shard_unit_left_unresharded(case: Case) -> bool:
    """FSDP1 NO_SHARD (or a one-rank shard group), use_orig_params=True, and a unit that a backward can reach without
    giving it a gradient: a gate (skipped in a step, or on the last microbatch) or frozen parameters (a frozen tied
    weight among them)."""
    return runs_unsharded(case) and case.plan.use_orig_params and (bool(case.model.gates()) or bool(case.train.frozen))


def no_shard_no_sync_unfrozen(case: Case) -> bool:
    """FSDP1 NO_SHARD (or a one-rank shard group), use_orig_params=True, no_sync() accumulation, and a parameter
    frozen at first and unfrozen on a later step."""
    return (runs_unsharded(case) and case.plan.use_orig_params and case.plan.no_sync
            and any(f.until for f in case.train.frozen))


def orig_params_unused_in_a_step(case: Case) -> bool:
    """use_orig_params=True and a parameter unused for a whole step (a gate that skips every microbatch of one)."""
    return case.plan.use_orig_params and any(_skips_a_step(case, g) for g in case.model.gates())


def frozen_instance_unused_in_a_step(case: Case) -> bool:
    """A gate FSDP1 makes an instance of (or may: a size-based policy), frozen as a whole: the gate itself, or
    every module with parameters under it (with either use_orig_params: the hooks do not depend on it)."""
    found = units(case)
    frozen = [f.path for f in case.train.frozen]

    def all_frozen(path: str) -> bool:
        held = [m for m in case.model.param_modules() if under(m, (path,))]
        return under(path, frozen) or (bool(held) and all(under(m, frozen) for m in held))

    return any((found is None or p in found) and all_frozen(p) for p in case.model.gates())


def no_sync_with_a_unit_unused_on_the_last_microbatch(case: Case) -> bool:
    return case.plan.no_sync and bool(case.model.gates())


def keep_low_precision_grads_sharded(case: Case) -> bool:
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    return mp.keep_low_precision_grads and case.plan.sharding != "NO_SHARD" and mp.reduce(master) != mp.compute(master)


def tied_weight_low_precision_gradient(case: Case) -> bool:
    """A tied weight, use_orig_params=True, and a gradient below the parameters' dtype: in param_dtype after
    no_sync() accumulation without sharding, or in the reduction dtype (``reduce_dtype``, else ``param_dtype``)
    kept by keep_low_precision_grads."""
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    low = ((case.plan.no_sync and runs_unsharded(case) and mp.compute(master) != master)
           or (mp.keep_low_precision_grads and mp.reduce(master) != master))
    return case.model.tie_head and case.plan.use_orig_params and low


def stateless_optimizer_through_dcp(case: Case) -> bool:
    """Plain SGD (no state tensors) saved through DCP and loaded by FSDP1's SHARDED recipe."""
    c = case.checkpoint
    return (bool(c) and case.family in fsdp1_families() and c.save in ("dcp", "fsdp1_sharded") and not c.full_state_dict
            and c.load_way == "fsdp1_sharded" and case.train.optimizer == "sgd" and not case.train.momentum)


def hybrid_rank0_only(case: Case) -> bool:
    """A rank-0-only full state dict where FSDP1's shard group is not the world: several replica groups
    (HYBRID_SHARD), or a tensor-parallel axis beside it (each tp rank has a shard group of its own; measured on
    fsdp1_tp/88e4086a: dp_shard 1 x tp 2 fails, dp_shard 2 x tp 1 or rank0_only off trains)."""
    c = case.checkpoint
    rank0_only = (c.save == "fsdp1_full" and c.rank0_only) or (c.cpu_offload and (c.save == "full" or (
        c.save == "dcp" and c.full_state_dict)))
    groups = case.mesh.axis_size("dp_replicate") * case.mesh.axis_size("tp")
    return case.family in fsdp1_families() and groups > 1 and rank0_only


def no_shard_rank0_only(case: Case) -> bool:
    c = case.checkpoint
    return (case.family in fsdp1_families() and case.plan.sharding == "NO_SHARD" and case.world_size > 1
            and c.save == "fsdp1_full" and c.rank0_only)


def full_state_dict_offloaded_on_cpu(case: Case) -> bool:
    c = case.checkpoint
    full = c.save in ("fsdp1_full", "full") or (c.save == "dcp" and c.full_state_dict)
    return case.family in fsdp1_families() and full and c.cpu_offload


def load_through_a_checkpoint_wrapper_applied_before_fsdp1(case: Case) -> bool:
    """A full or DCP load through set_state_dict into FSDP1 with a checkpoint wrapper applied before wrapping:
    around a module FSDP1 makes an instance of, or (use_orig_params=False) anywhere inside an instance."""
    r = case.resumed()
    if not case.checkpoint or r.family not in fsdp1_families() or case.checkpoint.load_way not in ("full", "dcp"):
        return False
    found = units(r)  # None: a size-based policy, whose instances the plan does not name
    flat = not getattr(r.plan, "use_orig_params", True)
    return any(c.before and (flat or found is None or c.path in found) for c in r.plan.checkpoints)


def dcp_load_into_fsdp1_where_a_rank_holds_no_piece_of_a_parameter(case: Case) -> bool:
    r = case.resumed()
    # (NO_SHARD too: its model state dict is full, the state dict type being replaced, but the sharded optimizer
    # state is still chunked over the ranks: Adam on a Linear(out=1) over 2 ranks fails alike, measured.)
    if not case.checkpoint or r.family != "fsdp1" or case.checkpoint.load_way != "dcp":
        return False
    from parityfuzz.run.build import build_model  # the parameters' shapes: the builder's, not a copy of its rules

    # FSDP1's sharded state dicts split each parameter in torch.chunk pieces over dim 0: a rank past the last
    # piece holds nothing (1 over 2, but also 5 over 4: 2, 2, 1, 0), whatever the smallest dimension is
    shards = r.mesh.axis_size("dp_shard")
    return any(chunk_leaves_a_rank_empty(p.shape[0], shards) for p in build_model(r).parameters() if p.dim())


def optimizer_state_dict_over_a_group_without_rank_0(case: Case) -> bool:
    """FSDP1 with use_orig_params=False (whose optimizer state dict broadcasts its keys from global rank 0) over a
    process group that leaves global rank 0 out on some ranks: a shard group of one rank while the world has more
    (HYBRID_SHARD over (n, 1), or the dp sub-mesh of a (1, tp) mesh: FSDP1 runs it as NO_SHARD, and get_state_dict
    passes that group), or the dp sub-mesh of any mesh with tp > 1; where a state dict is taken (a checkpoint
    event)."""
    if not case.checkpoint or case.plan.use_orig_params:
        return False
    one = case.mesh.axis_size("dp_shard") == 1 and case.world_size > 1
    if one and ((case.family == "fsdp1" and case.plan.sharding in HYBRID) or case.family == "fsdp1_tp"):
        return True
    return case.family == "fsdp1_tp" and case.mesh.axis_size("tp") > 1


def hybrid_sharded_recipe(case: Case) -> bool:
    return case.family == "fsdp1" and case.plan.sharding in HYBRID \
        and case.checkpoint.load_way == "fsdp1_sharded" and case.mesh.axis_size("dp_replicate") > 1


def compiled_forward_without_grad_holding_gradients(case: Case) -> bool:
    """A compiled FSDP1 forward traced while the flat parameters hold gradients, sharded (a gradient of the
    shard's size on the unsharded parameter) or in mixed precision (a gradient in another dtype than the cast
    parameter): under ``torch.no_grad()`` (the evaluation pass fails the grad-mode guard), where a gate
    at, inside or around a compiled module is traced on a rank after a backward (a later microbatch, or a later
    step whose gradients ``zero_grad`` keeps): at its first use there, or at its next use after one at the first
    forward; or where parameters of a compiled module are unfrozen at a later step whose gradients ``zero_grad``
    keeps (a retrace then)."""
    if not case.compile or (runs_unsharded(case) and not case.plan.mixed_precision()):
        return False
    return case.train.eval or _a_gate_compiled_after_a_backward(case) or _unfrozen_in_a_compiled_module(case)


def _unfrozen_in_a_compiled_module(case: Case) -> bool:
    """Parameters at, inside or around a compiled module unfrozen at a step whose ``zero_grad`` keeps the gradients
    (``set_to_none=False``): their ``requires_grad`` changed, Dynamo retraces the compiled frame at that step's
    first forward, after a backward (fsdp1/75812476: passes with ``set_to_none=True`` there, or never unfrozen)."""
    t = case.train
    compiled = case.compile.roots

    def keeps(step: int) -> bool:
        return t.zero_grad == "zeros" or (t.zero_grad == "alternate" and step % 2 == 1)

    return any(0 < f.until < t.steps and keeps(f.until)
               and any(under(f.path, (c,)) or under(c, (f.path,)) for c in compiled) for f in t.frozen)


def _a_gate_compiled_after_a_backward(case: Case) -> bool:
    """A gate at, inside or around a compiled module, traced on some rank while the flat parameters still
    hold a backward's gradients (a later microbatch of the step, or a later step where ``zero_grad`` keeps them).
    Forward ``index = step * microbatches + microbatch`` runs the gate's inner module where ``index + offset`` is
    a multiple of its period (offset: the rank's data-parallel index for a per-rank gate, else 0).  Dynamo traces
    the inner module at its first use; a compiled module at or around the gate reads the index, so a first use at
    index 0 (guarded on that index) is traced again at the next use, ``period`` later (fsdp1_tp/3ff4ab81: a
    global gate of period 2 in a compiled block, 3 microbatches; passes with period 3, with 1 or 2 microbatches,
    or uncompiled)."""
    t = case.train
    compiled = case.compile.roots

    def held(index: int) -> bool:
        return index < t.steps * t.microbatches and bool(index % t.microbatches or (index and t.zero_grad != "none"))

    def late(node, around: bool) -> bool:
        for offset in range(case.world_size if node.by_rank else 1):
            first = (-offset) % node.period
            if held(first) or (around and first == 0 and held(node.period)):
                return True
        return False

    for path, node in case.model.body.walk("body"):
        around = any(under(path, (c,)) for c in compiled)
        if node.kind == "gate" and (around or any(under(c, (path,)) for c in compiled)) and late(node, around):
            return True
    return False


def reentrant_checkpoint_inside_a_sharded_unit(case: Case) -> bool:
    """A reentrant checkpoint inside an instance's flat parameter, where FSDP1's post-backward changes the flat
    parameter: a strategy that shards (it reshards), or a mixed-precision policy (it frees the low-precision
    copy, or casts the gradient to ``reduce_dtype``), even unsharded.  Inside: on a module that is not itself an
    FSDP1 instance (``units`` unknown under a size policy: any module), or on an instance's own module with the
    checkpoint applied after wrapping (so within the instance) where a ``twice`` node calls it twice (the second
    use's recompute follows the first use's nested backward).  Unsharded in full precision only in one form
    (:func:`_frozen_recompute_before`)."""
    found = units(case)
    twice = [f"{path}.inner" for path, node in case.model.body.walk("body") if node.kind == "twice"]

    def inside(c) -> bool:
        return found is None or c.path not in found or (not c.before and under(c.path, twice))

    inner = [c for c in case.plan.checkpoints if c.reentrant and inside(c)]
    if not runs_unsharded(case) or case.mixed_precision():
        return bool(inner)
    return any(_frozen_recompute_before(case, c, found) for c in inner)


def _frozen_recompute_before(case: Case, reentrant, found) -> bool:
    """Unsharded and in full precision, the form the nested backward of ``reentrant`` breaks: a non-reentrant
    checkpoint at a module frozen at the first step (use_orig_params=True shares the flat parameter), earlier in
    the forward and in the same instance, whose recompute comes after the nested backward's post-backward and
    records nothing (CheckpointError 'A different number of tensors was saved'; fsdp1_tp/45c08468: without the
    freezing, that checkpoint or the reentrant one, it trains)."""
    order = {path: i for i, (path, _) in enumerate(case.model.module_paths())}
    frozen = tuple(f.path for f in case.train.frozen)

    def unit_of(path: str) -> str | None:
        return None if found is None else _innermost_unit(path, found)

    return any(not c.reentrant and under(c.path, frozen) and order.get(c.path, 0) < order.get(reentrant.path, 0)
               and unit_of(c.path) == unit_of(reentrant.path) for c in case.plan.checkpoints)


def _innermost_unit(path: str, found) -> str | None:
    """The innermost FSDP1 instance among ``found`` at or around the module at ``path`` (None: none)."""
    return max((u for u in found if under(path, (u,))), key=len, default=None)


def reentrant_unit_recomputed_by_an_outer_checkpoint(case: Case) -> bool:
    """A reentrant checkpoint within an instance's flat parameter (at the instance's own module, applied after
    wrapping; or at a module inside the instance that is no instance itself, either way), a non-reentrant
    checkpoint at a module strictly above that instance (its recompute in the backward runs the instance's
    forward again), and a ``param_dtype`` other than the parameters' dtype (every unshard then swaps the flat
    parameter's ``.data`` to another dtype, which gives it a new ``AccumulateGrad``).  Under a size policy
    (``units`` unknown) the instance may be any module strictly below the non-reentrant checkpoint."""
    if case.plan.precision.compute(dtypes.model_dtype(case)) == dtypes.model_dtype(case):
        return False
    found = units(case)
    outer = [c.path for c in case.plan.checkpoints if not c.reentrant]

    def above(path: str) -> bool:  # a non-reentrant checkpoint at a module strictly above the one at ``path``
        return any(o != path and under(path, (o,)) for o in outer)

    def unit_of(c) -> str | None:  # the instance whose flat parameter the reentrant checkpoint runs inside
        if c.path in found:
            return None if c.before else c.path  # before wrapping: the wrapper holds the instance, outside it
        return _innermost_unit(c.path, found)  # the innermost one around it

    if found is None:
        return any(c.reentrant and above(c.path) for c in case.plan.checkpoints)
    return any(c.reentrant and (u := unit_of(c)) is not None and above(u) for c in case.plan.checkpoints)


def tp_local_output_after_a_checkpointed_instance(case: Case) -> bool:
    """An activation checkpoint on a module holding an FSDP1 instance (strictly inside it, or the module itself
    with the checkpoint applied before wrapping: the wrapper holds the instance) in a compiled region: FSDP1's
    hooks break the graph inside Dynamo's checkpoint operator, so the whole checkpointed module runs eagerly, and
    where its output is, unchanged, the local output of a tensor-parallel module inside it (``RowwiseParallel``),
    the graph that resumes after it takes that ``AsyncCollectiveTensor`` as its input: the record
    ``tp-local-output-into-a-compiled-block`` reached through a graph break.  The whole model compiled: the
    graph resumed in the model's forward (the head's, after an embedding input; fsdp1_tp/c5f349ec).  A block
    compiled on its own: the checkpointed module's output is used by the block after it (fsdp1_tp/e543514b
    reduced: a compiled residual over a colwise Linear and a rowwise one checkpoint-wrapped before FSDP1 wraps
    it, whose add resumes the graph: the colwise Linear's gradient is zeros; FSDP1 at the root alone, an instance
    on the colwise Linear instead, the checkpoint applied after wrapping, or a (2, 1) mesh train)."""
    c = case.compile
    inner = units(case)
    # (a size policy: the instances are not known up front; one tp rank: no collective, so no such tensor; FSDP1
    # unsharded over tp meets fsdp1-no-shard-tensor-parallel-orig-params first, measured on e543514b reduced)
    if not c or inner is None or case.mesh.axis_size("tp") < 2 or runs_unsharded(case):
        return False
    nodes = dict(case.model.body.walk("body"))
    sources = local_outputs_handed_on(case)

    def holds_an_instance(k) -> bool:
        return any(w and under(w, (k.path,)) and (w != k.path or k.before) for w in inner)

    def resumed_on(k) -> bool:  # a traced graph takes the checkpointed module's output after the break
        if c.form == "model":
            return case.model.input == "embedding" and k.path in outputs_of(nodes, "body")
        return any(q != k.path and under(k.path, (q,)) and k.path not in outputs_of(nodes, q) for q in c.paths)

    return any(holds_an_instance(k) and resumed_on(k) and any(s in outputs_of(nodes, k.path) for s in sources)
               for k in case.plan.checkpoints if k.path in nodes)


def checkpointed_dropout_compiled_as_an_inference_graph(case: Case) -> bool:
    """The model compiled, and an activation checkpoint (any API) on a module holding a dropout and no parameter
    whose input needs no gradient (the dense model input, no parameter before it), where the first parameter after
    it lies in a non-root FSDP1 instance other than the checkpointed module: Dynamo's graph then ends before that
    parameter, and AOTAutograd compiles the dropout's graph for inference, whose activation-checkpoint pass refuses
    RNG ops.  Measured on fsdp1/d334252c (a dropout, then a Linear): an instance on the Linear or on the sequence
    holding both fails; the root alone, an instance on the dropout itself, or an embedding input trains.  A
    size-based auto-wrap policy (instances known only at wrap time) counts as any.  Compiled block by block
    (``compile.paths``), a compiled block holding no parameter, whose input needs no gradient, is such a graph
    whatever the instances: measured on fsdp1_tp/30e267bd (a dropout in a parameterless block, checkpointed and
    compiled, then a Linear): it fails with FSDP1 at the root alone; a Linear inside the block, the whole model
    compiled, or no checkpoint trains.  Parameters frozen at the first step (when Dynamo compiles) need no
    gradient either: measured on fsdp1_tp/446b4a4f (an MLP frozen for step 0, a checkpointed dropout, an instance
    on the Linear after it, inductor): it fails; nothing frozen, or only the MLP's second Linear, trains."""
    if not case.compile or case.model.input != "dense":
        return False
    frozen = tuple(f.path for f in case.train.frozen)  # (every entry is frozen at step 0)
    nodes = dict(case.model.body.walk("body"))
    order = list(nodes)  # pre-order: forward order
    holds_params = {p for p in order if nodes[p].kind in (*PARAM_KINDS, "mlp", "attention")}
    found = units(case)
    for region in checkpointed_paths(case):
        if region not in nodes or not any(nodes[p].kind == "dropout" for p in order if under(p, (region,))):
            continue
        if case.compile.form != "model":  # (outside the compiled blocks it runs eagerly)
            if any(under(region, (b,)) and case.model.needs_no_gradient(b, frozen) for b in case.compile.paths):
                return True
            continue
        if not case.model.needs_no_gradient(region, frozen):
            continue
        after = [p for p in order[order.index(region):] if p in holds_params and not under(p, (region,))]
        if after and (found is None or any(u and u != region and under(after[0], (u,)) for u in found)):
            return True
    return False


def _flat_parameter_sizes(case: Case) -> dict[str, list[int]]:
    """The numels of the parameters each FSDP1 instance of ``case`` flattens, in order, by instance path (the
    instances the built model gets, a size policy's too)."""
    from parityfuzz.parts.fsdp1.reference import units as built_units
    from parityfuzz.run.build import build_model  # the parameters' shapes: the builder's, not a copy of its rules

    model = build_model(case)
    found = built_units(model, case.plan)
    out = {}
    for unit in found:
        inner = [u for u in found if u != unit and under(u, (unit,))]
        module = model.get_submodule(unit) if unit else model
        out[unit] = [p.numel() for name, p in module.named_parameters(prefix=unit)
                     if not under(name.rpartition(".")[0], inner)]
    return out


def accumulated_into_a_flat_parameter_of_one_element(case: Case) -> bool:
    """use_orig_params=False, sharded over two ranks or more, several microbatches a step without ``no_sync()``,
    and an instance whose flat parameter holds one element: its shard (one element, padded) has the size of the
    unsharded parameter, so ``FlatParamHandle.prepare_gradient_for_backward`` takes the previous backward's reduced
    shard for an unsharded gradient and the next backward reduces it again (fsdp1/9adeaf48: a Scale of one weight in
    the root instance beside a Linear instance, 2 ranks, 2 microbatches; passes with one microbatch, one rank,
    use_orig_params=True, or, torch-only, a parameter of 2, 3 or 4 elements)."""
    if case.plan.use_orig_params or runs_unsharded(case) or case.train.microbatches < 2 or case.plan.no_sync:
        return False
    return any(sum(sizes) == 1 for sizes in _flat_parameter_sizes(case).values())


def rollback_where_a_rank_holds_no_piece_of_a_flat_parameter(case: Case) -> bool:
    """A rollback (``set_optimizer_state_dict`` into the live, stepped optimizer) of a flattened, sharded optimizer
    state dict (the ``dcp`` load) into FSDP1 with ``use_orig_params=True``, where some rank's piece of an instance's
    flat parameter holds nothing of one of its parameters (so that rank's optimizer has no state for it): the rank
    skips that parameter's all-gathers and the ranks' collectives pair wrongly (gloo's size abort, or silently mixed
    state where the sizes agree).  Measured on fsdp1/ef4a6744 (an embedding of 3 rows, a LayerNorm of 3, 4 ranks):
    a load into a fresh system, use_orig_params=False, or flatten_optimizer off do not fail so."""
    c = case.checkpoint
    if not (c and c.rollback_at and c.flatten_optimizer and c.load_way == "dcp" and case.family == "fsdp1"
            and case.plan.use_orig_params):
        return False
    ranks = case.mesh.axis_size("dp_shard")
    for sizes in _flat_parameter_sizes(case).values():
        chunk = -(-sum(sizes) // ranks)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        for r in range(ranks):
            lo, hi = r * chunk, (r + 1) * chunk
            if any(not (a < hi and a + n > lo) for a, n in zip(starts, sizes)):
                return True
    return False


def rollback_leaving_a_trainable_parameter_without_state_beside_stated_ones(case: Case) -> bool:
    """A rollback through FSDP1's own optimizer state dict (``FSDP.optim_state_dict_to_load``, full or sharded,
    then ``Optimizer.load_state_dict``, which replaces the whole state) of a checkpoint saved while a parameter was
    frozen (so it has no state there) into the live optimizer where it trains, with ``use_orig_params=True`` and an
    optimizer that keeps state: the loaded optimizer has no state for it while another parameter of the same FSDP1
    instance has, and the next ``FSDP.optim_state_dict`` raises.  Measured on fsdp1/723e656b (an embedding, a
    LayerNorm frozen for step 0, the root instance, Adam, a full save at step 1 rolled back at step 3): it fails,
    also with the sharded recipe, a dense input or two ranks; the LayerNorm in an instance of its own, or SGD
    without momentum, trains."""
    c = case.checkpoint
    if not (c and c.rollback_at and case.family == "fsdp1" and case.plan.use_orig_params
            and c.load_way in ("fsdp1_full", "fsdp1_sharded") and case.train.keeps_optimizer_state()):
        return False
    late = stateless_at_the_save(case)
    found = units(case)
    if not late or found is None:  # (a size policy: the instances are not known up front)
        return bool(late)
    params = case.model.param_modules()
    return any(under(p, late) and any(_innermost_unit(q, found) == _innermost_unit(p, found) and not under(q, late)
                                      for q in params) for p in params)


def compiled_attention_recomputed_through_a_later_dynamic_graph(case: Case) -> bool:
    """Inductor compiles, one by one (a ``blocks_*`` form), two instances of one class holding an attention at
    different widths, the earlier of them under a non-reentrant checkpoint; FSDP1 (use_orig_params=True, which
    compiling requires: its forward hands Dynamo the parameters as plain views that automatic dynamic shapes may
    mark dynamic).  The later instance's recompile is dynamic and, first in Dynamo's cache, serves the earlier
    one's recompute (fsdp1/a6fe85a3: passes with aot_eager, equal widths, an MLP in the attention's place, or the
    checkpoint on the later instance only)."""
    c = case.compile
    if c.backend != "inductor" or c.form == "model":
        return False
    nodes = dict(case.model.body.walk("body"))
    order = [path for path, _ in case.model.module_paths()]
    compiled = sorted((p for p in c.paths if p in nodes), key=order.index)
    non_reentrant = [k.path for k in case.plan.checkpoints if not k.reentrant]

    def holds_attention(path: str) -> bool:
        return any(n.kind == "attention" for _, n in nodes[path].walk(path))

    for i, first in enumerate(compiled):
        if not holds_attention(first) or not under(first, non_reentrant):
            continue
        width = case.model.input_width(first)
        if any(nodes[later].kind == nodes[first].kind and case.model.input_width(later) != width
               for later in compiled[i + 1:]):
            return True
    return False
