"""ONNX nodes TVM 0.27's frontend imports without error but computes otherwise than ONNX
says: refused before import, in one line naming the node, instead of a module that gives
wrong outputs and says nothing (only ``run --check`` caught them, in a user's trial).

- ``Resize`` with ``antialias=1`` (opset 18): the frontend ignores the attribute and
  resizes plainly (0.64 off the reference on a linear downscale by 0.5).
- A ``Resize`` given ``scales`` whose output size is no whole multiple of the input
  (7 x 0.6 = 4.2 rows, floored to 4): the frontend samples at the sizes' ratio (4 / 7)
  where ONNX uses the scale itself (0.6). Of 26 such resizes of a 7 x 9 input measured
  (scales 1.5 and 0.6; nearest with each of three rounding modes under half_pixel,
  pytorch_half_pixel, asymmetric and align_corners; linear under align_corners), 23 came
  out 1.0 to 4.2 off ONNX's reference evaluator, and the trial's linear half_pixel one
  1.48; every one with scale 2.0 matched exactly. With ``sizes`` given, ONNX's scale is
  that ratio too, so those pass.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import AutotuneError


def refuse_frontend_gaps(proto, source: str) -> None:
    """Raise for the first node of ``proto`` (static input shapes) listed above."""
    resizes = [n for n in proto.graph.node if n.op_type == "Resize" and n.domain in ("", "ai.onnx")]
    if not resizes:
        return
    constants = _constants(proto)
    shapes = _shapes(proto)
    for node in resizes:
        attrs = {a.name: a for a in node.attribute}
        name = node.name or node.output[0]
        if "antialias" in attrs and attrs["antialias"].i:
            raise AutotuneError(f"{source}: Resize {name!r} has antialias=1, which TVM's ONNX frontend ignores "
                                "(it would resize without antialiasing)")
        mode = attrs["mode"].s.decode() if "mode" in attrs else "nearest"
        scales = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if len(node.input) == 2:  # opset 10: (X, scales)
            scales = constants.get(node.input[1])
        shape = shapes.get(node.input[0])
        if scales is None or shape is None or len(scales) == 0 or len(scales) != len(shape):
            continue
        for axis, (size, scale) in enumerate(zip(shape, scales)):
            exact = size * float(scale)
            if abs(exact - round(exact)) > 1e-6:
                raise AutotuneError(
                    f"{source}: Resize {name!r} ({mode}) scales axis {axis} of {size} by {float(scale):g}, which is no whole "
                    f"size ({exact:g}); TVM's ONNX frontend would interpolate at the sizes' ratio instead of that scale "
                    "(give the output size as `sizes`, or a scale that divides)"
                )


def _constants(proto) -> dict[str, Any]:
    """Initializers and ``Constant`` nodes' values, by name, as numpy arrays."""
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
    return {k: v.reshape(-1) for k, v in found.items()}


def _shapes(proto) -> dict[str, list[int]]:
    """Every value's static shape ONNX's shape inference knows."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # a model shape inference cannot follow: nothing is checked
        return {}
    shapes = {}
    for info in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dims = info.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = [d.dim_value for d in dims]
    return shapes
