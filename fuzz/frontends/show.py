"""Human-readable rendering of a case: the model tree annotated with its parallel plan."""

from __future__ import annotations

from parityfuzz import families
from parityfuzz.case import LEAF_SUBMODULES, Case, Node
from parityfuzz.case.checkpoint import describe_checkpoint


def _leaf(node: Node, width: int) -> str:
    k = node.kind
    if k == "linear":
        return f"Linear({width} -> {node.out}{'' if node.bias else ', bias=False'})"
    if k == "act":
        return node.fn.upper() if node.fn == "gelu" else node.fn.capitalize()
    if k == "layernorm":
        return f"LayerNorm({width})"
    if k == "rmsnorm":
        return f"RMSNorm({width})"
    if k == "mlp":
        return f"MLP({width} -> {node.hidden} -> {width})"
    if k == "attention":
        return f"Attention(width {width}, {node.heads} heads)"
    if k == "dropout":
        return f"Dropout(p={node.p})"
    if k == "scale":
        return f"Scale: x * gain[{width}] (buffer) * w[{node.out}, 1, {width}].sum(0)"
    if k == "gate":
        when = f"forward index + data-parallel rank is a multiple of {node.period}" if node.by_rank else \
            f"forward index is a multiple of {node.period}"
        return f"Gate: inner(x) where the {when}, else x" + (" (per rank)" if node.by_rank else "")
    return {"seq": "Sequential", "block": "Block", "residual": "Residual: x + inner(x)",
            "twice": "Twice: inner(inner(x))"}[k]


def describe_case(case: Case) -> str:
    notes, plan_lines = families.get(case.family).describe(case)

    def mark(path: str) -> str:
        return f"   <- {notes[path]}" if notes.get(path) else ""

    t = case.train
    m = case.model
    optim = [f"lr={t.lr}"] + [f"{k}={getattr(t, k)}" for k in ("momentum", "nesterov", "maximize", "weight_decay")
                                 if getattr(t, k)]
    objective = "cross-entropy" if m.input == "embedding" else "mse"
    lines = [
        f"case {case.case_id()}: {case.family} family, {case.system_name()} vs {case.reference_name()}, "
        f"world size {case.world_size}, mesh {case.mesh.label()}, seed {case.seed}",
        f"train: {t.steps} step(s) of {t.optimizer}({', '.join(optim)}, foreach={t.foreach}), "
        f"zero_grad={t.zero_grad}, batch {t.batch} x seq {t.seq_len}, {objective} loss ({t.loss}), {t.dtype}, "
        f"{'same' if t.same_input else 'different'} inputs per data-parallel rank",
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
        lines.append(f"frozen (requires_grad=False before the parallel API): {f.path}"
                     + (f", unfrozen at step {f.until}" if f.until else ""))
    if t.microbatches > 1 and not any(line.startswith("accumulation") for line in plan_lines):
        lines.append(f"{t.microbatches} microbatches per step")
    if t.eval:
        lines.append("after every step, an evaluation forward (model.eval(), torch.no_grad())")
    if t.pad or t.pad_all_dp0 or t.label_smoothing:
        lines.append("token loss: cross_entropy(ignore_index=-100" + (f", label_smoothing={t.label_smoothing}"
                                                                      if t.label_smoothing else "") + ")"
                     + (f", {t.pad:.0%} of target tokens padding (not a sequence's first)" if t.pad else "")
                     + (", every target of data-parallel rank 0's first microbatch padding" if t.pad_all_dp0 else ""))
    if t.loss_scale:
        lines.append(f"loss scaling: GradScaler (ShardedGradScaler where the system shards gradients), init_scale "
                     f"{t.loss_scale:g}; unscale_ before clipping, step and update through it"
                     + (f"; at step {t.overflow_at} data-parallel rank 0's first backward overflows float16 ("
                        + (f"the gradient of {t.overflow_in}'s first output feature x 2**24: its weight row alone"
                           if t.overflow_in else "loss x 2**24") + "): every rank must skip that step"
                        if t.overflow_at else ""))
    if t.autocast:
        lines.append(f"every forward and its loss under torch.autocast(dtype=torch.{t.autocast}) (system and reference), "
                     "the backward outside it")
    lines += plan_lines
    c = case.compile
    if c:
        what = {"blocks_after": f"{', '.join(c.paths)}: module.compile() after the parallel API",
                "blocks_before": f"{', '.join(c.paths)}: module.compile() before the parallel API",
                "model": "torch.compile(model) around what the parallel API returns"}[c.form]
        lines.append(f"system under test compiled, backend {c.backend!r}: {what} (the reference runs eagerly)")
        if c.restart:
            lines.append("the system under test trains, then is restarted (torch._dynamo.reset(), built anew) and "
                         "trains again on the compiled graphs its first run cached (Inductor's FX graph cache and "
                         "AOTAutograd's, every rank's): the second run is compared")
    if t.nonroot:
        lines.append(f"after each step, a second step whose forward/backward runs through only {t.nonroot} "
                     f"(non-root), on inputs of width {m.input_width(t.nonroot) or 'token ids'}")
    lines += describe_checkpoint(case)
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
            if notes.get(f"{path}.{sub}"):
                lines.append(f"{'  ' * (depth + 1)}{sub}{mark(f'{path}.{sub}')}")
    out = m.body.out_width(m.in_dim)
    if m.input == "embedding":
        tied = ", weight tied to inp" if m.tie_head else ""
        lines.append(f"  head: Linear({out} -> {m.vocab}{tied}){mark('head')}")
    return "\n".join(lines)
