"""Tests for autotune.batch_norm: folding inference batch norm into the conv before it.

The oracle is ONNX's reference evaluator run on the model before and after the fold.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from autotune.batch_norm import fold_into_conv

RNG = np.random.default_rng(0)


def _init(name, shape, low=None):
    data = RNG.uniform(low, 2.0, shape) if low is not None else RNG.standard_normal(shape)
    return numpy_helper.from_array(data.astype("float32"), name)


def _bn_params(prefix, channels):
    return [_init(f"{prefix}_g", [channels]), _init(f"{prefix}_b", [channels]),
            _init(f"{prefix}_m", [channels]), _init(f"{prefix}_v", [channels], low=0.1)]


def _bn(prefix, x, y, **attrs):
    return helper.make_node("BatchNormalization", [x] + [f"{prefix}_{p}" for p in "gbmv"], [y], **attrs)


def _model(nodes, inits, outputs=None, inputs_list_initializers=False):
    """``outputs``: name -> shape (default ``y`` of 6 channels, 8x8)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape) for o, shape in (outputs or {"y": [1, 6, 8, 8]}).items()]
    inputs = [x]
    if inputs_list_initializers:  # IR < 4 style: every initializer is also a graph input
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "g", inputs, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _same_outputs(before, after):
    feed = {"x": RNG.standard_normal((1, 4, 8, 8)).astype("float32")}
    want = ReferenceEvaluator(before).run(None, feed)
    got = ReferenceEvaluator(after).run(None, feed)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _ops(model):
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_then_batch_norm_becomes_one_conv(with_bias):
    inits = [_init("w", [6, 4, 3, 3])] + ([_init("bias", [6])] if with_bias else []) + _bn_params("bn", 6)
    conv = helper.make_node("Conv", ["x", "w"] + (["bias"] if with_bias else []), ["c"], pads=[1, 1, 1, 1])
    model = _model([conv, _bn("bn", "c", "y", epsilon=1e-3)], inits)
    folded, count = fold_into_conv(model)
    onnx.checker.check_model(folded)
    assert count == 1 and _ops(folded) == ["Conv"]
    assert {t.name for t in folded.graph.initializer} == {"c_bn_weight", "c_bn_bias"}  # the old ones dropped
    _same_outputs(model, folded)
    assert _ops(model) == ["Conv", "BatchNormalization"]  # the input model is not touched


def test_grouped_conv_and_a_shared_weight():
    """Two depthwise convs share one weight, each with its own batch norm: each gets its
    own folded weight, and the shared one is dropped only once nothing uses it."""
    inits = [_init("w", [4, 1, 3, 3])] + _bn_params("a", 4) + _bn_params("b", 4)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], group=4, pads=[1, 1, 1, 1]),
        _bn("a", "c1", "y1"),
        helper.make_node("Conv", ["y1", "w"], ["c2"], group=4, pads=[1, 1, 1, 1]),
        _bn("b", "c2", "y"),
    ]
    model = _model(nodes, inits, outputs={"y": [1, 4, 8, 8]})
    folded, count = fold_into_conv(model)
    onnx.checker.check_model(folded)
    assert count == 2 and _ops(folded) == ["Conv", "Conv"]
    _same_outputs(model, folded)


def test_what_cannot_be_folded_is_left_alone():
    """A conv output someone else reads too, and a batch norm whose statistics are
    computed: both stay as they are."""
    inits = [_init("w", [4, 4, 1, 1])] + _bn_params("a", 4) + _bn_params("b", 4)[:3]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"]),
        _bn("a", "c1", "y1"),
        helper.make_node("Relu", ["c1"], ["r"]),  # c1 has a second reader
        helper.make_node("Conv", ["x", "w"], ["c2"]),
        helper.make_node("Abs", ["x"], ["b_v"]),  # not an initializer
        _bn("b", "c2", "y"),
    ]
    model = _model(nodes, inits, outputs={name: [1, 4, 8, 8] for name in ("y1", "r", "y")})
    folded, count = fold_into_conv(model)
    assert count == 0 and _ops(folded) == _ops(model)


def test_initializers_listed_as_inputs_go_with_them():
    inits = [_init("w", [6, 4, 3, 3])] + _bn_params("bn", 6)
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"]), _bn("bn", "c", "y")], inits,
                   outputs={"y": [1, 6, 6, 6]}, inputs_list_initializers=True)
    folded, count = fold_into_conv(model)
    onnx.checker.check_model(folded)
    assert count == 1
    assert [i.name for i in folded.graph.input] == ["x"]
    _same_outputs(model, folded)


def test_a_conv_output_read_inside_a_subgraph_is_not_folded():
    """An If branch reading the conv's output from the outer scope is a second reader."""
    inits = [_init("w", [4, 4, 1, 1])] + _bn_params("bn", 4)
    branch = helper.make_graph([helper.make_node("Identity", ["c"], ["z"])], "branch", [],
                               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        _bn("bn", "c", "y"),
        helper.make_node("If", ["cond"], ["r"], then_branch=branch, else_branch=branch),
    ]
    model = _model(nodes, inits + [cond], outputs={"y": [1, 4, 8, 8], "r": [1, 4, 8, 8]})
    folded, count = fold_into_conv(model)
    assert count == 0 and _ops(folded) == _ops(model)
    _same_outputs(model, folded)
