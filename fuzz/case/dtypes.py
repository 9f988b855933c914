"""What dtypes a case promises: the rules of FSDP2's ``MixedPrecisionPolicy`` as plain data.

Torch-free, like :mod:`parityfuzz.case` (which imports this module, never the other way round at run time).

- The model's parameters, buffers and gradients are in the model's dtype (``float64`` after
  ``train.to_float64``): FSDP2 keeps sharded parameters and their gradients in the original dtype
  whatever the policy.
- A wrapped module computes in its policy's ``param_dtype``, or in the model's dtype without one.
- The activations reaching a module are in the compute dtype of the wrapped module that holds its parent.
- A wrapped module's output is in its ``output_dtype``, or else in its compute dtype.  The root's output
  (and so the loss) follows the same rule; every other wrapped module that computes in another dtype than
  the activations reaching it must cast its inputs and cast its output back (:func:`check_consistent`),
  so every layer sees one dtype and the root's output is well defined.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from parityfuzz.case.errors import check

if TYPE_CHECKING:
    from parityfuzz.case import Case

#: Dtypes a MixedPrecisionPolicy may name, most precise first.
MP_DTYPES = ("float64", "float32", "float16", "bfloat16")

#: Machine epsilon of each dtype (torch.finfo(dtype).eps).
EPS = {"float64": 2.220446049250313e-16, "float32": 1.1920928955078125e-07, "float16": 0.0009765625,
       "bfloat16": 0.0078125}


def model_dtype(case: Case) -> str:
    """The dtype of the model's parameters as trained (float64 after ``train.to_float64``)."""
    return "float64" if case.train.to_float64 else case.train.dtype


def unpinned_dtype(case: Case) -> str:
    """The dtype, below the model's, in which the system under test may round otherwise than the reference, as
    torch does not pin that rounding (``""``: none; the oracle allows ``UNPINNED_ULPS`` of it):

    - a compiled system's lowest compute dtype (a mixed-precision ``param_dtype``, the autocast dtype): AOTAutograd's
      decompositions and the compiled graph's casts differ from the eager kernels there (torch's decomposition
      tests hold a decomposition to the original's accuracy against float64, not to its bits);
    - the mixed-precision ``param_dtype`` in which a gradient summed from several uses of one parameter is
      accumulated over microbatches, where a reentrant checkpoint runs the backward of some uses apart
      (:func:`split_uses`): its nested ``torch.autograd.backward`` adds their part into ``.grad`` by itself
      (``torch/utils/checkpoint.py``, ``CheckpointFunction.backward``), so the system sums ``(G + a) + b`` where
      the reference, which does not checkpoint (a checkpointing bug must not hide in it), sums ``G + (a + b)``;
      torch documents no order for the contributions to a ``.grad``;
    - the autocast dtype in which the gradient of a wrapped module's input is summed, where the input is used
      outside the module too (:func:`forked_wraps`): FSDP2 runs a wrapped module's inputs through an autograd
      function of its own (its post-backward hook), so the uses inside the module are summed before the outside
      one joins them, where the reference's autograd sums them in another order (torch pins none): one float16
      rounding apart in ``corpus/fsdp2/4b515ce06f6769d0.json``."""
    found = set()
    if case.compile:
        found |= {case.train.autocast} | param_dtypes(case)
    else:
        if case.train.microbatches > 1 and split_uses(case):
            found |= param_dtypes(case)
        if case.train.autocast and forked_wraps(case):
            found.add(case.train.autocast)
    low = [d for d in found if d and EPS[d] > EPS[model_dtype(case)]]
    return max(low, key=EPS.get, default="")


def forked_wraps(case: Case) -> list[str]:
    """Paths of the FSDP2-based wraps whose module's input is also used outside it: the inner module of a
    residual, whose skip adds the same input.  FSDP2-based: the plan's ``fully_shard`` wraps, and the composable
    family's ``fully_shard`` and ``replicate_with_fsdp`` calls (its ``_ReplicateState`` is an ``FSDPState`` whose
    ``FSDPParamGroup.pre_forward`` runs the inputs through ``RegisterPostBackwardFunction`` alike); the DDP-based
    ``replicate`` adds no autograd node on the inputs."""
    inners = {f"{path}.inner" for path, node in case.model.body.walk("body") if node.kind == "residual"}
    paths = [getattr(w, "path", None) for w in getattr(case.plan, "wraps", ())]
    paths += [c.path for c in getattr(case.plan, "applies", ()) if c.api in ("fully_shard", "replicate_fsdp")]
    return [p for p in paths if p in inners]


def split_uses(case: Case) -> list[str]:
    """Paths of the reentrant checkpoints that run the backward of some, not all, uses of a parameter: one at the
    tied head or the embedding it is tied to, or one under a module called twice (each call checkpointed apart)."""
    from parityfuzz.case.model import under

    twice = [path for path, node in case.model.body.walk("body") if node.kind == "twice"]
    return [c.path for c in getattr(case.plan, "checkpoints", ()) if c.reentrant and (
        (case.model.tie_head and under("head", (c.path,)) != under("inp", (c.path,)))
        or any(c.path.startswith(t + ".") for t in twice))]


def _wrap(case: Case, path: str):
    """The FSDP2 wrap at ``path`` whose policy decides dtypes, or None (nothing is wrapped under tensor
    parallelism alone; without mixed precision every module computes in the model's dtype, whatever the
    family's plan)."""
    if not case.mixed_precision():
        return None
    return next((w for w in case.plan.wraps if w.path == path), None)


def compute_dtype(case: Case, wrapped: str) -> str:
    """The dtype the wrapped module at ``wrapped`` computes in."""
    w = _wrap(case, wrapped)
    return (w.param_dtype if w else "") or model_dtype(case)


def activation_dtype(case: Case, path: str) -> str:
    """The dtype of the floating-point activations that reach the module at ``path`` in a forward of the
    whole model: the compute dtype of the wrapped module that holds its parent (the model's for the root)."""
    if not path or not case.mixed_precision():
        return model_dtype(case)
    return compute_dtype(case, case.plan.owner(path.rpartition(".")[0]))


def output_dtype(case: Case, wrapped: str) -> str:
    """The dtype of the output of the wrapped module at ``wrapped`` (the root: ``""``)."""
    w = _wrap(case, wrapped)
    return (w.output_dtype if w else "") or compute_dtype(case, wrapped)


def pass_output_dtype(case: Case, phase: str) -> str:
    """The dtype of the output, and so of the loss, of a pass: the root's, or a non-root pass's module's."""
    return output_dtype(case, phase.removeprefix("non-root ")) if phase.startswith("non-root ") \
        else output_dtype(case, "")


def param_dtypes(case: Case) -> set[str]:
    """The dtypes a mixed-precision policy computes parameters in: FSDP1's policy's ``param_dtype``, or each FSDP2
    wrap's (empty without mixed precision)."""
    if not case.mixed_precision():
        return set()
    policy = getattr(case.plan, "precision", None)
    names = {policy.param_dtype} if policy is not None else {w.param_dtype for w in case.plan.wraps}
    return names - {""}


def clashing(train) -> frozenset[str]:
    """The low dtypes a mixed-precision policy may not compute parameters in under ``train``'s autocast region: the
    one it does not cast to (:func:`check_autocast`)."""
    return frozenset({"float16", "bfloat16"} - {train.autocast}) if train.autocast else frozenset()


def check_autocast(case: Case) -> None:
    """Autocast to one low-precision dtype does not go with parameters in the other: CPU autocast leaves the
    parameters of ops it does not cast alone, and a float16 LayerNorm weight meeting a bfloat16 input (a Linear's
    under autocast) is refused by the kernel, eagerly, on one device ("mixed dtype (CPU): expect parameter to have
    scalar type of Float"; met by the 30-minute run, the reference and the system alike).  Nor, in a family whose
    modules hold views of a flat parameter (:attr:`Family.view_parameters`), with a module called twice: the
    fifth 30-minute run met FSDP1 summing such a module's gradients one float16 rounding away from DDP; nor with
    a module called twice in a compiled system under test (field ``compile``: the strategies fall back to eager),
    whose graph casts each use anew as FSDP1's views do."""
    t = case.train
    other = param_dtypes(case) & clashing(t)
    check(not other, "train.autocast",
          f"autocast to {t.autocast} with parameters computed in {' and '.join(sorted(other))} (the mixed-precision "
          "policy's): torch's CPU kernels refuse two low-precision dtypes in one op")
    reused = [path for path, node in case.model.body.walk("body") if node.kind == "twice"]
    check(not (t.autocast and reused and _family(case).view_parameters), "train.autocast",
          f"autocast with a module called twice in a forward ({reused[0] if reused else ''}) under "
          f"{case.family}: the reference cannot model the precision its gradients are summed in (autocast caches "
          "the cast of a leaf parameter, so DDP sums the two uses' gradients in the autocast dtype; the family's "
          "modules hold views of its flat parameter, not leaves, so each use is cast anew and the gradients are "
          "summed in the parameter's dtype; torch promises neither; measured 3e-4 relative apart in float16, "
          "one rounding of the sum)")
    check(not (t.autocast and reused and case.compile), "compile",
          f"a compiled system under autocast with a module called twice in a forward ({reused[0] if reused else ''}): "
          "the reference cannot model the precision its gradients are summed in (the eager reference's autocast "
          "casts the weight once and sums the two uses' gradients in the autocast dtype; the compiled graph casts "
          "each use and sums in the parameter's dtype; torch promises neither: the 30-minute run of 2026-11-25 met "
          "2.9e-3 relative apart in bfloat16, less than one bfloat16 rounding, for ZeRO and FSDP2 alike)")


def precision(case: Case) -> str:
    """The least precise dtype the case computes, reduces or outputs in."""
    own = _family(case).precision
    if own is not None:
        return own(case)
    names = [model_dtype(case)] + [d for w in (case.plan.wraps if case.mixed_precision() else ())
                                   for d in (w.param_dtype, w.reduce_dtype, w.output_dtype) if d]
    return max(names, key=MP_DTYPES.index)


def check_consistent(case: Case) -> tuple[str, str] | None:
    """``(field, message)`` for the first wrapped module whose policy leaves a layer seeing two dtypes, or
    None.  A module computing in another dtype than the activations reaching it casts its inputs (a dense
    root; a non-root module) and, below the root, casts its output back to them."""
    for i, w in enumerate(case.plan.wraps):
        where = f"plan.wraps[{i}]"
        entry = activation_dtype(case, w.path)
        mine = compute_dtype(case, w.path)
        takes_tokens = case.model.input == "embedding" and w.path in ("", "inp")
        if mine != entry and not takes_tokens and not w.cast_forward_inputs:
            return f"{where}.cast_forward_inputs", (f"computes in {mine} but receives {entry}: it must cast its "
                                                    "inputs")
        if w.path and (w.output_dtype or mine) != entry:
            return f"{where}.output_dtype", (f"must be '' or {entry!r} (what its parent computes in): its "
                                             f"output would reach the parent in {w.output_dtype or mine}")
    return None


@dataclass(frozen=True)
class Promise:
    """What a case promises for what the trace records: its dtypes, and which ranks run alike."""

    #: Parameters, and buffers and gradients unless said below.
    state: str
    #: The output (and loss) of each kind of pass: ``""`` the root's, ``"non-root <path>"``'s, ``"eval"``.
    outputs: dict
    #: Per rank, its control flow: ranks with the same value run the same modules and so issue the same
    #: collectives (all alike, unless per-rank gates key the flow by the data-parallel index).
    flows: tuple = ()
    #: Buffers and gradients where their dtype is not ``state``'s (FSDP1's ``buffer_dtype`` and
    #: ``keep_low_precision_grads``).
    buffers: str = ""
    grads: str = ""

    def output(self, phase: str) -> str:
        return self.outputs.get(phase, self.outputs[""])

    def tensor(self, what: str, name: str) -> str:
        """The dtype of a recorded tensor: ``what`` is ``grad`` or ``param`` (buffers are ``param`` records
        named ``buffer:...``)."""
        if what == "grad":
            return self.grads or self.state
        return (self.buffers or self.state) if name.startswith("buffer:") else self.state


def _family(case: Case):
    from parityfuzz import families

    return families.get(case.family)


def promise(case: Case, generic: bool = False) -> Promise:
    """What the case promises: by the family's own rule where it has one (unless ``generic``), else by
    FSDP2's policy rules above."""
    own = _family(case).promise
    if own is not None and not generic:
        return autocast_losses(case, own(case))
    outputs = {"": output_dtype(case, "")}
    if case.train.nonroot:
        outputs[f"non-root {case.train.nonroot}"] = output_dtype(case, case.train.nonroot)
    return autocast_losses(case, Promise(state=model_dtype(case), outputs=outputs, flows=flows(case)))


def autocast_losses(case: Case, promise: Promise) -> Promise:
    """Under an autocast region (``train.autocast``) the loss is float32 whatever the output's low dtype: the
    losses the case computes (``mse_loss``, ``cross_entropy``'s ``log_softmax`` and ``nll_loss``) are among the ops
    autocast runs in float32 ("Ops that can autocast to float32", torch.amp's documentation); a float64 output is
    not cast (autocast casts float32 and lower only)."""
    if not case.train.autocast:
        return promise
    return replace(promise, outputs={phase: "float64" if dtype == "float64" else "float32"
                                     for phase, dtype in promise.outputs.items()})


def flows(case: Case) -> tuple:
    """Per rank, its control flow (:attr:`Promise.flows`)."""
    per_rank = case.model.per_rank_flow()
    return tuple(case.mesh.dp_index(rank) if per_rank else 0 for rank in range(case.world_size))
