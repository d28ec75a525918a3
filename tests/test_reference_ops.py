"""``run --check``'s ground truth where ONNX's reference evaluator departs from the spec
(autotune.reference_ops): a user's trial found correct LRN and opset-11 softmax modules
called MISMATCH."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from autotune.cli import main
from autotune.run import onnx_reference


def _model(nodes, shape, opset, outputs=("y",)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(shape)) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_lrn_is_normalized_over_every_channel():
    """The evaluator's loop ran over the batch: with one image only channel 0 was normalized."""
    size, alpha, beta, bias = 3, 0.5, 0.75, 1.0
    model = _model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)], (1, 4, 2, 2), 17)
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 2)).astype(np.float32)
    want = np.empty_like(x)
    for c in range(4):  # the spec's formula, written out
        window = x[:, max(0, c - 1):min(4, c + 2)] ** 2
        want[:, c] = x[:, c] / (bias + alpha / size * window.sum(axis=1)) ** beta
    (got,) = onnx_reference(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("opset", [11, 13])
def test_the_softmax_family_takes_its_opsets_form(opset):
    """Before opset 13 Softmax, LogSoftmax and Hardmax flatten the input to 2-D at axis;
    the evaluator had only opset 13's per-axis form."""
    nodes = [helper.make_node(op, ["x"], [out], axis=1) for op, out in (("Softmax", "s"), ("LogSoftmax", "l"), ("Hardmax", "h"))]
    model = _model(nodes, (2, 3, 4), opset, outputs=("s", "l", "h"))
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    s, l, h = onnx_reference(model, {"x": x})
    axis = (1,) if opset >= 13 else (1, 2)  # opset 11: each row of the (2, 12) flattening
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(axis=axis, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(l, np.log(e / e.sum(axis=axis, keepdims=True)), rtol=1e-5, atol=1e-6)
    assert h.sum() == (2 if opset < 13 else 2 * 4)  # one 1 per normalized row


def test_a_correct_lrn_module_checks_ok(tmp_path, capsys):
    model = _model([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.5, beta=0.75, bias=1.0)], (1, 4, 8, 8), 17)
    onnx.save(model, tmp_path / "lrn.onnx")
    out = tmp_path / "lrn.so"
    assert main(["compile", str(tmp_path / "lrn.onnx"), "--target", "llvm", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check", str(tmp_path / "lrn.onnx"), "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"] is True


def _conv_transpose(x, w, b, strides, pads, output_padding, group):
    """The spec's ConvTranspose written out, loop by loop (2-D)."""
    n, c, h, wd = x.shape
    per_group, m, kh, kw = c // group, w.shape[1], w.shape[2], w.shape[3]
    full = np.zeros((n, m * group, (h - 1) * strides[0] + kh + output_padding[0], (wd - 1) * strides[1] + kw + output_padding[1]))
    for g in range(group):
        for ci in range(per_group):
            for i in range(h):
                for j in range(wd):
                    for o in range(m):
                        full[:, g * m + o, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw] += (
                            x[:, g * per_group + ci, i, j][:, None, None] * w[g * per_group + ci, o])
    out = full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]
    return out + b.reshape(1, -1, 1, 1)


def _conv_transpose_model(**attrs):
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("x", "w", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_grouped_conv_transpose_is_computed_as_the_spec_says():
    """The evaluator failed on group > 1 ("cannot reshape array of size 81 into shape
    (1,2,27)") and ``run --check`` ended in an error for a correct module; ungrouped ones
    it computes itself, and the spec's form given here agrees with it on those."""
    from onnx.reference import ReferenceEvaluator

    from autotune.reference_ops import ConvTranspose, corrected_ops

    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 5), (4, 3, 3, 2), (6,)))
    attrs = dict(strides=[2, 2], pads=[1, 1, 1, 0], output_padding=[1, 1], group=2)
    model = _conv_transpose_model(**attrs)
    assert ConvTranspose in corrected_ops(model)
    (got,) = onnx_reference(model, {"x": x, "w": w, "b": b})
    want = _conv_transpose(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), [2, 2], [1, 1, 1, 0], [1, 1], 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    w1, b1 = w[:, :, :, :], rng.standard_normal(3).astype(np.float32)
    for attrs in (dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), dict(strides=[3, 1], dilations=[2, 1], pads=[0, 1, 2, 0]),
                  dict(strides=[2, 2], output_shape=[10, 10], auto_pad="SAME_UPPER"), dict(strides=[2, 2], auto_pad="SAME_LOWER"), {}):
        model = _conv_transpose_model(**attrs)
        assert ConvTranspose not in corrected_ops(model)
        feed = {"x": x, "w": w1, "b": b1}
        (theirs,) = ReferenceEvaluator(model).run(None, feed)
        (ours,) = ReferenceEvaluator(model, new_ops=[ConvTranspose]).run(None, feed)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5, err_msg=str(attrs))


def test_a_grouped_conv_transpose_module_checks_ok_and_keeps_its_outputs(tmp_path, capsys):
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, (4, 3, 3, 3), rng.standard_normal(108).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, (6,), rng.standard_normal(6).astype(np.float32))
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 10, 10])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "ct.onnx")
    out = tmp_path / "ct.so"
    assert main(["compile", str(tmp_path / "ct.onnx"), "--target", "llvm", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check", str(tmp_path / "ct.onnx"), "--repeat", "1", "--json",
                 "--save-outputs", str(tmp_path / "y.npz")]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"] is True
    assert np.load(tmp_path / "y.npz")["y"].shape == (1, 6, 10, 10)


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_batch_norm_before_opset_14_is_inference(opset):
    """ONNX's evaluator took BatchNormalization at opsets 9 to 13 as training (its default
    momentum filled in) and normalized by the batch's statistics: `run --check` called
    correct modules 7.08 off (a helper's fuzzing)."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    g, b, m = (rng.standard_normal(4).astype("float32") for _ in range(3))
    v = rng.uniform(0.5, 2, 4).astype("float32")
    inits = [numpy_helper.from_array(a, n) for a, n in ((g, "g"), (b, "b"), (m, "m"), (v, "v"))]
    graph = helper.make_graph([helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], epsilon=1e-3)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = rng.standard_normal((2, 4, 3, 3)).astype("float32")
    (y,) = onnx_reference(model, {"x": x})
    expected = (x - m.reshape(1, -1, 1, 1)) / np.sqrt(v.reshape(1, -1, 1, 1) + 1e-3) * g.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)
    assert np.allclose(y, expected, atol=1e-5)
