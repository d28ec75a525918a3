"""ONNX ``LSTM``, ``GRU`` and ``RNN`` unrolled into the ops TVM's frontend imports.

TVM 0.27's Relax ONNX frontend has no converter for the recurrent ops, so a seq2seq or
speech model exported from PyTorch (``nn.LSTM`` becomes one ``LSTM`` node) could not be
tuned at all. Once the input shapes are pinned the sequence length is static, and each
step is a small matmul plus elementwise gate arithmetic, which TVM does import:

- the input projection of every step is one ``MatMul`` over the whole sequence (one dense
  layer of ``seq x batch`` rows) with both biases folded into it;
- each step's recurrent projection has the same shape, so the fused step kernels are one
  workload that history tunes once and every step reuses.

The rewrite is done on the ONNX graph, before import, and only what the ONNX operator
defines with its default activations is unrolled (forward, reverse or bidirectional,
optional biases and initial states, GRU's ``linear_before_reset`` either way); anything
else (peepholes, ``layout=1``, clipping, other activations, per-batch sequence lengths,
weights computed at run time) is refused with one line naming the node.
``run --check`` compares a compiled model with ONNX's reference evaluator on the original
graph, which implements these operators itself: an independent check of this rewrite.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import AutotuneError

#: Recurrent operators unrolled here, and how many gates each stacks in its weights.
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}


def has_recurrent(proto) -> bool:
    return any(n.op_type in GATES and n.domain in ("", "ai.onnx") for n in proto.graph.node)


def unroll_recurrent(proto) -> tuple[Any, int]:
    """A copy of ``proto`` with every LSTM, GRU and RNN node unrolled; and how many were.

    ``proto``'s input shapes must be static (``load_model`` pins them): the sequence
    length of each recurrent node's input is read from ONNX's shape inference.
    """
    import onnx

    if not has_recurrent(proto):
        return proto, 0
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    shapes = static_shapes(model)
    constants = _Constants(model)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=17)
    builder = _Builder(graph, opset)
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type in GATES and node.domain in ("", "ai.onnx"):
            builder.nodes = []
            _unroll(node, shapes, constants, builder)
            nodes.extend(builder.nodes)
            count += 1
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(builder.initializers)
    return model, count


def static_shapes(model) -> dict[str, tuple[int, ...]]:
    """Every value's shape, where ONNX's shape inference (or an initializer) fixes it
    whole; the Resize checks of :mod:`autotune.frontend_gaps` read them too."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference refuses some valid graphs; shapes then stay unknown
        inferred = model
    shapes: dict[str, tuple[int, ...]] = {}
    g = inferred.graph
    for info in [*g.input, *g.value_info, *g.output]:
        dims = info.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    for init in g.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


class _Constants:
    """Values known before the model runs: initializers, and what nodes compute from them
    alone, evaluated on demand with ONNX's reference evaluator. torch's dynamo exporter
    hands ``LSTM`` weights reordered by ``Slice`` and ``Concat`` of the initializers."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        graph = model.graph
        self.model = model
        self.values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        self.producer = {out: node for node in graph.node for out in node.output}
        self.runtime = {i.name for i in graph.input} - set(self.values)

    def get(self, name: str):
        """``name``'s value, or None if it depends on a model input (or cannot be folded)."""
        if name not in self.values:
            nodes = self._cone(name)
            if nodes is None:
                return None
            self.values[name] = self._evaluate(nodes, name)
        return self.values[name]

    def _cone(self, name: str) -> list[Any] | None:
        """The nodes ``name`` is computed by, in order, if they start from constants only."""
        order: list[Any] = []
        done: set[str] = set()

        def visit(tensor: str) -> bool:
            if not tensor or tensor in self.values or tensor in done:
                return True
            node = self.producer.get(tensor)
            if tensor in self.runtime or node is None or node.op_type in GATES or any(a.g.node or a.graphs for a in node.attribute):
                return False  # a model input, a recurrent op, or a subgraph (If, Loop)
            if not all(visit(i) for i in node.input):
                return False
            done.update(node.output)
            order.append(node)
            return True

        return order if visit(name) else None

    def _evaluate(self, nodes: list[Any], name: str):
        from onnx import helper, numpy_helper
        from onnx.reference import ReferenceEvaluator

        read = {i for n in nodes for i in n.input} & set(self.values)
        graph = helper.make_graph(
            nodes, "fold", [], [helper.make_empty_tensor_value_info(name)],
            [numpy_helper.from_array(self.values[r], r) for r in sorted(read)],
        )
        model = helper.make_model(graph, opset_imports=self.model.opset_import, ir_version=self.model.ir_version)
        try:
            (value,) = ReferenceEvaluator(model).run(None, {})
        except Exception:
            return None
        return value


class _Builder:
    """Appends nodes and initializers under fresh names, in the opset the model uses."""

    def __init__(self, graph, opset: int) -> None:
        self.opset = opset
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._taken = {v for n in graph.node for v in [*n.input, *n.output]}
        self._taken |= {t.name for t in graph.initializer} | {i.name for i in graph.input}
        self._counter = 0

    def name(self, stem: str) -> str:
        while True:
            self._counter += 1
            candidate = f"{stem}__{self._counter}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate

    def const(self, stem: str, value) -> str:
        from onnx import numpy_helper

        name = self.name(stem)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], stem: str, *, output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = output or self.name(stem)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(f"{stem}_{op_type}"), **attrs))
        return out

    def unsqueeze(self, x: str, axis: int, stem: str, *, output: str | None = None) -> str:
        import numpy as np

        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const(f"{stem}_axes", np.array([axis], np.int64))], stem, output=output)
        return self.op("Unsqueeze", [x], stem, output=output, axes=[axis])

    def take0(self, x: str, index: int, stem: str) -> str:
        """``x[index]`` along axis 0, as Slice + Squeeze: TVM legalizes Gather to a ``take``
        that warns on every use that it would segfault on an out-of-bounds index."""
        import numpy as np

        if self.opset >= 10:
            bounds = [self.const(f"{stem}_{k}", np.array([v], np.int64)) for k, v in (("start", index), ("end", index + 1), ("axis", 0))]
            row = self.op("Slice", [x, *bounds], f"{stem}_row")
        else:
            row = self.op("Slice", [x], f"{stem}_row", starts=[index], ends=[index + 1], axes=[0])
        if self.opset >= 13:
            return self.op("Squeeze", [row, self.const(f"{stem}_axes", np.array([0], np.int64))], stem)
        return self.op("Squeeze", [row], stem, axes=[0])

    def split(self, x: str, parts: int, size: int, stem: str) -> list[str]:
        import numpy as np
        from onnx import helper

        outs = [self.name(f"{stem}_part") for _ in range(parts)]
        if self.opset >= 13:
            inputs, attrs = [x, self.const(f"{stem}_sizes", np.full(parts, size, np.int64))], {}
        else:
            inputs, attrs = [x], {"split": [size] * parts}
        self.nodes.append(helper.make_node("Split", inputs, outs, name=self.name(f"{stem}_Split"), axis=1, **attrs))
        return outs

    def concat(self, parts: list[str], axis: int, stem: str, *, output: str | None = None) -> str:
        """``parts`` joined along ``axis`` (one part: itself, renamed to ``output`` if given)."""
        if len(parts) == 1:
            return parts[0] if output is None else self.op("Identity", parts, stem, output=output)
        return self.op("Concat", parts, stem, output=output, axis=axis)


def _unroll(node, shapes: dict[str, tuple[int, ...]], constants: _Constants, b: _Builder) -> None:
    import numpy as np
    from onnx import helper

    op = node.op_type
    where = f"{op} node {node.name or node.output[0]!r}"

    def refuse(why: str) -> AutotuneError:
        return AutotuneError(f"{where}: {why} (TVM has no {op} converter; autotune unrolls the standard form only)")

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("layout", 0) != 0:
        raise refuse("layout=1 (batch first) is not supported")
    if "clip" in attrs:
        raise refuse("cell clipping is not supported")
    if attrs.get("input_forget", 0):
        raise refuse("input_forget=1 is not supported")
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    if direction not in ("forward", "reverse", "bidirectional"):
        raise refuse(f"unknown direction {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    activations = tuple(a.decode() if isinstance(a, bytes) else str(a) for a in attrs.get("activations", ()))
    if activations and activations != _DEFAULT_ACTIVATIONS[op] * dirs:
        raise refuse(f"activations {', '.join(activations)} are not the default {', '.join(_DEFAULT_ACTIVATIONS[op])}")

    inputs = list(node.input) + [""] * 8
    x, w_name, r_name, b_name, seq_lens, h0_name = inputs[:6]
    c0_name = inputs[6] if op == "LSTM" else ""
    if op == "LSTM" and inputs[7]:
        raise refuse("peephole weights are not supported")
    for what, name in (("W", w_name), ("R", r_name), ("B", b_name)):
        if name and constants.get(name) is None:
            raise refuse(f"its {what} is computed from the model's inputs; it must be known before the model runs")
    shape = shapes.get(x)
    if shape is None or len(shape) != 3:
        raise refuse("its input's shape is not static; pin the model's inputs with --input-shape")
    seq, batch, _ = shape
    if seq_lens:
        lens = constants.get(seq_lens)
        if lens is None or np.any(np.asarray(lens) != seq):
            raise refuse("sequence_lens shorter than the sequence are not supported")

    gates = GATES[op]
    w, r = constants.get(w_name), constants.get(r_name)
    if w is None or r is None or np.ndim(w) != 3 or np.ndim(r) != 3:
        raise refuse("its W and R must both be given, each of rank 3")
    hidden = attrs.get("hidden_size", r.shape[-1])
    if not isinstance(hidden, int) or hidden <= 0:  # a negative one ended in numpy's "negative dimensions"
        raise refuse(f"hidden_size {hidden} is not a positive whole number")
    dtype = w.dtype
    bias = constants.get(b_name) if b_name else np.zeros((dirs, 2 * gates * hidden), dtype)
    if w.shape[:2] != (dirs, gates * hidden) or r.shape != (dirs, gates * hidden, hidden) or bias.shape != (
        dirs, 2 * gates * hidden
    ):
        raise refuse(f"weights W{list(w.shape)} R{list(r.shape)} B{list(bias.shape)} do not fit hidden_size {hidden}")
    reset_after = op == "GRU" and attrs.get("linear_before_reset", 0) != 0
    stem = (node.name or node.output[0] or op).replace("/", "_").strip("_") or op
    step = {"RNN": _rnn_step, "LSTM": _lstm_step, "GRU": _gru_step}[op]

    outs = list(node.output) + ["", "", ""]
    ys, last_h, last_c = [], [], []
    for d in range(dirs):
        s = f"{stem}_d{d}"
        wb, rb = bias[d, : gates * hidden], bias[d, gates * hidden :]
        folded = wb + rb
        if reset_after:  # the hidden gate's recurrent bias sits inside r * (...): keep it there
            folded[2 * hidden :] = wb[2 * hidden :]
        xw = b.op("MatMul", [x, b.const(f"{s}_W", np.ascontiguousarray(w[d].T))], f"{s}_xw")
        xw = b.op("Add", [xw, b.const(f"{s}_bias", folded)], f"{s}_xwb")
        cell = _Cell(b, s, op, np.ascontiguousarray(r[d].T), rb, hidden, reset_after)
        h = _initial(b, h0_name, d, batch, hidden, dtype, f"{s}_h0")
        c = _initial(b, c0_name, d, batch, hidden, dtype, f"{s}_c0") if op == "LSTM" else ""
        steps = range(seq - 1, -1, -1) if (direction == "reverse" or d == 1) else range(seq)
        per_step: dict[int, str] = {}
        for t in steps:
            h, c = step(b, cell, b.take0(xw, t, f"{s}_t{t}_x"), h, c, f"{s}_t{t}")
            per_step[t] = h
        if outs[0]:
            stacked = [b.unsqueeze(per_step[t], 0, f"{s}_y{t}") for t in range(seq)]
            ys.append(b.unsqueeze(b.concat(stacked, 0, f"{s}_y"), 1, f"{s}_ydir"))
        last_h.append(b.unsqueeze(h, 0, f"{s}_hlast"))
        if op == "LSTM":
            last_c.append(b.unsqueeze(c, 0, f"{s}_clast"))
    # Y [seq, dirs, batch, hidden], Y_h and Y_c [dirs, batch, hidden], under the node's own names
    for output, parts, axis in ((outs[0], ys, 1), (outs[1], last_h, 0), (outs[2], last_c, 0)):
        if output and parts:
            b.concat(parts, axis, f"{stem}_out", output=output)


def _initial(b: _Builder, name: str, d: int, batch: int, hidden: int, dtype, stem: str) -> str:
    """Direction ``d``'s initial state, [batch, hidden]: zeros unless the node is given one."""
    import numpy as np

    if not name:
        return b.const(stem, np.zeros((batch, hidden), dtype))
    return b.take0(name, d, stem)


class _Cell:
    """One direction's recurrent weights as graph constants: R transposed to (hidden,
    gates * hidden), and GRU's pieces of it."""

    def __init__(self, b: _Builder, stem: str, op: str, rt, rb, hidden: int, reset_after: bool) -> None:
        import numpy as np

        self.hidden = hidden
        self.reset_after = reset_after
        self.r = self.one = self.r_zr = self.r_h = self.rb_h = ""
        if op != "GRU" or reset_after:
            self.r = b.const(f"{stem}_R", rt)
        if op == "GRU":
            self.one = b.const(f"{stem}_one", np.array(1.0, rt.dtype))
            if reset_after:  # its recurrent bias is added before the reset multiplies
                self.rb_h = b.const(f"{stem}_Rbh", np.ascontiguousarray(rb[2 * hidden :]))
            else:  # the hidden gate multiplies (r * h) by its own slice of R
                self.r_zr = b.const(f"{stem}_Rzr", np.ascontiguousarray(rt[:, : 2 * hidden]))
                self.r_h = b.const(f"{stem}_Rh", np.ascontiguousarray(rt[:, 2 * hidden :]))


def _rnn_step(b: _Builder, cell: _Cell, xt: str, h: str, c: str, st: str) -> tuple[str, str]:
    """h = tanh(x W + h R + Wb + Rb), the biases already in ``xt``."""
    return b.op("Tanh", [b.op("Add", [xt, b.op("MatMul", [h, cell.r], f"{st}_hr")], f"{st}_pre")], f"{st}_h"), c


def _lstm_step(b: _Builder, cell: _Cell, xt: str, h: str, c: str, st: str) -> tuple[str, str]:
    """Gates i, o, f, c in ONNX's order; c = f c + i g, h = o tanh(c)."""
    pre = b.op("Add", [xt, b.op("MatMul", [h, cell.r], f"{st}_hr")], f"{st}_pre")
    i, o, f, g = b.split(pre, 4, cell.hidden, f"{st}_gates")
    i, o, f = (b.op("Sigmoid", [v], f"{st}_{n}") for v, n in ((i, "i"), (o, "o"), (f, "f")))
    g = b.op("Tanh", [g], f"{st}_g")
    c = b.op("Add", [b.op("Mul", [f, c], f"{st}_fc"), b.op("Mul", [i, g], f"{st}_ig")], f"{st}_c")
    return b.op("Mul", [o, b.op("Tanh", [c], f"{st}_tc")], f"{st}_h"), c


def _gru_step(b: _Builder, cell: _Cell, xt: str, h: str, c: str, st: str) -> tuple[str, str]:
    """Gates z, r, h in ONNX's order; h = (1 - z) n + z h, with n's recurrent product
    taken after the reset (default) or before it (``linear_before_reset``, torch's form)."""
    hidden = cell.hidden
    xz, xr, xh = b.split(xt, 3, hidden, f"{st}_xgates")
    if cell.reset_after:
        hz, hr, hh = b.split(b.op("MatMul", [h, cell.r], f"{st}_hr"), 3, hidden, f"{st}_hgates")
        hh = b.op("Add", [hh, cell.rb_h], f"{st}_hhb")
    else:
        hz, hr = b.split(b.op("MatMul", [h, cell.r_zr], f"{st}_hzr"), 2, hidden, f"{st}_hgates")
    z = b.op("Sigmoid", [b.op("Add", [xz, hz], f"{st}_zpre")], f"{st}_z")
    r = b.op("Sigmoid", [b.op("Add", [xr, hr], f"{st}_rpre")], f"{st}_r")
    if cell.reset_after:
        inner = b.op("Mul", [r, hh], f"{st}_rhh")
    else:
        inner = b.op("MatMul", [b.op("Mul", [r, h], f"{st}_rh"), cell.r_h], f"{st}_rhr")
    n = b.op("Tanh", [b.op("Add", [xh, inner], f"{st}_npre")], f"{st}_n")
    keep = b.op("Mul", [z, h], f"{st}_zh")
    return b.op("Add", [b.op("Mul", [b.op("Sub", [cell.one, z], f"{st}_1mz"), n], f"{st}_zn"), keep], f"{st}_h"), c
