"""Tracker + finish_with_report against a real MLflow sqlite store in tmp_path, read back via MlflowClient."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import AutotuneError
from autotune.report import summary_rows
from autotune.tracking import Tracker, finish_with_report, report_params, resolve_tracking_uri


def make_report() -> dict[str, Any]:
    """A complete report with plausible numbers: two tuned layers with convergence curves."""
    conv_curve = [[1, 0.00094], [2, 0.00051], [3, 0.00051], [4, 0.00030], [5, 0.00021]]
    dense_curve = [[1, 0.00040], [2, 0.00022], [3, 0.00012]]
    return {
        "run_id": None,
        "model": "resnet18",
        "target": {"kind": "llvm", "arch": "x86_64", "device_name": "Test CPU 9000"},
        "budget": 64,
        "history": "sqlite:////tmp/history.db",
        "tuner": "auto",
        "versions": {"autotune": "0.1.0", "tvm": "0.27.0.post1"},
        "model_latency_before": 0.0123,
        "model_latency_after": 0.0081,
        "measure_seconds": {"build": 41.5, "run": 12.25},
        "measure_twins": {"not_built": 3, "not_timed": 5},
        "roofline": {"peak_flops": 1.0e12, "peak_bw": 5.0e10, "source": "measured", "device_name": "Test CPU 9000"},
        "layers": [
            {
                "name": "fused_conv2d_add_relu",
                "op_class": "conv2d",
                "workload_key": "conv2d:1x64x56x56:64x64x3x3",
                "occurrences": 2,
                "flops": 1.2e8,
                "bytes": 3.4e6,
                "match_score": 0.0,
                "tuner": "random",
                "dispatch": "cold",
                "trials": 5,
                "best_latency": 0.00021,
                "default_latency": 0.00094,
                "speedup": 0.00094 / 0.00021,
                "share": 0.31,
                "curve": conv_curve,
            },
            {
                "name": "fused_dense_add",
                "op_class": "dense",
                "workload_key": "dense:1x512:1000x512",
                "occurrences": 1,
                "flops": 1.024e6,
                "bytes": 2.05e6,
                "match_score": 0.87,
                "tuner": "history",
                "dispatch": "warm",
                "trials": 3,
                "best_latency": 0.00012,
                "default_latency": 0.00040,
                "speedup": 0.0004 / 0.00012,
                "share": 0.09,
                "curve": dense_curve,
            },
        ],
    }


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sqlite store for the module: creating a fresh MLflow schema costs seconds (migrations).
    Tests stay independent because each reads back only its own run ids."""
    return tmp_path_factory.mktemp("store") / "mlflow.db"


@pytest.fixture()
def store(shared_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The shared store's URI; HOME and AUTOTUNE_HOME point into tmp so nothing touches ~."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home" / ".autotune"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return f"sqlite:///{shared_store.as_posix()}"


def client_for(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def children_of(client, parent_id: str) -> dict[str, Any]:
    parent = client.get_run(parent_id)
    runs = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'"
    )
    return {r.data.tags["mlflow.runName"]: r for r in runs}


def steps(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_live_logging_then_report(store: str, tmp_path: Path) -> None:
    """The pipeline's path: start, one nested run per layer with per-trial metrics, then the report."""
    report = make_report()
    report["layers"][1].update(probe=True, resumed=3)  # as the table's tuner column shows them
    with Tracker.create(True, store) as tracker:
        run_id = tracker.start("resnet18", report_params(report), {"autotune.cli": "tune"})
        assert run_id and tracker.run_id == run_id
        for layer in report["layers"]:
            with tracker.layer(layer["name"], params={"tuner": layer["tuner"]}) as nested:
                assert tracker.current_run_id == nested != run_id
                tracker.set_tags({"match_score": layer["match_score"], "dispatch": layer["dispatch"]})
                for step, latency in layer["curve"]:
                    tracker.log_trial(step, latency, layer["flops"])
            assert tracker.current_run_id == run_id
        paths = finish_with_report(tracker, report, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["convergence.png", "layers.txt", "report.csv", "report.json"]

    client = client_for(store)
    parent = client.get_run(run_id)
    assert parent.info.status == "FINISHED"
    params = parent.data.params
    assert params["model"] == "resnet18"
    assert params["target"] == "llvm" and params["device"] == "Test CPU 9000"
    assert params["budget"] == "64"
    assert params["history"] == "sqlite:////tmp/history.db"
    assert params["autotune_version"] == "0.1.0" and params["tvm_version"] == "0.27.0.post1"
    assert parent.data.tags["autotune.cli"] == "tune"
    assert parent.data.metrics["model_latency_before_ms"] == pytest.approx(12.3)
    assert parent.data.metrics["model_latency_after_ms"] == pytest.approx(8.1)
    assert parent.data.metrics["model_speedup"] == pytest.approx(0.0123 / 0.0081)
    assert parent.data.metrics["measure_build_s"] == 41.5 and parent.data.metrics["measure_run_s"] == 12.25
    assert parent.data.metrics["measure_twins_not_built"] == 3 and parent.data.metrics["measure_twins_not_timed"] == 5

    kids = children_of(client, run_id)
    assert set(kids) == {"fused_conv2d_add_relu", "fused_dense_add"}
    shares = {row["name"]: row["share"] for row in summary_rows(report)}
    for layer in report["layers"]:
        kid = kids[layer["name"]]
        assert kid.info.status == "FINISHED"
        assert kid.data.params["tuner"] == layer["tuner"]
        assert kid.data.tags["dispatch"] == layer["dispatch"]
        assert float(kid.data.tags["match_score"]) == pytest.approx(layer["match_score"])
        # as a layer's run is opened with it, four places (0.5074478025534243 read beside 0.9237)
        assert kid.data.tags["match_score"] == f"{layer['match_score']:.4f}"
        history = steps(client, kid.info.run_id, "best_latency_ms")
        # logged live exactly once per trial: finish_with_report must not replay the curve again
        assert [s for s, _ in history] == [s for s, _ in layer["curve"]]
        assert [v for _, v in history] == pytest.approx([lat * 1e3 for _, lat in layer["curve"]])
        gflops = steps(client, kid.info.run_id, "gflops")
        assert [v for _, v in gflops] == pytest.approx([layer["flops"] / lat / 1e9 for _, lat in layer["curve"]])
        assert kid.data.metrics["speedup"] == pytest.approx(layer["speedup"])
        # the share of the measured time, as the table shows it (not the stored estimate)
        assert kid.data.metrics["share"] == pytest.approx(shares[layer["name"]])
        assert kid.data.metrics["share"] != pytest.approx(layer["share"])
        # the table's GFLOP/s, there for a reused layer too, which logs no trial
        assert kid.data.metrics["final_gflops"] == pytest.approx(layer["flops"] / layer["best_latency"] / 1e9)
        assert ("probe" in kid.data.tags, kid.data.tags.get("resumed_configs")) == (
            (True, "3") if layer["name"] == "fused_dense_add" else (False, None))

    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"report.json", "report.csv", "convergence.png", "layers.txt"} <= artifacts
    dst = tmp_path / "dl"
    dst.mkdir()
    downloaded = json.loads(Path(client.download_artifacts(run_id, "report.json", str(dst))).read_text())
    expected = dict(report, run_id=run_id)
    assert downloaded == json.loads(json.dumps(expected))
    png = Path(client.download_artifacts(run_id, "convergence.png", str(dst))).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    # artifacts live next to the store, not in ./mlruns of the working directory
    store_dir = Path(store[len("sqlite:///"):]).parent
    assert (store_dir / "artifacts" / "autotune" / run_id).is_dir()
    assert not Path("mlruns").exists() or not any(Path("mlruns").glob(f"*/{run_id}"))


def test_report_only_creates_nested_runs(store: str, tmp_path: Path) -> None:
    """A pipeline that logs nothing live still gets nested runs with curves replayed as steps."""
    report = make_report()
    with Tracker.create(True, store) as tracker:
        finish_with_report(tracker, report, tmp_path / "out")
        run_id = tracker.run_id
    assert run_id is not None
    client = client_for(store)
    kids = children_of(client, run_id)
    assert len(kids) == 2
    conv = kids["fused_conv2d_add_relu"]
    history = steps(client, conv.info.run_id, "best_latency_ms")
    assert [s for s, _ in history] == [1, 2, 3, 4, 5]
    assert [v for _, v in history] == pytest.approx([0.94, 0.51, 0.51, 0.30, 0.21])
    assert conv.data.tags["mlflow.parentRunId"] == run_id
    assert conv.data.params["op_class"] == "conv2d"
    assert json.loads((tmp_path / "out" / "report.json").read_text())["run_id"] == run_id


def test_failure_marks_runs_failed(store: str) -> None:
    with pytest.raises(RuntimeError):
        with Tracker.create(True, store) as tracker:
            tracker.start("m")
            with tracker.layer("l0"):
                tracker.log_metric("best_latency_ms", 1.0, 1)
                raise RuntimeError("boom")
    client = client_for(store)
    assert client.get_run(tracker.run_id).info.status == "FAILED"
    kid = children_of(client, tracker.run_id)["l0"]
    assert kid.info.status == "FAILED"
    assert steps(client, kid.info.run_id, "best_latency_ms") == [(1, 1.0)]


def test_a_store_that_refuses_a_write_is_one_line_with_no_mlflow_log(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """A store on a full disk printed 85 lines (MLflow's ERROR log of the database error,
    two tracebacks, the SQL's parameters) above autotune's one line. Another process
    holding the database locked is such a refusal too."""
    import sqlite3

    db = tmp_path / "mlflow.db"
    tracker = Tracker.create(True, f"sqlite:///{db.as_posix()}")
    tracker.start("m", {}, {})
    capfd.readouterr()
    holder = sqlite3.connect(db, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(AutotuneError, match="failed to .*database is locked"):
            tracker.log_params({"answer": 42})
            tracker.flush()
    finally:
        holder.rollback()
        holder.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ERROR" not in err, err
    tracker.end("FAILED")


def test_explicit_end_status_and_idempotent(store: str) -> None:
    tracker = Tracker.create(True, store)
    tracker.start("m", {"model": "m"})
    tracker.log_metric("x", 2.5)
    tracker.log_metric("skipped", None)
    tracker.log_metric("nan", math.nan)
    tracker.end("KILLED")
    tracker.end("FINISHED")
    run = client_for(store).get_run(tracker.run_id)
    assert run.info.status == "KILLED"
    assert run.data.metrics == {"x": 2.5}


def test_params_are_not_relogged(store: str) -> None:
    """MLflow rejects changing a param; the tracker keeps the first value instead of failing the tune."""
    with Tracker.create(True, store) as tracker:
        tracker.start("m", {"budget": 64})
        tracker.log_params({"budget": 128, "tuner": "auto"})
    params = client_for(store).get_run(tracker.run_id).data.params
    assert params == {"budget": "64", "tuner": "auto"}


def test_log_dict_and_log_artifact(store: str, tmp_path: Path) -> None:
    extra = tmp_path / "notes.txt"
    extra.write_text("hello")
    with Tracker.create(True, store) as tracker:
        tracker.start("m")
        tracker.log_dict({"a": 1, "bad": math.inf}, "extra/info.json")
        tracker.log_artifact(extra, "notes")
    client = client_for(store)
    dst = tmp_path / "dl"
    dst.mkdir()
    info = json.loads(Path(client.download_artifacts(tracker.run_id, "extra/info.json", str(dst))).read_text())
    assert info == {"a": 1, "bad": None}
    assert Path(client.download_artifacts(tracker.run_id, "notes/notes.txt", str(dst))).read_text() == "hello"


def test_disabled_tracker_is_noop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home" / ".autotune"))
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{(tmp_path / 'never' / 'mlflow.db').as_posix()}"
    with Tracker.create(False, uri) as tracker:
        assert tracker.enabled is False
        assert tracker.start("m", {"a": 1}, {"t": 2}) is None
        with tracker.layer("l") as nested:
            assert nested is None
            tracker.log_params({"x": 1})
            tracker.log_metric("best_latency_ms", 1.0, 1)
            tracker.log_trial(1, 0.001, 1e6)
            tracker.set_tags({"dispatch": "cold"})
            tracker.log_dict({"a": 1}, "a.json")
            tracker.log_artifact(tmp_path / "missing.txt")
        tracker.end("FAILED")
    assert tracker.run_id is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_disabled_finish_writes_only_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    paths = finish_with_report(Tracker.create(False), make_report(), tmp_path / "out")
    assert {p.parent for p in paths} == {tmp_path / "out"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_unreachable_store_is_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(AutotuneError) as info:
        Tracker.create(True, f"sqlite:///{(blocker / 'sub' / 'mlflow.db').as_posix()}")
    assert "\n" not in str(info.value) and "tracking store" in str(info.value)


@pytest.mark.parametrize("case", ["directory", "not a database", "unwritable folder"])
def test_an_sqlite_store_mlflow_cannot_open_is_refused_before_mlflow_tries(tmp_path: Path, case: str) -> None:
    """MLflow retried such a store for about 105 s before its error; said at once here,
    by autotune's own check (MLflow's message would not name the cause so)."""
    db = tmp_path / "ml.db"
    if case == "directory":
        db.mkdir()
        want = f"{db} is not a file"
    elif case == "not a database":
        db.write_text("plain text")
        want = "file is not a database"
    else:
        if not Path("/proc/self").is_dir():
            pytest.skip("needs /proc")
        db = Path("/proc/autotune-ml.db")
        want = "cannot write /proc/autotune-ml.db"
    with pytest.raises(AutotuneError) as info:
        Tracker.create(True, f"sqlite:///{db.as_posix()}")
    assert str(info.value).startswith(f"cannot open MLflow tracking store sqlite:///{db.as_posix()}: ")
    assert want in str(info.value) and "\n" not in str(info.value)
    if case == "not a database":
        assert db.read_text() == "plain text"


def test_the_experiment_is_the_arguments_then_mlflows_variable_then_autotune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLFLOW_EXPERIMENT_NAME, which MLflow itself reads, was ignored: every run went to 'autotune'."""
    uri = f"sqlite:///{(tmp_path / 'ml.db').as_posix()}"
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    names = []
    for env, given in ((None, None), ("from-env", None), ("from-env", "given")):
        if env:
            monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", env)
        with Tracker.create(True, uri, given) as tracker:
            tracker.start("r")
        names.append(client_for(uri).get_experiment(tracker.experiment_id).name)
    assert names == ["autotune", "from-env", "given"]


def test_file_store_refused_with_the_way_out_then_usable_when_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow refuses ``file:`` stores unless MLFLOW_ALLOW_FILE_STORE is set; the error
    names both ways out, and once allowed, layer runs named by TVM (its ``str``
    subclass, which the file store's YAML cannot write) are stored."""
    import tvm_ffi

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = (tmp_path / "mlruns").as_uri()
    with pytest.raises(AutotuneError) as info:
        Tracker.create(True, uri)
    message = str(info.value)
    assert "\n" not in message and "MLFLOW_ALLOW_FILE_STORE=true" in message and ".db path" in message

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    name = tvm_ffi.core.String("fused_conv2d_add_relu")  # what TVM names a function with
    assert type(name) is not str
    with Tracker.create(True, uri) as tracker:
        parent = tracker.start("resnet18")
        with tracker.layer(name, params={"tuner": "xgb"}):
            tracker.log_trial(1, 0.001)
    children = children_of(client_for(uri), parent)
    assert list(children) == ["fused_conv2d_add_relu"]
    assert children["fused_conv2d_add_relu"].data.params == {"tuner": "xgb"}


def test_unreachable_server_fails_fast(tmp_path: Path) -> None:
    import time

    t0 = time.monotonic()
    with pytest.raises(AutotuneError) as info:
        Tracker.create(True, "http://127.0.0.1:9")  # discard port: connection refused
    assert "\n" not in str(info.value)
    assert time.monotonic() - t0 < 30


def test_uri_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "ah"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == f"sqlite:///{(tmp_path / 'ah' / 'mlruns' / 'mlflow.db').as_posix()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example:5000")
    assert resolve_tracking_uri() == "http://example:5000"
    assert resolve_tracking_uri("sqlite:///x.db") == "sqlite:///x.db"
    # plain paths become sqlite (MLflow 3.17 refuses the file store)
    assert resolve_tracking_uri(str(tmp_path / "runs")) == f"sqlite:///{(tmp_path / 'runs' / 'mlflow.db').as_posix()}"
    assert resolve_tracking_uri(str(tmp_path / "t.db")) == f"sqlite:///{(tmp_path / 't.db').as_posix()}"
    # MLflow's own URIs without a scheme stay MLflow's (they became ./databricks/mlflow.db)
    assert resolve_tracking_uri("databricks") == "databricks" and resolve_tracking_uri("databricks-uc") == "databricks-uc"


def test_default_store_needs_no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "ah"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with Tracker.create(True, None) as tracker:
        tracker.start("m")
    assert (tmp_path / "ah" / "mlruns" / "mlflow.db").is_file()
    assert client_for(resolve_tracking_uri()).get_run(tracker.run_id).info.status == "FINISHED"


def test_import_does_not_load_heavy_modules() -> None:
    code = (
        "import sys, autotune.tracking, autotune.report, autotune.roofline, autotune.progress;"
        "heavy = [m for m in ('mlflow', 'matplotlib', 'rich', 'numpy') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_params_name_the_model_file_the_whole_target_and_unset_options(tmp_path: Path) -> None:
    """Two files both named model.onnx read alike ("model"); the target's num-cores and mcpu,
    which change every timing, were nowhere; an option left at None (max_layers: every
    layer) had no key, so a frame of two runs held NaN beside 3 and grouped it away."""
    report = make_report()
    report["model_source"] = "/data/a/resnet18.onnx"
    report["target"]["config"] = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    report["options"] = {"trials": 64, "seed": 0, "max_layers": None, "measure": {"repeat": 5, "rpc": None}}
    params = report_params(report)
    assert params["model"] == "resnet18" and params["model_source"] == "/data/a/resnet18.onnx"
    assert json.loads(params["target_config"]) == {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    assert params["max_layers"] == "None" and params["rpc"] == "None"
    assert params["seed"] == "0" and params["repeat"] == "5" and "trials" not in params


def test_runs_carry_filterable_tags_a_description_and_trials_used(store: str, tmp_path: Path) -> None:
    """A layer's run could not be found by model or target (only its parent had them, as
    params); the parent had no description (mlflow.note.content, the UI's "Description");
    the trials a run spent were in no number of the parent."""
    report = make_report()
    report["model_source"] = "zoo:resnet18"
    report["model_layers_changed"] = 2
    report["tunable_layers"] = 3  # --max-layers 2: the report lists two of the model's three
    with Tracker.create(True, store) as tracker:
        tracker.start("tune-resnet18", report_params(report), {"autotune.run_id": "abcdef123456"})
        with tracker.layer("fused_conv2d_add_relu", params={"tuner": "random"}):
            tracker.log_trial(1, 0.0009)
        finish_with_report(tracker, report, tmp_path / "out")
        run_id = tracker.run_id
    client = client_for(store)
    parent = client.get_run(run_id)
    tags = parent.data.tags
    assert (tags["autotune.model"], tags["autotune.target"], tags["autotune.device"]) == ("resnet18", "llvm", "Test CPU 9000")
    note = tags["mlflow.note.content"]
    assert "resnet18" in note and "llvm" in note and "12.300 ms" in note and "8.100 ms" in note and "1.52x" in note
    assert "8 of 64 trials" in note and "2 of 3 layers changed" in note
    assert parent.data.metrics["trials_used"] == 8 and parent.data.metrics["model_layers_changed"] == 2
    kids = children_of(client, run_id)
    assert set(kids) == {"fused_conv2d_add_relu", "fused_dense_add"}  # one live, one made by the report
    for kid in kids.values():
        assert kid.data.tags["autotune.model"] == "resnet18" and kid.data.tags["autotune.target"] == "llvm"
        assert "autotune.run_id" not in kid.data.tags  # `report RUN` finds the parent by it
    found = client.search_runs([parent.info.experiment_id], filter_string=(
        f"tags.`autotune.model` = 'resnet18' and tags.`mlflow.parentRunId` = '{run_id}'"))
    assert len(found) == 2


def test_a_run_started_by_the_report_alone_is_described_and_tagged(store: str, tmp_path: Path) -> None:
    """finish_with_report on a tracker not yet started (the API's path) made a run with no
    params until its end and its layer runs without the model's tags."""
    with Tracker.create(True, store) as tracker:
        finish_with_report(tracker, make_report(), tmp_path / "out")
    client = client_for(store)
    parent = client.get_run(tracker.run_id)
    assert parent.data.tags["autotune.model"] == "resnet18"
    assert "resnet18" in parent.data.tags["mlflow.note.content"]
    assert all(k.data.tags["autotune.target"] == "llvm" for k in children_of(client, tracker.run_id).values())


@pytest.fixture()
def failing_server() -> Any:
    """A tracking server that opens the experiment and creates runs, then answers every other
    request 503 (as a server behind a proxy does when it goes down mid-tune)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if "/experiments/get-by-name" in self.path:
                self._answer(200, {"experiment": {"experiment_id": "1", "name": "autotune", "lifecycle_stage": "active"}})
            else:
                self._answer(503, {})

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.endswith("/runs/create"):
                info = {"run_id": "f" * 32, "experiment_id": "1", "status": "RUNNING", "start_time": 1, "lifecycle_stage": "active"}
                self._answer(200, {"run": {"info": info, "data": {}}})
            else:
                self._answer(503, {})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_ending_after_the_store_failed_does_not_wait_out_the_retries_again(failing_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server lost mid-tune: the write that found it gone had MLflow's retries (minutes by
    default); ending the runs as FAILED then waited them out once more before the user saw
    the error. After a store failure, the end is tried once."""
    import time

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # the user's: ~4 s of backoff
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "2")
    tracker = Tracker.create(True, failing_server)
    tracker.start("m")
    t0 = time.monotonic()
    with pytest.raises(AutotuneError, match="failed to log metrics"):
        tracker.log_metric("x", 1.0, 1)
        tracker.flush()
    retried = time.monotonic() - t0
    assert retried > 3  # the user's retries were honoured for the write itself
    t0 = time.monotonic()
    with pytest.raises(AutotuneError, match="failed to end the run"):
        tracker.end("FAILED")
    assert time.monotonic() - t0 < retried / 2
