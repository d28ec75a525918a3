"""End to end on LLVM through the CLI: tune -> history -> compile -> run -> check.

This is the walking skeleton: real TVM builds and measurements, a real SQLite history,
a real MLflow store, a real ONNX model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.cli import main
from autotune.history import WorkloadInfo, open_history


def _small_cnn(path: Path) -> Path:
    """conv(stride 2)+relu -> maxpool -> flatten -> matmul -> softmax, seeded weights."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.3).astype("float32"), "W"),
        numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "B"),
        numpy_helper.from_array((rng.standard_normal((16 * 8 * 8, 10)) * 0.05).astype("float32"), "F"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "W", "B"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "F"], ["m"]),
        helper.make_node("Softmax", ["m"], ["output"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def tuned(workdir):
    """One real tune of the small model (shared by the tests below)."""
    model = _small_cnn(workdir / "small.onnx")
    history = workdir / "history.db"
    mlruns = workdir / "mlruns.db"
    code = main([
        "tune", str(model), "--target", "llvm", "--trials", "12", "--batch", "4", "--tuner", "random",
        "--history", str(history), "--mlflow-uri", f"sqlite:///{mlruns}", "--quiet", "--json",
        "--out-dir", str(workdir / "run"), "--out", str(workdir / "tuned.so"),
    ])
    assert code == 0
    return model, history, mlruns


def report_versions(workdir):
    return json.loads((workdir / "run" / "report.json").read_text())["versions"]


def test_tune_writes_every_measurement_to_history(tuned, workdir):
    model, history, _ = tuned
    with open_history(str(history), readonly=True) as store:
        records = store.records()
        tuned_records = [r for r in records if r.tuner == "random"]
        # 12 trials were asked for; every measured (non-invalid) one is a record
        assert len([r for r in tuned_records if r.status != "invalid"]) == 12
        ok = [r for r in tuned_records if r.status == "ok"]
        assert ok and all(r.latency_median > 0 and r.repeats >= 1 for r in ok)
        runs = store.runs()
        assert runs and runs[-1]["status"] == "finished"
        # which autotune and TVM made the records, in history (an export carries it; a report does not travel)
        import tvm

        from autotune.info import build_versions

        assert runs[-1]["params"]["versions"] == build_versions() == report_versions(workdir)
        assert build_versions()["tvm"] == tvm.__version__ and build_versions()["tvm_ffi"] == "0.1.14.post1"
        # every tuned layer's winner was checked against the reference
        for key in {r.workload_key for r in tuned_records}:
            best = store.best(key, tuned_records[0].target_key)
            assert best is not None and best.verified is True
    report = json.loads((workdir / "run" / "report.json").read_text())
    assert {l["name"] for l in report["layers"]} >= {"fused_conv2d_add_relu", "matmul"}
    assert sum(l["trials"] for l in report["layers"]) == 12
    # the adaptive split (the default) gave the budget chunk by chunk; its log adds up
    assert report["budget_split"] == "adaptive"
    assert sum(n for _, n in report["schedule"]) == 12
    for layer in report["layers"]:
        given = sum(n for name, n in report["schedule"] if name == layer["name"])
        assert layer["trials"] == layer["budget"] == given
    conv = next(l for l in report["layers"] if l["op_class"] == "conv2d")
    assert conv["default_latency"] > 0 and conv["best_latency"] > 0
    assert conv["speedup"] == pytest.approx(conv["default_latency"] / conv["best_latency"])
    # the whole model before and after, timed in turn at the end: each the median of its rounds
    from autotune.tune import MODEL_ROUNDS

    rounds = report["model_latency_rounds"]
    assert {k: len(v) for k, v in rounds.items()} == {"before": MODEL_ROUNDS, "after": MODEL_ROUNDS}
    for key in ("before", "after"):
        assert report[f"model_latency_{key}"] == pytest.approx(float(np.median(rounds[key])))


def test_second_tune_reuses_history_with_zero_measurements(tuned, workdir, capsys):
    """Layers tuned before are exact hits (no measurement); a layer the first budget did
    not reach (only its baseline is in history) is tuned now."""
    model, history, _ = tuned
    first = json.loads((workdir / "run" / "report.json").read_text())
    tuned_before = {l["workload_key"] for l in first["layers"] if l["trials"] > 0}
    assert tuned_before
    with open_history(str(history), readonly=True) as store:
        before = {k: len(store.records(workload_key=k)) for k in tuned_before}
    capsys.readouterr()
    code = main([
        "tune", str(model), "--target", "llvm", "--trials", "12", "--history", str(history),
        "--no-mlflow", "--quiet", "--json", "--no-model-latency", "--out-dir", str(workdir / "run2"),
    ])
    assert code == 0
    (line,) = capsys.readouterr().out.strip().splitlines()  # --quiet: the report, no progress events
    report = json.loads(line)
    assert report["event"] == "report"
    # the table's figures too, as `report --json` gives them (share, GFLOP/s, roofline)
    assert [r["name"] for r in report["rows"]] == [l["name"] for l in report["layers"]]
    assert all({"share", "gflops", "roofline_fraction"} <= set(r) for r in report["rows"])
    assert os.path.isabs(report["report_dir"])
    # not timed, and said so by null (the keys were missing: a reader's KeyError)
    assert report["model_latency_before"] is None and report["model_latency_after"] is None
    # every option as given, to make the run again (the seed, repeat and batch were nowhere)
    assert report["options"]["seed"] == 0 and report["options"]["batch"] == 8 and report["options"]["measure"]["repeat"] == 5
    with open_history(str(history), readonly=True) as store:
        assert store.runs()[-1]["params"]["options"] == report["options"]
    # the layer tuned now was built and timed; the report says for how long
    assert any(layer["trials"] > 0 for layer in report["layers"])
    assert report["measure_seconds"]["build"] > 0 and report["measure_seconds"]["run"] > 0
    for layer in report["layers"]:
        if layer["workload_key"] in tuned_before:
            assert layer["dispatch"] == "exact" and layer["trials"] == 0 and layer["match_score"] == 1.0
        else:
            assert layer["dispatch"] != "exact"
            # which source layers a guided tuner believed in the end (empty: one or none)
            assert isinstance(layer["source_weights"], dict)
            assert all(0.0 <= w <= 1.0 for w in layer["source_weights"].values())
            if layer["trials"] > 0:  # history of this very CPU: drawn on, never restated
                assert layer["history_records"]["restated_for_vector_width"] == 0
    with open_history(str(history), readonly=True) as store:
        assert {k: len(store.records(workload_key=k)) for k in tuned_before} == before


def test_a_layer_another_tune_finishes_meanwhile_is_tuned_from_that_history(tmp_path, capsys):
    """Which layers history covers is decided at a tune's start; another tune of the same
    model on the same history (or an import) can finish one before its turn. Opened
    then, its match said "reuse", which is no tuner: the tune stopped with a traceback."""
    from autotune.budget import LayerProgress
    from autotune.target import resolve_target
    from autotune.tune import TuneOptions, TuneSession, load_layers

    model, history = _small_cnn(tmp_path / "small.onnx"), tmp_path / "history.db"
    assert main(["tune", str(model), "--target", "llvm", "--trials", "8", "--batch", "4", "--history", str(history),
                 "--no-mlflow", "--quiet", "--no-model-latency", "--no-verify", "--tuner", "random"]) == 0
    with open_history(str(history)) as store:
        session = TuneSession(resolve_target("llvm"), store, TuneOptions(trials=4, batch=4, verify=False, model_latency=False))
        try:
            loaded = load_layers(str(model))
            finished = [l for l in loaded.layers if l.tunable and session._exact_hit(l)]
            assert finished  # what the other tune left: an exact hit for this one
            layer = finished[0]
            opened = session._open_layer(layer, LayerProgress(layer.name, layer.occurrences, layer.flops, layer.op_class, 1e-6))
            assert opened.out["dispatch"] == "guided" and opened.tuner_name == "gga"
            assert opened.out["match_score"] == 1.0
        finally:
            session.close()


def test_a_tune_says_when_another_on_this_history_measures_on_this_machine(tmp_path, capsys):
    """Two tunes at once time each other's load: the same config read 0.377 and 0.624 ms,
    and history keeps a winner for good. Nothing said so."""
    import socket
    import subprocess
    import sys

    from autotune.target import resolve_target

    model, history = _small_cnn(tmp_path / "small.onnx"), tmp_path / "history.db"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with open_history(str(history)) as store:  # what a tune running in that process writes first
            target = resolve_target("llvm")
            store.register_target(target.history_info())
            store.start_run("othertune123", model="small", target_key=target.key, tuner="auto",
                            params={"pid": other.pid, "host": socket.gethostname()})
            # and its first measurement: history held that run's work alone, and only the
            # first of two tunes started together said it was empty
            store.register_workload(WorkloadInfo("w" * 24, "w" * 24, "dense", {"name": "dense0"}, 1e6))
            store.add_record(workload_key="w" * 24, target_key=target.key, space_id="s", config={}, samples=[1e-4],
                             status="ok", run_id="othertune123")
        capsys.readouterr()
        assert main(["tune", str(model), "--target", "llvm", "--trials", "2", "--history", str(history), "--no-mlflow",
                     "--json", "--no-model-latency", "--no-verify", "--tuner", "random"]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
        assert lines[-1]["concurrent_runs"] == ["othertune123"] and lines[-1]["history_was_empty"] is True
        notes = [e["text"] for e in lines if e.get("event") == "message" and "othertune123" in e.get("text", "")]
        assert notes == [f"note: run othertune123 (pid {other.pid}) is measuring on this machine too: timings taken "
                         "together run slower, and history keeps them"]
    finally:
        other.kill()
        other.wait()
    # gone, it is no one's concurrent run (the next tune marks it killed)
    assert main(["tune", str(model), "--target", "llvm", "--trials", "2", "--history", str(history), "--no-mlflow",
                 "--json", "--quiet", "--no-model-latency", "--no-verify", "--tuner", "random"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "concurrent_runs" not in last and last["history_was_empty"] is False


def test_tune_says_where_it_wrote_the_module(tmp_path, capsys):
    """``tune --out`` wrote the module and logged it to MLflow without a word of it."""
    model = _small_cnn(tmp_path / "small.onnx")
    assert main(["tune", str(model), "--target", "llvm", "--trials", "2", "--tuner", "random", "--history",
                 str(tmp_path / "h.db"), "--no-mlflow", "--no-verify", "--no-model-latency", "--out", str(tmp_path / "m.so")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"module: {tmp_path / 'm.so'} (") and "layers from history, the rest TVM defaults)" in last
    assert (tmp_path / "m.so").is_file()


def test_a_guided_tuner_asked_for_on_an_empty_history_says_it_has_none(tmp_path, capsys):
    """`--tuner tl_xgb` on a fresh history ran the layer as "tl_xgb (override)" at a 0.00
    match, with no word that it had nothing to transfer from."""
    model = _small_cnn(tmp_path / "small.onnx")
    assert main(["tune", str(model), "--target", "llvm", "--trials", "4", "--tuner", "tl_xgb", "--max-layers", "1",
                 "--history", str(tmp_path / "h.db"), "--no-mlflow", "--no-verify", "--no-model-latency", "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    notes = [e["text"] for e in events if e.get("event") == "message" and "has no history to draw on" in e.get("text", "")]
    (layer,) = [l for l in events[-1]["layers"] if l["trials"]]
    assert notes == [f"{layer['name']}: tl_xgb has no history to draw on (nothing like this layer measured on this "
                     "target); it starts from its own first draws"]


def test_a_run_started_beside_a_tune_counts_as_concurrent_in_its_report_too(tmp_path):
    """Two tunes at once: only the second said so (``concurrent_runs``), the first having
    looked when it began, before the second had; its timings were shared all the same."""
    import socket

    from autotune.target import resolve_target
    from autotune.run_status import overlapping_runs

    here = {"pid": 1, "host": socket.gethostname()}
    with open_history(str(tmp_path / "h.db")) as store:
        key = resolve_target("llvm").key
        store.register_target(resolve_target("llvm").history_info())
        store.start_run("before", model="m", target_key=key, tuner="auto", params=here)
        store.finish_run("before", "finished", {})
        store.start_run("ours", model="m", target_key=key, tuner="auto", params=here)
        store.start_run("beside", model="m", target_key=key, tuner="auto", params=here)
        store.finish_run("beside", "finished", {})
        store.start_run("still", model="m", target_key=key, tuner="auto", params=here)
        store.start_run("elsewhere", model="m", target_key=key, tuner="auto", params={**here, "host": "another-host"})
        assert overlapping_runs(store, "ours") == ["beside", "still"]


def test_a_layer_whose_every_trial_failed_says_so(tmp_path, capsys):
    """Every candidate timed out (a run timeout just above what a timing takes): the
    table read '-' in every column, exit 0, and nothing said why."""
    model, history = _small_cnn(tmp_path / "small.onnx"), tmp_path / "history.db"
    assert main(["tune", str(model), "--target", "llvm", "--tuner", "random", "--trials", "2", "--max-layers", "1",
                 "--history", str(history), "--no-mlflow", "--json", "--no-model-latency", "--no-verify",
                 "--run-timeout", "0.051", "--min-repeat-ms", "10", "--repeat", "5"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    (layer,) = [l for l in events[-1]["layers"] if l["trials"]]
    # no candidate timed: the layer's best is TVM's default where that timing came in
    # within the limit (on a quiet machine it can), else none
    assert layer["failed"] == {"timeout": 2}
    assert layer["best_latency"] is None or layer["best_latency"] == pytest.approx(layer["default_latency"])
    said = [e["text"] for e in events if e.get("event") == "message" and "failed" in e["text"]]
    assert said == [f"{layer['name']}: every one of its 2 trials failed (timeout 2): `autotune history show "
                    f"{layer['workload_key'][:12]} --history {history}` has their errors"]
    assert events[-1]["options"]["measure"]["min_repeat_ms"] == 10


def test_layers_history_covers_leave_the_whole_budget_to_the_others(tmp_path, capsys):
    """A tune after a partial one: the layer tuned before is reused with no trial, and
    the trials it would have had go to the layer that still needs them."""
    model, history = _small_cnn(tmp_path / "small.onnx"), tmp_path / "history.db"

    starts: dict[str, str | None] = {}

    def tune(*flags: str) -> dict:
        capsys.readouterr()
        assert main([
            "tune", str(model), "--target", "llvm", "--tuner", "random", "--batch", "4", "--history", str(history),
            "--no-mlflow", "--json", "--no-model-latency", "--no-verify", *flags,
        ]) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
        starts.clear()
        starts.update((e["layer"], e["tuner"]) for e in events if e.get("event") == "start_layer")
        return {l["name"]: l for l in events[-1]["layers"]}

    first = tune("--trials", "4", "--max-layers", "1")
    assert len(first) == 1
    (tuned_first,) = first
    second = tune("--trials", "8")
    assert second[tuned_first]["dispatch"] == "exact" and second[tuned_first]["trials"] == 0
    assert sum(l["trials"] for l in second.values()) == 8  # none of it left on the reused layer
    # --max-layers counts the layers still to tune, not the ones history covers
    covered = {name for name, l in second.items() if l["trials"] > 0} | {tuned_first}
    assert len(covered) < len(second)  # 8 trials at 4 a layer did not reach every layer
    # a layer the budget did not reach names no tuner (it named the one it would have had)
    assert all(l["tuner"] is None for name, l in second.items() if name not in covered)
    assert all(starts[name] is None for name in second if name not in covered)  # as its progress event said
    assert all(starts[name] == "random" for name, l in second.items() if l["trials"] > 0)
    assert all(l["tuner"] == "random" for name, l in second.items() if l["trials"] > 0)
    third = tune("--trials", "4", "--max-layers", "1")
    assert {name for name, l in third.items() if l["dispatch"] == "exact"} == covered
    assert sorted(l["trials"] for l in third.values()) == [0] * len(covered) + [4]


def test_compile_applies_history_and_output_matches_reference(tuned, workdir, capsys):
    model, history, _ = tuned
    out = workdir / "small.so"
    capsys.readouterr()
    assert main(["compile", str(model), "--target", "llvm", "--history", str(history), "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert out.exists() and Path(summary["metadata"]).exists()
    assert summary["tuned_layers"] >= 1
    applied = summary["schedules"]
    with open_history(str(history), readonly=True) as store:
        for name, entry in applied.items():
            if entry["schedule"] == "history":
                assert store.best(entry["workload_key"], summary["target"]).id == entry["record_id"]
    assert main(["run", str(out), "--check", str(model), "--json", "--repeat", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["check"]["ok"] is True
    assert result["latency_median_s"] > 0


def test_compile_takes_the_fastest_record_that_applies(tuned, workdir, tmp_path, capsys):
    """A hand-edited import's record faster than all, with a tile no space holds: compile
    left its layer at TVM's default (445 us against a 27.6 us record in the trial), and
    said its config was "for another knob space version"."""
    import shutil

    model, history, _ = tuned
    edited = tmp_path / "edited.db"
    shutil.copy(history, edited)
    capsys.readouterr()
    assert main(["compile", str(model), "--target", "llvm", "--history", str(edited), "-o", str(tmp_path / "a.so"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    name, entry = next((n, e) for n, e in summary["schedules"].items() if e["schedule"] == "history")
    with open_history(str(edited)) as store:
        good = store.best(entry["workload_key"], summary["target"])
        config = {k: ([10**12, 1, 1, 1] if isinstance(v, list) else v) for k, v in good.config.items()}
        bad = store.add_record(workload_key=good.workload_key, target_key=good.target_key, space_id=good.space_id,
                               config=config, samples=[1e-8] * 3, status="ok", tuner="hand")
    assert main(["compile", str(model), "--target", "llvm", "--history", str(edited), "-o", str(tmp_path / "b.so"), "--json"]) == 0
    after = json.loads(capsys.readouterr().out)["schedules"][name]
    assert after["schedule"] == "history" and after["record_id"] == entry["record_id"]
    assert after["note"] == f"faster records do not apply: #{bad}: history config holds values this layer's knob space does not"


def test_mlflow_run_recorded(tuned, workdir):
    from mlflow.tracking import MlflowClient

    _, _, mlruns = tuned
    report = json.loads((workdir / "run" / "report.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{mlruns}")
    run = client.get_run(report["mlflow_run_id"])
    assert run.data.params["model"] == "small"
    assert run.data.tags["mlflow.runName"] == "tune-small-llvm"  # MLflow's table tells targets apart
    # the shapes tuned and the batch read (a zoo model at --size 36 and 44 read alike)
    assert (run.data.params["input_shapes"], run.data.params["batch_size"]) == ("input=1x3x32x32", "1")
    assert report["inputs"] == {"input": {"shape": [1, 3, 32, 32], "dtype": "float32"}}
    assert report["batch"] == {"size": 1, "input": "input", "axis": 0}
    # every option, by its name (seed, repeat, batch... were not params)
    assert {k: run.data.params.get(k) for k in ("seed", "batch", "repeat", "min_trials", "verify", "high")} == {
        "seed": "0", "batch": "4", "repeat": "5", "min_trials": "4", "verify": "True", "high": "0.8"}
    history = client.get_metric_history(run.info.run_id, "model_latency_after_ms")
    assert history and history[-1].value > 0
    # how many layers the "after" module runs other than TVM's defaults: those whose winner
    # is a tuned config (best_config is None where TVM's default won)
    assert report["model_layers_changed"] == sum(1 for layer in report["layers"] if layer.get("best_config") is not None)
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"decomposition.txt", "decomposition.json", "report.json", "report.csv", "convergence.png"} <= names
    assert {a.path for a in client.list_artifacts(run.info.run_id, "module")} == {"module/tuned.so", "module/tuned.so.json"}
    layers = [r for r in client.search_runs([run.info.experiment_id]) if r.data.tags.get("mlflow.parentRunId") == run.info.run_id]
    assert {r.data.tags["dispatch"] for r in layers} == {"override"}
    conv = next(r for r in layers if r.data.params.get("op_class") == "conv2d")
    steps = client.get_metric_history(conv.info.run_id, "best_latency_ms")
    assert [m.step for m in steps] == sorted(m.step for m in steps) and len(steps) >= 2
    assert all(b.value <= a.value for a, b in zip(steps, steps[1:]))  # best-so-far never rises
    # layers tuned by turns each log to their own run, which ends once the layer is verified
    for r in layers:
        entry = next(l for l in report["layers"] if l["name"] == r.data.tags["autotune.layer"])
        assert r.info.status == "FINISHED" and r.data.params["trials_budget"] == str(entry["budget"])
        assert r.data.params.get("tuner") == entry["tuner"]  # logged once the layer closes: None logs none
        logged = client.get_metric_history(r.info.run_id, "best_latency_ms")
        assert max((m.step for m in logged), default=0) == entry["trials"]


def test_history_export_import_roundtrip(tuned, workdir, capsys):
    _, history, _ = tuned
    dump = workdir / "dump.json"
    assert main(["history", "export", str(dump), "--history", str(history)]) == 0
    fresh = workdir / "fresh.db"
    assert main(["history", "import", str(dump), "--history", str(fresh), "--json"]) == 0
    with open_history(str(history), readonly=True) as a, open_history(str(fresh), readonly=True) as b:
        assert len(a.records()) == len(b.records())
        assert [r.config for r in a.records()] == [r.config for r in b.records()]
    capsys.readouterr()
    assert main(["history", "ls", "--history", str(fresh), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["n_records"] >= 1 for r in rows)


def test_killed_tune_keeps_measurements_and_resumes(workdir):
    """SIGKILL mid-tune: what was measured stays; the next run measures only new configs."""
    import os
    import signal
    import subprocess
    import sys
    import time

    model = _small_cnn(workdir / "small2.onnx")
    history = workdir / "killed.db"
    mlflow_uri = f"sqlite:///{workdir / 'killed_mlruns' / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "autotune", "tune", str(model), "--target", "llvm", "--trials", "400",
           "--batch", "2", "--tuner", "random", "--history", str(history), "--mlflow-uri", mlflow_uri, "--quiet",
           "--no-model-latency", "--no-verify"]
    env = dict(os.environ)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    n = 0
    while time.time() < deadline:
        time.sleep(2)
        if history.exists():
            try:
                with open_history(str(history), readonly=True) as store:
                    n = len([r for r in store.records() if r.tuner == "random"])
            except Exception:
                n = 0
            if n >= 6:
                break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert n >= 6, "the tune never wrote records"
    # its build folder outlived it; the next builder on this host removes it
    import glob
    import socket
    import tempfile

    left = glob.glob(os.path.join(tempfile.gettempdir(), f"autotune-build-{socket.gethostname()}-{proc.pid}-*"))
    assert len(left) == 1
    with open_history(str(history), readonly=True) as store:
        kept = [r for r in store.records() if r.tuner == "random"]
    assert len(kept) >= n
    # resume: a new run only adds configs never measured before
    assert main(["tune", str(model), "--target", "llvm", "--trials", "8", "--batch", "4", "--tuner", "random",
                 "--history", str(history), "--mlflow-uri", mlflow_uri, "--quiet", "--no-model-latency", "--no-verify"]) == 0
    with open_history(str(history), readonly=True) as store:
        after = [r for r in store.records() if r.tuner == "random"]
    keys = [(r.workload_key, json.dumps(r.config, sort_keys=True)) for r in after if r.status != "invalid"]
    assert len(keys) == len(set(keys)), "a config was measured twice"
    assert len(after) > len(kept)
    assert not os.path.exists(left[0])
    with open_history(str(history), readonly=True) as store:
        runs = store.runs()
    # the killed run is recognised as such once its process is gone; the resume finished
    assert [r["status"] for r in runs] == ["killed", "finished"]
    assert runs[0]["n_records"] >= n
    # and in MLflow, where it stayed RUNNING for good: its run and its open layer's
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)
    tracked = client.search_runs([e.experiment_id for e in client.search_experiments()])
    status = {(r.data.tags.get("autotune.run_id"), r.data.tags.get("mlflow.parentRunId") is None): r.info.status for r in tracked}
    assert status[(runs[0]["run_id"], True)] == "KILLED" and status[(runs[1]["run_id"], True)] == "FINISHED"
    assert not [r for r in tracked if r.info.status == "RUNNING"]
    # `report` takes a prefix of the killed run's id, as of any: with no report folder it
    # was looked up as an MLflow run id's prefix only, and not found
    from autotune.errors import AutotuneError
    from autotune.report import load_report

    for given in (runs[0]["run_id"], runs[0]["run_id"][:5]):
        with pytest.raises(AutotuneError, match=f"run {runs[0]['run_id']} .* has no report: it was stopped before the end"):
            load_report(given, mlflow_uri, history=str(history))
        # its history elsewhere (not named): MLflow alone knows it
        with pytest.raises(AutotuneError, match=f"ended killed before its report was written; what autotune run {runs[0]['run_id']}"):
            load_report(given, mlflow_uri, history=str(workdir / "elsewhere.db"))
    assert not (workdir / "elsewhere.db").exists()


def test_a_failed_tune_leaves_its_open_layers_runs_with_what_they_did(tmp_path, capsys, monkeypatch):
    """The server died mid-tune: the open layer's MLflow run held its class alone, where
    a finished layer's holds its tuner, key, calls and trials (they came with the report
    at the end). A fault is injected at the sixth batch: nothing fails here on its own."""
    from mlflow.tracking import MlflowClient

    from autotune.errors import AutotuneError
    from autotune.measure import Measurer

    real, calls = Measurer.measure, []

    def dies_at_the_sixth_batch(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 6:  # the layers' defaults timed, tuning under way
            raise AutotuneError("--rpc: the server is gone (injected)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Measurer, "measure", dies_at_the_sixth_batch)
    model, uri = _small_cnn(tmp_path / "small.onnx"), f"sqlite:///{tmp_path / 'mlruns.db'}"
    assert main(["tune", str(model), "--target", "llvm", "--trials", "12", "--batch", "4", "--tuner", "random",
                 "--history", str(tmp_path / "h.db"), "--mlflow-uri", uri, "--quiet", "--no-model-latency",
                 "--no-verify"]) == 2
    assert "the server is gone (injected)" in capsys.readouterr().err
    client = MlflowClient(uri)
    tracked = client.search_runs([e.experiment_id for e in client.search_experiments()])
    failed = [r for r in tracked if r.data.tags.get("mlflow.parentRunId") and r.info.status == "FAILED"]
    assert failed
    for run in failed:
        assert {"op_class", "tuner", "workload_key", "occurrences", "trials", "trials_budget"} <= set(run.data.params)
        assert run.data.params["tuner"] == "random" and int(run.data.params["trials"]) >= 0


def test_report_command_reprints_a_run(tuned, workdir, capsys):
    _, _, mlruns = tuned
    report = json.loads((workdir / "run" / "report.json").read_text())
    capsys.readouterr()
    # by run directory
    assert main(["report", str(workdir / "run"), "--out-dir", str(workdir / "rep1"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in out["rows"]} == {l["name"] for l in report["layers"]}
    # each layer as the run's report.json holds it: its match, what it drew on, its curve
    assert json.loads(json.dumps(report["layers"], default=str)) == out["layers"]
    assert (workdir / "rep1" / "convergence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # by MLflow run id, read back through the tracking store
    assert main(["report", report["mlflow_run_id"], "--mlflow-uri", f"sqlite:///{mlruns}", "--out-dir", str(workdir / "rep2")]) == 0
    text = capsys.readouterr().out
    assert "fused_conv2d_add_relu" in text and (workdir / "rep2" / "report.csv").exists()


def test_model_timing_failure_keeps_the_tune_and_says_why(workdir, capsys, monkeypatch):
    """The whole-model timing fails (the model build is made to fail: a fault injected,
    since nothing here fails on its own): the layers are still tuned and recorded, the
    latencies are null, and the report carries the reason, in JSON and in the table."""
    from autotune import compile as compiler
    from autotune.errors import AutotuneError
    from autotune.report import format_table

    def broken_build(mod, target):
        raise AutotuneError("compiling the model for llvm failed: injected fault")

    monkeypatch.setattr(compiler, "build", broken_build)
    model = _small_cnn(workdir / "timing.onnx")
    code = main([
        "tune", str(model), "--target", "llvm", "--trials", "4", "--batch", "4", "--tuner", "random",
        "--history", str(workdir / "timing.db"), "--no-mlflow", "--no-verify", "--quiet", "--json",
        "--out-dir", str(workdir / "timing-run"),
    ])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["model_latency_before"] is None and report["model_latency_after"] is None
    reason = "compiling the model for llvm failed: injected fault"
    assert report["model_latency_errors"] == {"model_latency_before": reason, "model_latency_after": reason}
    assert sum(layer["trials"] for layer in report["layers"]) == 4
    assert f"not measured: {reason}" in " ".join(format_table(report).split())  # the caption wraps where it is long


def test_a_model_too_slow_to_time_is_not_timed_and_the_tune_says_why(workdir, capsys, monkeypatch):
    """The whole model is timed in-process with no timeout, where native code heeds no
    Ctrl-C: a layer whose TVM default ran past the run timeout (injected: nothing here is
    that slow) skips the timing before tuning, and layers whose timings sum past the limit
    skip both timings; the model is then never built for timing, and the tune goes on."""
    from autotune import compile as compiler
    from autotune import tune as tune_module
    from autotune.compile import default_space_id

    model = _small_cnn(workdir / "slow.onnx")

    def tune(name: str) -> dict:
        code = main([
            "tune", str(model), "--target", "llvm", "--trials", "4", "--batch", "4", "--tuner", "random",
            "--history", str(workdir / f"{name}.db"), "--no-mlflow", "--no-verify", "--quiet", "--json",
            "--out-dir", str(workdir / f"{name}-run"),
        ])
        out, err = capsys.readouterr()
        assert code == 0, err
        return json.loads(out.strip().splitlines()[-1])

    slow: list[str] = []
    real_default = tune_module.TuneSession.default_latency

    def timed_out(self, layer):  # the first layer's TVM default ran past the run timeout
        if slow and layer.name != slow[0]:
            return real_default(self, layer)
        slow.append(layer.name)
        self.store.add_record(workload_key=layer.workload_key, target_key=self.target.key,
                              space_id=default_space_id(self.target), config={}, samples=[], status="timeout",
                              error="timeout: killed after 30 s", run_id=self.run_id, tuner="default")
        return None

    with monkeypatch.context() as m:
        m.setattr(tune_module.TuneSession, "default_latency", timed_out)
        report = tune("timeout")
    assert report["model_latency_before"] is None
    reason = report["model_latency_errors"]["model_latency_before"]
    assert reason.startswith(f"{slow[0]} ran past the 30 s run timeout with TVM's default schedule")
    # after tuning, the model is timed if that layer has a timing of its own now, else not
    tuned_slow = next(layer for layer in report["layers"] if layer["name"] == slow[0])
    if tuned_slow.get("best_latency"):
        assert report["model_latency_after"] is not None
    else:
        assert report["model_latency_after"] is None and report["model_latency_errors"]["model_latency_after"] == reason
    assert sum(layer["trials"] for layer in report["layers"]) == 4

    def never(mod, target):
        raise AssertionError("the model was built to be timed")

    monkeypatch.setattr(tune_module, "MODEL_TIMING_LIMIT_S", 1e-12)
    monkeypatch.setattr(compiler, "build", never)
    report = tune("sum")
    assert report["model_latency_before"] is None and report["model_latency_after"] is None
    for reason in report["model_latency_errors"].values():
        assert "a run as timed, and the whole model's timing runs it 6 times at least" in reason
    assert sum(layer["trials"] for layer in report["layers"]) == 4


def _twin_convs(path: Path, *, first_only: bool = False) -> Path:
    """conv+relu, then the same convolution with a residual add: twin layers (one conv
    shape, two epilogues), as every ResNet block has them. ``first_only``: the conv+relu
    alone, a model whose one layer is the twin's history."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype("float32"), n) for n in ("W1", "W2")]
    inits += [numpy_helper.from_array(rng.standard_normal(16).astype("float32"), n) for n in ("B1", "B2")]
    nodes = [
        helper.make_node("Conv", ["input", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "input"], ["a"]),
        helper.make_node("Relu", ["a"], ["output"]),
    ]
    if first_only:
        nodes, inits = nodes[:2], [inits[0], inits[2]]
        nodes[1].output[0] = "output"
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 16, 16]) for n in ("input", "output")]
    graph = helper.make_graph(nodes, "twins", io[:1], io[1:], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_twin_of_a_tuned_layer_is_probed_with_one_trial(tmp_path, capsys):
    """Once the first convolution is tuned, its twin matches history closely: the adaptive
    split gives it a one-trial probe (the guided GA's first proposal, the twin's winner
    mapped), which is faster than TVM's default; the trials a 4-trial first chunk would
    have taken go deeper instead."""
    model = _twin_convs(tmp_path / "twins.onnx")

    def tune(*extra: str) -> dict:
        capsys.readouterr()
        assert main([
            "tune", str(model), "--target", "llvm", "--trials", "6", "--history", str(tmp_path / f"h{len(extra)}.db"),
            "--no-mlflow", "--quiet", "--json", "--no-model-latency", "--out-dir", str(tmp_path / f"run{len(extra)}"), *extra,
        ]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    report = tune()
    assert report["probes"] is True
    layers = {layer["name"]: layer for layer in report["layers"]}
    assert len(layers) == 2
    # the budget reaches one 4-trial first chunk (the heavier default), then the probe
    (first_name, first_n), (twin_name, twin_n) = report["schedule"][:2]
    assert (first_n, twin_n) == (4, 1) and {first_name, twin_name} == set(layers)
    twin = layers[twin_name]
    assert twin["match_score"] >= 0.8 and twin["dispatch"] == "guided" and twin["tuner"] == "gga"
    # its history: the first conv alone, as deep as that conv's 4-trial chunk went
    assert twin["history_records"]["sources"] == 1
    assert 1 <= twin["history_records"]["per_source_min"] == twin["history_records"]["per_source_median"] <= first_n
    # ... and its one source is the most similar: how deep that one is, is what counts (run 51)
    assert twin["history_records"]["nearest_configs"] == twin["history_records"]["per_source_min"]
    assert twin["history_records"]["nearest_similarity"] == round(twin["match_score"], 3)
    assert twin["curve"][0][1] < twin["default_latency"] / 2 and twin["probe"] is True
    assert sum(layer["trials"] for layer in report["layers"]) == 6
    # the probe measured the first conv's winner (the same knobs here), not another of its configs
    with open_history(str(tmp_path / "h0.db"), readonly=True) as store:
        def measured(name: str) -> list:
            return sorted((r for r in store.records(workload_key=layers[name]["workload_key"]) if r.tuner in ("xgb", "gga")),
                          key=lambda r: r.id)
        winner = min((r for r in measured(first_name) if r.ok), key=lambda r: r.latency_median)
        assert measured(twin_name)[0].config == winner.config

    # The next tune on that history: the first conv (4 trials or more, --min-trials) is
    # reused as it is; the twin, measured fewer times, is tuned on from where it stopped
    # (it was an exact hit at one trial before, and so never tuned again).
    first = layers[first_name]
    assert first["trials"] >= 4 and twin["trials"] < 4
    with open_history(str(tmp_path / "h0.db"), readonly=True) as store:
        before = [r for r in store.records(workload_key=twin["workload_key"]) if r.tuner == "gga"]
    capsys.readouterr()
    assert main([  # with its progress events this time
        "tune", str(model), "--target", "llvm", "--trials", "4", "--history", str(tmp_path / "h0.db"),
        "--no-mlflow", "--json", "--no-model-latency", "--out-dir", str(tmp_path / "again"),
    ]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    again = {layer["name"]: layer for layer in events[-1]["layers"]}
    # a history of a few trials a layer is called shallow where the twin starts (run 43b)
    (shallow,) = [e["text"] for e in events if e["event"] == "message" and e["text"].startswith(f"{twin_name}: history is shallow")]
    assert "(the most similar, at " in shallow and "tuning the most similar layer longer" in shallow
    assert again[first_name]["dispatch"] == "exact" and again[first_name]["trials"] == 0
    assert again[twin_name]["dispatch"] == "guided" and again[twin_name]["trials"] == 4
    assert again[twin_name]["resumed"] == len([r for r in before if r.status != "invalid"]) and again[first_name]["resumed"] == 0
    from autotune.report import format_table

    assert f"gga (guided, resumed at {again[twin_name]['resumed']})" in format_table({"layers": list(again.values())})
    assert again[twin_name]["best_latency"] <= min(r.latency_median for r in before if r.ok)
    with open_history(str(tmp_path / "h0.db"), readonly=True) as store:
        after = [r for r in store.records(workload_key=twin["workload_key"]) if r.tuner == "gga" and r.status != "invalid"]
    configs = [json.dumps(r.config, sort_keys=True) for r in after]
    assert len(configs) == len(set(configs)) == len([r for r in before if r.status != "invalid"]) + 4


    plain = tune("--no-probes")  # a full first chunk for the twin too: 4, then the 2 left
    assert plain["probes"] is False
    assert [n for _, n in plain["schedule"][:2]] == [4, 2]
    assert not any(layer["probe"] for layer in plain["layers"])


def test_the_guided_ga_hands_a_shallow_historys_layer_to_transfer_xgboost(tmp_path, capsys):
    """History a 4-trial tune left (the conv+relu) is shallow: the twin goes to the guided
    GA (a close match), which measures its first population, 32 configs (8 of them
    transfer XGBoost's picks), then hands the layer to transfer XGBoost; the report, the
    table and the progress say so (runs 46b, 52)."""
    db = str(tmp_path / "h.db")

    def tune(model: Path, trials: int) -> list[dict]:
        capsys.readouterr()
        assert main([
            "tune", str(model), "--target", "llvm", "--trials", str(trials), "--history", db, "--no-mlflow",
            "--json", "--no-model-latency", "--no-verify", "--out-dir", str(tmp_path / model.stem),
        ]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]

    tune(_twin_convs(tmp_path / "first.onnx", first_only=True), 4)
    events = tune(_twin_convs(tmp_path / "twins.onnx"), 40)
    layers = events[-1]["layers"]
    first = next(layer for layer in layers if layer["dispatch"] == "exact")
    (twin,) = [layer for layer in layers if layer is not first]
    assert twin["tuner"] == "gga" and twin["dispatch"] == "guided" and twin["trials"] == 40
    assert twin["history_records"]["per_source_median"] == 4
    # at the first batch once 32 are measured (the split's chunks need not end there)
    assert twin["handed_over"]["to"] == "tl_xgb" and 32 <= twin["handed_over"]["after_configs"] < 40
    (said,) = [e["text"] for e in events if e["event"] == "message"
               and e["text"].startswith(f"{twin['name']}: gga handed the layer to tl_xgb after")]
    # a quarter of its first population was transfer XGBoost's first picks (run 52)
    assert twin["model_seeds"] == 8 and "from history and 8 of tl_xgb picks" in said
    from autotune.report import format_table

    assert f"gga (guided, then tl_xgb after {twin['handed_over']['after_configs']})" in format_table({"layers": [twin]}, width=240)


def _heavy_then_light_conv(path: Path) -> Path:
    """A heavy 3x3 convolution, then a light strided one (8x fewer FLOPs): after both
    first chunks, the adaptive split gives the next one to the heavy convolution."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype("float32"), "W1"),
        numpy_helper.from_array((rng.standard_normal((8, 32, 3, 3)) * 0.1).astype("float32"), "W2"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "heavy_light", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 16, 16])], inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_layer_tuned_cold_is_matched_again_once_history_resembles_it(tmp_path):
    """The heavy convolution meets an empty history (cold XGBoost); by its second chunk
    the light one is tuned, so it is matched again and goes on with the tuner that match
    picks, told what it measured (nothing measured twice). With ``rematch=False`` it
    stays cold."""
    from autotune import api
    from autotune.report import format_table

    model = _heavy_then_light_conv(tmp_path / "heavy_light.onnx")

    def tune(name: str, **options) -> dict:
        return api.tune(model, target="llvm", history=str(tmp_path / f"{name}.db"), out_dir=tmp_path / name, mlflow=False,
                        trials=12, model_latency=False, **options)

    report = tune("again")
    heavy_name = report["schedule"][0][0]
    assert [n for name, n in report["schedule"] if name == heavy_name] == [4, 4], report["schedule"]
    heavy = next(l for l in report["layers"] if l["name"] == heavy_name)
    assert heavy["rematched"] == {"from": "xgb", "at_trial": 4}
    assert heavy["tuner"] in ("tl_xgb", "gga") and heavy["dispatch"] in ("transfer", "guided") and heavy["match_score"] > 0.05
    assert heavy["trials"] == 8 and f"{heavy['tuner']} ({heavy['dispatch']}, xgb for 4)" in format_table(report)
    with open_history(str(tmp_path / "again.db"), readonly=True) as store:
        mine = [r for r in store.records(workload_key=heavy["workload_key"]) if r.tuner != "baseline" and r.config and r.status != "invalid"]
    assert sorted(r.tuner for r in mine) == sorted([heavy["tuner"]] * 4 + ["xgb"] * 4)
    assert len({json.dumps(r.config, sort_keys=True) for r in mine}) == 8

    stays = next(l for l in tune("cold", rematch=False)["layers"] if l["name"] == heavy_name)
    assert stays["tuner"] == "xgb" and stays["dispatch"] == "cold" and stays.get("rematched") is None


def _one_graph(path: Path, nodes, x_shape, y_shape, weights: dict[str, tuple[int, ...]]) -> Path:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype("float32"), n) for n, s in weights.items()]
    graph = helper.make_graph(
        nodes, path.stem, [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(y_shape))], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def test_a_candidate_answered_by_its_twin_program_is_marked_so_in_history(tmp_path, capsys):
    """A small layer's configs often compile to one program (an unroll limit above every
    loop's extent); the measurer times it once and its twins take that timing. History
    says which records were not timed themselves, as many as the run counted."""
    model = _one_graph(tmp_path / "tiny.onnx", [helper.make_node("MatMul", ["input", "F"], ["m"]),
                                                helper.make_node("Relu", ["m"], ["output"])], (1, 16), (1, 8), {"F": (16, 8)})
    history = tmp_path / "h.db"
    assert main(["tune", str(model), "--target", "llvm", "--trials", "24", "--batch", "8", "--tuner", "random",
                 "--history", str(history), "--no-mlflow", "--quiet", "--json", "--no-model-latency",
                 "--out-dir", str(tmp_path / "run")]) == 0
    twins = sum(json.loads(capsys.readouterr().out)["measure_twins"].values())
    with open_history(str(history), readonly=True) as store:
        records = store.records()
    marked = [r for r in records if r.twin]
    assert len(marked) == twins >= 1
    timed = {r.samples for r in records if not r.twin}
    assert all(r.status == "ok" and r.samples in timed for r in marked)  # each carries a timed program's samples
    assert main(["history", "show", records[0].workload_key, "--history", str(history)]) == 0
    assert capsys.readouterr().out.count(" twin ") == len(marked)


def test_report_finds_a_run_whose_report_went_elsewhere_by_its_id_or_a_prefix(tmp_path, capsys):
    """``tune --out-dir X --no-mlflow`` printed a run id that ``report`` then called no
    run; ``report --json`` gave the rows alone, not the run's own figures."""
    model = _one_graph(tmp_path / "tiny.onnx", [helper.make_node("MatMul", ["input", "F"], ["m"]),
                                                helper.make_node("Relu", ["m"], ["output"])], (1, 16), (1, 8), {"F": (16, 8)})
    assert main(["tune", str(model), "--target", "llvm", "--trials", "4", "--batch", "4", "--tuner", "random",
                 "--history", str(tmp_path / "h.db"), "--no-mlflow", "--quiet", "--json",
                 "--out-dir", str(tmp_path / "elsewhere")]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    for given in (run_id, run_id[:5]):
        assert main(["report", given, "--out-dir", str(tmp_path / f"again-{given}"), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["run_id"] == run_id and out["model_latency_before"] > 0 and out["rows"][0]["name"] == "fused_matmul_relu"
    # where the home's runs folder could not be written, no pointer was left there: history says where
    from autotune.report import REPORT_ELSEWHERE, run_dir

    (run_dir(run_id) / REPORT_ELSEWHERE).unlink()
    assert main(["report", run_id[:5], "--history", str(tmp_path / "h.db"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # its files are the folder's: no copies written into the working directory
    assert out["run_id"] == run_id and out["files"][0].startswith(str(tmp_path / "elsewhere"))


def test_a_reused_layer_reports_the_schedule_compile_applies_checked(tmp_path, capsys):
    """An exact hit reuses history with no trial; what the run reports for it is what
    ``compile`` applies (TVM's default where that is faster than every tuned record, as
    ``history best`` says), and a winner never checked (a killed run's) is checked first."""
    import sqlite3

    model = _one_graph(tmp_path / "tiny.onnx", [helper.make_node("MatMul", ["input", "F"], ["m"]),
                                                helper.make_node("Relu", ["m"], ["output"])], (1, 16), (1, 8), {"F": (16, 8)})
    history = tmp_path / "h.db"
    tune = ["tune", str(model), "--target", "llvm", "--trials", "8", "--batch", "8", "--tuner", "random",
            "--history", str(history), "--no-mlflow", "--quiet", "--json", "--no-model-latency"]
    assert main(tune + ["--out-dir", str(tmp_path / "run1")]) == 0
    capsys.readouterr()
    con = sqlite3.connect(history)
    default_id, default_s = con.execute("SELECT id, latency_median FROM records WHERE tuner = 'default'").fetchone()
    con.execute("UPDATE records SET verified = NULL WHERE tuner = 'random'")
    con.commit()
    assert main(tune + ["--out-dir", str(tmp_path / "run2")]) == 0
    (layer,) = json.loads(capsys.readouterr().out)["layers"]
    assert layer["dispatch"] == "exact" and layer["trials"] == 0
    with open_history(str(history), readonly=True) as store:
        best = store.best(layer["workload_key"], store.records()[0].target_key)
    assert layer["best_record_id"] == best.id and best.verified is True and layer["verified"] is True
    # every tuned record made slower than the default: the default is what compile applies
    con.execute("UPDATE records SET latency_median = ? WHERE tuner = 'random' AND status = 'ok'", (default_s * 10,))
    con.commit()
    con.close()
    assert main(tune + ["--out-dir", str(tmp_path / "run3")]) == 0
    (layer,) = json.loads(capsys.readouterr().out)["layers"]
    assert layer["dispatch"] == "exact" and layer["best_record_id"] == default_id and layer["speedup"] == 1.0
    assert main(["compile", str(model), "--target", "llvm", "--history", str(history), "-o", str(tmp_path / "t.so"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schedules"][layer["name"]]["record_id"] == default_id
    # an imported 1-ns record of values this space does not hold: compile skips it, and so
    # does the run's report (it read a 5.9-million-fold speed-up)
    with open_history(str(history)) as store:
        good = next(r for r in store.records(status="ok") if r.tuner == "random")
        strings = {k: "__import__('os').system('true')" for k in good.config}
        store.add_record(workload_key=good.workload_key, target_key=good.target_key, space_id=good.space_id,
                         config=strings, samples=[1e-9] * 3, status="ok", tuner="hand")
    assert main(tune + ["--out-dir", str(tmp_path / "run4")]) == 0
    (layer,) = json.loads(capsys.readouterr().out)["layers"]
    assert layer["best_record_id"] == default_id and layer["speedup"] == 1.0


def test_convolutions_of_other_ranks_tune_apart_and_a_transposed_one_compiles_correct(tmp_path):
    """A speech-style conv1d model is tuned into history first; an autoencoder (conv2d
    down, ConvTranspose up) after it finds no neighbour there: history transfers only
    between convolutions of the same rank and kind. (Before, both convolutions were
    'conv2d' and the autoencoder's matched the conv1d.) Its tuned, transposed kernel
    then compiles and agrees with ONNX's reference."""
    from autotune import api

    speech = _one_graph(
        tmp_path / "speech.onnx",
        [helper.make_node("Conv", ["input", "W"], ["c"], kernel_shape=[5], strides=[2], pads=[2, 2]),
         helper.make_node("Relu", ["c"], ["output"])],
        (1, 8, 64), (1, 16, 32), {"W": (16, 8, 5)},
    )
    autoencoder = _one_graph(
        tmp_path / "autoencoder.onnx",
        [helper.make_node("Conv", ["input", "W"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("ConvTranspose", ["r", "V"], ["t"], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Sigmoid", ["t"], ["output"])],
        (1, 3, 16, 16), (1, 3, 16, 16), {"W": (8, 3, 3, 3), "V": (8, 3, 4, 4)},
    )
    history = str(tmp_path / "history.db")
    common = dict(target="llvm", history=history, mlflow=False, model_latency=False, repeat=2, batch=4)
    first = api.tune(speech, trials=4, out_dir=tmp_path / "run1", **common)
    assert [l["op_class"] for l in first["layers"] if l["trials"]] == ["conv1d"]

    second = api.tune(autoencoder, trials=8, out_dir=tmp_path / "run2", **common)
    tuned = {l["op_class"]: l for l in second["layers"] if l["trials"]}
    assert set(tuned) == {"conv2d", "conv2d_transpose"}
    for layer in tuned.values():
        assert layer["match"]["score"] == 0.0 and not layer["match"]["neighbours"], layer["match"]
        assert (layer["tuner"], layer["dispatch"]) == ("xgb", "cold")

    out = tmp_path / "autoencoder.so"
    api.compile(autoencoder, out, target="llvm", history=history)
    result = api.run(out, check=autoencoder, repeat=1)
    assert result["check"]["ok"] is True, result["check"]


def test_a_translation_model_fed_token_ids_tunes_compiles_and_decodes_as_onnx_does(tmp_path):
    """The zoo's seq2seq: int64 token ids in, an LSTM decoder whose steps start from the
    previous step's states and are fed the embedding of its own argmax. Its tuned module,
    run on ids from the whole vocabulary, decodes what ONNX's reference evaluator decodes
    on the recurrent graph, and each decoding step reuses one tuned workload."""
    from autotune import api
    from autotune.zoo import get_entry

    entry, size = get_entry("seq2seq"), 3
    history = str(tmp_path / "history.db")
    report = api.tune("seq2seq", size=size, trials=4, target="llvm", history=history, mlflow=False,
                      model_latency=False, repeat=2, batch=4, out_dir=tmp_path / "run")
    tuned = [l for l in report["layers"] if l["trials"]]
    assert tuned and all(l["best_latency"] > 0 for l in tuned)
    steps = api.layers("seq2seq", size=size)["layers"]
    assert max(l.occurrences for l in steps if l.op_class == "dense") >= size  # one kernel, every step

    out = tmp_path / "seq2seq.so"
    api.compile("seq2seq", out, size=size, target="llvm", history=history)
    ids = np.random.default_rng(5).integers(0, entry.vocab, entry.input_shape(1, size))
    result = api.run(out, inputs={"input": ids}, check="seq2seq", repeat=1, return_outputs=True)
    assert result["check"]["ok"] is True, result["check"]
    (scores,) = result["output_arrays"]
    assert scores.shape == entry.output_shape(1, size)


def test_the_shallow_history_message_counts_its_layers() -> None:
    from autotune.tune import shallow_history_message

    one = shallow_history_message("L", {"sources": 1, "per_source_median": 4.0, "nearest_similarity": 0.27,
                                        "nearest_configs": 4}, "tl_xgb")
    assert one.startswith("L: history is shallow, 1 similar layer, at 0.27, with 4 measured configs; tl_xgb may settle near its ")
    two = shallow_history_message("L", {"sources": 2, "per_source_median": 6.5, "nearest_similarity": 0.41,
                                        "nearest_configs": 8}, "gga", handover=32)
    assert "2 similar layers with a median of 6.5 measured configs each (the most similar, at 0.41, holds 8)" in two
    assert "near their unconverged winners" in two
    # with its count: a one-trial probe never gets there, and said bare it read as done
    assert two.endswith("; given more than 32 trials (its first population), gga hands the layer to tl_xgb")
    assert "hands the layer" not in shallow_history_message("L", {"sources": 2, "per_source_median": 6.5, "nearest_similarity": 0.41,
                                                                  "nearest_configs": 8}, "gga", handover=0)


def test_the_shallow_history_advice_is_given_once_then_only_what_history_holds():
    """A 48-trial ResNet-50 tune printed the same advice for 19 layers; after the first,
    a layer's note says what history holds for it, and "1 measured configs" is singular."""
    from autotune.tune import shallow_history_message

    depth = {"sources": 3, "per_source_median": 1, "nearest_similarity": 0.81, "nearest_configs": 1}
    full = shallow_history_message("conv_a", depth, "gga", handover=16)
    assert full.startswith("conv_a: history is shallow, 3 similar layers with a median of 1 measured config each")
    assert "unconverged winners" in full and "gga hands the layer to tl_xgb" in full
    brief = shallow_history_message("conv_b", depth, "gga", brief=True)
    assert brief == ("conv_b: history is shallow too, 3 similar layers with a median of 1 measured config each "
                     "(the most similar, at 0.81, holds 1)")
    one = shallow_history_message("conv_c", {**depth, "sources": 1, "nearest_configs": 1}, "tl_xgb", brief=True)
    assert one == "conv_c: history is shallow too, 1 similar layer, at 0.81, with 1 measured config"
    # a few layers said, then one line, then nothing: a 24-trial tune printed 16 notes
    from autotune.tune import SHALLOW_NOTES, shallow_note

    notes = [shallow_note(told, f"conv{told}", depth, "gga", handover=16) for told in range(SHALLOW_NOTES + 3)]
    assert notes[0] == full.replace("conv_a", "conv0") and notes[1].startswith("conv1: history is shallow too")
    assert notes[SHALLOW_NOTES].startswith("more layers' history is shallow too: not said again")
    assert notes[SHALLOW_NOTES + 1:] == [None, None]


def test_a_tune_stopped_after_its_layers_before_its_report_is_no_finished_run(tmp_path, monkeypatch):
    """Ctrl-C 1.5 s after the last layer closed: the layers had closed the run finished,
    and it stayed so with no report or module written ("finished", then `report` said
    its report was gone)."""
    from autotune import api

    model = _small_cnn(tmp_path / "small.onnx")
    history = tmp_path / "h.db"

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "_write_decomposition", stop)
    with pytest.raises(KeyboardInterrupt):
        api.tune(model, target="llvm", history=str(history), out_dir=tmp_path / "run", mlflow=False,
                 trials=2, batch=2, tuner="random", model_latency=False, repeat=1)
    with open_history(str(history), readonly=True) as store:
        (run,) = store.runs()
    assert run["status"] == "killed" and run["n_records"] > 0
    assert not (tmp_path / "run" / "report.json").exists()


def test_the_schedule_logs_the_trials_each_chunk_kept(tmp_path, capsys):
    """A layer that ran out of new configs hands the rest of its chunk back: the log had
    the chunk as given ([mean, 1], [mean, 19] for a layer that spent 4 of 20), summing
    past what was spent."""
    graph = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512, 1, 1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "gap.onnx"))
    tune = ["tune", str(tmp_path / "gap.onnx"), "--target", "llvm", "--trials", "20", "--history", str(tmp_path / "h.db"),
            "--no-mlflow", "--quiet", "--json", "--no-model-latency"]
    assert main([*tune, "--out-dir", str(tmp_path / "run1")]) == 0
    # again, tuning on (--min-trials past what the first measured): few new configs are left
    assert main([*tune, "--min-trials", "30", "--out-dir", str(tmp_path / "run2")]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (layer,) = report["layers"]
    assert 0 < layer["trials"] < 20, layer  # the space ran out before the budget
    assert sum(n for _, n in report["schedule"]) == layer["trials"] == layer["budget"], report["schedule"]


def test_a_minimum_past_the_budget_is_said(tmp_path, capsys):
    """--min-trials above --trials ran without a word, every layer but one untuned."""
    model = _small_cnn(tmp_path / "cnn.onnx")
    assert main(["tune", str(model), "--target", "llvm", "--trials", "2", "--min-trials", "8", "--history",
                 str(tmp_path / "h.db"), "--no-mlflow", "--json", "--no-model-latency", "--no-verify",
                 "--out-dir", str(tmp_path / "run")]) == 0
    said = [e["text"] for e in map(json.loads, capsys.readouterr().out.splitlines()) if e.get("event") == "message"]
    assert any(t.startswith("note: --min-trials 8 is more than the 2 trials") for t in said), said


def _two_dense(path: Path) -> Path:
    """``relu(x @ W1) @ W2`` with a free batch dimension: two layers."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 128)) * 0.1).astype("float32"), "W1"),
             numpy_helper.from_array((rng.standard_normal((128, 32)) * 0.1).astype("float32"), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["y"])]
    graph = helper.make_graph(nodes, "two_dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_layer_the_budget_misses_at_a_new_batch_shows_the_kernel_it_runs(tmp_path, capsys):
    """Tuned at batch 1, then a short tune at batch 8: the layers the budget did not reach
    read TVM's default latency (1.00x, and a share of the model's time) while the timed
    model and the export ran the batch-1 winner there. That winner is now timed at this
    batch once, as TVM's default is, and the table shows the faster of the two."""
    from autotune import api
    from autotune.compile import OTHER_BATCH
    from autotune.report import format_table
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace
    from autotune.tune import OTHER_BATCH_TUNER

    model, history = _two_dense(tmp_path / "two.onnx"), tmp_path / "h.db"

    def tune(batch: int, trials: int) -> dict:
        capsys.readouterr()
        assert main(["tune", str(model), "--input-shape", f"x={batch}x64", "--target", "llvm", "--trials", str(trials),
                     "--history", str(history), "--no-mlflow", "--quiet", "--json", "--no-model-latency",
                     "--out-dir", str(tmp_path / f"run{batch}")]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    # batch 1's winners, one per layer (a tune's adaptive split may leave a layer untried)
    target = resolve_target("llvm")
    with open_history(str(history)) as store:
        store.register_target(target.history_info())
        for layer in api.layers(str(model), input_shapes={"x": (1, 64)})["layers"]:
            if not layer.tunable:
                continue
            space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
            store.register_workload(layer.workload_info())
            store.add_record(workload_key=layer.workload_key, target_key=target.key, space_id=space.space_id,
                             config=space.random_config(np.random.default_rng(0)), samples=[1e-7], status="ok")
    report = tune(8, 1)
    missed = [layer for layer in report["layers"] if layer["budget"] == 0]
    assert len(missed) == 1 and missed[0]["trials"] == 0
    (layer,) = missed
    other = layer["other_batch"]
    with open_history(str(history), readonly=True) as store:
        at_8 = store.records(workload_key=layer["workload_key"])
        (timed,) = [r for r in at_8 if r.tuner == OTHER_BATCH_TUNER]
        (source,) = [r for r in store.records() if r.id == other["record_id"]]
    assert timed.ok and timed.latency_median == other["latency"] and timed.run_id == report["run_id"]
    assert source.workload_key != layer["workload_key"]  # the same layer at batch 1
    assert layer["best_latency"] == min(layer["default_latency"], other["latency"])
    assert other["applied"] == (other["latency"] < layer["default_latency"])
    row = [line for line in format_table(report).splitlines() if layer["name"] in line][0]
    assert ("other batch's winner" in row) == other["applied"]
    # compile now goes by this batch's own timings of the two: the faster is applied
    assert main(["compile", str(model), "--input-shape", "x=8x64", "--target", "llvm", "--history", str(history),
                 "-o", str(tmp_path / "m.so"), "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["schedules"][layer["name"]]
    assert entry["schedule"] == ("history" if other["applied"] else "default") != OTHER_BATCH
