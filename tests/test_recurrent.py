"""LSTM, GRU and RNN unrolled for TVM (autotune.recurrent).

The oracle is ONNX's reference evaluator, which implements the recurrent operators
itself: the unrolled graph must give the original graph's outputs, and a model compiled
by TVM from the unrolled graph must too.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from autotune.errors import AutotuneError
from autotune.recurrent import GATES, unroll_recurrent

SEQ, BATCH, INPUT, HIDDEN = 5, 2, 3, 4


def _recurrent(op, *, direction="forward", bias=True, initial=True, opset=17, outputs=("Y", "Y_h", "Y_c"), seed=0, **attrs):
    """One recurrent node with random weights, and feeds for it."""
    rng = np.random.default_rng(seed)
    gates, dirs = GATES[op], 2 if direction == "bidirectional" else 1
    inits = [
        numpy_helper.from_array(rng.standard_normal((dirs, gates * HIDDEN, INPUT)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)).astype(np.float32), "R"),
    ]
    inputs = ["x", "W", "R", "B" if bias else "", ""]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 2 * gates * HIDDEN)).astype(np.float32), "B"))
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, BATCH, INPUT])]
    feeds = {"x": rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)}
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    if initial:
        for name in states:
            inputs.append(name)
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [dirs, BATCH, HIDDEN]))
            feeds[name] = rng.standard_normal((dirs, BATCH, HIDDEN)).astype(np.float32)
    outputs = [o for o in outputs if op == "LSTM" or o != "Y_c"]
    shapes = {"Y": [SEQ, dirs, BATCH, HIDDEN], "Y_h": [dirs, BATCH, HIDDEN], "Y_c": [dirs, BATCH, HIDDEN]}
    node = helper.make_node(op, inputs, outputs, name="encoder/rnn", hidden_size=HIDDEN, direction=direction, **attrs)
    graph = helper.make_graph(
        [node], "g", graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs if o], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model, feeds


CASES = [
    dict(op=op, direction=d, bias=bias, initial=initial, **extra)
    for op in ("LSTM", "GRU", "RNN")
    for d in ("forward", "reverse", "bidirectional")
    for bias, initial in ((True, True), (False, False))
    for extra in (({"linear_before_reset": 0}, {"linear_before_reset": 1}) if op == "GRU" else ({},))
] + [
    dict(op="LSTM", opset=9),  # Split, Slice, Squeeze and Unsqueeze with attributes, not inputs
    dict(op="GRU", direction="bidirectional", linear_before_reset=1, opset=11),
    dict(op="LSTM", outputs=("", "Y_h")),  # only the last state is used (a typical encoder)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_the_unrolled_graph_computes_what_the_operator_does(case):
    model, feeds = _recurrent(**case)
    unrolled, count = unroll_recurrent(model)
    assert count == 1 and not {n.op_type for n in unrolled.graph.node} & set(GATES)
    onnx.checker.check_model(unrolled, full_check=True)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = ReferenceEvaluator(unrolled).run(None, feeds)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert [o.name for o in unrolled.graph.output] == [o.name for o in model.graph.output]


def test_a_model_without_recurrent_ops_is_returned_as_it_is():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph)
    assert unroll_recurrent(model) == (model, 0)


def _with(model, **attrs):
    node = model.graph.node[0]
    for name, value in attrs.items():
        node.attribute.append(helper.make_attribute(name, value))
    return model


@pytest.mark.parametrize(
    "build,words",
    [
        (lambda: _with(_recurrent("LSTM")[0], clip=1.0), "cell clipping"),
        (lambda: _with(_recurrent("GRU")[0], activations=["Sigmoid", "Relu"]), "activations Sigmoid, Relu"),
        (lambda: _with(_recurrent("LSTM")[0], input_forget=1), "input_forget"),
        (lambda: _with(_recurrent("RNN")[0], layout=1), "layout=1"),
    ],
    ids=["clip", "activations", "input_forget", "layout"],
)
def test_what_is_not_unrolled_is_refused_in_one_line_naming_the_node(build, words):
    with pytest.raises(AutotuneError) as err:
        unroll_recurrent(build())
    message = str(err.value)
    assert message.startswith(f"{build().graph.node[0].op_type} node 'encoder/rnn': ") and words in message
    assert "\n" not in message


def test_a_hidden_size_that_is_no_size_is_refused():
    """hidden_size -1 ended in numpy's "negative dimensions are not allowed"."""
    for size in (-1, 0):
        model, _ = _recurrent("LSTM")
        (old,) = [a for a in model.graph.node[0].attribute if a.name == "hidden_size"]
        model.graph.node[0].attribute.remove(old)
        with pytest.raises(AutotuneError, match=f"^LSTM node 'encoder/rnn': hidden_size {size} is not a positive whole number"):
            unroll_recurrent(_with(model, hidden_size=size))


def test_peepholes_and_weights_computed_at_run_time_are_refused():
    model, _ = _recurrent("LSTM", initial=False)
    model.graph.node[0].input.extend(["", "", "P"])
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 3 * HIDDEN), np.float32), "P"))
    with pytest.raises(AutotuneError, match="peephole"):
        unroll_recurrent(model)

    model, _ = _recurrent("GRU")
    model.graph.node[0].input[1] = "W_scaled"
    model.graph.input.append(helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1]))
    model.graph.node.insert(0, helper.make_node("Mul", ["W", "scale"], ["W_scaled"]))
    with pytest.raises(AutotuneError, match="its W is computed from the model's inputs"):
        unroll_recurrent(model)


def test_weights_computed_from_initializers_are_folded_first():
    """torch's dynamo exporter hands LSTM its weights through Slice and Concat of the
    initializers (reordering torch's gates i, f, g, o into ONNX's i, o, f, c)."""
    model, feeds = _recurrent("LSTM", direction="bidirectional")
    model.graph.node[0].input[1] = "W_reordered"
    halves = [f"W_half{k}" for k in range(2)]
    model.graph.node.insert(0, helper.make_node("Split", ["W", "half"], halves, axis=1))
    model.graph.node.insert(1, helper.make_node("Concat", halves[::-1], ["W_reordered"], axis=1))  # really reordered
    model.graph.initializer.append(numpy_helper.from_array(np.array([2 * HIDDEN, 2 * HIDDEN], np.int64), "half"))
    onnx.checker.check_model(model, full_check=True)
    unrolled, count = unroll_recurrent(model)
    assert count == 1
    for got, want in zip(ReferenceEvaluator(unrolled).run(None, feeds), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sequence_lengths_shorter_than_the_sequence_are_refused():
    model, feeds = _recurrent("RNN", initial=False)
    model.graph.node[0].input[4] = "lens"
    model.graph.initializer.append(numpy_helper.from_array(np.array([SEQ, SEQ - 1], np.int32), "lens"))
    with pytest.raises(AutotuneError, match="sequence_lens shorter"):
        unroll_recurrent(model)
    # lengths that are the whole sequence change nothing: unrolled
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([SEQ, SEQ], np.int32), "lens"))
    unrolled, _ = unroll_recurrent(model)
    np.testing.assert_allclose(
        ReferenceEvaluator(unrolled).run(None, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-5, atol=1e-5
    )


def _speech_model(path):
    """A bidirectional LSTM over 40-dim frames, then a GRU and a linear layer on its last state."""
    rng = np.random.default_rng(0)
    seq, feat, hidden = 8, 40, 32

    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("LSTM", ["input", "W1", "R1", "B1"], ["y1"], hidden_size=hidden, direction="bidirectional"),
        helper.make_node("Transpose", ["y1"], ["y1t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["y1t", "shape"], ["y1r"]),
        helper.make_node("GRU", ["y1r", "W2", "R2", "B2"], ["", "h2"], hidden_size=hidden, linear_before_reset=1),
        helper.make_node("Squeeze", ["h2", "axis0"], ["h"]),
        helper.make_node("Gemm", ["h", "Wo", "Bo"], ["output"], transB=1),
    ]
    inits = [
        weight("W1", (2, 4 * hidden, feat)), weight("R1", (2, 4 * hidden, hidden)), weight("B1", (2, 8 * hidden)),
        numpy_helper.from_array(np.array([seq, 1, 2 * hidden], np.int64), "shape"),
        weight("W2", (1, 3 * hidden, 2 * hidden)), weight("R2", (1, 3 * hidden, hidden)), weight("B2", (1, 6 * hidden)),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"), weight("Wo", (10, hidden)), weight("Bo", (10,)),
    ]
    graph = helper.make_graph(
        nodes, "speech", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [seq, 1, feat])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return str(path), seq


def test_an_lstm_model_decomposes_compiles_and_matches_the_onnx_reference(tmp_path):
    """Before, TVM's frontend refused the model ("not supported: GRU, LSTM"). Now each
    step's recurrent matmul is one workload for all its steps, and the compiled module
    agrees with ONNX's reference evaluator run on the original, recurrent graph."""
    from autotune import api

    model, seq = _speech_model(tmp_path / "speech.onnx")
    layers = api.layers(model)["layers"]
    dense = [l for l in layers if l.op_class == "dense"]
    # the input projections (one per direction or layer) and the classifier run once;
    # the recurrent step matmul of each layer is one workload called step after step
    assert max(l.occurrences for l in dense) >= seq - 1
    assert all(l.tunable for l in dense)

    out = tmp_path / "speech.so"
    api.compile(model, out, target="llvm")  # no history: TVM's default schedules
    result = api.run(out, check=model, repeat=1)
    assert result["check"]["ok"] is True, result["check"]


def test_the_batch_of_a_sequence_first_lstm_is_its_second_dimension(tmp_path):
    """A PyTorch LSTM's default input is (time, batch, features): the model's batch was
    read as its sequence length, so its layers' batch-invariant keys kept the batch, and a
    model tuned at one batch matched none of another's layers as the same kernel."""
    from autotune import api
    from autotune.frontend import load_model

    def model(batch: int) -> str:
        rng = np.random.default_rng(0)
        node = helper.make_node("LSTM", ["x", "W", "R"], ["", "h"], hidden_size=HIDDEN)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, batch, INPUT])],
            [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, batch, HIDDEN])],
            [numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, n)).astype(np.float32), w)
             for w, n in (("W", INPUT), ("R", HIDDEN))],
        )
        path = tmp_path / f"lstm_{batch}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return str(path)

    assert load_model(model(3)).batch_size == 3 and load_model(model(6)).batch_size == 6
    keys = [{l.batch_invariant_key for l in api.layers(model(b))["layers"] if l.op_class == "dense"} for b in (3, 6)]
    assert keys[0] and keys[0] == keys[1]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_torchs_own_lstm_and_gru_exports_compile_to_torchs_outputs(tmp_path, exporter):
    """nn.LSTM (2 layers, bidirectional, batch first) + nn.GRU + nn.Linear as torch 2.13
    exports them (tests/data/make_torch_recurrent.py): the TorchScript exporter computes
    the initial states with Shape/Expand chains, the dynamo exporter reorders the gates
    with Slice and Concat of the weights. The compiled module must give torch's outputs."""
    from pathlib import Path

    from autotune import api

    data = Path(__file__).parent / "data"
    io = np.load(data / "torch_recurrent_io.npz")
    model = str(data / f"torch_recurrent_{exporter}.onnx")
    out = tmp_path / f"{exporter}.so"
    api.compile(model, out, target="llvm")
    result = api.run(out, inputs={"input": io["input"]}, check=model, repeat=1, return_outputs=True)
    (got,) = result["output_arrays"]
    np.testing.assert_allclose(got, io["output"], rtol=1e-5, atol=1e-5)  # torch's own numbers
    assert result["check"]["ok"] is True  # and ONNX's reference on the exported graph


def test_a_batch_first_model_whose_lstm_runs_time_first_keeps_its_layers_keys_across_batches():
    """``speech`` takes (batch, time, features) and transposes it for its LSTM: its LSTM
    layers carry the batch second while the batch was read from the input's first
    dimension alone, so their batch-invariant keys changed with the batch, and ``compile``
    at a new batch gave them TVM's defaults (a helper's trial: 0 tuned layers of 4)."""
    from autotune import api
    from autotune.frontend import load_model

    def tunable(batch: int) -> list:
        return [l for l in api.layers("speech", size=8, batch_size=batch)["layers"] if l.tunable]

    spec = load_model("speech", size=8, batch_size=2)
    assert spec.batch_axis == 0 and not spec.sequence_first and spec.sequences_carry_batch_second
    one, two, four = tunable(1), tunable(2), tunable(4)
    assert len(one) == len(two) == len(four) >= 4
    for a, b, c in zip(one, two, four):
        assert a.batch_invariant_key == b.batch_invariant_key == c.batch_invariant_key, a.name
        assert a.workload_key != b.workload_key != c.workload_key
