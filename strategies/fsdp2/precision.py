"""Mixed precision: a ``MixedPrecisionPolicy`` for each wrapped module.

The root computes in ``param_dtype`` bf16, fp16, fp32 (below a float64 model)
or the model's own dtype.  Every other wrapped module computes in the dtype
its activations arrive in (that of the nearest wrapped module above it) or in
another one; a module that differs casts its inputs (``cast_forward_inputs``)
and casts its outputs back (``output_dtype``), as a model must for its layers
to see matching dtypes.  ``reduce_dtype`` is drawn per module; the root may
cast its output (e.g. to fp32 for the loss), and ``cast_forward_inputs=False``
is drawn where it is legal (the module's inputs already have its dtype, or
are token ids).

Mixed precision is drawn with every optimizer: the emulating reference
reproduces FSDP2's low-precision arithmetic bit for bit (measured), and the
oracle judges what rounding differences remain by their measured noise.

Under an autocast region no module computes in the other low dtype (torch's CPU kernels refuse two low dtypes in
one op: :func:`parityfuzz.case.dtypes.check_autocast`), so autocast and mixed precision are drawn together.

Shrinking: toward no policy at all (the first coin), then the root computing
in bf16, children following their parent, no reduce or output dtype.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import ModelSpec, TrainSpec
from parityfuzz.case.dtypes import clashing
from parityfuzz.families.fsdp2 import FSDP2Plan, Wrap

LOW = ("bfloat16", "float16", "float32")


@st.composite
def precision_policies(draw, plan: FSDP2Plan, model: ModelSpec, train: TrainSpec) -> FSDP2Plan:
    """``plan`` with mixed-precision policies on its wraps (or unchanged: the first coin)."""
    if not draw(st.booleans()):
        return plan
    master = train.dtype
    # Not the low dtype an autocast region does not cast to (dtypes.check_autocast): the two drawn together.
    low = tuple(d for d in LOW if d not in clashing(train))
    compute_choices = [d for d in low if d != master]
    computes: dict[str, str] = {}  # path -> dtype the module computes in
    new: dict[str, Wrap] = {}
    for w in sorted(plan.wraps, key=lambda w: (w.path != "", w.path.count("."), w.path)):  # parents first
        reduce = draw(st.sampled_from(("",) + tuple(dict.fromkeys(("float32", master, "bfloat16", "float16")))))
        if not w.path:
            param = draw(st.sampled_from(tuple(compute_choices) + ("",)))
            computes[""] = param or master
            token_input = model.input == "embedding"
            cast = True if computes[""] != master and not token_input else not draw(st.booleans())
            output = draw(st.sampled_from(("",) + tuple(dict.fromkeys(("float32", master)))))
            new[""] = dataclasses.replace(w, param_dtype=param, reduce_dtype=reduce, output_dtype=output,
                                          cast_forward_inputs=cast)
            continue
        entry = computes[plan.owner(w.path.rpartition(".")[0])]
        same = "" if entry == master else entry
        param = draw(st.sampled_from((same,) + tuple(d for d in dict.fromkeys(low + (master,)) if d != entry)))
        computes[w.path] = param or master
        if computes[w.path] != entry:
            cast, output = True, entry
        else:
            cast, output = not draw(st.booleans()), draw(st.sampled_from(("", entry)))
        new[w.path] = dataclasses.replace(w, param_dtype=param, reduce_dtype=reduce, output_dtype=output,
                                          cast_forward_inputs=cast)
    return dataclasses.replace(plan, wraps=tuple(new[w.path] for w in plan.wraps))
