"""Fused Relax module -> the list of layers (kernels) worth tuning.

A *layer* is one fused TIR PrimFunc: the unit TVM generates one kernel for, and so the
unit of tuning and of history. Everything here reads the TIR itself (block names,
iteration domains, access indices), so layers from any ONNX model are described the
same way, whatever the op that produced them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.table_layout import Column, fitted_table

#: Op classes worth spending measurements on; the rest keep TVM's default schedule.
#: Convolutions are classed by spatial rank (``conv1d``: speech, ``conv3d``: video) and
#: kind, so history transfers only between like kernels: a conv1d's features (its
#: kernel, stride, reduction extents) mean something else in a conv2d's.
TUNABLE_CLASSES = (
    "conv1d",
    "conv2d",
    "conv3d",
    "depthwise_conv1d",
    "depthwise_conv2d",
    "conv1d_transpose",
    "conv2d_transpose",
    "conv3d_transpose",
    "dense",
    "batch_matmul",
    "pool",
    "softmax",
    "norm",
    "reduction",
)
#: The class of a layer whose shapes are known only at run time (never tuned).
DYNAMIC_CLASS = "dynamic_shape"
#: The class of a layer whose PrimFunc has no blocks to schedule (TOPI writes ScatterElements
#: as a loop nest of its own, without a root block): TVM's default, never tuned.
OPAQUE_CLASS = "opaque"

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "bool": 1}
_REDUCE = 2  # IterVar.iter_type of a reduction axis (CommReduce)
#: Blocks TOPI emits to copy an input into a padded buffer.
_PAD_BLOCKS = ("pad_temp", "data_pad", "PadInput")
#: Blocks TOPI's transposed convolutions emit: the input spread out by the stride, and the
#: kernel flipped (``kernel_transform`` in 2-D, ``kernel`` in 1-D); the anchor, named
#: ``compute``, is then a plain convolution over the spread input.
_TRANSPOSE_BLOCKS = ("data_dilate", "kernel_transform", "kernel")
#: The Relax variable a block name starts with when TOPI names it after its input.
_RELAX_VAR_PREFIX = re.compile(r"^lv\d*_")
#: Classes whose anchor is a multiply-accumulate (two FLOPs per iteration).
_MAC = re.compile(r"(depthwise_)?conv\dd(_transpose)?|dense|batch_matmul")


@dataclass
class Layer:
    """One kernel of the model, described well enough to key history and transfer."""

    name: str
    op_class: str
    anchor: str
    dtype: str
    inputs: list[list[int]]
    weights: list[list[int]]
    output: list[int]
    attrs: dict[str, Any]
    epilogue: list[str]
    flops: float
    bytes: float
    workload_key: str
    batch_invariant_key: str
    occurrences: int
    spatial: list[int] = field(default_factory=list)
    reduction: list[int] = field(default_factory=list)
    #: the batch size the layer was read at (the batch-invariant key leaves it out)
    batch: int = 1
    func: Any = field(default=None, repr=False, compare=False)

    @property
    def tunable(self) -> bool:
        # an output of size 0 computes nothing, and its loops cannot be tiled (a tune
        # ended in TVM's "Cannot tile a loop with 0 or negative extent" traceback)
        return self.op_class in TUNABLE_CLASSES and 0 not in self.output

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    def features(self) -> list[float]:
        """Fixed-length numeric description used for similarity between layers, of one
        sample of the batch: the batch size does not enter the comparison (it rarely
        changes the winner). Read with it, a ResNet-18 conv at batch 4 scored 0.66
        against a ResNet-50 conv it scored 0.94 against at batch 1, and went from the
        guided GA to transfer XGBoost. At batch 1 the features are what they were."""
        spatial, flops, nbytes = self._per_sample()
        sp = [math.log2(max(d, 1)) for d in spatial][:6]
        rd = [math.log2(max(d, 1)) for d in self.reduction][:4]
        sp += [0.0] * (6 - len(sp))
        rd += [0.0] * (4 - len(rd))
        a = self.attrs
        return sp + rd + [
            math.log2(max(flops, 1.0)),
            math.log2(max(nbytes, 1.0)),
            math.log2(max(flops / nbytes if nbytes else 0.0, 1e-3)),
            float(a.get("stride", [1])[0]),
            float(a.get("kernel", [1])[0]),
            float(a.get("dilation", [1])[0]),
            math.log2(max(a.get("groups", 1), 1)),
        ]

    def _per_sample(self) -> tuple[list[int], float, float]:
        """(spatial extents, FLOPs, bytes) of one sample: the batch axis, where the output
        carries it first (or second, a sequence-first model's), taken as 1 in the
        extents and divided out of FLOPs and of the bytes of the tensors that carry it.
        A layer whose output does not show the batch (folded into another axis) is
        read as it is."""
        b = self.batch
        out = self.output
        if b <= 1 or not out:
            return self.spatial, self.flops, self.bytes
        pos = 0 if out[0] == b else 1 if len(out) >= 3 and out[1] == b else None
        if pos is None:
            return self.spatial, self.flops, self.bytes
        spatial = list(self.spatial)
        if len(spatial) > pos and spatial[pos] == b:
            spatial[pos] = 1
        carried = [*self.inputs, out]
        fixed = sum(math.prod(w) for w in self.weights)
        total = sum(math.prod(s) for s in carried) + fixed
        one = sum(math.prod(s) / b if len(s) > pos and s[pos] == b else math.prod(s) for s in carried) + fixed
        return spatial, self.flops / b, self.bytes * one / total if total else self.bytes

    def descriptor(self) -> dict[str, Any]:
        """What a person needs to recognise the layer (stored with the workload)."""
        return {
            "name": self.name,
            "op_class": self.op_class,
            "anchor": self.anchor,
            "dtype": self.dtype,
            "inputs": self.inputs,
            "weights": self.weights,
            "output": self.output,
            "attrs": self.attrs,
            "epilogue": self.epilogue,
            "batch": self.batch,  # what the match discounts another batch size's layers by
        }

    def workload_info(self):
        """This layer as history's workload row."""
        from autotune.history import WorkloadInfo

        return WorkloadInfo(
            self.workload_key, self.batch_invariant_key, self.op_class, self.descriptor(), self.flops, tuple(self.features())
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("func", None)
        d["tunable"] = self.tunable
        d["arithmetic_intensity"] = self.arithmetic_intensity
        return d


def decompose(mod, *, batch_size: int | None = None, sequence_first: bool = False) -> list[Layer]:
    """One :class:`Layer` per distinct PrimFunc called from ``main``, in call order.

    ``sequence_first``: sequences through the layers carry the batch second (an LSTM's
    default layout: the model's input is such a sequence, or is transposed into one)."""
    import tvm
    from tvm import relax

    calls: list[tuple[str, list[bool]]] = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
                gvar = value.args[0]
                args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else [value.args[1]]
                calls.append((str(gvar.name_hint), [isinstance(a, tvm.ir.expr.Constant) for a in args]))

    counts: dict[str, int] = {}
    # an argument is a weight only if every call passes a constant there: a kernel that
    # one call feeds a constant and the others activations (a memory network's first hop
    # queries with a fixed vector) is classed as the product of activations it is
    masks: dict[str, list[bool]] = {}
    for name, const_mask in calls:
        counts[name] = counts.get(name, 0) + 1
        masks[name] = [a and b for a, b in zip(masks[name], const_mask)] if name in masks else const_mask
    return [describe(name, mod[name], masks[name], counts[name], batch_size, sequence_first) for name in masks]


def _dynamic(name: str, func, params, const_mask: list[bool], occurrences: int, dtype: str,
             op_class: str = DYNAMIC_CLASS) -> Layer:
    """A layer whose shapes are known only at run time (a data-dependent op's output, as
    NonMaxSuppression's): TVM's default schedule, never tuned. Its unknown dimensions
    read -1; it counts no FLOPs (an estimate would need them)."""
    import tvm

    shapes = [[int(d) if isinstance(d, tvm.tirx.IntImm) else -1 for d in t.shape] for t in params]
    inputs = [s for s, c in zip(shapes[:-1], const_mask) if not c]
    weights = [s for s, c in zip(shapes[:-1], const_mask) if c]
    key = _digest(["workload", _structure_hash(func), dtype])
    return Layer(name=name, op_class=op_class, anchor="", dtype=dtype, inputs=inputs, weights=weights,
                 output=shapes[-1] if shapes else [], attrs={}, epilogue=[], flops=0.0, bytes=0.0, workload_key=key,
                 batch_invariant_key=_digest(["invariant", key]), occurrences=occurrences, func=func)


def describe(
    name: str, func, const_mask: list[bool], occurrences: int, batch_size: int | None, sequence_first: bool = False
) -> Layer:
    """Read one PrimFunc: anchor block, op class, shapes, attributes, FLOPs, keys."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import ScheduleError

    params = [p.ty for p in func.params]
    dtype = str(params[0].dtype) if params else "float32"
    sch = Schedule(func)
    try:
        root = sch.get_sblock("root")
    except ScheduleError:  # no blocks (ScatterElements): a ScheduleError's 60-line traceback
        return _dynamic(name, func, params, const_mask, occurrences, dtype, op_class=OPAQUE_CLASS)
    blocks = [sch.get(b) for b in sch.get_child_blocks(root)]
    if any(not isinstance(d, tvm.tirx.IntImm) for t in params for d in t.shape):
        return _dynamic(name, func, params, const_mask, occurrences, dtype)
    shapes = [[int(d) for d in t.shape] for t in params]
    inputs = [s for s, c in zip(shapes[:-1], const_mask) if not c]
    weights = [s for s, c in zip(shapes[:-1], const_mask) if c]
    output = shapes[-1] if shapes else []

    def volume(block) -> int:
        return math.prod(int(iv.dom.extent) for iv in block.iter_vars)

    reducers = [b for b in blocks if any(int(iv.iter_type) == _REDUCE for iv in b.iter_vars)]
    anchor = max(reducers or blocks, key=volume)
    spatial = [int(iv.dom.extent) for iv in anchor.iter_vars if int(iv.iter_type) != _REDUCE]
    reduction = [int(iv.dom.extent) for iv in anchor.iter_vars if int(iv.iter_type) == _REDUCE]
    const_names = {p.name for p, c in zip(func.params, const_mask) if c}
    op_class = _classify(anchor, bool(reducers), blocks, const_names)
    attrs = _attributes(anchor, blocks, op_class, weights)
    if (
        op_class in ("conv1d", "conv2d")
        and attrs.get("groups", 1) > 1
        and weights
        and len(weights[0]) == len(output)
        and weights[0][1] == 1
    ):
        op_class = "depthwise_" + op_class  # one input channel per group: TVM names it group_conv2d

    flops = 0.0
    for b in blocks:
        if b.name_hint in _PAD_BLOCKS or b.name_hint in _TRANSPOSE_BLOCKS:
            continue  # a padded, spread or flipped copy moves data; it computes nothing
        if b is anchor and _MAC.fullmatch(op_class):
            flops += volume(b) * 2
        elif b is anchor and reducers:  # a sum of products of n operands: n - 1 multiplies and an add
            flops += volume(b) * max(1, _multiplied_operands(b))
        else:
            flops += volume(b)
    nbytes = float(sum(math.prod(s) for s in shapes) * _DTYPE_BYTES.get(dtype, 4))
    prologue = _PAD_BLOCKS + _TRANSPOSE_BLOCKS
    # named after the op, less TOPI's "T_" and the Relax variable a block was made for
    # ("lv48_mean": its number changes from export to export, and the key with it)
    epilogue = [_RELAX_VAR_PREFIX.sub("", b.name_hint.removeprefix("T_"))
                for b in blocks if b is not anchor and b.name_hint not in prologue]

    workload_key = _digest(["workload", _structure_hash(func), dtype])
    batch = batch_size if batch_size is not None else (inputs[0][0] if inputs and inputs[0] else 1)
    invariant = {
        "op_class": op_class,
        "anchor": anchor.name_hint,
        "dtype": dtype,
        "inputs": [_drop_batch(s, batch, sequence_first) for s in inputs],
        "weights": weights,
        "output": _drop_batch(output, batch, sequence_first),
        "attrs": attrs,
        "epilogue": epilogue,
    }
    return Layer(
        name=name,
        op_class=op_class,
        anchor=anchor.name_hint,
        dtype=dtype,
        inputs=inputs,
        weights=weights,
        output=output,
        attrs=attrs,
        epilogue=epilogue,
        flops=float(flops),
        bytes=nbytes,
        workload_key=workload_key,
        batch_invariant_key=_digest(["invariant", invariant]),
        occurrences=occurrences,
        spatial=spatial,
        reduction=reduction,
        batch=batch if isinstance(batch, int) and batch > 0 else 1,
        func=func,
    )


def _classify(anchor, has_reduction: bool, blocks, const_names: set[str]) -> str:
    name = anchor.name_hint.lower()
    transposed = has_reduction and name == "compute" and any(b.name_hint in _TRANSPOSE_BLOCKS for b in blocks)
    if "conv" in name or transposed:
        # conv1d_ncw, conv2d_nchw, conv3d_ncdhw, depthwise_conv2d_nchw, group_conv2d_nchw
        rank = f"conv{_spatial_rank(anchor)}d"
        if transposed:
            return rank + "_transpose"
        return "depthwise_" + rank if "depthwise" in name else rank
    if "matmul" in name or "dense" in name or ("einsum" in name and _multiplied_operands(anchor) == 2):
        # An Einsum of two operands summed over shared indices is a matrix product too
        # (attention's "bhqd,bhkd->bhqk"): classed as one, so it matches matmul history
        # and counts a multiply and an add per iteration.
        # batch_matmul: both operands are activations (not weights) with batch dims,
        # whatever the batch size, so the class does not change with the batch.
        operands = anchor.reads[:2]
        batched = len(operands) == 2 and all(
            len(r.source.shape) >= 3 and r.source.name not in const_names for r in operands
        )
        return "batch_matmul" if batched else "dense"
    if "pool" in name:
        return "pool"
    if "softmax" in name:
        return "softmax"
    names = " ".join(b.name_hint.lower() for b in blocks)
    if "norm" in names or "variance" in names or "rsqrt" in names:
        return "norm"
    if has_reduction:
        return "reduction"
    injective = ("reshape", "transpose", "concat", "strided_slice", "take", "split", "squeeze", "layout", "broadcast_to")
    if all(any(k in b.name_hint.lower() for k in injective) for b in blocks):
        return "injective"
    return "elementwise"


def _multiplied_operands(block) -> int:
    """How many loads a reduction's update multiplies into its accumulator: two for a
    contraction (``acc + a * b``), one for a sum, 0 for an update of any other form."""
    store = block.body
    value = getattr(store, "value", None)
    if type(value).__name__ != "Add" or not hasattr(store, "buffer"):
        return 0
    terms = [t for t in (value.a, value.b) if not _loads(t, store.buffer)]
    if len(terms) != 1:
        return 0

    def factors(expr) -> list[Any]:
        kind = type(expr).__name__
        if kind == "Mul":
            return factors(expr.a) + factors(expr.b)
        if kind == "Cast":
            return factors(expr.value)
        return [expr if _loads(expr) else None]

    found = factors(terms[0])
    return 0 if None in found else len(found)


def _loads(expr, buffer=None) -> bool:
    """``expr`` reads a buffer (``buffer`` itself, when given). TVM 0.27 names the node
    TensorLoad, with the buffer as ``source``; older TVM BufferLoad, as ``buffer``."""
    if type(expr).__name__ not in ("TensorLoad", "BufferLoad"):
        return False
    source = getattr(expr, "source", None)
    source = getattr(expr, "buffer", None) if source is None else source
    return buffer is None or (source is not None and source.same_as(buffer))


def _attributes(anchor, blocks, op_class: str, weights: list[list[int]]) -> dict[str, Any]:
    """Stride, padding, dilation, kernel and groups read back from the TIR indices."""
    attrs: dict[str, Any] = {}
    if "conv" in op_class:
        rank = _spatial_rank(anchor)
        spatial_vars = [iv.var for iv in anchor.iter_vars if int(iv.iter_type) != _REDUCE]
        reduce_vars = [iv.var for iv in anchor.iter_vars if int(iv.iter_type) == _REDUCE]
        data = anchor.reads[0]
        strides, dilations = [], []
        for idx in data.region[-rank:]:
            s, d = _linear_coeffs(idx.min, spatial_vars[-rank:], reduce_vars)
            strides.append(s)
            dilations.append(d)
        kernel = [int(iv.dom.extent) for iv in anchor.iter_vars if int(iv.iter_type) == _REDUCE][-rank:]
        padding = _padding(blocks, rank)
        if op_class.endswith("_transpose"):
            # The anchor slides with stride 1 over the input spread by the real stride and
            # padded by kernel - 1 - pad: read both back as the model wrote them. A
            # dilated kernel is spread out first (kernel_dilate), so the anchor's kernel is
            # the spread one and its own dilation 1: it read dilation 1 and kernel 5 for a
            # 3x3 kernel dilated by 2.
            strides = _spread(blocks, rank)
            padding = [max(0, (k - 1) * d - p) for k, d, p in zip(kernel, dilations, padding)]
            dilations = _spread(blocks, rank, block="kernel_dilate")
            kernel = [(k - 1) // d + 1 for k, d in zip(kernel, dilations)]
        attrs["stride"] = strides
        attrs["dilation"] = dilations
        attrs["kernel"] = kernel
        attrs["padding"] = padding
        w = weights[0] if weights else []
        in_ch = int(data.source.shape[1]) if len(data.source.shape) == rank + 2 else 0
        if op_class.startswith("depthwise_"):
            attrs["groups"] = in_ch or 1
        elif w and len(w) == rank + 2 and w[1] and not op_class.endswith("_transpose"):
            attrs["groups"] = max(1, in_ch // w[1]) if in_ch else 1
        elif w and len(w) == rank + 2 and w[1] and anchor.writes:
            # a transposed convolution's weight is (in, out / groups, ...): it read 1 always
            out_ch = int(anchor.writes[0].source.shape[1])
            attrs["groups"] = out_ch // w[1] if out_ch % w[1] == 0 and out_ch >= w[1] else 1
        else:
            attrs["groups"] = 1
    elif op_class == "pool":
        reduce_ext = [int(iv.dom.extent) for iv in anchor.iter_vars if int(iv.iter_type) == _REDUCE]
        attrs["kernel"] = reduce_ext
        attrs["kind"] = "max" if "max" in anchor.name_hint else "avg"
        rank = len(reduce_ext)
        attrs["padding"] = _padding(blocks, rank or 2)
        # read back like a convolution's: a 3x3 pool at stride 1 or 2 differ in output only
        spatial_vars = [iv.var for iv in anchor.iter_vars if int(iv.iter_type) != _REDUCE]
        reduce_vars = [iv.var for iv in anchor.iter_vars if int(iv.iter_type) == _REDUCE]
        if anchor.reads and rank and len(spatial_vars) >= rank:
            attrs["stride"] = [
                _linear_coeffs(idx.min, spatial_vars[-rank:], reduce_vars)[0] for idx in anchor.reads[0].region[-rank:]
            ]
    return attrs


def _spatial_rank(anchor) -> int:
    """Spatial dims of a convolution: its data operand's rank less batch and channels."""
    return max(1, len(anchor.reads[0].source.shape) - 2)


def _spread(blocks, rank: int, block: str = "data_dilate") -> list[int]:
    """A transposed convolution's stride: the divisor in data_dilate's ``x // stride`` reads
    (no such block: stride 1); with ``block="kernel_dilate"``, its kernel's dilation."""
    for b in blocks:
        if b.name_hint == block and b.reads:
            return [_floordiv_divisor(idx.min) for idx in b.reads[0].region[-rank:]]
    return [1] * rank


def _floordiv_divisor(expr) -> int:
    """``s`` of an index ``x // s``; 1 for any other index."""
    if type(expr).__name__ != "FloorDiv":
        return 1
    try:
        return max(1, int(expr.b))
    except (TypeError, ValueError):
        return 1


def _linear_coeffs(expr, spatial_vars, reduce_vars) -> tuple[int, int]:
    """(stride, dilation) of an index like ``y*2 + ry``: the coefficients of y and ry."""
    from tvm.sym.pattern import detect_linear_equation

    for sv in spatial_vars:
        for rv in reduce_vars:
            coeffs = detect_linear_equation(expr, [sv, rv])
            if len(coeffs) == 3:
                try:
                    s, d = int(coeffs[0]), int(coeffs[1])
                except (TypeError, ValueError):
                    continue
                if s > 0 and d > 0:
                    return s, d
    return 1, 1


def _padding(blocks, rank: int = 2) -> list[int]:
    """Pad-before per spatial dim, from the pad block's shifted read (``x - 1`` -> 1)."""
    from tvm.sym.pattern import detect_linear_equation

    for b in blocks:
        if b.name_hint in _PAD_BLOCKS and b.reads:
            pads = []
            for idx, iv in zip(b.reads[0].region[-rank:], b.iter_vars[-rank:]):
                coeffs = detect_linear_equation(idx.min, [iv.var])
                try:
                    pads.append(max(0, -int(coeffs[1])) if len(coeffs) == 2 else 0)
                except (TypeError, ValueError):
                    pads.append(0)
            return pads
    return [0] * rank


def shape_text(shape: list[int]) -> str:
    """``2x3x4``; a scalar is ``scalar`` (it printed as nothing, a double space in the row)."""
    return "x".join(map(str, shape)) if shape else "scalar"


def _drop_batch(shape: list[int], batch: int, sequence_first: bool = False) -> list[int]:
    """``shape`` less its batch dimension: the first, or in a sequence-first model a
    sequence's second ((time, batch, features); a step's state is (batch, features))."""
    if sequence_first and len(shape) >= 3 and shape[0] != batch and shape[1] == batch:
        return [shape[0], *shape[2:]]
    return shape[1:] if shape and shape[0] == batch else list(shape)


def _structure_hash(func) -> str:
    """Identical kernels hash equal whatever their parameter names (TVM structural hash)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(func.without_attr("global_symbol") if "global_symbol" in func.attrs else func))


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


#: The columns of ``autotune layers``' table, the ones left out first on a narrow terminal last.
LAYER_COLUMNS = (
    Column("#", keep=5), Column("layer", fold_at=20), Column("class", fold_at=10), Column("shapes", keep=3, fold_at=16),
    Column("attrs", keep=9, fold_at=24), Column("epilogue", keep=6, fold_at=12), Column("MFLOP", justify="right"),
    Column("KB", justify="right", keep=7), Column("x", justify="right", keep=4), Column("key", keep=8),
)


def format_table(layers: list[Layer], width: int | None = None) -> str:
    """Plain-text table for ``autotune layers``: ``width``, a terminal's, where it is one;
    where it is too narrow for every column, those read least are left out, and said so
    (:mod:`autotune.table_layout`). A file or pipe gets every column at its width."""
    from rich.console import Console
    from rich.markup import escape

    rows = []
    for i, layer in enumerate(layers):
        shapes = " ".join(shape_text(s) for s in layer.inputs + layer.weights) + " -> " + shape_text(layer.output)
        rows.append([
            str(i),
            layer.name,
            layer.op_class + ("" if layer.tunable else " (default)"),
            shapes,
            ", ".join(f"{k}={v}" for k, v in layer.attrs.items()),
            "+".join(layer.epilogue),
            f"{layer.flops / 1e6:.1f}",
            f"{layer.bytes / 1024:.0f}",
            str(layer.occurrences),
            layer.workload_key[:10],
        ])
    rows = [[escape(cell) for cell in row] for row in rows]  # a layer named [red] is no markup
    table, note = fitted_table(LAYER_COLUMNS, rows, width, title=None, show_lines=False)
    console = Console(width=width or 200, record=True, force_terminal=False)
    with console.capture() as cap:
        console.print(table)
        if note:
            console.print(note, highlight=False, markup=False)
    return cap.get()
