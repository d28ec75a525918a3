"""Tests for autotune.decompose: fused Relax module -> described layers.

The oracle is the model architecture itself (torchvision ResNet-18 / MobileNetV2 and
the zoo transformer block): layer attributes are read back from TIR indices and must
match what the architecture says; FLOPs must match the textbook formula.
"""

from __future__ import annotations

import json
import math

import pytest

from autotune.decompose import TUNABLE_CLASSES, Layer, decompose, describe
from autotune.frontend import load_and_fuse


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home" / ".autotune"))
    monkeypatch.setenv("AUTOTUNE_HISTORY", str(tmp_path / "home" / "history.db"))


def _layers(name, size, batch=1, batch_norm="separate"):
    """Batch norm separate by default here: these checks read each convolution back as a
    bare kernel; the default layering (folded) has its own tests below."""
    _, mod = load_and_fuse(name, size=size, batch_size=batch, batch_norm=batch_norm)
    return decompose(mod, batch_size=batch)


@pytest.fixture(scope="module")
def resnet():
    return _layers("resnet18", 64, 1)


@pytest.fixture(scope="module")
def resnet_b2():
    return _layers("resnet18", 64, 2)


@pytest.fixture(scope="module")
def mobilenet():
    return _layers("mobilenetv2", 32, 1)


@pytest.fixture(scope="module")
def transformer():
    return _layers("transformer", 16, 1)


@pytest.fixture(scope="module")
def transformer_b2():
    return _layers("transformer", 16, 2)


def _convs(layers):
    return [l for l in layers if l.op_class in ("conv2d", "depthwise_conv2d")]


def _by_name(layers):
    return {l.name: l for l in layers}


# --- where batch norm runs ------------------------------------------------------------------
def test_batch_norm_folds_into_the_conv_epilogue(resnet):
    """Inference batch norm is elementwise: folded, it is the conv's epilogue, one kernel
    for conv + BN + ReLU (+ residual add), as TVM's own tuning pipeline gets."""
    _, mod = load_and_fuse("resnet18", size=64, batch_norm="epilogue")
    folded = decompose(mod, batch_size=1)
    assert any("batch_norm" in l.name for l in resnet)
    assert not any("batch_norm" in l.name for l in folded)
    launches = lambda layers: sum(l.occurrences for l in layers)  # noqa: E731
    assert (launches(resnet), launches(folded)) == (41, 24)
    # the same convolutions, each now normalizing (and mostly rectifying) its own output
    convs = [l for l in folded if l.op_class == "conv2d"]
    shapes = lambda layers: {(tuple(l.spatial), tuple(l.reduction)) for l in layers if l.op_class == "conv2d"}  # noqa: E731
    assert shapes(folded) == shapes(resnet)
    assert all(l.epilogue[:4] == ["subtract", "divide", "multiply", "add"] for l in convs)
    assert sum("relu" in l.name for l in convs) >= len(convs) - 3  # all but the downsampling 1x1s
    # MACs, then one op per output element for each epilogue step
    for l in convs:
        n, _, _, _ = l.inputs[0]
        k, cg, r, s = l.weights[0]
        macs = n * k * cg * r * s * math.prod(l.output[2:])
        assert l.flops == 2 * macs + len(l.epilogue) * math.prod(l.output), l.name


def test_batch_norm_folded_into_weights_leaves_an_epilogue_of_one_add(resnet):
    """Folded into the weights (the default), batch norm leaves the conv a bias add, then
    the ReLU or residual add that followed it: as many launches as the epilogue layering,
    each normalizing nothing at run time."""
    folded = _layers("resnet18", 64, 1, batch_norm="weights")
    assert sum(l.occurrences for l in folded) == 24
    convs = [l for l in folded if l.op_class == "conv2d"]
    shapes = lambda layers: {(tuple(l.spatial), tuple(l.reduction)) for l in layers if l.op_class == "conv2d"}  # noqa: E731
    assert shapes(folded) == shapes(resnet)
    assert all(l.epilogue[0] == "add" and "divide" not in l.epilogue for l in convs), [l.epilogue for l in convs]
    assert all(l.weights[1] == [1, l.output[1], 1, 1] for l in convs)  # the folded bias, per channel
    for l in convs:
        n, _, _, _ = l.inputs[0]
        k, cg, r, s = l.weights[0]
        assert l.flops == 2 * n * k * cg * r * s * math.prod(l.output[2:]) + len(l.epilogue) * math.prod(l.output), l.name


def test_unknown_batch_norm_layering_is_one_clear_error():
    from autotune.errors import AutotuneError

    with pytest.raises(AutotuneError, match="batch_norm must be one of separate, epilogue, weights"):
        load_and_fuse("resnet18", size=32, batch_norm="fold")


# --- conv attributes ---------------------------------------------------------------------
def test_first_conv_attributes(resnet):
    first = resnet[0]
    assert first.op_class == "conv2d"
    assert first.tunable
    assert first.attrs["stride"] == [2, 2]
    assert first.attrs["kernel"] == [7, 7]
    assert first.attrs["padding"] == [3, 3]
    assert first.attrs["dilation"] == [1, 1]
    assert first.attrs["groups"] == 1
    assert first.inputs == [[1, 3, 64, 64]]
    assert first.weights == [[64, 3, 7, 7]]
    assert first.output == [1, 64, 32, 32]
    assert first.dtype == "float32"


def test_resnet_conv_attributes_match_architecture(resnet):
    convs = _convs(resnet)
    # torchvision ResNet-18: 7x7/2 stem, 3x3 convs (stride 2 at the first of stages 2-4),
    # and three 1x1/2 downsample projections
    assert sorted({tuple(c.attrs["kernel"]) for c in convs}) == [(1, 1), (3, 3), (7, 7)]
    for c in convs:
        k = c.attrs["kernel"][0]
        assert c.attrs["padding"] == [k // 2, k // 2], c.name
        assert c.weights[0][2:] == c.attrs["kernel"], c.name
        s = c.attrs["stride"][0]
        assert c.inputs[0][2] // s == c.output[2], c.name
    downsample = [c for c in convs if c.attrs["kernel"] == [1, 1]]
    assert len(downsample) == 3 and all(c.attrs["stride"] == [2, 2] for c in downsample)


# --- FLOPs --------------------------------------------------------------------------------
def _conv_macs(layer: Layer) -> int:
    n, c, _, _ = layer.inputs[0]
    k, cg, r, s = layer.weights[0]
    _, k_out, oh, ow = layer.output
    assert k == k_out
    return n * k * cg * r * s * oh * ow


def test_conv_flops_formula(resnet):
    plain = [c for c in _convs(resnet) if not c.epilogue]
    assert len(plain) >= 10
    for c in plain:
        macs = _conv_macs(c)
        # the anchor's 2*N*K*C*R*S*OH*OW dominates ...
        assert c.flops == pytest.approx(2 * macs, rel=2e-2), c.name
        # ... and exactly: the 'pad_temp' copy TOPI always emits moves data and is not counted
        assert c.flops == 2 * macs, c.name


def test_first_conv_flops_exact(resnet):
    first = resnet[0]
    assert first.flops == 2 * 1 * 64 * 3 * 7 * 7 * 32 * 32


def test_dense_flops_include_epilogue(resnet):
    fc = resnet[-1]
    assert fc.op_class == "dense"
    assert fc.inputs == [[1, 512]] and fc.weights == [[512, 1000], [1000]]
    assert fc.epilogue == ["add"]
    assert fc.flops == 2 * 512 * 1000 + 1000  # matmul MACs + bias add
    assert fc.bytes == 4 * (512 + 512 * 1000 + 1000 + 1000)
    assert fc.arithmetic_intensity == pytest.approx(fc.flops / fc.bytes)


# --- identical layers --------------------------------------------------------------------------
def test_identical_layers_share_key_and_count(resnet):
    keys = [l.workload_key for l in resnet]
    assert len(keys) == len(set(keys)), "each distinct kernel is listed once"
    convs = _convs(resnet)
    # ResNet-18 has 20 convolutions in all
    assert sum(c.occurrences for c in convs) == 20
    # the 3x3 64->64 stride-1 conv appears four times in stage 1
    stage1 = [c for c in convs if c.weights == [[64, 64, 3, 3]]]
    assert len(stage1) == 1 and stage1[0].occurrences == 4
    # one occurrence of the stem
    assert resnet[0].occurrences == 1


def test_layer_names_are_plain_strings(resnet):
    """Not TVM's ``str`` subclass, which YAML and pickle-free stores cannot write."""
    assert all(type(layer.name) is str for layer in resnet)


def test_workload_key_is_structural(resnet):
    """Same kernel under another name -> same key; another kernel -> another key."""
    a, b = _convs(resnet)[1], _convs(resnet)[2]
    func = a.func.with_attr("global_symbol", "some_other_name")
    again = describe("renamed", func, [False, True], 1, 1)
    assert again.workload_key == a.workload_key
    assert again.batch_invariant_key == a.batch_invariant_key
    assert b.workload_key != a.workload_key


# --- depthwise convs ------------------------------------------------------------------------
def _grouped(layers):
    return [l for l in _convs(layers) if l.weights and l.weights[0][1] == 1 and l.inputs[0][1] > 1]


def test_mobilenet_depthwise_groups_equal_channels(mobilenet):
    dw = _grouped(mobilenet)
    assert len(dw) >= 8  # 17 inverted residual blocks, deduplicated by shape
    for l in dw:
        channels = l.inputs[0][1]
        assert l.attrs["groups"] == channels == l.output[1], l.name
        assert l.attrs["kernel"] == [3, 3]
        # depthwise: one MAC per output element per kernel tap (the pad copy is not counted)
        assert _conv_macs(l) == math.prod(l.output) * 9
        assert l.flops == 2 * _conv_macs(l), l.name


def test_mobilenet_has_depthwise_conv2d_class(mobilenet):
    classes = {l.op_class for l in mobilenet}
    assert "depthwise_conv2d" in classes
    for l in _grouped(mobilenet):
        assert l.op_class == "depthwise_conv2d", (l.name, l.anchor)


# --- transformer --------------------------------------------------------------------------
def test_a_kernel_is_given_weights_only_where_every_call_passes_constants():
    """memnet's six hops call one matmul kernel; the first hop queries the memory with a
    fixed vector (a constant), the other five with the previous hop's state. It is a
    product of two activations, batch_matmul like the hop's second product, not a dense
    layer whose 'weight' is the query; and an LSTM step kernel fed zeros as its first
    state takes that state as an input, not a weight."""
    memnet = _layers("memnet", 8)
    hops = [l for l in memnet if l.occurrences == 6 and "matmul" in l.name]
    assert len(hops) == 2 and {l.op_class for l in hops} == {"batch_matmul"}
    assert all(not l.weights for l in hops)
    cell = [l for l in _layers("seq2seq", 3) if l.name.startswith("fused_tir_sigmoid_tir_sigmoid_tir_tanh")]
    assert len(cell) == 1 and not cell[0].weights and len(cell[0].inputs) == 4  # c = f * c0 + i * g


def test_transformer_has_dense_softmax_norm(transformer):
    classes = {l.op_class for l in transformer}
    assert {"dense", "softmax", "norm"} <= classes
    softmax = [l for l in transformer if l.op_class == "softmax"]
    assert len(softmax) == 1 and softmax[0].output == [1, 4, 16, 16]
    norms = [l for l in transformer if l.op_class == "norm"]
    assert norms and all(l.output == [1, 16, 256] for l in norms)
    assert sum(l.occurrences for l in norms) == 2  # two LayerNorms per encoder block
    # Q, K, V projections are one kernel called three times
    qkv = [l for l in transformer if l.op_class == "dense" and l.weights[:1] == [[256, 256]] and l.epilogue == ["add"]]
    assert len(qkv) == 1 and qkv[0].occurrences == 3


def _attention_matmuls(layers):
    """Matmuls whose two operands are both activations of rank 4 (Q@K^T and P@V)."""
    return [l for l in layers if "matmul" in l.anchor and len(l.inputs) >= 2
            and all(len(s) == 4 for s in l.inputs[:2])]


def test_transformer_attention_is_batch_matmul(transformer):
    attention = _attention_matmuls(transformer)
    assert len(attention) == 2
    assert {l.op_class for l in attention} == {"batch_matmul"}
    assert "batch_matmul" in {l.op_class for l in transformer}


def test_transformer_attention_is_batch_matmul_at_batch_2(transformer_b2):
    attention = _attention_matmuls(transformer_b2)
    assert len(attention) == 2
    assert {l.op_class for l in attention} == {"batch_matmul"}


def test_transformer_op_classes_do_not_depend_on_batch(transformer, transformer_b2):
    one, two = _by_name(transformer), _by_name(transformer_b2)
    assert one.keys() == two.keys()
    diff = {n: (one[n].op_class, two[n].op_class) for n in one if one[n].op_class != two[n].op_class}
    assert diff == {}
    # weights-as-second-operand projections are dense at any batch size
    for l in transformer_b2:
        if "matmul" in l.anchor and l.weights and len(l.weights[0]) == 2:
            assert l.op_class == "dense", l.name


# --- batch size -----------------------------------------------------------------------------
def test_batch_changes_workload_key_not_invariant_key(resnet, resnet_b2):
    one, two = _by_name(resnet), _by_name(resnet_b2)
    assert one.keys() == two.keys()
    for name in one:
        assert one[name].workload_key != two[name].workload_key, name
    convs = _convs(resnet)
    assert len(convs) >= 10
    for c in convs:
        other = two[c.name]
        assert other.inputs[0][0] == 2 and c.inputs[0][0] == 1
        assert other.batch_invariant_key == c.batch_invariant_key, c.name
        assert other.flops > c.flops
    # different convs must still differ with the batch dimension dropped
    assert len({c.batch_invariant_key for c in convs}) == len(convs)


# --- serialisation --------------------------------------------------------------------------
def test_features_have_fixed_length(resnet, mobilenet, transformer):
    lengths = set()
    for layer in resnet + mobilenet + transformer:
        f = layer.features()
        lengths.add(len(f))
        assert all(isinstance(v, float) and math.isfinite(v) for v in f), layer.name
    assert len(lengths) == 1 and lengths.pop() >= 10
    # layers with different shapes get different features
    a, b = _convs(resnet)[0], _convs(resnet)[1]
    assert a.features() != b.features()


def test_to_dict_is_json_serializable(resnet, transformer):
    for layer in resnet + transformer:
        d = layer.to_dict()
        assert "func" not in d
        back = json.loads(json.dumps(d))
        assert back["name"] == layer.name
        assert back["workload_key"] == layer.workload_key
        assert back["tunable"] == (layer.op_class in TUNABLE_CLASSES)
        assert back["arithmetic_intensity"] == pytest.approx(layer.arithmetic_intensity)
        assert back["attrs"] == layer.attrs
        json.dumps(layer.descriptor())


# ---------------------------------------------------------------- convolutions of other ranks


def _conv_model(tmp_path, name, x_shape, w_shape, y_shape, op="Conv", **attrs):
    """A one-node ONNX model (no bias: the layer is the bare kernel)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "w"], ["y"], **attrs)],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)  # y_shape is ONNX's own inference
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    _, mod = load_and_fuse(str(path))
    (layer,) = [l for l in decompose(mod) if l.tunable]
    return layer


@pytest.mark.parametrize(
    "case",
    [
        # speech front end: conv1d, stride 2, pad 5
        dict(x=(1, 40, 128), w=(64, 40, 11), y=(1, 64, 64), attrs=dict(kernel_shape=[11], strides=[2], pads=[5, 5]),
             cls="conv1d", want=dict(stride=[2], dilation=[1], kernel=[11], padding=[5], groups=1), macs=64 * 64 * 40 * 11),
        # depthwise, dilated conv1d (QuartzNet-style)
        dict(x=(1, 16, 40), w=(16, 1, 5), y=(1, 16, 36), attrs=dict(kernel_shape=[5], pads=[2, 2], group=16, dilations=[2]),
             cls="depthwise_conv1d", want=dict(stride=[1], dilation=[2], kernel=[5], padding=[2], groups=16), macs=16 * 36 * 5),
        # video: conv3d
        dict(x=(1, 3, 8, 16, 16), w=(8, 3, 3, 3, 3), y=(1, 8, 8, 16, 16), attrs=dict(kernel_shape=[3, 3, 3], pads=[1] * 6),
             cls="conv3d", want=dict(stride=[1, 1, 1], dilation=[1, 1, 1], kernel=[3, 3, 3], padding=[1, 1, 1], groups=1),
             macs=8 * 8 * 16 * 16 * 3 * 27),
    ],
    ids=["conv1d", "depthwise_conv1d", "conv3d"],
)
def test_convolutions_are_classed_by_spatial_rank(tmp_path, case):
    """A conv1d's kernel and stride read back as the model wrote them, in a class of its own:
    as 'conv2d' (before) its attributes mixed the channel axis in (kernel [40, 11]) and its
    history transferred to and from 2-D convolutions."""
    layer = _conv_model(tmp_path, case["cls"], case["x"], case["w"], case["y"], **case["attrs"])
    assert layer.op_class == case["cls"] and layer.tunable
    assert layer.attrs == case["want"]
    assert layer.flops == 2 * case["macs"]
    assert layer.op_class in TUNABLE_CLASSES


@pytest.mark.parametrize(
    "x,w,y,attrs,want",
    [
        ((1, 8, 8, 8), (8, 4, 4, 4), (1, 4, 16, 16), dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]),
         dict(stride=[2, 2], kernel=[4, 4], padding=[1, 1])),
        ((1, 8, 8, 8), (8, 4, 3, 3), (1, 4, 17, 17), dict(kernel_shape=[3, 3], strides=[2, 2]),
         dict(stride=[2, 2], kernel=[3, 3], padding=[0, 0])),
        ((1, 8, 8, 8), (8, 4, 3, 3), (1, 4, 8, 8), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         dict(stride=[1, 1], kernel=[3, 3], padding=[1, 1])),
        ((1, 8, 20), (8, 4, 5), (1, 4, 58), dict(kernel_shape=[5], strides=[3], pads=[2, 2]),
         dict(stride=[3], kernel=[5], padding=[2])),
        ((1, 4, 4, 4, 4), (4, 2, 3, 3, 3), (1, 2, 7, 7, 7), dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6),
         dict(stride=[2, 2, 2], kernel=[3, 3, 3], padding=[1, 1, 1])),
    ],
    ids=["2d-s2-p1", "2d-s2-p0", "2d-s1", "1d-s3", "3d-s2"],
)
def test_transposed_convolutions_are_their_own_class_with_the_models_attributes(tmp_path, x, w, y, attrs, want):
    """TOPI lowers ConvTranspose to a block named "compute" over the input spread by the
    stride: before, that read as a generic 'reduction' with no attributes, a MAC counted as
    one FLOP, and the spread and flipped copies listed as its epilogue."""
    rank = len(x) - 2
    layer = _conv_model(tmp_path, f"tr{rank}d", x, w, y, op="ConvTranspose", **attrs)
    assert layer.op_class == f"conv{rank}d_transpose" and layer.tunable
    assert {k: layer.attrs[k] for k in want} == want
    assert layer.attrs["dilation"] == [1] * rank and layer.attrs["groups"] == 1
    assert layer.epilogue == []
    # the anchor convolves the spread input: every output point sums C_in * prod(kernel) products
    assert layer.flops == 2 * math.prod(y) * x[1] * math.prod(want["kernel"])


def test_a_transposed_convolutions_dilation_and_groups_are_read_as_the_model_wrote_them(tmp_path):
    """A 3x3 kernel dilated by 2 read as kernel 5 and dilation 1 (TOPI spreads the kernel
    first), and groups read 1 always: what history's matching compares layers by."""
    dilated = _conv_model(tmp_path, "trdil", (1, 4, 6, 6), (4, 6, 3, 3), (1, 6, 21, 13), op="ConvTranspose",
                          kernel_shape=[3, 3], strides=[3, 2], dilations=[2, 1], output_padding=[2, 1], pads=[1, 0, 0, 1])
    assert {k: dilated.attrs[k] for k in ("stride", "dilation", "kernel", "groups")} == dict(
        stride=[3, 2], dilation=[2, 1], kernel=[3, 3], groups=1)
    grouped = _conv_model(tmp_path, "trgrp", (1, 4, 16, 16), (4, 2, 3, 3), (1, 4, 34, 33), op="ConvTranspose",
                          kernel_shape=[3, 3], strides=[2, 2], output_padding=[1, 0], group=2)
    assert {k: grouped.attrs[k] for k in ("stride", "dilation", "kernel", "groups")} == dict(
        stride=[2, 2], dilation=[1, 1], kernel=[3, 3], groups=2)


def test_a_layer_whose_shapes_are_known_only_at_run_time_keeps_tvms_default(tmp_path, capsys):
    """NonMaxSuppression's output shape depends on its data: such a layer is described
    (unknown dimensions as -1) and left to TVM's default schedule, and the model compiles;
    it stopped ``layers`` and ``tune`` with a traceback."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from autotune.cli import main
    from autotune.decompose import DYNAMIC_CLASS

    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "mo"], ["sel"])], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 10, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 10])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, ["n", 3])],
        [numpy_helper.from_array(np.array([3], dtype=np.int64), "mo")],
    )
    path = tmp_path / "nms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    _, mod = load_and_fuse(str(path))
    dynamic = [layer for layer in decompose(mod) if layer.op_class == DYNAMIC_CLASS]
    assert dynamic and not any(layer.tunable for layer in dynamic)
    assert all(-1 in layer.output and layer.flops == 0 for layer in dynamic)
    assert main(["layers", str(path), "--json"]) == 0
    assert DYNAMIC_CLASS in capsys.readouterr().out
    assert main(["compile", str(path), "--target", "llvm", "-o", str(tmp_path / "nms.so")]) == 0
    capsys.readouterr()
    # ONNX's reference evaluator (1.23) fails in its own NonMaxSuppression: said so, not
    # 'is the module compiled from nms.onnx?', which it is
    saved = tmp_path / "sel.npz"
    if main(["run", str(tmp_path / "nms.so"), "--check", str(path), "--save-outputs", str(saved)]) != 0:
        out, err = capsys.readouterr()
        assert "reference evaluator failed in the model's NonMaxSuppression operator" in err
        assert "compiled from" not in err and len(err.strip().splitlines()) == 1
        assert f"outputs written to {saved}" in out  # written all the same, and said
    # the outputs are written before the check: one the evaluator could not run lost them
    assert "sel" in np.load(saved)


def test_an_einsum_contraction_is_a_matrix_product_and_a_sum_stays_a_reduction(tmp_path):
    """Einsum lowers to a block named T_einsum: it read as a generic reduction, its
    multiply-accumulate counted as one FLOP, so the roofline and GFLOP/s were half."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Einsum", ["a", "b"], ["t"], equation="bij,bjk->bik"),  # two activations
        helper.make_node("Einsum", ["t", "w"], ["u"], equation="bik,kl->bil"),  # by a weight
        helper.make_node("Einsum", ["u"], ["y"], equation="bil->bl"),  # a sum
    ]
    graph = helper.make_graph(
        nodes,
        "einsums",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 64, 32]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 32, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        [numpy_helper.from_array(np.ones((48, 16), "float32"), "w")],
    )
    path = tmp_path / "einsums.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    _, mod = load_and_fuse(str(path))
    layers = decompose(mod)
    assert [(l.op_class, l.flops) for l in layers] == [
        ("batch_matmul", 2 * 2 * 64 * 48 * 32),
        ("dense", 2 * 2 * 64 * 16 * 48),
        ("reduction", 2 * 16 * 64),
    ]
    assert all(l.tunable for l in layers)


@pytest.mark.parametrize(
    "op, x, y, attrs, want",
    [
        ("MaxPool", (1, 4, 16, 16), (1, 4, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         dict(kind="max", kernel=[3, 3], stride=[2, 2], padding=[1, 1])),
        ("MaxPool", (1, 4, 16, 16), (1, 4, 16, 16), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
         dict(kind="max", kernel=[3, 3], stride=[1, 1], padding=[1, 1])),
        ("AveragePool", (1, 4, 16, 16), (1, 4, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2]),
         dict(kind="avg", kernel=[2, 2], stride=[2, 2], padding=[0, 0])),
        ("MaxPool", (1, 4, 20), (1, 4, 7), dict(kernel_shape=[3], strides=[3], pads=[1, 1]),
         dict(kind="max", kernel=[3], stride=[3], padding=[1])),
    ],
    ids=["max-3x3-s2-p1", "max-3x3-s1-p1", "avg-2x2-s2", "max1d-k3-s3-p1"],
)
def test_a_pools_attributes_are_the_models(tmp_path, op, x, y, attrs, want):
    """A pool's stride was not read back (`layers` showed kernel and padding only), and a
    1-D pool's padding was read over two dimensions."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "pool.onnx"
    onnx.save(model, str(path))
    _, mod = load_and_fuse(str(path))
    (layer,) = [l for l in decompose(mod) if l.tunable]
    assert layer.op_class == "pool"
    assert layer.attrs == want


def test_epilogues_are_named_after_ops_not_relax_variables(transformer):
    """A layer norm's epilogue read ``lv48_mean+lv48_var_sum``: the variable's number
    changes from export to export, and the batch-invariant key with it."""
    norms = [l for l in transformer if l.op_class == "norm"]
    assert norms and all(l.epilogue for l in norms)
    assert not [e for l in transformer for e in l.epilogue if e.startswith("lv")]
    assert "mean" in norms[0].epilogue


def test_the_layers_table_names_a_scalar_operand():
    from autotune.decompose import format_table

    layer = Layer(name="where", op_class="elementwise", anchor="T_where", dtype="float32", inputs=[[4, 4]],
                  weights=[[]], output=[4, 4], attrs={}, epilogue=[], flops=16.0, bytes=132.0, workload_key="k",
                  batch_invariant_key="b", occurrences=1)
    assert "4x4 scalar -> 4x4" in format_table([layer])
