"""Validity rules of tensor-parallel plans (``plan.tp``, ``plan.loss_parallel``): every family that applies them
(``fsdp2_tp``, ``fsdp1_tp``).

The rules follow the activations: :func:`check_rules` walks the model in execution order and tracks the layout of what
reaches each module over the ``tp`` axis (``replicate``: the whole tensor on every tp rank; ``shard_seq``: a shard
of the sequence, ``Shard(1)``; ``shard_last``: a shard of the last dimension, ``Shard(-1)``) and whether it is a
DTensor or a plain tensor.  A style's layouts are declarations the user makes about activations (torch's words:
input layouts "annotate the input tensor to become a DTensor"); a plan is valid only where every declaration is
true and every module that no style covers gets what it would get without tensor parallelism.

Why it matters, on torch 2.13 (the case a 1-minimal reduction once handed over as a torch bug): a
``RowwiseParallel(output_layouts=Shard(1))`` before an RMSNorm that only a ``PrepareModuleOutput`` touches runs
the norm on each rank's tokens; its weight's gradient is never reduced across the tp ranks and the replicas
drift.  Torch documents such norms under ``SequenceParallel``: the plan breaks
:data:`PARAMETERS_SEE_FULL_TENSORS`, and ``repro`` refuses it naming that rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.model import LEAF_SUBMODULES, PARAM_KINDS, Node, child_names
from parityfuzz.rules import Rule, require

_STYLE_PY = "torch/distributed/tensor/parallel/style.py"

DECLARED_INPUT = Rule(
    "tp.declared-input",
    "a style's input layout (its input_layouts, or the documented default) is the layout that reaches the module",
    f"{_STYLE_PY}: ColwiseParallel input_layouts 'is used to annotate the input tensor to become a DTensor. If not "
    "specified, we assume the input tensor to be replicated'; RowwiseParallel: 'If not specified, we assume the input "
    "tensor to be sharded on the last dimension'; SequenceParallel: 'If the input passed in to this nn.Module is a "
    "torch.Tensor, it assumes that the input is already sharded on the sequence dimension'; PrepareModuleInput "
    "input_layouts: 'The DTensor layouts of input tensors for the nn.Module, this is used to convert the input "
    "tensors to DTensors'")
DECLARED_OUTPUT = Rule(
    "tp.declared-output",
    "PrepareModuleOutput's output_layouts is the layout the module's output has",
    f"{_STYLE_PY}: PrepareModuleOutput output_layouts: 'The DTensor layouts of output tensors for the nn.Module, "
    "this is used to convert the output tensors to DTensors if they are torch.Tensor'")
PARAMETERS_SEE_FULL_TENSORS = Rule(
    "tp.parameters-see-full-tensors",
    "a module with parameters that no style parallelizes gets the whole activation; a norm that runs on sequence "
    "shards is under SequenceParallel",
    f"{_STYLE_PY}: 'SequenceParallel replicates a compatible nn.Module parameters and runs the sharded computation "
    "with input sharded on the sequence dimension. This currently supports nn.LayerNorm, nn.Dropout, and the RMSNorm "
    "python implementation' (a module no style covers keeps plain parameters: nothing reduces their gradients over "
    "the tp ranks)")
ELEMENTWISE_ON_SHARDS = Rule(
    "tp.elementwise-on-shards",
    "between styles, sharded activations pass only through elementwise modules (activations) and containers that "
    "hand back the layout they were given",
    "torch/distributed/tensor/parallel/__init__.py parallelize_module: a plan parallelizes 'module or sub_modules'; "
    "what is not in the plan runs its ordinary forward on whatever tensor it gets (a residual adds a shard to the "
    "activation it was given; a module called twice gets its own output back)")
PLAIN_WITHOUT_STYLE = Rule(
    "tp.plain-without-style",
    "a module that no style covers gets a plain tensor, not a DTensor",
    "torch/distributed/tensor/experimental/__init__.py implicit_replication: 'allows DTensor to implicitly treat all "
    "non-DTensors (torch.Tensor) in the program be replicate DTensor s' only inside that context: outside it, "
    "DTensor refuses 'mixed torch.Tensor and DTensor'")
EVEN_LOCAL_SHARDS = Rule(
    "tp.even-local-shards",
    "a plain tensor that a style turns into a DTensor is evenly sharded (tp divides the sharded dimension)",
    "torch/distributed/tensor/_api.py DTensor.from_local shape: 'this needs to be provided if the shape of "
    "local_tensor are different across the ranks. If not provided, shape will be computed assuming the given "
    "distributed tensor is evenly sharded across ranks' (the parallel styles call it without a shape)")
ATTENTION_HEADS = Rule(
    "tp.attention-heads",
    "q, k and v of one attention give the same layout (all sharded over whole heads, or all whole)",
    "torch's tensor-parallel tutorial ('Large Scale Transformer model training with Tensor Parallel'): attention's "
    "q/k/v are ColwiseParallel and its output projection RowwiseParallel, 'so that the attention computation is "
    "sharded on the heads dimension'")
LOSS_INPUT = Rule(
    "tp.loss-input",
    "the model's output is the whole tensor, or under loss_parallel() logits sharded on the class dimension as a "
    "DTensor",
    "torch/distributed/tensor/parallel/loss.py loss_parallel: 'A context manager that enables loss parallelism, "
    "where efficient parallelized loss computation can be performed when the input is sharded on the class "
    "dimension' and 'the input ... is a DTensor'")

LOSS_PARALLEL_SMOOTHING = Rule(
    "tp.loss-parallel-smoothing",
    "no label smoothing under loss_parallel()",
    "torch/distributed/tensor/parallel/loss.py loss_parallel, of cross_entropy's arguments: 'label_smoothing: "
    "Currently not supported.'")

STYLE_PREPARES_ITS_INPUT = Rule(
    "tp.style-prepares-its-input",
    "a module that a parallel style parallelizes takes no PrepareModuleInput (the style converts its input itself)",
    f"{_STYLE_PY}: PrepareModuleInput is for 'configur[ing] the nn.Module's inputs ... without distribut[ing] the "
    "module parameters to DTensors' (docs/source/distributed.tensor.parallel.md); ColwiseParallel, RowwiseParallel "
    "and SequenceParallel each prepare their input from input_layouts to the layout they compute on")

RULES = (DECLARED_INPUT, STYLE_PREPARES_ITS_INPUT, DECLARED_OUTPUT, PARAMETERS_SEE_FULL_TENSORS, ELEMENTWISE_ON_SHARDS, PLAIN_WITHOUT_STYLE,
         EVEN_LOCAL_SHARDS, ATTENTION_HEADS, LOSS_INPUT, LOSS_PARALLEL_SMOOTHING)

#: Leaf kinds without parameters that act elementwise (per value), so a shard in gives the shard of the result.
ELEMENTWISE = ("act",)
FULL = "replicate"


@dataclass(frozen=True)
class Flow:
    """What reaches a module over the tp axis: its layout and whether it is a DTensor."""

    layout: str = FULL
    dtensor: bool = False

    def __str__(self) -> str:
        return f"{'a DTensor' if self.dtensor else 'a plain tensor'} {_NAMES[self.layout]}"


_NAMES = {FULL: "holding the whole activation", "shard_seq": "sharded on the sequence (Shard(1))",
          "shard_last": "sharded on the last dimension (Shard(-1))"}
#: The input layout each style assumes where the plan gives none (the docstrings quoted in DECLARED_INPUT).
DEFAULT_INPUT = {"colwise": FULL, "rowwise": "shard_last", "sequence": "shard_seq"}
#: The output layout of each style where the plan gives none.
DEFAULT_OUTPUT = {"colwise": "shard_last", "rowwise": FULL, "sequence": "shard_seq"}


def check_rules(case) -> None:
    """Raise :class:`parityfuzz.rules.RuleViolation` where ``case``'s tensor-parallel plan breaks a rule of :data:`RULES`
    (the styles' own fields were checked before: known styles and layouts on modules that exist)."""
    plan, model = case.plan, case.model
    require(not (plan.loss_parallel and case.train.label_smoothing), LOSS_PARALLEL_SMOOTHING,
            "train.label_smoothing", f"label_smoothing={case.train.label_smoothing} under loss_parallel()")
    if not plan.tp:
        return
    walker = _Walker(case)
    flow = Flow()  # token ids or dense inputs: the same on every rank of a tp group
    if model.input == "embedding":
        flow = walker.module("inp", "embedding", flow, _leaf)
    flow = walker.node(model.body, "body", flow)
    if model.input == "embedding":
        flow = walker.module("head", "linear", flow, _leaf)
    if plan.loss_parallel:
        require(flow == Flow("shard_last", True), LOSS_INPUT, "plan.loss_parallel",
                f"the loss gets {flow}")
    else:
        require(flow.layout == FULL, LOSS_INPUT, "plan.tp", f"the loss gets {flow}")


def _leaf(walker: _Walker, path: str, kind: str, flow: Flow) -> Flow:
    """A module of the model that no style covers and whose children (if any) the walk does not enter."""
    if kind in ELEMENTWISE:
        return flow
    rule = PARAMETERS_SEE_FULL_TENSORS if kind in PARAM_KINDS else ELEMENTWISE_ON_SHARDS
    require(flow.layout == FULL, rule, walker.field(path), f"{path!r} (a {kind} no style parallelizes) gets {flow}")
    require(not flow.dtensor, PLAIN_WITHOUT_STYLE, walker.field(path), f"{path!r} (a {kind}) gets {flow}")
    return flow


class _Walker:
    def __init__(self, case):
        self.case = case
        self.tp = case.mesh.axis_size("tp")
        self.entries: dict[str, dict] = {}
        for i, p in enumerate(case.plan.tp):
            self.entries.setdefault(p.path, {})[p.style] = (i, p)

    def field(self, path: str) -> str:
        """The dotted field of the first plan entry on ``path`` (``plan.tp`` where none is)."""
        found = self.entries.get(path)
        return f"plan.tp[{min(i for i, _ in found.values())}]" if found else "plan.tp"

    def module(self, path: str, kind: str, flow: Flow, compute) -> Flow:
        """``flow`` through the module at ``path``: its PrepareModuleInput, its style or its own ``compute``
        (``compute(walker, path, kind, flow)``), its PrepareModuleOutput."""
        styles = self.entries.get(path, {})
        main = [(i, p) for style, (i, p) in styles.items() if style in DEFAULT_INPUT]
        if "prepare_input" in styles:
            i, p = styles["prepare_input"]
            require(not main, STYLE_PREPARES_ITS_INPUT, f"plan.tp[{i}]", f"{path!r} has a style and a PrepareModuleInput")
            flow = self._declared(flow, p.input_layout, DECLARED_INPUT, f"plan.tp[{i}].input_layout", path)
            flow = Flow(p.desired_layout, not p.use_local_output)
        if main:
            i, p = main[0]
            layout = p.input_layout or DEFAULT_INPUT[p.style]
            if p.style == "sequence" and flow.dtensor:  # a DTensor is redistributed to Shard(1) (the docstring)
                layout = flow.layout
            flow = self._declared(flow, layout, DECLARED_INPUT, f"plan.tp[{i}].input_layout", path)
            flow = Flow(p.output_layout or DEFAULT_OUTPUT[p.style], not p.use_local_output)
        else:
            flow = compute(self, path, kind, flow)
        if "prepare_output" in styles:
            i, p = styles["prepare_output"]
            flow = self._declared(flow, p.output_layout, DECLARED_OUTPUT, f"plan.tp[{i}].output_layout", path,
                                  output=True)
            flow = Flow(p.desired_layout, not p.use_local_output)
        return flow

    def _declared(self, flow: Flow, declared: str, rule: Rule, field: str, path: str, output: bool = False) -> Flow:
        require(flow.layout == declared, rule, field,
                f"{path!r} is declared to get a tensor {_NAMES[declared]} but gets {flow}")
        if not flow.dtensor and declared != FULL:
            size = self._sharded_size(path, declared, output)
            require(size % self.tp == 0, EVEN_LOCAL_SHARDS, field,
                    f"{path!r} gets plain shards of a dimension of {size} over tp={self.tp}: keep it a DTensor "
                    "(use_local_output=False where it is made)")
        return flow

    def _sharded_size(self, path: str, layout: str, output: bool) -> int:
        if layout == "shard_seq":
            return self.case.train.seq_len
        model = self.case.model
        width = model.output_width(path) if output else model.input_width(path)
        return width if width is not None else self.tp  # token ids: never sharded on their last dimension

    def node(self, node: Node, path: str, flow: Flow) -> Flow:
        return self.module(path, node.kind, flow, lambda w, p, k, f: w._compute(node, p, f))

    def _compute(self, node: Node, path: str, flow: Flow) -> Flow:
        kind = node.kind
        if kind in ("seq", "block"):
            for name, child in zip(child_names(node), node.children):
                flow = self.node(child, f"{path}.{name}", flow)
            return flow
        if kind in ("residual", "twice", "gate"):
            inner = f"{path}.inner"
            out = self.node(node.children[0], inner, flow)
            require(out == flow, ELEMENTWISE_ON_SHARDS, self.field(inner),
                    f"the {kind} at {path!r} gives its child {flow} and gets back {out}")
            return flow
        if kind == "mlp":
            hidden = self.module(f"{path}.fc1", "linear", flow, _leaf)
            return self.module(f"{path}.fc2", "linear", hidden, _leaf)  # F.gelu between: elementwise
        if kind == "attention":
            q, k, v = (self.module(f"{path}.{x}", "linear", flow, _leaf) for x in "qkv")
            require(q == k == v and not q.dtensor and q.layout in (FULL, "shard_last"), ATTENTION_HEADS,
                    self.field(f"{path}.q"), f"q, k and v of {path!r} give {q}, {k} and {v}")
            return self.module(f"{path}.o", "linear", q, _leaf)
        return _leaf(self, path, kind, flow)


assert set(LEAF_SUBMODULES) == {"mlp", "attention"}, "a new leaf block needs its flow in _Walker._compute"

__all__ = ["RULES", "Flow", "check_rules"]
