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
