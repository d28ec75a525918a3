"""Half-precision models: their ONNX conversions, and what their outputs are checked against.

The zoo builds a float16 or bfloat16 model from its float32 one (:func:`half_model`); ``run
--check`` judges a half-precision module against the model widened to float32
(:func:`float32_model`; exact, since every float16 or bfloat16 value is a float32 value).

Why against float32: two right float16 evaluations of a deep network differ by more than
a few units in the last place, each rounding its intermediate tensors in its own order
(ours also folds batch norm into the weights, and sums in float32). Ten zoo models cast
to float16 and compiled for LLVM (2026-11-27, ``benchmarks/check_half_precision.py``)
came out 0.7x to 2.4x as far from the model widened to float32 as ONNX's reference
evaluator's float16 outputs did (ResNet-18: 0.0053 against 0.0054 on outputs up to 6.4;
three came out equal to the evaluator's), yet compared with the latter directly, within
two units in the last place, the other seven failed (MobileNetV2 differed by up to
0.018 on outputs up to 5.5). So a module passes when its outputs lie no further from
the float32 model's than :data:`ERROR_FACTOR` times the reference evaluator's own
half-precision outputs do. A wrong kernel misses by about the size of the outputs, some
hundreds of times that.

That yardstick fails where the evaluator's own half-precision run goes wrong: a
LayerNorm of inputs near 300 squares past float16's range, the evaluator's output came
out 3.12 off (an infinity for a ReduceL2), and 8x that passed a module of other weights
(2026-12-07, a helper's trial). So the yardstick is held to :data:`YARDSTICK_ULPS` units
in the last place of the output's largest value, and the factor is 4, not 8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import numpy as np

#: The floating types the zoo builds models in (``autotune zoo export --dtype``).
ZOO_DTYPES = ("float32", "float16", "bfloat16")
#: The half-precision types, as TVM and numpy (with ml_dtypes) name them.
HALF_TYPES = ("float16", "bfloat16")

#: How much further from the float32 model than ONNX's own half-precision evaluation an
#: output may lie (observed: 0.68x to 2.38x over ten zoo models, the most on seq2seq).
ERROR_FACTOR = 4.0
#: The evaluator's own error taken as the yardstick up to this many units in the last
#: place of the output's largest value (observed: 0.6 to 2.8 in float16 over ten zoo
#: models, 3.5 for the transformer in bfloat16); past it, or not finite, it is held there.
YARDSTICK_ULPS = 32


def _half_types() -> set[int]:
    from onnx import TensorProto

    return {TensorProto.FLOAT16, TensorProto.BFLOAT16}


def float32_model(proto):
    """A copy of ``proto`` with every float16 and bfloat16 tensor, type and cast made
    float32; None when the model has none (nothing to widen)."""
    import numpy as np
    from onnx import TensorProto

    return _retyped(proto, _half_types(), TensorProto.FLOAT, np.float32)


def half_model(proto, dtype: str = "float16"):
    """A copy of ``proto`` with every float32 tensor, type and cast made ``dtype``
    (float16 or bfloat16): a model as a half-precision deployment runs it (the zoo's
    ``dtype=``). Weights round to that type; None when the model has no float32 at all."""
    import ml_dtypes
    import numpy as np
    from onnx import TensorProto

    kinds = {"float16": (TensorProto.FLOAT16, np.float16), "bfloat16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16)}
    return _retyped(proto, {TensorProto.FLOAT}, *kinds[dtype])


def _retyped(proto, sources: set[int], target: int, np_target):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out if _retype_graph(out.graph, sources, target, np_target) else None


def _retype_graph(graph, sources: set[int], target: int, np_target) -> bool:
    from onnx import AttributeProto, numpy_helper

    def converted(tensor):
        return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np_target), tensor.name)

    changed = False
    for i, init in enumerate(graph.initializer):
        if init.data_type in sources:
            graph.initializer[i].CopyFrom(converted(init))
            changed = True
    for info in (*graph.input, *graph.output, *graph.value_info):
        tensor_type = info.type.tensor_type
        if tensor_type.elem_type in sources:
            tensor_type.elem_type = target
            changed = True
    for node in graph.node:
        if node.op_type == "Constant":
            changed |= _retype_float_constant(node, target, np_target)
        for attr in node.attribute:
            if attr.type == AttributeProto.INT and attr.name in ("to", "dtype") and attr.i in sources:
                attr.i = target  # Cast's target type, RandomNormal's and EyeLike's
                changed = True
            elif attr.type == AttributeProto.TENSOR and attr.t.data_type in sources:
                attr.t.CopyFrom(converted(attr.t))  # Constant's value, ConstantOfShape's
                changed = True
            elif attr.type == AttributeProto.GRAPH:
                changed |= _retype_graph(attr.g, sources, target, np_target)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    changed |= _retype_graph(sub, sources, target, np_target)
    return changed


def _retype_float_constant(node, target: int, np_target) -> bool:
    """A ``Constant`` given as ``value_float(s)`` (always float32) as a ``value`` tensor of
    the target type."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if target == TensorProto.FLOAT:
        return False
    for i, attr in enumerate(node.attribute):
        if attr.name in ("value_float", "value_floats"):
            value = np.asarray(attr.f if attr.name == "value_float" else list(attr.floats), dtype=np_target)
            del node.attribute[i]
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value, "value")))
            return True
    return False


def widen_inputs(feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs as the float32 model takes them (half-precision arrays widened)."""
    import numpy as np

    return {name: a.astype(np.float32) if is_half(a) else a for name, a in feed.items()}


def is_half(array: np.ndarray) -> bool:
    return str(array.dtype) in HALF_TYPES


def judged_against_float32(outputs, want, want32, matched: list[bool], *, atol: float) -> dict:
    """``run --check``'s verdict where outputs differ from the reference evaluator's own
    half-precision ones (``want``; ``matched`` says which agree): each must lie no further
    from the float32 model's (``want32``) than :data:`ERROR_FACTOR` times ``want`` does,
    that held to :data:`YARDSTICK_ULPS` units in the last place of the output's largest
    value. ``per_output`` has each output's figures and verdict (a matched one passes)."""
    import numpy as np

    from autotune.verify import UNIT_ROUNDOFF, max_abs_error

    per_output = []
    for got, half, wide, same in zip(outputs, want, want32, matched):
        ours, theirs = max_abs_error(got, wide), max_abs_error(half, wide)
        finite = np.asarray(wide, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        scale = float(np.max(np.abs(finite))) if finite.size else 0.0
        cap = YARDSTICK_ULPS * UNIT_ROUNDOFF.get(str(half.dtype), 2.0**-10) * scale
        capped = not (theirs <= cap)  # an infinity or a NaN too
        allowed = ERROR_FACTOR * (cap if capped else theirs) + atol
        per_output.append({"max_abs_error": ours, "reference_max_abs_error": theirs, "allowed": allowed,
                           "reference_capped": capped, "ok": bool(same or ours <= allowed)})
    worst = max(range(len(per_output)), key=lambda i: per_output[i]["max_abs_error"] - per_output[i]["allowed"])
    return {"ok": all(o["ok"] for o in per_output),
            "float32": {"max_abs_error": max(o["max_abs_error"] for o in per_output),
                        "reference_max_abs_error": max(o["reference_max_abs_error"] for o in per_output),
                        "allowed_factor": ERROR_FACTOR, "allowed": per_output[worst]["allowed"],
                        "reference_capped": any(o["reference_capped"] for o in per_output),
                        "per_output": per_output}}
