"""The case's model written out as torch code: the module classes it uses (the fuzzer's own, copied) and a
``build_model`` that constructs the tree in the fuzzer's order, so the seeded weights come out the same."""

from __future__ import annotations

import inspect

from parityfuzz.case import Case, Node, child_names
from parityfuzz.run import build

#: Node kinds built from a class of :mod:`parityfuzz.run.build`, and those classes' own dependencies.
CLASSES = {"scale": ["Scale"], "mlp": ["MLP"], "attention": ["Attention"], "block": ["Block"],
           "residual": ["Residual"], "twice": ["Twice"], "gate": ["ForwardClock", "Gate"]}
ACTS = {"relu": "nn.ReLU()", "gelu": "nn.GELU()", "tanh": "nn.Tanh()", "silu": "nn.SiLU()"}

NET = '''
class Net(nn.Module):
    """The root: optional embedding ``inp``, the ``body`` tree, optional ``head``."""

    def __init__(self, inp, body, head):
        super().__init__()
        if inp is not None:
            self.inp = inp
        self.body = body
        if head is not None:
            self.head = head
''' + inspect.getsource(build.Net.forward) + "\n" + inspect.getsource(build.Net.forward_alt)


def node_source(node: Node, width: int, indent: int) -> str:
    """A Python expression that constructs ``node`` on inputs of ``width`` (children first, as the fuzzer)."""
    k = node.kind
    simple = {"linear": f"nn.Linear({width}, {node.out}" + (", bias=False)" if not node.bias else ")"),
              "act": ACTS.get(node.fn, ""), "layernorm": f"nn.LayerNorm({width})", "rmsnorm": f"nn.RMSNorm({width})",
              "dropout": f"nn.Dropout({node.p})", "scale": f"Scale({width}, {node.out})",
              "mlp": f"MLP({width}, {node.hidden})", "attention": f"Attention({width}, {node.heads})"}
    if k in simple:
        return simple[k]
    pad = " " * (indent + 4)
    children = []
    for child in node.children:
        children.append(node_source(child, width, indent + 4))
        width = child.out_width(width)
    if k == "seq":
        return "nn.Sequential(\n" + "".join(f"{pad}{c},\n" for c in children) + " " * indent + ")"
    if k == "block":
        named = zip(child_names(node), children)
        return "Block([\n" + "".join(f"{pad}({n!r}, {c}),\n" for n, c in named) + " " * indent + "])"
    if k in ("residual", "twice"):
        return f"{k.capitalize()}({children[0]})"
    if k == "gate":
        return f"Gate({children[0]}, period={node.period}, clock=CLOCK, offset={'dp' if node.by_rank else 0})"
    raise ValueError(f"unknown node kind {k!r}")


def classes_used(case: Case) -> list[str]:
    out: dict[str, None] = {}
    for _, node in case.model.body.walk("body"):
        out.update(dict.fromkeys(CLASSES.get(node.kind, ())))
    return list(out)


def model_source(case: Case) -> str:
    """The classes the model needs, ``Net`` and ``build_model(dp)``."""
    m = case.model
    parts = [inspect.getsource(getattr(build, name)) for name in classes_used(case)]
    if "ForwardClock" in classes_used(case):
        parts.append("CLOCK = ForwardClock()  # which forward of the run comes next: the gates read it\n")
    parts.append(NET)
    embedding = m.input == "embedding"
    lines = [
        "def build_model(dp):",
        '    """The initial model, the same on every rank (seeded); per-rank gates are keyed by the data-parallel',
        '    index ``dp``."""',
        "    with torch.random.fork_rng(devices=[]):",
        "        torch.manual_seed(SEED)",
        f"        inp = nn.Embedding({m.vocab}, {m.in_dim})" if embedding else "        inp = None",
        f"        body = {node_source(m.body, m.in_dim, 8)}",
    ]
    if embedding:
        lines.append(f"        head = nn.Linear({m.body.out_width(m.in_dim)}, {m.vocab}, bias={not m.tie_head})")
    else:
        lines.append("        head = None")
    lines.append("        model = Net(inp, body, head)")
    if embedding and m.tie_head:
        lines.append("        model.head.weight = model.inp.weight  # tied")
    lines.append("    return model.to(DTYPE)")
    return "\n\n".join(p.rstrip() + "\n" for p in parts) + "\n\n" + "\n".join(lines) + "\n"
