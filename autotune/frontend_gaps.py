"""ONNX nodes TVM 0.27's frontend imports without error but computes otherwise than ONNX
says: refused before import, in one line naming the node, instead of a module that gives
wrong outputs and says nothing (only ``run --check`` caught them, in a user's trial).
TVM has one ``Resize`` converter (opset 18's); what it gets wrong:

- ``antialias=1``: ignored, a plain resize (0.64 off the reference on a linear
  downscale by 0.5).
- ``keep_aspect_ratio_policy`` other than ``stretch`` with ``sizes``: ignored, the sizes
  taken as they are (ONNX's output 7 x 9, TVM's 14 x 14).
- ``axes``: not read (the scales or sizes of a subset of axes: "index out of bounds").
- ``scales`` that give no whole output size (7 x 0.6 = 4.2 rows, floored to 4): TVM
  samples at the sizes' ratio (4 / 7) where ONNX uses the scale itself (0.6). Of 26 such
  resizes of a 7 x 9 input measured (scales 1.5 and 0.6; nearest with each of three
  rounding modes under half_pixel, pytorch_half_pixel, asymmetric and align_corners;
  linear under align_corners), 23 came out 1.0 to 4.2 off ONNX's reference evaluator,
  and the trial's linear half_pixel one 1.48; every one with scale 2.0 matched exactly.
  With ``sizes`` given, ONNX's scale is that ratio too, so those pass.
- opset 10's ``Resize(X, scales)``: its scales read as opset 11's ``roi`` (even a scale
  of 2.0 failed in the converter, in a line that named no cause).

And ``Upsample`` (opsets 7 to 9, retired at 10): at opset 7 nearest rounds the source
index (half to even) where ONNX floors it (5.66 off at scales 2 and 3 on a 4x8x8
input), at opset 9 the converter fails on its scales input ("object of type 'NoneType'
has no len()"). ONNX's version converter makes it a Resize, which imports right.
"""

from __future__ import annotations

import math
from typing import Any

from autotune.errors import AutotuneError

#: How far a scaled size may lie from a whole number and count as one: scales are
#: float32, and 640 x float32(1.2) is 768.00003.
_WHOLE = 1e-5


def refuse_frontend_gaps(proto, source: str) -> None:
    """Raise for the first node of ``proto`` (static input shapes) listed above."""
    for node in proto.graph.node:
        if node.op_type == "Upsample" and node.domain in ("", "ai.onnx"):
            raise AutotuneError(
                f"{source}: Upsample {node.name or node.output[0]!r} (an operator ONNX retired at opset 10) is one TVM's "
                "ONNX frontend computes otherwise than ONNX (nearest picks source pixels by rounding where ONNX floors: "
                "5.66 off at scales 2 and 3) or cannot import (opset 9's scales input): convert the model first, "
                "onnx.version_converter.convert_version(model, 13), which makes it a Resize"
            )
    resizes = [n for n in proto.graph.node if n.op_type == "Resize" and n.domain in ("", "ai.onnx")]
    cropped = [n for n in proto.graph.node if n.op_type == "ConvTranspose" and n.domain in ("", "ai.onnx")
               and any(a.name == "output_shape" for a in n.attribute)]
    if not resizes and not cropped:
        return
    from autotune.recurrent import static_shapes

    shapes = static_shapes(proto)
    for node in cropped:
        _refuse_ignored_output_shape(node, shapes, source)
    for node in resizes:
        attrs = {a.name: a for a in node.attribute}
        where = f"{source}: Resize {node.name or node.output[0]!r}"
        if len(node.input) == 2:
            raise AutotuneError(f"{where} is opset 10's (X, scales), which TVM's ONNX frontend reads as opset 11's "
                                "(X, roi): export the model at opset 11 or later")
        if "antialias" in attrs and attrs["antialias"].i:
            raise AutotuneError(f"{where} has antialias=1, which TVM's ONNX frontend ignores (it would resize without antialiasing)")
        if "axes" in attrs:
            raise AutotuneError(f"{where} has axes, which TVM's ONNX frontend does not read: give scales or sizes for every axis")
        sizes_given = len(node.input) > 3 and bool(node.input[3])
        policy = attrs["keep_aspect_ratio_policy"].s.decode() if "keep_aspect_ratio_policy" in attrs else "stretch"
        if sizes_given and policy != "stretch":
            raise AutotuneError(f"{where} has keep_aspect_ratio_policy={policy}, which TVM's ONNX frontend ignores "
                                "(it would take the sizes as they are)")
        scales = _constant(proto, node.input[2]) if len(node.input) > 2 and node.input[2] else None
        shape = shapes.get(node.input[0])
        if scales is None or shape is None or len(scales) != len(shape):
            continue
        mode = attrs["mode"].s.decode() if "mode" in attrs else "nearest"
        try:
            scales = [float(scale) for scale in scales]
        except (TypeError, ValueError):
            raise AutotuneError(f"{where} has scales that are not numbers ({scales.dtype})") from None
        for axis, (size, scale) in enumerate(zip(shape, scales)):
            if not (math.isfinite(scale) and scale > 0):  # NaN ended in round()'s ValueError
                raise AutotuneError(f"{where} scales axis {axis} by {scale:g}: a scale must be a positive number")
            exact = size * scale
            if abs(exact - round(exact)) > _WHOLE * max(1.0, exact):
                raise AutotuneError(
                    f"{where} ({mode}) scales axis {axis} of {size} by {scale:g}, which is no whole size "
                    f"({exact:g}); TVM's ONNX frontend would sample at the sizes' ratio instead of that scale "
                    "(give the output size as `sizes`, or a scale that divides)"
                )


def _refuse_ignored_output_shape(node, shapes: dict[str, tuple[int, ...]], source: str) -> None:
    """Raise where a ConvTranspose's ``output_shape`` crops its output: TVM's frontend does
    not read the attribute and gives the whole transposed convolution (tf2onnx writes it
    for ``conv2d_transpose``: 11x11 where ONNX gives 10x10, 0.41 off downstream, said by
    nothing where the model declared no static output shape). One it would not crop passes."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    wanted = list(attrs["output_shape"])
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1]) if len(node.input) > 1 else None
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if x is not None and w is not None and len(wanted) == len(x) - 2 == len(w) - 2 and auto_pad in (b"NOTSET", "NOTSET"):
        spatial = len(wanted)
        strides = list(attrs.get("strides", [1] * spatial))
        dilations = list(attrs.get("dilations", [1] * spatial))
        extra = list(attrs.get("output_padding", [0] * spatial))
        pads = list(attrs.get("pads", [0] * 2 * spatial))
        # what TVM computes: the whole transposed convolution, less the pads it does read
        given = [s * (n - 1) + e + (k - 1) * d + 1 - pads[i] - pads[i + spatial]
                 for i, (n, k, s, d, e) in enumerate(zip(x[2:], w[2:], strides, dilations, extra))]
        if given == wanted:
            return
        said = f" (it would give {'x'.join(map(str, given))} for {'x'.join(map(str, wanted))})"
    else:
        said = ""
    raise AutotuneError(
        f"{source}: ConvTranspose {node.name or node.output[0]!r} has output_shape, which TVM's ONNX frontend ignores"
        f"{said}: give the cropping as pads instead (ONNX's formula for them is in the ConvTranspose spec)"
    )


def _constant(proto, name: str) -> Any:
    """The value of ``name`` where it is an initializer or a ``Constant`` node's output (as
    a flat numpy array), else None."""
    import numpy as np
    from onnx import numpy_helper

    for init in proto.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init).reshape(-1)
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t).reshape(-1)
                if attr.name == "value_floats":
                    return np.asarray(list(attr.floats), np.float32)
    return None
