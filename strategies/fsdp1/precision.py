"""FSDP1's ``MixedPrecision``: one policy for every instance of the plan.

``param_dtype`` bf16, fp16, fp32 (below a float64 model) or none; ``reduce_dtype`` none (FSDP1 then reduces
in ``param_dtype``), fp32, the model's, bf16 or fp16; ``buffer_dtype`` none or one of those;
``keep_low_precision_grads`` where the optimizer takes gradients of another dtype than its parameters (SGD
without foreach); ``cast_forward_inputs``; ``cast_root_forward_inputs=False`` only where the input is token
ids (a dense input must be cast at the root: ``parityfuzz.families.fsdp1``).

Under an autocast region ``param_dtype`` is never the other low dtype (:func:`parityfuzz.case.dtypes.check_autocast`).
Not drawn with ignored modules (an ignored module keeps its dtype and meets param_dtype activations) nor with
``train.to_float64``.

Shrinking: toward no policy (the first coin), then bf16 compute with the other fields at torch's defaults.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import ModelSpec, TrainSpec
from parityfuzz.case.dtypes import clashing
from parityfuzz.families.fsdp1 import Precision


@st.composite
def precisions(draw, model: ModelSpec, train: TrainSpec) -> Precision:
    if train.to_float64 or not draw(st.booleans()):
        return Precision()
    master = train.dtype
    low = tuple(d for d in ("bfloat16", "float16", "float32") if d != master and d not in clashing(train))
    param = draw(st.sampled_from(low + ("",)))
    dtypes = ("",) + tuple(dict.fromkeys(("float32", master, "bfloat16", "float16")))
    reduce = draw(st.sampled_from(dtypes))
    buffer = draw(st.sampled_from(dtypes))
    if not (param or reduce or buffer):
        param = low[0]
    keep_low = train.optimizer == "sgd" and not train.foreach and draw(st.booleans())
    root_cast = True if model.input != "embedding" else not draw(st.booleans())
    return Precision(param_dtype=param, reduce_dtype=reduce, buffer_dtype=buffer, keep_low_precision_grads=keep_low,
                     cast_forward_inputs=draw(st.booleans()), cast_root_forward_inputs=root_cast)
