"""Tests for the bundled model zoo (autotune.zoo).

The zoo is only useful if its models are valid ONNX, match the real
architectures, are reproducible, and import through TVM's Relax frontend,
so each of those is checked here against an independent oracle (the ONNX
checker and shape inference, the ONNX reference evaluator, torchvision's
published parameter counts, TVM itself).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import autotune.zoo as zoo
from autotune.errors import AutotuneError
from autotune.zoo import build_model, export_model, get_entry, list_models
from autotune.zoo.alexnet import alexnet
from autotune.zoo.dqn import dqn
from autotune.zoo.graph import GraphBuilder

NAMES = ["resnet18", "resnet50", "vgg11", "alexnet", "mobilenetv2", "transformer", "dqn", "autoencoder", "speech",
         "seq2seq", "memnet"]
#: Small sizes keep the reference evaluator and TVM compile fast.
SMALL = {"resnet18": 32, "resnet50": 32, "vgg11": 32, "alexnet": 64, "mobilenetv2": 32,
         "transformer": 16, "dqn": 36, "autoencoder": 16, "speech": 8, "seq2seq": 4, "memnet": 8}
#: Learnable parameters (weights + biases, excluding BN running stats) at the
#: default size: torchvision's published counts for the CNNs, and
#: 4*(256*256+256) + 2*2*256 + (256*1024+1024) + (1024*256+256) for the transformer;
#: the Nature DQN's 1.69M (conv 4->32 8x8, 32->64 4x4, 64->64 3x3, fc 3136->512->18);
#: for the autoencoder, convs 3->32->64->128 and transposed 128->64->32->3, all 4x4 with bias;
#: for speech, torch.nn.LSTM(40, 256, num_layers=2, bidirectional=True) + Linear(512, 29);
#: for seq2seq, two Embedding(8000, 256), two LSTM(256, 256, num_layers=2), Luong's
#: W_c (256 x 512, no bias) and Linear(256, 8000); for memnet (Sukhbaatar et al.'s Penn
#: Treebank model), embeddings A and C (10000 x 150) with temporal encodings (100 x 150),
#: H (150 x 150, no bias) and Linear(150, 10000).
EXPECTED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg11": 132_863_336,
    "alexnet": 61_100_840,
    "mobilenetv2": 3_504_872,
    "transformer": 789_760,
    "dqn": (4 * 32 * 64 + 32) + (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (3136 * 512 + 512) + (512 * 18 + 18),
    "autoencoder": sum(a * b * 16 + b for a, b in [(3, 32), (32, 64), (64, 128)])
    + sum(a * b * 16 + b for a, b in [(128, 64), (64, 32), (32, 3)]),
    "speech": sum(2 * (4 * 256 * (n_in + 256) + 8 * 256) for n_in in (40, 512)) + 512 * 29 + 29,
    "seq2seq": 2 * 8000 * 256 + 4 * (4 * 256 * (256 + 256) + 8 * 256) + 256 * 512 + 256 * 8000 + 8000,
    "memnet": 2 * (10_000 * 150 + 100 * 150) + 150 * 150 + 150 * 10_000 + 10_000,
}
BATCH = 2


def _small(name: str) -> tuple[onnx.ModelProto, np.ndarray]:
    """A small-size batch-2 model and a seeded input for it (token ids anywhere in the
    vocabulary for the language models)."""
    entry = get_entry(name)
    model = build_model(name, batch_size=BATCH, size=SMALL[name])
    rng = np.random.default_rng(123)
    shape = entry.input_shape(BATCH, SMALL[name])
    x = rng.integers(0, entry.vocab, shape) if entry.vocab else rng.standard_normal(shape)
    return model, x.astype(entry.input_dtype)


def _shape(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)


def test_list_models_has_exactly_the_zoo() -> None:
    entries = list_models()
    assert [e.name for e in entries] == NAMES
    for e in entries:
        assert e.input_name == "input"
        assert e.min_size <= e.default_size
        assert get_entry(e.name) is e
    assert get_entry("transformer").default_size == 128
    assert get_entry("alexnet").min_size == 63


def test_input_shapes() -> None:
    assert get_entry("resnet18").input_shape(2, 32) == (2, 3, 32, 32)
    assert get_entry("transformer").input_shape(2, 16) == (2, 16, 256)
    assert get_entry("vgg11").output_shape(3, 64) == (3, 1000)
    assert get_entry("transformer").output_shape(3, 16) == (3, 16, 256)
    assert get_entry("dqn").input_shape(2, 84) == (2, 4, 84, 84) and get_entry("dqn").output_shape(2, 84) == (2, 18)
    assert get_entry("autoencoder").output_shape(2, 32) == (2, 3, 32, 32)
    assert get_entry("speech").input_shape(2, 50) == (2, 50, 40) and get_entry("speech").output_shape(2, 50) == (2, 50, 29)
    assert get_entry("seq2seq").input_shape(2, 7) == (2, 7) and get_entry("seq2seq").output_shape(2, 7) == (2, 7, 8000)
    assert get_entry("memnet").input_shape(2, 30) == (2, 30) and get_entry("memnet").output_shape(2, 30) == (2, 10_000)
    assert [e.name for e in list_models() if e.input_dtype == "int64"] == ["seq2seq", "memnet"]


@pytest.mark.parametrize("name", NAMES)
def test_checker_shapes_and_reference_run(name: str) -> None:
    """Valid ONNX with static shapes that agree with ONNX's own shape inference,
    and a reference run that is finite, O(1) and actually depends on the input."""
    entry = get_entry(name)
    model, x = _small(name)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)

    assert model.opset_import[0].domain == "" and model.opset_import[0].version == 17
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["output"]
    assert _shape(model.graph.input[0]) == entry.input_shape(BATCH, SMALL[name])
    expected_out = entry.output_shape(BATCH, SMALL[name])
    assert _shape(inferred.graph.output[0]) == expected_out
    for vi in inferred.graph.value_info:  # every intermediate shape is static
        assert all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim), vi.name
    assert name in model.doc_string
    assert {p.key: p.value for p in model.metadata_props}["autotune.zoo.name"] == name

    assert model.graph.input[0].type.tensor_type.elem_type == onnx.helper.np_dtype_to_tensor_dtype(np.dtype(entry.input_dtype))
    (out,) = ReferenceEvaluator(model).run(None, {"input": x})
    assert out.shape == expected_out and out.dtype == np.float32
    assert np.isfinite(out).all()
    assert 0.1 < float(out.std()) < 100.0, "activations vanished or exploded"
    assert not np.allclose(out[0], out[1]), "output ignores the input"


@pytest.mark.parametrize("name", NAMES)
def test_default_size_matches_reference_architecture(name: str) -> None:
    """Parameter counts pin the architecture (channel widths, block counts,
    classifier in_features at 224) to torchvision's."""
    model = build_model(name)
    entry = get_entry(name)
    assert _shape(model.graph.input[0]) == entry.input_shape(1, entry.default_size)
    n_params = sum(
        int(np.prod(t.dims)) for t in model.graph.initializer
        if t.name.endswith((".weight", ".bias"))
    )
    assert n_params == EXPECTED_PARAMS[name]


def test_operator_choices() -> None:
    """The ops tuning relies on are present in the torch-exported form."""
    mb = build_model("mobilenetv2", size=32)
    inits = {t.name: t for t in mb.graph.initializer}
    depthwise = [
        n for n in mb.graph.node if n.op_type == "Conv"
        and onnx.helper.get_attribute_value(next(a for a in n.attribute if a.name == "group")) > 1
    ]
    assert len(depthwise) == 17
    for n in depthwise:  # depthwise: group == channels, weight [C, 1, 3, 3]
        w = inits[n.input[1]]
        group = onnx.helper.get_attribute_value(next(a for a in n.attribute if a.name == "group"))
        assert list(w.dims) == [group, 1, 3, 3]
    clips = [n for n in mb.graph.node if n.op_type == "Clip"]
    assert clips and all(len(n.input) == 3 and not n.attribute for n in clips)

    r18_ops = [n.op_type for n in build_model("resnet18", size=32).graph.node]
    assert r18_ops.count("BatchNormalization") == 20 and r18_ops.count("Add") == 8
    vgg_ops = [n.op_type for n in build_model("vgg11", size=32).graph.node]
    assert "BatchNormalization" not in vgg_ops and vgg_ops.count("Conv") == 8

    tr_ops = {n.op_type for n in build_model("transformer", size=16).graph.node}
    assert {"MatMul", "Transpose", "Softmax", "LayerNormalization", "Erf"} <= tr_ops

    dqn_convs = [n for n in build_model("dqn").graph.node if n.op_type == "Conv"]
    assert [onnx.helper.get_attribute_value(a) for n in dqn_convs for a in n.attribute if a.name == "strides"] == [
        [4, 4], [2, 2], [1, 1]
    ]
    speech_ops = [n.op_type for n in build_model("speech", size=8).graph.node]
    assert speech_ops.count("LSTM") == 2  # one node per layer, as torch.onnx exports nn.LSTM
    ae_ops = [n.op_type for n in build_model("autoencoder", size=16).graph.node]
    assert ae_ops.count("Conv") == 3 and ae_ops.count("ConvTranspose") == 3 and ae_ops[-1] == "Sigmoid"

    # seq2seq: 2 encoder LSTM nodes, then 2 per decoding step sharing their weights
    # (torch exports an nn.LSTM called once per step), each step fed its own argmax
    s2s = build_model("seq2seq", size=5)
    s2s_ops = [n.op_type for n in s2s.graph.node]
    assert s2s_ops.count("LSTM") == 2 + 2 * 5 and s2s_ops.count("ArgMax") == 4 and s2s_ops.count("Gather") == 6
    decoder_weights = {n.input[1] for n in s2s.graph.node if n.op_type == "LSTM"}
    assert len(decoder_weights) == 4  # one set per encoder and decoder layer
    # memnet: 6 hops of two batched products around a softmax, one H shared by all
    mn = build_model("memnet", size=10)
    mn_ops = [n.op_type for n in mn.graph.node]
    assert mn_ops.count("Softmax") == 6 and mn_ops.count("MatMul") == 12 and mn_ops.count("Gather") == 2
    assert {n.input[1] for n in mn.graph.node if n.op_type == "Gemm"} == {"hop.weight", "output.weight"}


@pytest.mark.parametrize("name", NAMES)
def test_tvm_import_build_and_match_reference(name: str) -> None:
    """Import through Relax's ONNX frontend, legalize, build for llvm and compare
    with the ONNX reference evaluator (the frontend only *warns* on invalid
    models, so the checker test above is what guards validity)."""
    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from autotune.recurrent import unroll_recurrent

    model, x = _small(name)
    unrolled, _ = unroll_recurrent(model)  # TVM has no LSTM converter (speech, seq2seq)
    mod = from_onnx(unrolled, shape_dict={"input": list(x.shape)}, keep_params_in_input=False)
    mod = relax.transform.LegalizeOps()(mod)
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x)).numpy()

    (ref,) = ReferenceEvaluator(model).run(None, {"input": x})
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("name", ["resnet18", "transformer"])
def test_deterministic(name: str) -> None:
    a = build_model(name, batch_size=2, size=SMALL[name], seed=7).SerializeToString()
    b = build_model(name, batch_size=2, size=SMALL[name], seed=7).SerializeToString()
    c = build_model(name, batch_size=2, size=SMALL[name], seed=8)
    assert a == b
    assert c.SerializeToString() != a
    # A different seed changes weights only, never the architecture.
    first = onnx.load_from_string(a)
    assert [n.op_type for n in first.graph.node] == [n.op_type for n in c.graph.node]


def test_unknown_name() -> None:
    with pytest.raises(AutotuneError) as info:
        build_model("resnet19")
    msg = str(info.value)
    assert msg.startswith("unknown zoo model 'resnet19'; available: ")
    assert all(n in msg for n in NAMES) and "\n" not in msg
    with pytest.raises(AutotuneError, match="unknown zoo model"):
        get_entry("nope")


@pytest.mark.parametrize(
    ("name", "size"), [("alexnet", 62), ("vgg11", 31), ("resnet18", 16), ("mobilenetv2", 8),
                       ("transformer", 0), ("dqn", 35), ("autoencoder", 4), ("seq2seq", 0), ("memnet", 0)],
)
def test_too_small_size_rejected(name: str, size: int) -> None:
    with pytest.raises(AutotuneError) as info:
        build_model(name, size=size)
    msg = str(info.value)
    assert "\n" not in msg and str(get_entry(name).min_size) in msg and name in msg


def test_min_sizes_build() -> None:
    """The boundary itself is accepted (AlexNet's 63 is the tightest)."""
    assert _shape(build_model("alexnet", size=63).graph.output[0]) == (1, 1000)
    assert _shape(build_model("vgg11", size=32).graph.output[0]) == (1, 1000)
    assert _shape(build_model("transformer", size=1).graph.output[0]) == (1, 1, 256)
    assert _shape(build_model("dqn", size=36).graph.output[0]) == (1, 18)
    assert _shape(build_model("autoencoder", size=8).graph.output[0]) == (1, 3, 8, 8)
    assert _shape(build_model("seq2seq", size=1).graph.output[0]) == (1, 1, 8000)
    assert _shape(build_model("memnet", size=1).graph.output[0]) == (1, 10_000)


def test_dqn_min_size_is_tight() -> None:
    g = GraphBuilder(0)
    x = g.input("input", (1, 4, 35, 35))
    with pytest.raises(AutotuneError, match="empty tensor"):
        dqn(g, x, "output")


def test_autoencoder_size_must_divide_by_its_downsampling() -> None:
    """Its decoder doubles the side three times: 20 would come back as 16, not 20."""
    with pytest.raises(AutotuneError, match="multiple of 8, got 20") as info:
        build_model("autoencoder", size=20)
    assert "\n" not in str(info.value)


def test_alexnet_min_size_is_tight() -> None:
    """Bypassing the entry's min_size check, 62 really does empty a feature map."""
    g = GraphBuilder(0)
    x = g.input("input", (1, 3, 62, 62))
    with pytest.raises(AutotuneError, match="empty tensor"):
        alexnet(g, x, "output")


@pytest.mark.parametrize(
    "kwargs", [{"batch_size": 0}, {"size": 32.0}, {"size": True}, {"seed": -1}],
)
def test_bad_arguments_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(AutotuneError):
        build_model("resnet18", **kwargs)  # type: ignore[arg-type]


def test_oversized_model_rejected_before_allocating() -> None:
    """VGG's fc1 grows with the image; at 1024 it would need ~8 GiB, past ONNX's 2 GiB."""
    with pytest.raises(AutotuneError, match="2 GiB"):
        build_model("vgg11", size=1024)


def test_export_model_writes_loadable_file(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "dir" / "t.onnx"
    result = export_model("transformer", str(target), batch_size=2, size=8, seed=3)
    assert result == target and target.is_file()
    loaded = onnx.load(target)
    onnx.checker.check_model(loaded)
    expected = build_model("transformer", batch_size=2, size=8, seed=3)
    assert loaded.SerializeToString() == expected.SerializeToString()
    assert os.listdir(target.parent) == ["t.onnx"]  # no temp file left behind


def test_export_model_failure_leaves_nothing_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "m.onnx"
    target.write_bytes(b"\x08\x09previous")  # an earlier export, as its first field says (compile.OUTPUT_KINDS)

    def broken_save(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
        Path(path).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(zoo.onnx, "save", broken_save)
    with pytest.raises(AutotuneError, match="disk full"):  # one clear line, not a traceback
        export_model("transformer", target, size=4)
    assert target.read_bytes() == b"\x08\x09previous"
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_export_unknown_model_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(AutotuneError):
        export_model("nope", tmp_path / "sub" / "x.onnx")
    assert not (tmp_path / "sub").exists()


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2", "transformer"])
def test_a_size_past_a_loops_extent_is_one_line(name):
    """--size 2147483648 stopped resnet18 and mobilenetv2 in numpy's broadcast, a 40-line
    traceback, where the README says such an input is refused."""
    with pytest.raises(AutotuneError, match="past the 2,147,483,647 a loop may run here"):
        build_model(name, size=2**31)
