"""Models as users bring them: torchvision architectures exported by torch's two ONNX
exporters (tests/data/make_torch_vision.py; torch 2.14.1, torchvision 0.29.1).

The TorchScript exporter computes shapes at run time (Shape/Gather/Concat chains before
every Reshape and Flatten); the dynamo exporter writes opset 18 with its own op choices
(LayerNormalization, Gelu, split attention heads) and keeps the weights in
``<model>.onnx.data`` beside the graph. Each architecture is small (7k to 24k weights)
but has the ops the full-size model has: patch embedding and attention (ViT), depthwise
7x7 and layer norm over channels (ConvNeXt), squeeze-and-excitation with hardswish
(MobileNetV3) and SiLU (EfficientNet), channel shuffle (ShuffleNetV2), concatenation
(DenseNet), grouped convolutions (RegNet). What must hold is torch's own numbers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from autotune import api
from autotune.errors import AutotuneError

DATA = Path(__file__).parent / "data"
ARCHITECTURES = ["vit", "convnext", "mobilenetv3", "shufflenetv2", "densenet", "efficientnet", "regnet"]


@pytest.fixture(scope="module")
def torch_io():
    return np.load(DATA / "torchvision_io.npz")


def _model(name: str, exporter: str) -> str:
    return str(DATA / f"torchvision_{name}_{exporter}.onnx")


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_compiled_export_gives_torchs_outputs(tmp_path, torch_io, name, exporter):
    out = tmp_path / f"{name}.so"
    api.compile(_model(name, exporter), out, target="llvm")  # no history: TVM's defaults
    result = api.run(out, inputs={"input": torch_io["input"]}, check=_model(name, exporter), repeat=1, return_outputs=True)
    (got,) = result["output_arrays"]
    want = torch_io[name]
    assert np.abs(want).max() > 0.1  # the generator made outputs that a wrong kernel would change
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert result["check"]["ok"] is True  # and ONNX's reference on the exported graph


def test_tuned_dynamo_export_gives_torchs_outputs(tmp_path, torch_io):
    """Tuned kernels replace TVM's defaults in the export, and still compute torch's ViT."""
    model, out = _model("vit", "dynamo"), tmp_path / "vit.so"
    report = api.tune(model, target="llvm", trials=6, history=str(tmp_path / "history.db"), out=str(out),
                      mlflow=False, out_dir=str(tmp_path / "runs"))
    tuned = [layer for layer in report["layers"] if layer["trials"]]
    assert tuned and all(layer["verified"] for layer in tuned)
    result = api.run(out, inputs={"input": torch_io["input"]}, repeat=1, return_outputs=True)
    np.testing.assert_allclose(result["output_arrays"][0], torch_io["vit"], rtol=1e-4, atol=1e-5)


def test_dynamo_export_without_its_weights_file_is_one_clear_error(tmp_path):
    """Copied without ``.onnx.data``, the model is not called broken: the file is named."""
    lone = tmp_path / "convnext.onnx"
    shutil.copy(_model("convnext", "dynamo"), lone)  # the graph names torchvision_convnext_dynamo.onnx.data
    with pytest.raises(AutotuneError, match=r"torchvision_convnext_dynamo\.onnx\.data beside it") as err:
        api.layers(str(lone))
    assert "not an ONNX model" not in str(err.value)
