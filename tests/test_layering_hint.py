"""Tests for autotune.layering_hint: a history tuned with another ``--batch-norm`` says so.

The end-to-end tests tune a small conv + batch norm model for real (LLVM, a real SQLite
history), then compile and tune it again with other layerings.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.cli import main
from autotune.layering_hint import layering_hint


def _run(layering: str | None, model: str = "net", target: str = "llvm:x86_64:cpu") -> dict:
    params = {} if layering is None else {"batch_norm": layering}
    return {"model": model, "target_key": target, "params": params}


def test_runs_before_layerings_were_recorded_count_as_separate():
    hint = layering_hint([_run(None), _run(None)], model="net", target_key="llvm:x86_64:cpu", batch_norm="weights")
    assert hint is not None
    assert "2 runs of net" in hint and "all tuned with --batch-norm separate" in hint
    assert hint.endswith("pass --batch-norm separate to reuse them")


def test_the_most_used_other_layering_is_the_one_suggested():
    runs = [_run("epilogue"), _run("separate"), _run("epilogue")]
    hint = layering_hint(runs, model="net", target_key="llvm:x86_64:cpu", batch_norm="weights")
    assert "2 with --batch-norm epilogue, 1 with --batch-norm separate" in hint
    assert hint.endswith("pass --batch-norm epilogue to reuse them")


@pytest.mark.parametrize("runs", [
    [],  # nothing tuned
    [_run("separate"), _run("weights")],  # one run in this layering: its records match
    [_run("separate", model="other")],  # another model
    [_run("separate", target="cuda:sm_90:H100")],  # another target
])
def test_silent_when_nothing_points_elsewhere(runs):
    assert layering_hint(runs, model="net", target_key="llvm:x86_64:cpu", batch_norm="weights") is None


# ------------------------------------------------------------------- end to end (CLI)


def _conv_bn_relu(path: Path, *, with_batch_norm: bool = True) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype("float32"), "W")]
    nodes = [helper.make_node("Conv", ["input", "W"], ["c"], pads=[1, 1, 1, 1])]
    if with_batch_norm:
        for name, low in (("g", 0.5), ("b", None), ("m", None), ("v", 0.1)):
            data = rng.uniform(low, 2.0, 8) if low is not None else rng.standard_normal(8)
            inits.append(numpy_helper.from_array(data.astype("float32"), name))
        nodes.append(helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"]))
    nodes.append(helper.make_node("Relu", ["n" if with_batch_norm else "c"], ["output"]))
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 16, 16])], inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _tune(model: Path, history: Path, layering: str, capsys) -> dict:
    capsys.readouterr()
    assert main([
        "tune", str(model), "--target", "llvm", "--trials", "4", "--batch", "4", "--tuner", "random",
        "--batch-norm", layering, "--history", str(history), "--no-mlflow", "--no-model-latency",
        "--json", "--out-dir", str(history.parent / f"run-{layering}"),
    ]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _compile(model: Path, history: Path, capsys, *flags: str) -> tuple[dict, str]:
    out = history.parent / "net.so"
    capsys.readouterr()
    assert main(["compile", str(model), "--target", "llvm", "--history", str(history), "-o", str(out), "--json", *flags]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert main(["compile", str(model), "--target", "llvm", "--history", str(history), "-o", str(out), *flags]) == 0
    return summary, capsys.readouterr().out


def _from_history(summary: dict) -> list[str]:
    """Layers whose schedule choice came from a history record (the tuned config, or the
    measured default where it won: 4 random trials rarely beat it on so small a conv)."""
    return sorted(name for name, entry in summary["schedules"].items() if entry["record_id"] is not None)


@pytest.fixture(scope="module")
def separate_history(tmp_path_factory):
    """A history whose one run tuned ``net`` with batch norm separate."""
    workdir = tmp_path_factory.mktemp("layering")
    return _conv_bn_relu(workdir / "net.onnx"), workdir / "history.db"


def test_compile_in_another_layering_points_at_the_flag(separate_history, capsys):
    model, history = separate_history
    first = _tune(model, history, "separate", capsys)
    assert "history_note" not in first  # nothing to point at yet

    summary, text = _compile(model, history, capsys)  # the default: folded into the weights
    assert _from_history(summary) == []
    assert "--batch-norm separate" in summary["history_note"]
    assert f"note: {summary['history_note']}" in text.splitlines()

    summary, text = _compile(model, history, capsys, "--batch-norm", "separate")
    assert _from_history(summary) == ["conv2d"]
    assert summary["history_note"] is None and "note:" not in text


def test_tune_in_another_layering_says_so_once_then_not_again(separate_history, capsys):
    model, history = separate_history
    report = _tune(model, history, "epilogue", capsys)
    assert "--batch-norm separate" in report["history_note"]
    # the epilogue run is now in history: a second epilogue tune has nothing to point at
    assert "history_note" not in _tune(model, history, "epilogue", capsys)


def test_a_model_without_batch_norm_gets_no_note(tmp_path, capsys):
    """Every layering gives it the same layers, so the separate run's records are hits."""
    model = _conv_bn_relu(tmp_path / "net.onnx", with_batch_norm=False)
    history = tmp_path / "history.db"
    _tune(model, history, "separate", capsys)
    summary, text = _compile(model, history, capsys)
    assert _from_history(summary) and summary["history_note"] is None and "note:" not in text
