"""A small ONNX graph builder used by the zoo model families.

Why a builder instead of exporting from PyTorch: the zoo must work offline with
only ``onnx`` and ``numpy`` installed, and tuning only cares about architecture
(operator types and static shapes), not trained weights. The builder tracks the
static shape of every tensor it creates so that each family can size its
classifier from whatever spatial extent is left, and so that impossible input
sizes fail with a clear message instead of a broken graph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from autotune.errors import AutotuneError

#: The ONNX opset every zoo model targets (LayerNormalization needs >= 17).
OPSET = 17
#: IR version matching opset 17; pinned so older runtimes can still load the files.
IR_VERSION = 8
#: Serialized ONNX protobufs cannot exceed 2 GiB; stay clear of it with some headroom.
MAX_WEIGHT_BYTES = 1800 * 1024 * 1024

Shape = tuple[int, ...]


def _pool_out(size: int, kernel: int, stride: int, pad: int) -> int:
    """Output extent of a conv/pool window along one axis (floor mode, as ONNX's default)."""
    return (size + 2 * pad - kernel) // stride + 1


class GraphBuilder:
    """Accumulates nodes and seeded initializers, tracking static shapes.

    Every random draw goes through one ``numpy.random.default_rng(seed)`` in
    graph-construction order, so the same build calls give byte-identical models.
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.shapes: dict[str, Shape] = {}
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[tuple[str, np.ndarray]] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._op_counts: dict[str, int] = {}
        self._weight_bytes = 0

    # ------------------------------------------------------------------ basics
    def _claim(self, name: str, shape: Shape) -> str:
        """Register a tensor name; duplicates would silently alias tensors, so refuse them."""
        if name in self.shapes:
            raise ValueError(f"duplicate tensor name {name!r} in zoo graph")
        self.shapes[name] = tuple(int(d) for d in shape)
        return name

    def input(self, name: str, shape: Shape, dtype: str = "float32") -> str:
        """Declare a graph input with a fully static shape (``int64`` for token ids)."""
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self._inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return self._claim(name, shape)

    def _check_room(self, shape: Shape, itemsize: int = 4) -> None:
        """Refuse, before allocating, weights that could never be saved as one ONNX file."""
        if self._weight_bytes + math.prod(shape) * itemsize > MAX_WEIGHT_BYTES:
            raise AutotuneError(
                "weights would exceed the 2 GiB ONNX file limit; use a smaller input size"
            )

    def const(self, name: str, value: np.ndarray) -> str:
        """Add an initializer (weights, reshape targets, clip bounds)."""
        arr = np.ascontiguousarray(value)
        self._check_room(arr.shape, arr.itemsize)
        self._weight_bytes += arr.nbytes
        self._initializers.append((name, arr))
        return self._claim(name, arr.shape)

    def normal(self, name: str, shape: Shape, std: float, mean: float = 0.0) -> str:
        """Add a float32 initializer drawn from N(mean, std^2)."""
        self._check_room(shape)
        arr = self.rng.standard_normal(shape, dtype=np.float32)
        arr *= np.float32(std)
        if mean:
            arr += np.float32(mean)
        return self.const(name, arr)

    def uniform(self, name: str, shape: Shape, low: float, high: float) -> str:
        """Add a float32 initializer drawn from U(low, high)."""
        arr = self.rng.uniform(low, high, size=shape).astype(np.float32)
        return self.const(name, arr)

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        out_shape: Shape,
        *,
        output: str | None = None,
        **attrs: object,
    ) -> str:
        """Append a single-output node; its output name is generated unless given."""
        (out,) = self.node_outputs(op_type, inputs, [out_shape], outputs=None if output is None else [output], **attrs)
        return out

    def node_outputs(
        self,
        op_type: str,
        inputs: Sequence[str],
        out_shapes: Sequence[Shape],
        *,
        outputs: Sequence[str] | None = None,
        **attrs: object,
    ) -> list[str]:
        """Append a node with one output per shape in ``out_shapes`` (an LSTM's Y, Y_h, Y_c)."""
        count = self._op_counts.get(op_type, 0)
        self._op_counts[op_type] = count + 1
        node_name = f"{op_type}_{count}"
        if outputs is None:
            outputs = [f"{node_name}_out"] if len(out_shapes) == 1 else [f"{node_name}_out{i}" for i in range(len(out_shapes))]
        for shape in out_shapes:
            if any(d < 1 for d in shape):
                raise AutotuneError(
                    f"input too small: {op_type} would produce an empty tensor of shape {tuple(shape)}"
                )
        self._nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=node_name, **attrs))
        return [self._claim(out, shape) for out, shape in zip(outputs, out_shapes)]

    def finish(
        self, output: str, *, graph_name: str, doc: str, metadata: dict[str, str]
    ) -> onnx.ModelProto:
        """Wrap everything into a ModelProto with a static-shaped output named ``output``."""
        out_info = helper.make_tensor_value_info(
            output, TensorProto.FLOAT, list(self.shapes[output])
        )
        graph = helper.make_graph(self._nodes, graph_name, self._inputs, [out_info])
        model = helper.make_model(
            graph,
            producer_name="autotune.zoo",
            opset_imports=[helper.make_opsetid("", OPSET)],
        )
        # Weights go straight into the final message: passing them to make_graph /
        # make_model copies every tensor twice, which dominated VGG build time.
        for name, arr in self._initializers:
            tensor = model.graph.initializer.add()
            tensor.name = name
            tensor.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
            tensor.dims.extend(arr.shape)
            tensor.raw_data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        model.ir_version = IR_VERSION
        model.doc_string = doc
        helper.set_model_props(model, metadata)
        return model

    # ------------------------------------------------------------ layer helpers
    def conv(
        self,
        x: str,
        out_ch: int,
        kernel: int,
        *,
        name: str,
        stride: int = 1,
        pad: int = 0,
        groups: int = 1,
        bias: bool = False,
        output: str | None = None,
    ) -> str:
        """2-D convolution with He-normal weights (keeps activation variance ~1 through ReLU)."""
        n, c, h, w = self.shapes[x]
        if c % groups or out_ch % groups:
            raise ValueError(f"{name}: channels {c}->{out_ch} not divisible by groups={groups}")
        fan_in = (c // groups) * kernel * kernel
        inputs = [x, self.normal(f"{name}.weight", (out_ch, c // groups, kernel, kernel),
                                 math.sqrt(2.0 / fan_in))]
        if bias:
            inputs.append(self.normal(f"{name}.bias", (out_ch,), 0.01))
        oh, ow = _pool_out(h, kernel, stride, pad), _pool_out(w, kernel, stride, pad)
        return self.node(
            "Conv", inputs, (n, out_ch, oh, ow), output=output,
            kernel_shape=[kernel, kernel], strides=[stride, stride],
            pads=[pad, pad, pad, pad], group=groups,
        )

    def conv_transpose(
        self,
        x: str,
        out_ch: int,
        kernel: int,
        *,
        name: str,
        stride: int = 1,
        pad: int = 0,
        bias: bool = True,
        gain: float = 2.0,
    ) -> str:
        """2-D transposed convolution (a decoder's upsampling), weights [in, out, k, k].

        Each output point sums about in * (k / stride)^2 products, so that is the fan-in
        the weights are scaled by."""
        n, c, h, w = self.shapes[x]
        fan_in = c * kernel * kernel / (stride * stride)
        inputs = [x, self.normal(f"{name}.weight", (c, out_ch, kernel, kernel), math.sqrt(gain / fan_in))]
        if bias:
            inputs.append(self.normal(f"{name}.bias", (out_ch,), 0.01))
        oh, ow = ((d - 1) * stride - 2 * pad + kernel for d in (h, w))
        return self.node(
            "ConvTranspose", inputs, (n, out_ch, oh, ow),
            kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad, pad, pad, pad],
        )

    def lstm(self, x: str, hidden: int, *, name: str, bidirectional: bool = False) -> str:
        """torch.nn.LSTM on a [seq, batch, features] input, as torch.onnx exports it: one
        LSTM node (weights [dirs, 4 * hidden, in], gates i, o, f, c), then its output's
        directions joined into the feature axis: [seq, batch, dirs * hidden]."""
        seq, batch, features = self.shapes[x]
        dirs = 2 if bidirectional else 1
        weights = self.lstm_weights(features, hidden, name=name, dirs=dirs)
        y = self.node("LSTM", [x, *weights], (seq, dirs, batch, hidden), hidden_size=hidden,
                      direction="bidirectional" if bidirectional else "forward")
        y = self.node("Transpose", [y], (seq, batch, dirs, hidden), perm=[0, 2, 1, 3])
        return self.reshape(y, (seq, batch, dirs * hidden), name=f"{name}.join")

    def lstm_weights(self, features: int, hidden: int, *, name: str, dirs: int = 1) -> list[str]:
        """An LSTM node's W, R and B initializers, made once so that the steps of a decoder
        (one LSTM node per step) can share them."""
        # gate inputs of unit variance for unit inputs (torch's U(+-1/sqrt(hidden)) leaves
        # the states, and the model's output, near 0)
        ih, hh = math.sqrt(3.0 / features), math.sqrt(3.0 / hidden)
        return [
            self.uniform(f"{name}.ih.weight", (dirs, 4 * hidden, features), -ih, ih),
            self.uniform(f"{name}.hh.weight", (dirs, 4 * hidden, hidden), -hh, hh),
            self.uniform(f"{name}.bias", (dirs, 8 * hidden), -hh, hh),
        ]

    def lstm_step(
        self, x: str, weights: Sequence[str], state: tuple[str, str] | None = None
    ) -> tuple[str, str, str]:
        """One forward LSTM node over ``x`` [seq, batch, features] from ``state`` (h, c),
        each [1, batch, hidden], zeros when None: its output [seq, batch, hidden] and its
        last (h, c), which the next call takes up, as torch exports an ``nn.LSTM`` called
        once per decoding step."""
        seq, batch, _ = self.shapes[x]
        hidden = self.shapes[weights[1]][-1]
        inputs = [x, *weights] + (["", state[0], state[1]] if state else [])
        y, h, c = self.node_outputs(
            "LSTM", inputs, [(seq, 1, batch, hidden), (1, batch, hidden), (1, batch, hidden)], hidden_size=hidden
        )
        return self.node("Squeeze", [y, self.axes_const(1)], (seq, batch, hidden)), h, c

    def axes_const(self, *axes: int) -> str:
        """An int64 axes input (Squeeze, Unsqueeze), shared by every node that uses the same axes."""
        name = "axes." + "_".join(str(a) for a in axes)
        if name not in self.shapes:
            self.const(name, np.array(axes, dtype=np.int64))
        return name

    def batch_norm(self, x: str, *, name: str, gamma: float = 1.0) -> str:
        """Inference BatchNormalization with near-identity statistics.

        Small random perturbations make the op non-trivial (a frontend that
        dropped it would be caught) while keeping activations O(1). ``gamma``
        lets residual branches start damped so depth does not blow up variance.
        """
        c = self.shapes[x][1]
        scale = self.normal(f"{name}.weight", (c,), 0.05 * gamma, mean=gamma)
        bias = self.normal(f"{name}.bias", (c,), 0.05)
        mean = self.normal(f"{name}.running_mean", (c,), 0.05)
        var = self.uniform(f"{name}.running_var", (c,), 0.8, 1.2)
        return self.node("BatchNormalization", [x, scale, bias, mean, var], self.shapes[x],
                         epsilon=1e-5)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x], self.shapes[x])

    def sigmoid(self, x: str, *, output: str | None = None) -> str:
        return self.node("Sigmoid", [x], self.shapes[x], output=output)

    def relu6(self, x: str) -> str:
        """ReLU6 as Clip with min/max given as inputs (the opset >= 11 form torch exports)."""
        if "relu6.min" not in self.shapes:
            self.const("relu6.min", np.array(0.0, dtype=np.float32))
            self.const("relu6.max", np.array(6.0, dtype=np.float32))
        return self.node("Clip", [x, "relu6.min", "relu6.max"], self.shapes[x])

    def add(self, a: str, b: str) -> str:
        """Elementwise add; shapes must already agree after numpy broadcasting."""
        shape = np.broadcast_shapes(self.shapes[a], self.shapes[b])
        return self.node("Add", [a, b], shape)

    def max_pool(self, x: str, kernel: int, stride: int, pad: int = 0) -> str:
        n, c, h, w = self.shapes[x]
        return self.node(
            "MaxPool", [x],
            (n, c, _pool_out(h, kernel, stride, pad), _pool_out(w, kernel, stride, pad)),
            kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad, pad, pad, pad],
        )

    def global_avg_pool(self, x: str) -> str:
        n, c, _, _ = self.shapes[x]
        return self.node("GlobalAveragePool", [x], (n, c, 1, 1))

    def reshape(self, x: str, shape: Shape, *, name: str) -> str:
        """Reshape to a fully static target stored as a constant initializer."""
        if math.prod(shape) != math.prod(self.shapes[x]):
            raise ValueError(f"{name}: cannot reshape {self.shapes[x]} to {shape}")
        target = self.const(f"{name}.shape", np.array(shape, dtype=np.int64))
        return self.node("Reshape", [x, target], shape)

    def flatten(self, x: str, *, name: str = "flatten") -> str:
        """Collapse everything but the batch axis (static, so any spatial size works)."""
        n = self.shapes[x][0]
        return self.reshape(x, (n, math.prod(self.shapes[x][1:])), name=name)

    def linear(
        self, x: str, out_features: int, *, name: str, gain: float = 2.0,
        output: str | None = None,
    ) -> str:
        """torch.nn.Linear on a 2-D input as Gemm(transB=1), the form torch.onnx emits."""
        n, in_features = self.shapes[x]
        w = self.normal(f"{name}.weight", (out_features, in_features), math.sqrt(gain / in_features))
        b = self.normal(f"{name}.bias", (out_features,), 0.01)
        return self.node("Gemm", [x, w, b], (n, out_features), output=output, transB=1)

    def dense(
        self, x: str, out_features: int, *, name: str, gain: float = 1.0,
        output: str | None = None,
    ) -> str:
        """Linear layer on an N-D input as MatMul + Add (how transformers are exported)."""
        shape = self.shapes[x]
        in_features = shape[-1]
        w = self.normal(f"{name}.weight", (in_features, out_features), math.sqrt(gain / in_features))
        b = self.normal(f"{name}.bias", (out_features,), 0.01)
        mm = self.node("MatMul", [x, w], (*shape[:-1], out_features))
        return self.node("Add", [mm, b], self.shapes[mm], output=output)
