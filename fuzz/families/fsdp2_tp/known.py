"""Preconditions of the known torch bugs of the fsdp2_tp family (``corpus/known_bugs.toml`` names them
``fsdp2_tp:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug
can show in it."""

from __future__ import annotations

from parityfuzz.case import dtypes
from parityfuzz.case import Case, under
from parityfuzz.case.mesh import chunk_leaves_a_rank_empty
from parityfuzz.systems.compiled.known import local_outputs_handed_on, outputs_of


def _split_sizes(case: Case) -> list[int]:
    """The size of the dimension each colwise/rowwise module splits over tp."""
    def split(p) -> int:
        if p.path == "inp":
            return case.model.vocab
        return case.model.output_width(p.path) if p.style == "colwise" else case.model.input_width(p.path) or 0

    return [split(p) for p in case.plan.tp if p.style in ("colwise", "rowwise")]


def _has_bias(case: Case, path: str) -> bool:
    """Whether the Linear at ``path`` has a bias (the Linears inside MLP and attention blocks all do)."""
    if path == "head":
        return not case.model.tie_head
    node = dict(case.model.body.walk("body")).get(path)
    return node.bias if node is not None else True


def _fully_sharded(case: Case) -> bool:
    """Whether FSDP2 shards the tensor-parallel model: a wrap of the plan, or under pipelining (whose records share
    these preconditions) each stage over the mesh's ``dp_shard`` axis."""
    return "dp_shard" in case.mesh.names if case.family == "pipeline" else bool(case.plan.wraps)


def clipping_a_partly_tensor_parallel_fsdp2_model(case: Case) -> bool:
    """Gradients on two meshes: FSDP2 over some tensor-parallel modules and some plain ones."""
    parallel = {p.path for p in case.plan.tp}
    return (case.train.clip > 0 and _fully_sharded(case) and bool(parallel)
            and any(m not in parallel for m in case.model.param_modules()))


def fsdp2_over_an_empty_tensor_parallel_shard(case: Case) -> bool:
    """FSDP2 over a parallelized module whose split dimension leaves some tp rank nothing."""
    tp = case.mesh.axis_size("tp")
    return _fully_sharded(case) and any(chunk_leaves_a_rank_empty(n, tp) for n in _split_sizes(case))


def loss_parallel_with_a_rank_holding_no_vocabulary(case: Case) -> bool:
    return case.plan.loss_parallel and chunk_leaves_a_rank_empty(case.model.vocab, case.mesh.axis_size("tp"))


def tp_replicated_gradient_under_a_reduce_dtype(case: Case) -> bool:
    """A parameter that TP replicates (a SequenceParallel module's, a RowwiseParallel Linear's bias: its gradient
    is Partial over tp) in an FSDP2 group whose reduce_dtype is not that gradient's dtype."""
    plan = case.plan
    wraps = {w.path: w for w in plan.wraps}
    kinds = dict(case.model.module_paths())
    for p in plan.tp:
        replicated = p.style == "sequence" or (p.style == "rowwise" and kinds[p.path] == "linear"
                                               and _has_bias(case, p.path))
        w = wraps.get(plan.owner(p.path)) if replicated else None
        if w is not None and w.reduce_dtype and w.reduce_dtype != (w.param_dtype or dtypes.model_dtype(case)):
            return True
    return False


def a_frozen_sequence_parallel_module(case: Case) -> bool:
    return any(p.style == "sequence" and case.train.frozen_at(f"{p.path}.weight", 0) for p in case.plan.tp)


def foreach_zeroing_of_sequence_parallel_gradients(case: Case) -> bool:
    """TP alone (no FSDP2 to redistribute gradients), a sequence-parallel norm, foreach zero_grad(set_to_none=False)."""
    return (not _fully_sharded(case) and case.train.foreach and case.train.zero_grad in ("zeros", "alternate")
            and case.train.steps > 1
            and any(p.style == "sequence" for p in case.plan.tp))


def foreach_sgd_weight_decay_over_plain_and_tensor_parallel_params(case: Case) -> bool:
    """TP alone (plain and DTensor parameters in one optimizer), foreach SGD with momentum and weight decay, and
    a parameter whose momentum buffer starts later than the others' (frozen at first)."""
    t = case.train
    parallel = [p.path for p in getattr(case.plan, "tp", ()) if p.style in ("colwise", "rowwise", "sequence")]
    return (not _fully_sharded(case) and t.optimizer == "sgd" and t.foreach and t.momentum > 0
            and (t.weight_decay > 0 or any(g.weight_decay > 0 for g in t.groups)) and any(f.until for f in t.frozen)
            and bool(parallel) and any(not under(m, parallel) for m in case.model.param_modules()))


def a_view_of_a_sharded_dimension_of_size_one(case: Case) -> bool:
    """A tensor-parallel Linear whose split dimension has size 1, viewed so that DTensor's view rule drops the
    sharded size-1 dim: a RowwiseParallel Linear of input width 1 at sequence length 1 (the forward's view
    (b, 1, 1) -> (b, 1), any tp), or on a tp axis of size 1 a ColwiseParallel Linear of output width 1 with a bias
    (the backward's view of the bias gradient (1, 1) -> (1,), any sequence length; over a larger tp the gradient is
    Replicate by then, the record a-split-dimension-smaller-than-tp)."""
    tp = case.mesh.axis_size("tp")
    model = case.model
    for p in case.plan.tp:
        if p.path == "inp":
            continue
        if p.style == "rowwise" and model.input_width(p.path) == 1 and case.train.seq_len == 1:
            return True
        if p.style == "colwise" and tp == 1 and model.output_width(p.path) == 1 and _has_bias(case, p.path):
            return True
    return False


def a_split_dimension_smaller_than_tp(case: Case) -> bool:
    """A parallelized module whose split dimension is smaller than tp (DTensor's ``is_tensor_shardable`` refuses a
    Shard of a dimension smaller than the mesh, so the weight's gradient comes back Replicate); a dimension that
    merely leaves the last rank empty (5 over 4) trains."""
    tp = case.mesh.axis_size("tp")
    return any(0 < n < tp for n in _split_sizes(case))


def init_optim_state_of_a_partly_tensor_parallel_model(case: Case) -> bool:
    """A checkpoint load through ``set_state_dict`` into a fresh foreach optimizer over tensor-parallel parameters
    beside plain ones: the fsdp2_tp family's, or a pipeline's stages over a ``tp`` axis."""
    r = case.resumed()
    return (bool(case.checkpoint) and (r.family == "fsdp2_tp" or (r.family == "pipeline" and "tp" in r.mesh.names))
            and case.train.foreach and case.checkpoint.load_way in ("dcp", "full"))


def grad_scaler_over_a_partly_tensor_parallel_model(case: Case) -> bool:
    """``torch.amp.GradScaler`` (the tensor-parallel reference's, ``ddp_mp_tp``) over a model that tensor
    parallelism covers in part, where some ``unscale_`` may find a plain gradient first in its device and dtype
    group (``found_inf_reduce_handler`` reads the placements of the group's first gradient only): in the
    optimizer's order (the default group, then the case's groups, each in model order), a module holding
    parameters that no colwise, rowwise or sequence style reaches comes before every tensor-parallel one that has
    a gradient in every step (one neither frozen at some step nor under a gate)."""
    if not case.train.loss_scale or case.reference_name() != "ddp_mp_tp":
        return False
    t = case.train
    parallel = [p.path for p in case.plan.tp if p.style in ("colwise", "rowwise", "sequence")]
    sometimes = [*case.model.gates(), *(f.path for f in t.frozen)]

    def group(module: str) -> int:
        index = t.group_of(f"{module}.weight")
        return -1 if index is None else index

    for module in sorted(case.model.param_modules(), key=group):
        if not under(module, parallel):
            return True
        if not under(module, sometimes):
            return False
    return False


def a_rowwise_embedding_in_a_compiled_model(case: Case) -> bool:
    """The whole model compiled (``torch.compile(model)``) over a RowwiseParallel input embedding, whose output
    DTensor carries a ``_MaskPartial`` placement into Dynamo's fake-tensor run."""
    return case.compile.form == "model" and bool(case.compile) and any(
        p.path == "inp" and p.style == "rowwise" for p in case.plan.tp)


def tp_local_output_after_a_checkpointed_unit(case: Case) -> bool:
    """The whole model compiled, and a wrapper checkpoint (``checkpoint_wrapper`` / ``apply_activation_checkpointing``;
    the composable one trains) on a module that is, or holds, a non-root ``fully_shard`` unit: the unit's hooks
    break the graph inside Dynamo's checkpoint operator, so the checkpointed module runs eagerly, and where its
    output is, unchanged, the local output of a tensor-parallel module inside it (``RowwiseParallel``), the graph
    that resumes after it (more of the body, or the head) takes that ``AsyncCollectiveTensor`` as its input: the
    record ``tp-local-output-into-a-compiled-block`` reached through a graph break.  Measured on fsdp2_tp/a9525c31
    (a colwise then a rowwise Linear, the rowwise one checkpointed, then a sequence-parallel norm): fully_shard on
    the rowwise Linear fails; on the colwise one or the root alone, the composable checkpoint, or no checkpoint
    trains."""
    if not case.compile or case.compile.form != "model":
        return False
    nodes = dict(case.model.body.walk("body"))
    sources, last = local_outputs_handed_on(case), outputs_of(nodes, "body")
    units = [w.path for w in case.plan.wraps if w.path]
    wrapped = [c.path for c in case.plan.checkpoints if c.api != "composable"]
    return any(any(under(u, (p,)) for u in units) and any(s in outputs_of(nodes, p) for s in sources)
               and (p not in last or case.model.input == "embedding")
               for p in wrapped if p in nodes)


def compiled_tensor_parallel_block_after_another_shape(case: Case) -> bool:
    """Modules compiled one by one (``compile.paths``), two of them of one kind of the harness's own (an attention,
    an MLP: one ``forward``, one code object) with other sizes (heads, hidden or input width), and the later one
    holding a colwise or rowwise module: Dynamo recompiles that forward with automatic dynamic shapes over DTensors,
    and AOTAutograd's backward trace hashes a DTensorSpec holding SymInts.  Measured on fsdp2_tp/0ff563ba (a plain
    one-head attention, then a two-head one colwise/rowwise, both compiled): it fails with fully_shard at the root
    or on each block; the two the other way round, the parallel one compiled alone, two alike in size, or the whole
    model compiled, train."""
    c = case.compile
    if not c or c.form == "model":
        return False
    nodes = dict(case.model.body.walk("body"))
    parallel = [p.path for p in case.plan.tp if p.style in ("colwise", "rowwise")]
    seen: dict[str, set] = {}
    for path, node in nodes.items():
        if path not in c.paths or node.kind not in ("attention", "mlp"):
            continue
        shape = (node, case.model.input_width(path))
        earlier = seen.setdefault(node.kind, set())
        if any(under(p, (path,)) for p in parallel) and earlier - {shape}:
            return True
        earlier.add(shape)
    return False


def compiled_restart_over_an_uneven_colwise_unit(case: Case) -> bool:
    """A restart on a warm cache (``compile.restart``, inductor) with a module inside the compiled region that is
    ``fully_shard``-ed itself and colwise-parallel over output features tp does not divide (local shards of two
    sizes): AOTAutograd's cache key hashes a DTensor input by its global spec, so the ranks' graphs share one key
    and a rank is served another's.  Measured on fsdp2_tp/b295a65c reduced (an MLP of hidden 3 over tp 2, fc1
    colwise with ``use_local_output=False``, fc2 rowwise, compiled by inductor): fully_shard on fc1 fails, the block
    compiled or the whole model; fully_shard at the root only, on the MLP, or on fc2 alone, hidden 4, or no restart
    train."""
    c = case.compile
    if not c.restart:
        return False
    tp = case.mesh.axis_size("tp")
    compiled = c.roots
    wrapped = {w.path for w in case.plan.wraps}
    return any(p.style == "colwise" and p.path in wrapped and under(p.path, compiled)
               and case.model.output_width(p.path) % tp for p in case.plan.tp)


def compiled_tp_output_hooks_of_two_widths_after_a_graph_break(case: Case) -> bool:
    """The model compiled with a ``fully_shard`` below the root (FSDP2's disabled hooks break the graph, so the
    parallel styles' output hooks run as frames of their own, one code object for every module), two colwise or
    rowwise modules with the same output hook (style, output layout, ``use_local_output``) and outputs of different
    widths, one of them as wide as the batch or the sequence (Dynamo's duck-sized replay of the output view pins
    that width, and no guard checks it), and a second call of the model.  Measured on fsdp2_tp/ab1e2a2b (Linears of
    7, 4 and 4 outputs, rowwise, colwise, rowwise, seq_len 4): it fails from the second call (microbatch or step);
    one call, no compile, fully_shard at the root only, 7 -> 4 outputs, seq_len 2, or tensor parallelism on the last
    two only train."""
    t = case.train
    if not case.compile or not any(w.path for w in case.plan.wraps) or t.steps * t.microbatches < 2 and not t.eval:
        return False
    sizes = {t.batch, t.seq_len, t.batch // max(1, t.microbatches)}
    widths: dict[tuple, set[int]] = {}
    for p in case.plan.tp:
        if p.style in ("colwise", "rowwise"):
            widths.setdefault((p.style, p.output_layout, p.use_local_output), set()).add(
                case.model.output_width(p.path))
    return any(len(w) > 1 and w & sizes for w in widths.values())


def compiled_tp_output_hook_first_over_a_bias_free_linear(case: Case) -> bool:
    """The second form of the output hook's unguarded specialization: modules compiled (blocks or the whole model)
    whose Linears are ``fully_shard``-ed on their own (FSDP2's disabled hooks make each one's style hooks frames of
    their own), two of them with the same output hook and outputs of different widths, the first of the hook's
    Linears without a bias (its output is no view: the hook's first frames keep no ``_base``) and the first one of
    another width with a bias (its output is a view of a 2-D base, first met at the dynamic recompile and so
    fakified with static sizes: the replay pins the width, unguarded), and a second call.  Measured on
    fsdp2_tp/029cb439 (a bias-free colwise Linear of 8 outputs, then an attention whose colwise v of 5 outputs is
    fully_shard'ed): inductor, aot_eager, the whole model compiled and two steps in place of three microbatches
    fail; a bias on the first Linear, 5 outputs on it, one call, v not fully_shard'ed or the attention not
    parallelized train."""
    t = case.train
    c = case.compile
    if not c or t.steps * t.microbatches < 2:
        return False
    roots = c.roots
    wrapped = {w.path for w in case.plan.wraps}
    styles = {p.path: p for p in case.plan.tp if p.style in ("colwise", "rowwise")}
    groups: dict[tuple, list[str]] = {}
    for path, _ in case.model.module_paths():  # forward order
        p = styles.get(path)
        if p is not None and path in wrapped and under(path, roots):
            groups.setdefault((p.style, p.output_layout, p.use_local_output), []).append(path)
    for paths in groups.values():
        first = paths[0]
        width = case.model.output_width(first)
        other = next((q for q in paths if case.model.output_width(q) != width), None)
        if other is not None and not _has_bias(case, first) and _has_bias(case, other):
            return True
    return False


def composable_checkpoint_over_a_layout_changing_input_hook(case: Case) -> bool:
    """The composable ``checkpoint()`` (applied after ``parallelize_module``, as the family always applies it) on a
    module whose own ``PrepareModuleInput`` changes the input's layout and hands on the local tensor: the recompute
    calls the module again, so the style's pre-hook converts the already converted input a second time.  Measured
    on fsdp2_tp/166c89c8 (a rowwise Linear with sequence-sharded output, then a Linear prepared shard_seq -> replicate
    and checkpointed): it fails with or without fully_shard and before or after it; ``checkpoint_wrapper``,
    ``apply_activation_checkpointing``, no checkpoint, the checkpoint on another module (the colwise, the rowwise or
    the root) or an identity ``prepare_input`` (shard_seq -> shard_seq) train."""
    changing = {p.path for p in case.plan.tp if p.style == "prepare_input" and p.use_local_output
                and p.input_layout != p.desired_layout}
    return any(c.api == "composable" and c.path in changing for c in case.plan.checkpoints)


def colwise_linear_recomputed_eagerly_under_a_checkpoint(case: Case) -> bool:
    """A block compiled on its own (not the whole model) at or under a module a non-reentrant activation checkpoint
    holds, holding a ``ColwiseParallel`` Linear and, after it, a Linear whose forward frame Dynamo compiles no graph
    for (one fully_shard'ed on its own, or one no style parallelizes and no fully_shard holds): Dynamo marks
    ``nn.Linear.forward``'s code skipped from then on, so the recompute runs the colwise Linear eagerly, saving
    DTensors where its compiled graph saved plain tensors.  Measured on fsdp2_tp/20a0cf69 (a residual of a colwise
    Linear and a rowwise one fully_shard'ed on its own, the root checkpointed, the residual compiled): the
    checkpoint on the residual fails alike; no checkpoint, eager, the following Linear under the root's fully_shard
    only (rowwise, or plain after a colwise gathering its output) train.  Torch-only: a plain Linear after the
    colwise one fails without FSDP; a rowwise one without FSDP trains; a reentrant checkpoint trains."""
    c = case.compile
    if not c or c.form == "model":
        return False
    checkpointed = [k.path for k in case.plan.checkpoints if not k.reentrant]
    styles = {p.path: p.style for p in case.plan.tp}
    wraps = [w.path for w in case.plan.wraps]
    order = [path for path, node in case.model.body.walk("body") if node.kind == "linear"]

    def no_graph(path: str) -> bool:
        return path in wraps or (path not in styles and not any(under(path, (w,)) for w in wraps))

    for q in c.paths:
        if not any(under(q, (p,)) for p in checkpointed):
            continue
        inside = [p for p in order if p != q and under(p, (q,))]
        cols = [i for i, p in enumerate(inside) if styles.get(p) == "colwise"]
        if cols and any(no_graph(p) and styles.get(p) != "colwise" for p in inside[cols[0] + 1:]):
            return True
    return False


def compiled_plain_then_colwise_query_each_fully_shard_ed(case: Case) -> bool:
    """Modules compiled one by one, an earlier one holding a Linear that is ``fully_shard``-ed on its own and that no
    style parallelizes, a later one an attention whose query projection is colwise-parallel and ``fully_shard``-ed
    on its own, over tp of 2 or more: each such Linear's forward is a frame of its own (FSDP's hooks break the graph),
    and ``nn.Linear.forward``, compiled first over plain tensors, is recompiled with dynamic shapes over the query's
    DTensors.  Measured on fsdp2_tp/bb83f5c5 reduced (two two-head attentions, the second colwise/rowwise, both
    compiled): the first one's k or q fully_shard'ed with the second's q fails; the first one's Linear not
    fully_shard'ed, the second's k in place of its q, or the second attention fully_shard'ed whole train; the whole
    model compiled fails alike (the fault benchmark's fsdp2_tp target, 8d02fdf7)."""
    c = case.compile
    if not c or case.mesh.axis_size("tp") < 2:
        return False
    compiled = c.roots
    styles = {p.path: p.style for p in case.plan.tp}
    wrapped = {w.path for w in case.plan.wraps}
    nodes = dict(case.model.body.walk("body"))
    plain_seen = False
    for linear, kind in case.model.module_paths():  # (forward order, an attention's q, k, v and o among them)
        if kind != "linear" or linear not in wrapped or not under(linear, compiled):
            continue
        parent, _, name = linear.rpartition(".")
        if name == "q" and getattr(nodes.get(parent), "kind", "") == "attention" and styles.get(linear) == "colwise" \
                and plain_seen:
            return True
        plain_seen = plain_seen or linear not in styles
    return False
