"""Human-readable rendering of a case: the model tree annotated with its parallel plan."""

from __future__ import annotations

from fuzz.case import LEAF_SUBMODULES, Case, Node


def _leaf(node: Node, width: int) -> str:
    k = node.kind
    if k == "linear":
        return f"Linear({width} -> {node.out}{'' if node.bias else ', bias=False'})"
    if k == "act":
        return node.fn.upper() if node.fn == "gelu" else node.fn.capitalize()
    if k == "layernorm":
        return f"LayerNorm({width})"
    if k == "mlp":
        return f"MLP({width} -> {node.hidden} -> {width})"
    if k == "attention":
        return f"Attention(width {width}, {node.heads} heads)"
    if k == "dropout":
        return f"Dropout(p={node.p})"
    if k == "scale":
        return f"Scale: x * gain[{width}] (buffer) * w[{node.out}, 1, {width}].sum(0)"
    if k == "gate":
        when = f"forward index + rank is a multiple of {node.period}" if node.by_rank else \
            f"forward index is a multiple of {node.period}"
        return f"Gate: inner(x) where the {when}, else x" + (" (per rank)" if node.by_rank else "")
    return {"seq": "Sequential", "block": "Block", "residual": "Residual: x + inner(x)",
            "twice": "Twice: inner(inner(x))"}[k]


def describe_case(case: Case) -> str:
    wraps = {w.path: w for w in case.plan.wraps}
    checkpoints = {c.path: c for c in case.plan.checkpoints}
    prefetch = {p.path: p for p in case.plan.prefetch}

    def mark(path: str) -> str:
        notes = []
        c = checkpoints.get(path)
        if c and c.before:
            notes.append(f"checkpoint[{c.api}]")
        w = wraps.get(path)
        if w:
            mp = [f"{k}={getattr(w, k)}" for k in ("param_dtype", "reduce_dtype", "output_dtype") if getattr(w, k)]
            mp += ["cast_forward_inputs=False"] if not w.cast_forward_inputs else []
            notes.append(f"fully_shard(reshard_after_forward={w.reshard_after_forward}"
                         + (", offload=CPUOffloadPolicy()" if w.offload else "")
                         + (f", mp_policy=MixedPrecisionPolicy({', '.join(mp)})" if mp else "") + ")")
        if c and not c.before:
            notes.append(f"checkpoint[{c.api}]")
        p = prefetch.get(path)
        if p:
            notes += [f"prefetch {kind} {[t or '<root>' for t in getattr(p, kind)]}"
                      for kind in ("forward", "backward") if getattr(p, kind)]
        return "   <- " + ", then ".join(notes) if notes else ""

    t = case.train
    m = case.model
    optim = [f"lr={t.lr}"] + [f"{k}={getattr(t, k)}" for k in ("momentum", "weight_decay") if getattr(t, k)]
    objective = "cross-entropy" if m.input == "embedding" else "mse"
    lines = [
        f"case {case.case_id()}: {case.system} vs {case.reference}, world size {case.world_size}, "
        f"mesh {list(case.mesh.shape)} {list(case.mesh.names)}, seed {case.seed}",
        f"train: {t.steps} step(s) of {t.optimizer}({', '.join(optim)}, foreach={t.foreach}), "
        f"zero_grad={t.zero_grad}, batch {t.batch} x seq {t.seq_len}, {objective} loss ({t.loss}), {t.dtype}, "
        f"{'same' if t.same_input else 'different'} inputs per rank",
    ]
    for g in t.groups:
        lines.append(f"param group: modules {list(g.paths)} at lr x{g.lr_scale}, weight_decay={g.weight_decay}")
    if t.clip:
        lines.append(f"clip_grad_norm_(max_norm={t.clip}) before every optimizer step")
    if t.scheduler:
        lines.append({"step": "StepLR(step_size=2, gamma=0.5)",
                      "linear": f"LinearLR(1.0 -> 0.1 over {t.steps} steps)"}[t.scheduler]
                     + " stepped after every optimizer step")
    for f in t.frozen:
        lines.append(f"frozen (requires_grad=False before wrapping): {f.path}"
                     + (f", unfrozen at step {f.until}" if f.until else ""))
    if t.eval:
        lines.append("after every step, an evaluation forward (model.eval(), torch.no_grad())")
    accum = []
    if t.microbatches > 1:
        accum.append(f"{t.microbatches} microbatches, gradient sync off on non-last ones for "
                     f"{[p or '<root>' for p in t.no_sync] or 'no module'}")
    if t.is_last_backward:
        accum.append("set_is_last_backward per microbatch")
    if not t.reshard_after_backward:
        accum.append("set_reshard_after_backward(False) until the last microbatch")
    if t.unshard_first:
        accum.append("every wrapped module's unshard(async_op=True) issued first, handles left pending (1F1B)")
    if t.no_all_reduce:
        accum.append("set_requires_all_reduce(False) until the last microbatch")
    if accum:
        lines.append("accumulation: " + "; ".join(accum))
    if t.to_float64:
        lines.append("model.to(torch.float64) after fully_shard")
    if t.forward_method:
        lines.append("root called through forward_alt, registered with register_fsdp_forward_method")
    if case.plan.reduce_scatter_unused:
        lines.append("set_reduce_scatter_unused_params(True) on every wrapped module")
    if t.nonroot:
        lines.append(f"after each step, a second step whose forward/backward runs through only {t.nonroot} "
                     f"(non-root), on inputs of width {m.input_width(t.nonroot) or 'token ids'}")
    if case.delays:
        lines.append("delays: " + ", ".join(f"rank {d.rank} sleeps {d.ms} ms {d.where.replace('_', ' ')}"
                                             for d in case.delays))
    lines.append(f"model{mark('')}")
    if m.input == "embedding":
        lines.append(f"  inp: Embedding({m.vocab}, {m.in_dim}){mark('inp')}")
    else:
        lines.append(f"  input: dense, width {m.in_dim}")

    for path, node, width in m.body.walk_widths("body", m.in_dim):
        depth = path.count(".") + 1
        lines.append(f"{'  ' * depth}{path.rpartition('.')[2]}: {_leaf(node, width)}{mark(path)}")
        for sub in LEAF_SUBMODULES.get(node.kind, ()):
            if f"{path}.{sub}" in wraps:
                lines.append(f"{'  ' * (depth + 1)}{sub}{mark(f'{path}.{sub}')}")
    out = m.body.out_width(m.in_dim)
    if m.input == "embedding":
        tied = ", weight tied to inp" if m.tie_head else ""
        lines.append(f"  head: Linear({out} -> {m.vocab}{tied}){mark('head')}")
    return "\n".join(lines)
