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


@pytest.mark.parametrize("damage", [
    lambda inits: inits.__setitem__(2, _init("bn_g", [5])),  # gamma of 5 for 6 channels
    lambda inits: inits.__setitem__(5, _init("bn_v", [6, 1], low=0.1)),  # var of rank 2
    lambda inits: inits.__setitem__(1, _init("bias", [3])),  # conv bias of 3
    lambda inits: inits.__setitem__(0, numpy_helper.from_array(np.ones([6, 4, 3, 3], np.int32), "w")),  # int weights
    lambda inits: inits.__setitem__(3, _init("bn_b", [])),  # a scalar beta
], ids=["gamma-short", "var-rank-2", "bias-short", "int-weight", "scalar-beta"])
def test_parameters_that_do_not_fit_the_conv_are_not_folded(damage):
    """The checker passes initializers of any shape: the fold broadcast gamma [6, 1]
    over 36 channels or ended in numpy's ValueError (18 of a fuzzing trial's cases)."""
    inits = [_init("w", [6, 4, 3, 3]), _init("bias", [6])] + _bn_params("bn", 6)
    damage(inits)
    conv = helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1])
    model = _model([conv, _bn("bn", "c", "y")], inits)
    folded, count = fold_into_conv(model)
    assert count == 0 and _ops(folded) == ["Conv", "BatchNormalization"]


def test_a_fold_that_would_overflow_the_weights_type_is_not_made():
    inits = [_init("w", [6, 4, 3, 3])] + _bn_params("bn", 6)
    inits[1] = numpy_helper.from_array(np.full([6], 3e38, np.float32), "bn_g")  # w x 3e38 / sqrt(var) > float32 max
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), _bn("bn", "c", "y")], inits)
    folded, count = fold_into_conv(model)
    assert count == 0


def test_a_malformed_batch_norm_is_one_line_before_any_fold(tmp_path):
    """The fold ran before ONNX's checker, and read a batch norm of three inputs as one of
    five (ValueError: not enough values to unpack)."""
    from autotune import api
    from autotune.errors import AutotuneError

    inits = [_init("w", [6, 4, 3, 3])] + _bn_params("bn", 6)
    bn = _bn("bn", "c", "y")
    del bn.input[3:]
    onnx.save(_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), bn], inits), tmp_path / "m.onnx")
    with pytest.raises(AutotuneError, match="^invalid ONNX model .*m.onnx: "):
        api.layers(str(tmp_path / "m.onnx"), batch_norm="weights")
