"""Tests of the tuning-history database on real SQLite files (and real processes)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from sqlalchemy import event

from autotune import history
from autotune.history import io as history_io
from autotune.history import (
    HistoryError,
    HistoryStore,
    Record,
    TargetInfo,
    WorkloadInfo,
    canonical_json,
    export_json,
    import_json,
    open_history,
    resolve_location,
)

REPO = Path(__file__).resolve().parents[1]

GPU = TargetInfo("cuda", "sm_90", "NVIDIA H100", driver_version="550.1", runtime_version="12.4", tvm_version="0.17")
CPU = TargetInfo("llvm", "x86_64", "Xeon")
CONV = WorkloadInfo(
    key="conv2d:n1:c64:h56:w56:k64:r3:s3:float32",
    batch_invariant_key="conv2d:c64:h56:w56:k64:r3:s3:float32",
    op_class="conv2d",
    descriptor={"shapes": [[1, 64, 56, 56], [64, 64, 3, 3]], "dtype": "float32", "attrs": {"strides": [1, 1]}},
    flops=2.0 * 64 * 56 * 56 * 64 * 9,
    features=(1.0, 64.0, 56.0),
)
CONV_B8 = dataclasses.replace(CONV, key="conv2d:n8:c64:h56:w56:k64:r3:s3:float32", features=())
DENSE = WorkloadInfo("dense:n1:k512:m1000", "dense:k512:m1000", "dense", {"shapes": [[1, 512]]}, 1.0e6)


def populated(path: Path | str) -> HistoryStore:
    """A store with two targets, three workloads and a handful of records of every kind."""
    store = open_history(str(path))
    for t in (GPU, CPU):
        store.register_target(t)
    for w in (CONV, CONV_B8, DENSE):
        store.register_workload(w)
    add = store.add_record
    add(workload_key=CONV.key, target_key=GPU.key, space_id="s1", config={"tile": 8}, samples=[3e-3, 2e-3, 4e-3], status="ok", run_id="r1", tuner="random")
    add(workload_key=CONV.key, target_key=GPU.key, space_id="s1", config={"tile": 16}, samples=[1e-3, 1e-3, 1e-3], status="ok", run_id="r1", tuner="random", twin=True)
    add(workload_key=CONV.key, target_key=GPU.key, space_id="s1", config={"tile": 32}, samples=[], status="build_error", error="nvcc: bad", run_id="r1")
    add(workload_key=CONV.key, target_key=GPU.key, space_id="s2", config={"tile": 4}, samples=[5e-4], status="ok", tuner="xgb", timing="queued")
    add(workload_key=CONV.key, target_key=CPU.key, space_id="s1", config={"tile": 8}, samples=[9e-3], status="ok")
    add(workload_key=DENSE.key, target_key=GPU.key, space_id="d1", config={"k": 2}, samples=[], status="timeout", error="took too long")
    return store


def record_dicts(store: HistoryStore) -> list[dict[str, Any]]:
    """Records without their database-local ids, to compare across databases."""
    out = []
    for r in store.records():
        d = dataclasses.asdict(r)
        d.pop("id")
        out.append(d)
    return out


def file_sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def edit_file(path: Path | str, sql: str) -> None:
    """Change a history file behind the store's back, as an older autotune or a hand would."""
    con = sqlite3.connect(path)
    try:
        con.execute(sql)
        con.commit()
    finally:
        con.close()


def table_counts(path: Path | str) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("targets", "workloads", "records", "runs")}
    finally:
        con.close()


# ------------------------------------------------------------------- location


def test_resolve_location_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_HISTORY", raising=False)
    monkeypatch.delenv("AUTOTUNE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_location(None) == "sqlite:///" + str(tmp_path / "home" / ".autotune" / "history.db")
    # AUTOTUNE_HOME moves the history with the rest of the state directory
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "state"))
    assert resolve_location(None) == "sqlite:///" + str(tmp_path / "state" / "history.db")
    monkeypatch.setenv("AUTOTUNE_HISTORY", str(tmp_path / "env.db"))
    assert resolve_location(None) == "sqlite:///" + str(tmp_path / "env.db")
    assert resolve_location(str(tmp_path / "arg.db")) == "sqlite:///" + str(tmp_path / "arg.db")
    monkeypatch.chdir(tmp_path)
    assert resolve_location("rel/h.db") == "sqlite:///" + str(tmp_path / "rel" / "h.db")
    assert resolve_location("postgresql://u:p@host/db") == "postgresql://u:p@host/db"
    monkeypatch.setenv("AUTOTUNE_HISTORY", "sqlite:////x/y.db")
    assert resolve_location(None) == "sqlite:////x/y.db"


def test_default_location_is_created_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_HISTORY", raising=False)
    monkeypatch.delenv("AUTOTUNE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with open_history() as store:
        assert store.location == str(tmp_path / ".autotune" / "history.db")
    assert (tmp_path / ".autotune" / "history.db").is_file()


def test_url_masks_password() -> None:
    assert history.mask_url("postgresql://me:s3cret@db.example/hist") == "postgresql://me:***@db.example/hist"


# -------------------------------------------------------------- API round trip


def test_targets_and_workloads_round_trip(tmp_path: Path) -> None:
    with open_history(tmp_path / "h.db") as store:
        gid = store.register_target(TargetInfo("cuda", "sm_90", "NVIDIA H100"))
        # Same key again: same id, and versions unknown so far get filled in.
        assert store.register_target(GPU) == gid
        assert store.register_target(GPU) == gid
        assert store.register_target(CPU) != gid
        assert store.targets() == [GPU, CPU]
        assert GPU.key == "cuda:sm_90:NVIDIA H100"

        wid = store.register_workload(CONV_B8)  # no features yet
        assert store.workloads()[0].features == ()  # read now, and kept until the table changes
        assert store.register_workload(dataclasses.replace(CONV_B8, features=(8.0, 64.0))) == wid
        assert store.workload(CONV_B8.key).features == (8.0, 64.0)
        assert store.workloads()[0].features == (8.0, 64.0)  # features filled in: read again
        # A tune's register describes the layer as this version compares layers: its
        # features replace stored ones (the batch left out since 2026-11-28) ...
        store.register_workload(dataclasses.replace(CONV_B8, features=(1.0, 64.0)))
        assert store.workload(CONV_B8.key).features == (1.0, 64.0)
        assert store.workloads()[0].features == (1.0, 64.0)  # the same length of text: read again all the same
        # ... and an import only fills in missing ones
        doc = {"format": "autotune-history", "version": 1, "targets": [], "records": [], "workloads": [
            {"key": CONV_B8.key, "batch_invariant_key": CONV_B8.batch_invariant_key, "op_class": CONV_B8.op_class,
             "descriptor": dict(CONV_B8.descriptor), "flops": CONV_B8.flops, "features": [8.0, 64.0]}]}
        import_json(store, doc)
        assert store.workload(CONV_B8.key).features == (1.0, 64.0)
        store.register_workload(dataclasses.replace(CONV_B8, features=(8.0, 64.0)))
        store.register_workload(CONV)
        store.register_workload(DENSE)
        assert store.workload(CONV.key) == CONV
        assert store.workload("nope") is None
        assert [w.key for w in store.workloads()] == [CONV_B8.key, CONV.key, DENSE.key]
        assert [w.key for w in store.workloads(op_class="dense")] == [DENSE.key]
        assert store.workloads(op_class="softmax") == []
        # another handle's (another process's) new workload is seen by this one's next read
        with open_history(tmp_path / "h.db") as other:
            other.register_workload(dataclasses.replace(DENSE, key="dense:n1:k512:m10", batch_invariant_key="dense:k512:m10"))
        assert [w.key for w in store.workloads(op_class="dense")] == [DENSE.key, "dense:n1:k512:m10"]


def test_add_record_computes_stats_and_reads_back(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        rid = store.add_record(
            workload_key=CONV.key,
            target_key=GPU.key,
            space_id="s9",
            config={"b": np.int64(2), "a": [1, 2], "c": "x"},
            samples=[np.float64(1.0), 2.0, 4.0],
            status="ok",
            run_id="r2",
            tuner="ga",
        )
        rec = store.records(space_id="s9")[0]
        assert isinstance(rec, Record)
        assert rec.id == rid
        assert rec.config == {"a": [1, 2], "b": 2, "c": "x"}
        assert rec.latency_median == 2.0
        assert rec.latency_mean == pytest.approx(7 / 3)
        assert rec.latency_std == pytest.approx(float(np.std([1.0, 2.0, 4.0])))
        assert rec.repeats == 3 and rec.samples == (1.0, 2.0, 4.0)
        assert (rec.status, rec.error, rec.verified, rec.run_id, rec.tuner) == ("ok", None, None, "r2", "ga")
        assert (rec.workload_key, rec.batch_invariant_key, rec.op_class, rec.target_key) == (
            CONV.key, CONV.batch_invariant_key, "conv2d", GPU.key)
        assert rec.created_at.endswith("+00:00")

        err = store.records(status="build_error")[0]
        assert err.latency_median is None and err.repeats == 0 and err.samples == () and err.error == "nvcc: bad"

        long_id = store.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="d1", config={}, samples=[],
                                   status="run_error", error="x" * 10000)
        assert len(store.records(status="run_error")[0].error) == history.MAX_ERROR_CHARS
        assert store.records()[-1].id == long_id


def test_sample_statistics_are_numpys_median_and_correctly_rounded_mean_and_std() -> None:
    """Worked out in Python (numpy's per record were two fifths of an import): the median
    to the bit, as a record's identity holds it; mean and std within a rounding."""
    from autotune.history.models import sample_stats

    rng = np.random.default_rng(0)
    for n in (*range(1, 12), 31, 64, 257):
        samples = rng.lognormal(-9, 1, n)
        mean, median, std, repeats = sample_stats(list(samples))
        assert (median, repeats) == (float(np.median(samples)), n)
        assert mean == pytest.approx(float(samples.mean()), rel=1e-14)
        assert std == pytest.approx(float(samples.std()), rel=1e-12, abs=1e-300)
    assert sample_stats([]) == (None, None, None, 0)
    assert sample_stats([2e-3, 2e-3]) == (2e-3, 2e-3, 0.0, 2)
    huge = sample_stats([1e200, 1e-3])  # squared deviations past float's range: OverflowError
    assert huge[0] == 5e199 and huge[2] == pytest.approx(5e199)


def test_record_filters_and_order(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        all_records = store.records()
        assert [r.id for r in all_records] == sorted(r.id for r in all_records)
        assert len(all_records) == 6
        assert len(store.records(workload_key=CONV.key)) == 5
        assert len(store.records(target_key=CPU.key)) == 1
        assert len(store.records(op_class="dense")) == 1
        assert len(store.records(batch_invariant_key=CONV.batch_invariant_key)) == 5
        assert len(store.records(status="ok")) == 4
        assert len(store.records(space_id="s2")) == 1
        assert len(store.records(run_id="r1")) == 3
        assert len(store.records(workload_key=CONV.key, target_key=GPU.key, space_id="s1")) == 3
        assert [r.id for r in store.records(limit=2)] == [all_records[0].id, all_records[1].id]
        assert store.records(workload_key="missing") == []


def test_measured_configs_for_resume(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        got = store.measured_configs(CONV.key, GPU.key, "s1")
        # Every status counts: a failed config is not measured again either.
        assert got == {canonical_json({"tile": 8}), canonical_json({"tile": 16}), canonical_json({"tile": 32})}
        assert '{"tile":8}' in got
        assert store.measured_configs(CONV.key, GPU.key, "s2") == {'{"tile":4}'}
        assert store.measured_configs(CONV.key, CPU.key, "s2") == set()


def test_add_record_rejects_bad_input(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        before = len(store.records())
        refuse_bad_records(store)
        assert len(store.records()) == before


def refuse_bad_records(store: HistoryStore) -> None:
    """Every kind of bad record is refused with a clear error."""
    base = dict(workload_key=CONV.key, target_key=GPU.key, space_id="s1", config={"t": 1}, samples=[1e-3])
    with pytest.raises(HistoryError, match="unknown workload 'nope'"):
        store.add_record(**{**base, "workload_key": "nope"}, status="ok")
    with pytest.raises(HistoryError, match="unknown target"):
        store.add_record(**{**base, "target_key": "cuda:sm_1:none"}, status="ok")
    with pytest.raises(ValueError, match="invalid record status"):
        store.add_record(**base, status="great")
    with pytest.raises(ValueError, match="at least one latency sample"):
        store.add_record(**{**base, "samples": []}, status="ok")
    with pytest.raises(ValueError):
        store.add_record(**{**base, "samples": [math.nan]}, status="ok")
    with pytest.raises(ValueError):
        store.add_record(**{**base, "config": {"t": object()}}, status="ok")
    with pytest.raises(ValueError):
        store.add_record(**{**base, "config": {"t": math.inf}}, status="ok")


def test_best_ignores_errors_and_wrong_results(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        best = store.best(CONV.key, GPU.key)
        assert best is not None and best.config == {"tile": 4} and best.latency_median == 5e-4
        assert store.best(CONV.key, GPU.key, space_id="s1").config == {"tile": 16}
        assert store.best(CONV.key, CPU.key).config == {"tile": 8}
        assert store.best(DENSE.key, GPU.key) is None  # only a timeout there
        assert store.best(CONV_B8.key, GPU.key) is None  # nothing at all

        # A build error with a tiny (bogus) sample never wins.
        store.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="s1", config={"tile": 1},
                         samples=[1e-9], status="run_error", error="crashed")
        # An ok record already known wrong never wins either.
        store.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="s1", config={"tile": 2},
                         samples=[1e-8], status="ok", verified=False)
        assert store.best(CONV.key, GPU.key, space_id="s1").config == {"tile": 16}

        # Verified wrong after the fact: the previous best drops out.
        best_s1 = store.best(CONV.key, GPU.key, space_id="s1")
        store.set_verified(best_s1.id, False, "max abs diff 3.2")
        wrong = store.records(status="wrong_result")[0]
        assert (wrong.id, wrong.verified, wrong.error) == (best_s1.id, False, "max abs diff 3.2")
        assert store.best(CONV.key, GPU.key, space_id="s1").config == {"tile": 8}


def test_set_verified(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        rec = store.records(status="ok")[0]
        store.set_verified(rec.id, True)
        again = [r for r in store.records() if r.id == rec.id][0]
        assert again.verified is True and again.status == "ok"
        assert store.best(CONV.key, CPU.key).verified is None
        store.set_verified(rec.id, False)
        again = [r for r in store.records() if r.id == rec.id][0]
        assert again.verified is False and again.status == "wrong_result" and again.error
        with pytest.raises(HistoryError, match="no record 99999"):
            store.set_verified(99999, True)


def test_summary(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        rows = store.summary()
        by_key = {(r["workload_key"], r["target_key"]): r for r in rows}
        assert set(by_key) == {(CONV.key, GPU.key), (CONV.key, CPU.key), (DENSE.key, GPU.key)}
        conv_gpu = by_key[(CONV.key, GPU.key)]
        assert conv_gpu["n_records"] == 4 and conv_gpu["n_ok"] == 3 and conv_gpu["op_class"] == "conv2d"
        assert conv_gpu["best_latency"] == 5e-4
        assert conv_gpu["best_record_id"] == store.best(CONV.key, GPU.key).id
        dense = by_key[(DENSE.key, GPU.key)]
        assert (dense["n_records"], dense["n_ok"], dense["best_latency"], dense["best_record_id"]) == (1, 0, None, None)
        assert {r["target_key"] for r in store.summary(target_key=CPU.key)} == {CPU.key}
        assert store.summary(target_key="none") == []


def test_summary_kept_between_calls_is_what_a_fresh_read_gives(tmp_path: Path) -> None:
    """summary() rows are kept and only the workloads with new records read again: after
    records added (by this handle or another), one found wrong and runs removed, each
    call gives what a handle reading it all afresh does."""
    path = tmp_path / "h.db"

    def fresh(**kwargs) -> list[dict[str, Any]]:
        with open_history(str(path), readonly=True) as other:
            return other.summary(**kwargs)

    with populated(path) as store:
        calls = ({}, {"searched_only": True}, {"target_key": GPU.key})
        for kwargs in calls:
            assert store.summary(**kwargs) == fresh(**kwargs)
        store.add_record(workload_key=DENSE.key, target_key=GPU.key, space_id="d1", config={"k": 3}, samples=[2e-4],
                         status="ok", run_id="r2")
        with open_history(str(path)) as other:  # another process's records
            other.register_workload(dataclasses.replace(DENSE, key="dense:n1:k512:m10", batch_invariant_key="dense:k512:m10"))
            other.add_record(workload_key="dense:n1:k512:m10", target_key=CPU.key, space_id="d1", config={"k": 1},
                             samples=[1e-4], status="ok", run_id="r2")
        for kwargs in calls:
            assert store.summary(**kwargs) == fresh(**kwargs)
        assert {r["workload_key"] for r in store.summary()} >= {DENSE.key, "dense:n1:k512:m10"}
        store.set_verified(store.best(CONV.key, GPU.key).id, False, "wrong")  # no row added: read again
        for kwargs in calls:
            assert store.summary(**kwargs) == fresh(**kwargs)
        store.remove_runs(["r1"])
        for kwargs in calls:
            assert store.summary(**kwargs) == fresh(**kwargs)


def test_runs(tmp_path: Path) -> None:
    check_runs(str(tmp_path / "h.db"))


def check_runs(location: str) -> None:
    """Runs start, finish, list in order, resume, and refuse what does not fit."""
    with populated(location) as store:
        store.start_run("r1", model="resnet18.onnx", target_key=GPU.key, tuner="random", params={"trials": 64})
        run = store.run("r1")
        assert run["status"] == "running" and run["params"] == {"trials": 64} and run["finished_at"] is None
        assert run["target_key"] == GPU.key and run["n_records"] == 3 and run["model"] == "resnet18.onnx"
        store.finish_run("r1", "finished", {"speedup": 1.7, "layers": 12})
        run = store.run("r1")
        assert run["status"] == "finished" and run["summary"] == {"speedup": 1.7, "layers": 12} and run["finished_at"]
        store.start_run("r2", model="bert.onnx", target_key=CPU.key, tuner="xgb", params={})
        assert [r["run_id"] for r in store.runs()] == ["r1", "r2"]
        # Restarting the same run (same model and target) resumes it.
        store.start_run("r1", model="resnet18.onnx", target_key=GPU.key, tuner="random", params={"trials": 128})
        assert store.run("r1")["status"] == "running" and store.run("r1")["finished_at"] is None
        with pytest.raises(HistoryError, match="another model"):
            store.start_run("r1", model="other.onnx", target_key=GPU.key, tuner="random", params={})
        with pytest.raises(HistoryError, match="unknown target"):
            store.start_run("r3", model="m", target_key="cuda:x:y", tuner="t", params={})
        with pytest.raises(HistoryError, match="no run"):
            store.finish_run("nope", "failed", {})
        with pytest.raises(ValueError):
            store.finish_run("r2", "exploded", {})
        assert store.run("nope") is None


def test_in_memory_store() -> None:
    with open_history("sqlite://") as store:
        store.register_target(CPU)
        store.register_workload(DENSE)
        store.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="d", config={}, samples=[1.0], status="ok")
        assert store.best(DENSE.key, CPU.key).latency_median == 1.0


# ----------------------------------------------------------------- durability


def test_persistence_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    store = populated(path)
    store.start_run("r1", model="m", target_key=GPU.key, tuner="random", params={"a": 1})
    expected = record_dicts(store)
    store.close()
    assert not (tmp_path / "h.db-wal").exists()  # last writer out checkpoints the WAL
    with open_history(path) as again:
        assert record_dicts(again) == expected
        assert again.targets() == [GPU, CPU]
        assert again.workload(CONV.key) == CONV
        assert again.run("r1")["params"] == {"a": 1}
    with open_history(path, readonly=True) as ro:
        assert record_dicts(ro) == expected


def test_open_for_writing_while_another_process_reads_a_rollback_journal_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch to WAL needs the file to itself; a reader mid-transaction must not make open fail."""
    from autotune.history import sqlite_db

    monkeypatch.setattr(sqlite_db, "WAL_SWITCH_WAIT_S", 0.2)
    path = tmp_path / "h.db"
    populated(path).close()  # the last writer out leaves the file in rollback-journal mode
    reader = sqlite3.connect(path, isolation_level=None)
    assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    reader.execute("BEGIN")
    before = reader.execute("SELECT count(*) FROM records").fetchone()[0]  # holds a SHARED lock
    try:
        store = open_history(path)
    finally:
        reader.execute("COMMIT")
        reader.close()
    with store:
        # The rollback journal stayed; writing works once the reader is gone.
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        store.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="s", config={"after": 1},
                         samples=[1e-3], status="ok")
        assert len(store.records()) == before + 1


def _run_script(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_records_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    populated(path).close()
    n = 25
    proc = _run_script(
        """
        import os, signal, sys
        from autotune.history import open_history
        path, n = sys.argv[1], int(sys.argv[2])
        store = open_history(path)
        for i in range(n):
            store.add_record(workload_key=sys.argv[3], target_key=sys.argv[4], space_id="kill",
                             config={"i": i}, samples=[1e-3 + i * 1e-6], status="ok", run_id="killed-run")
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        str(path), str(n), CONV.key, GPU.key,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    with open_history(path) as store:
        got = store.records(space_id="kill")
        assert [r.config["i"] for r in got] == list(range(n))
        assert len(store.records()) == 6 + n


WRITER = """
import sys, time, os
from autotune.history import open_history, TargetInfo, WorkloadInfo
path, tag, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
while not os.path.exists(go):
    time.sleep(0.001)
store = open_history(path)
t = TargetInfo("cuda", "sm_90", "shared")
w = WorkloadInfo("w", "w*", "dense", {"m": 1}, 1.0)
for i in range(n):
    store.register_target(t)
    store.register_workload(w)
    store.add_record(workload_key=w.key, target_key=t.key, space_id="s", config={"tag": tag, "i": i},
                     samples=[1e-3], status="ok", run_id=tag)
    store.records(run_id=tag, limit=1)
store.start_run(tag, model="m", target_key=t.key, tuner="t", params={})
store.finish_run(tag, "finished", {"n": n})
store.close()
print("done", tag)
"""


def check_two_writers(location: str, tmp_path: Path, fresh: bool, n: int) -> None:
    """Two processes write ``n`` records each into one history at once (``fresh``: both
    also create it): every record lands, once, under its own run."""
    if not fresh:
        open_history(location).close()
    go = tmp_path / "go"
    procs = [_run_script(WRITER, location, tag, str(n), str(go)) for tag in ("A", "B")]
    time.sleep(0.5)  # let both interpreters start, then release them together
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.startswith("done")
    with open_history(location) as store:
        assert len(store.targets()) == 1 and len(store.workloads()) == 1
        records = store.records()
        assert len(records) == 2 * n
        for tag in ("A", "B"):
            assert sorted(r.config["i"] for r in records if r.run_id == tag) == list(range(n))
        assert {r["run_id"]: r["n_records"] for r in store.runs()} == {"A": n, "B": n}


IMPORTER = """
import json, os, sys, time
from autotune.history import import_json, open_history
path, src, go = sys.argv[1], sys.argv[2], sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.001)
with open_history(path) as store:
    print(json.dumps(import_json(store, src)))
"""


def check_two_importers(location: str, tmp_path: Path, n: int) -> None:
    """Two processes import the same export of ``n`` records at once: one adds them all,
    the other finds every one a duplicate, and each record is stored once."""
    src = tmp_path / "export.json"
    with open_history(str(tmp_path / "source.db")) as store:
        store.register_target(GPU)
        store.register_workload(CONV)
        for i in range(n):
            store.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="s", config={"i": i},
                             samples=[1e-3 + i * 1e-6], status="ok", run_id="r")
        export_json(store, src)
    with open_history(location) as store:  # known target and workload: no insert to wait on
        store.register_target(GPU)
        store.register_workload(CONV)
    go = tmp_path / "go-import"
    procs = [_run_script(IMPORTER, location, str(src), str(go)) for _ in range(2)]
    time.sleep(0.5)
    go.touch()
    added = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        added.append(json.loads(out.strip().splitlines()[-1])["added"])
    assert sorted(added) == [0, n]
    with open_history(location) as store:
        assert sorted(r.config["i"] for r in store.records()) == list(range(n))


def test_two_processes_import_the_same_export(tmp_path: Path) -> None:
    check_two_importers(str(tmp_path / "h.db"), tmp_path, 300)


@pytest.mark.parametrize("fresh", [False, True], ids=["existing-file", "both-create-the-file"])
def test_two_processes_write_the_same_file(tmp_path: Path, fresh: bool) -> None:
    check_two_writers(str(tmp_path / "h.db"), tmp_path, fresh, 60)


def test_disk_full_rolls_back_and_reports(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    store = populated(path)
    pages = sqlite3.connect(path).execute("PRAGMA page_count").fetchone()[0]

    # SQLite reports SQLITE_FULL ("database or disk is full") once max_page_count is reached,
    # exactly as on a full disk.
    @event.listens_for(store.engine, "connect")
    def _limit(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count={pages + 2}")

    store.engine.dispose()
    written = 0
    with pytest.raises(HistoryError, match="database or disk is full") as info:
        for i in range(10000):
            store.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="full", config={"i": i},
                             samples=[1e-3] * 300, status="ok")
            written += 1
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert 0 < written < 10000
    store.close()
    with open_history(path) as again:  # the failed write left nothing behind, the others are all there
        assert [r.config["i"] for r in again.records(space_id="full")] == list(range(written))


# ------------------------------------------------------------------ export/import


def test_export_import_round_trip_and_idempotent(tmp_path: Path) -> None:
    src = populated(tmp_path / "src.db")
    src.set_verified(src.records(status="ok")[0].id, True)
    out = tmp_path / "export.json"
    assert export_json(src, out) == 6
    doc = json.loads(out.read_text())
    assert doc["format"] == "autotune-history" and doc["version"] == 1
    assert {r["workload_key"] for r in doc["records"]} == {CONV.key, DENSE.key}
    assert "workload_id" not in doc["records"][0] and "id" not in doc["records"][0]
    assert [r["twin"] for r in doc["records"]] == [False, True, False, False, False, False]
    assert [r["timing"] for r in doc["records"]] == ["launches"] * 3 + ["queued"] + ["launches"] * 2
    assert not list(tmp_path.glob(".autotune-*"))  # its temporary, renamed over the export
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # shared as any new file, not mkstemp's 0600

    with open_history(tmp_path / "dst.db") as dst:
        check_import_merges(src, dst, out)
        # a record twice in one file is one record, as in two files (the batched insert
        # checks the file against itself too)
        doc = json.loads(out.read_text())
        doc["records"].append(dict(doc["records"][-1], created_at="2030-01-01T00:00:00+00:00"))
        doc["records"].append(dict(doc["records"][-1]))
        assert import_json(dst, doc)["added"] == 1 and import_json(dst, doc)["added"] == 0
        assert "versions_differ" not in import_json(dst, doc)
        # another TVM's records go in under the versions history keeps: said, not silent
        for target in doc["targets"]:
            if target["key"] == GPU.key:
                target["tvm_version"] = "0.18"
        assert import_json(dst, doc)["versions_differ"] == [f"{GPU.key}: tvm 0.17 in history, 0.18 in <document>"]
    src.close()


def check_import_merges(src: HistoryStore, dst: HistoryStore, out: Path) -> None:
    """``out`` (``populated`` ``src``'s export) into an empty ``dst``: everything once,
    nothing on a second import, and later source records merge in."""
    # its records name a run the file does not carry (src holds none): said once, as they come
    # the workloads its records name: CONV_B8, registered and never measured, stays behind
    assert import_json(dst, out) == {"added": 6, "skipped": 0, "targets_added": 2, "workloads_added": 2, "runs_added": 0,
                                     "runs_unknown": 1}
    assert record_dicts(dst) == record_dicts(src)
    assert dst.targets() == src.targets()
    assert dst.workloads() == [w for w in src.workloads() if w.key != CONV_B8.key]
    assert import_json(dst, out) == {"added": 0, "skipped": 6, "targets_added": 0, "workloads_added": 0, "runs_added": 0}
    assert record_dicts(dst) == record_dicts(src)
    # New records on the source side merge in; old ones are still skipped.
    src.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="d1", config={"k": 4}, samples=[2e-3], status="ok")
    buf = io.StringIO()
    export_json(src, buf)
    buf.seek(0)
    assert import_json(dst, buf)["added"] == 1
    assert record_dicts(dst) == record_dicts(src)


def test_runs_travel_with_their_records(tmp_path: Path, capsys) -> None:
    """An export carries the runs (all of them, or a filtered export's records' runs), and
    an import adds the ones history lacks: imported history listed no runs, and
    ``history rm`` pointed to ``history runs`` for ids it could not show. A file with no
    runs (written before) still imports; a malformed run is refused like a record."""
    from autotune.cli import main

    src = populated(tmp_path / "src.db")
    src.start_run("r1", model="resnet18", target_key=GPU.key, tuner="random", params={"trials": 3})
    src.finish_run("r1", "finished", {"layers": 1})
    src.start_run("r2", model="dense", target_key=CPU.key, tuner="xgb", params={})
    out = tmp_path / "export.json"
    export_json(src, out)
    assert [r["run_id"] for r in json.loads(out.read_text())["runs"]] == ["r1", "r2"]
    buf = io.StringIO()
    export_json(src, buf, workload_key=CONV.key, target_key=GPU.key)
    assert [r["run_id"] for r in json.loads(buf.getvalue())["runs"]] == ["r1"]  # the one its records name
    with open_history(tmp_path / "dst.db") as dst:
        assert import_json(dst, out)["runs_added"] == 2
        assert [{k: v for k, v in r.items() if k not in ("n_records", "status", "summary")} for r in dst.runs()] == \
               [{k: v for k, v in r.items() if k not in ("n_records", "status", "summary")} for r in src.runs()]
        assert dst.run("r1")["status"] == "finished" and dst.run("r1")["summary"] == {"layers": 1}
        assert [r["n_records"] for r in dst.runs()] == [3, 0]
        assert import_json(dst, out)["runs_added"] == 0
    src.close()
    assert main(["history", "runs", "--history", str(tmp_path / "dst.db")]) == 0
    assert "resnet18" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    del doc["runs"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with open_history(tmp_path / "old.db") as old:
        counts = import_json(old, tmp_path / "old.json")
        assert counts["added"] == 6 and old.runs() == []
        assert counts["runs_unknown"] == 1  # r1's records came, r1 did not: said, not silent
    capsys.readouterr()
    assert main(["history", "import", str(tmp_path / "old.json"), "--history", str(tmp_path / "old2.db")]) == 0
    said = capsys.readouterr().out
    assert "imported 6 records" in said and "note: its records name 1 run neither" in said and "before 2026-11-27" in said
    with open_history(tmp_path / "old.db") as old:
        assert "runs_unknown" not in import_json(old, out)  # the full export brings r1 along
    # a run exported while it ran is killed here (as 'running' no `history rm` could remove
    # it: its host is another); exported again once it ended, it takes its final state
    assert json.loads(out.read_text())["runs"][1]["status"] == "running"
    with open_history(tmp_path / "dst.db") as dst:
        r2 = dst.run("r2")
        assert r2["status"] == "killed" and r2["summary"]["reason"].startswith("exported while it was running")
        assert [r["run_id"] for r in dst.remove_runs(["r2"], dry_run=True)] == ["r2"]
    with open_history(tmp_path / "src.db") as again:
        again.finish_run("r2", "finished", {"layers": 2})
        export_json(again, out)
    with open_history(tmp_path / "dst.db") as dst:
        assert import_json(dst, out)["runs_added"] == 0
        assert dst.run("r2")["status"] == "finished" and dst.run("r2")["summary"] == {"layers": 2}
        assert dst.run("r1")["summary"] == {"layers": 1}
    for mutate, message in ((_set("runs", 0, "status", "done"), r"runs\[0\]\.status: 'done' is not one of"),
                            (_set("runs", 0, "tuner", "x" * 129), r"runs\[0\]\.tuner: longer than 128 characters"),
                            (_set("runs", 1, "started_at", "noon"), r"runs\[1\]\.started_at: 'noon' is not an ISO-8601"),
                            (_set("runs", 0, "target_key", "cuda:sm_1:ghost"), r"runs\[0\]: .*unknown target")):
        bad = json.loads(out.read_text())
        mutate(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with open_history(tmp_path / "bad.db") as store, pytest.raises(HistoryError, match=message):
            import_json(store, tmp_path / "bad.json")
        with open_history(tmp_path / "bad.db") as store:
            assert store.records() == [] and store.runs() == []


def test_export_refuses_to_overwrite_a_database(tmp_path: Path) -> None:
    """``history export --history h.db h.db`` replaced the database with its JSON; a
    missing folder on the way is made, as ``tune --out`` makes its own."""
    from autotune.cli import main

    populated(tmp_path / "h.db").close()
    populated(tmp_path / "other.db").close()
    for victim in ("h.db", "other.db"):
        before = file_sha(tmp_path / victim)
        with open_history(tmp_path / "h.db", readonly=True) as store, pytest.raises(HistoryError, match="it is a SQLite database"):
            export_json(store, tmp_path / victim)
        assert file_sha(tmp_path / victim) == before
    assert main(["history", "export", "--history", str(tmp_path / "h.db"), str(tmp_path / "new" / "dir" / "e.json")]) == 0
    assert len(json.loads((tmp_path / "new" / "dir" / "e.json").read_text())["records"]) == 6


def test_filtered_export(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        buf = io.StringIO()
        assert export_json(store, buf, workload_key=CONV.key, target_key=GPU.key) == 4
        doc = json.loads(buf.getvalue())
        assert [w["key"] for w in doc["workloads"]] == [CONV.key]
        assert [t["key"] for t in doc["targets"]] == [GPU.key]
        assert {(r["workload_key"], r["target_key"]) for r in doc["records"]} == {(CONV.key, GPU.key)}


def test_has_records_leaves_out_the_runs_named(tmp_path: Path) -> None:
    with open_history(tmp_path / "empty.db") as store:
        store.register_target(CPU)
        store.register_workload(CONV)  # registered, never measured: nothing to draw on
        assert not store.has_records()
    with populated(tmp_path / "h.db") as store:  # records of run r1, and four of no run
        assert store.has_records() and store.has_records(excluding_runs=["r1"])
        edit = sqlite3.connect(tmp_path / "h.db")  # now run r1's alone
        edit.execute("DELETE FROM records WHERE run_id IS NULL")
        edit.commit()
        edit.close()
        assert store.has_records() and not store.has_records(excluding_runs=["r1", "r2"])


def test_the_last_records_and_their_count_come_from_the_database(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        every = store.records(workload_key=CONV.key, target_key=GPU.key)
        assert [r.id for r in store.records(workload_key=CONV.key, target_key=GPU.key, last=2)] == [r.id for r in every[-2:]]
        assert store.records(workload_key=CONV.key, last=100) == store.records(workload_key=CONV.key)
        assert store.count_records(workload_key=CONV.key, target_key=GPU.key) == len(every) == 4
        assert store.count_records(workload_key=CONV.key, status="ok") == 4
        assert store.count_records(timing="queued") == 1 and store.count_records(run_id="nobody") == 0


def test_records_read_a_page_at_a_time_are_the_records(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:
        for page in (1, 2, 5, 100):
            assert list(store.iter_records(page=page)) == store.records()
            assert list(store.iter_records(page=page, workload_key=CONV.key, timing="launches")) == \
                store.records(workload_key=CONV.key, timing="launches")


def test_a_streamed_export_is_the_text_one_dump_of_the_document_wrote(tmp_path: Path) -> None:
    """Exports are written as records are read; the text stays what ``json.dumps(document,
    indent=1, sort_keys=True)`` wrote, so an export of the same history is the same bytes."""
    with populated(tmp_path / "h.db") as store:
        for filters in ({}, {"workload_key": CONV.key}, {"target_key": CPU.key}, {"workload_key": "nothing-here"}):
            buf = io.StringIO()
            export_json(store, buf, **filters)
            text = buf.getvalue()
            assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
        export_json(store, tmp_path / "e.json.gz")
        assert (tmp_path / "e.json.gz").read_bytes() == gzip.compress(text_of(store).encode(), mtime=0)


def text_of(store: HistoryStore) -> str:
    buf = io.StringIO()
    export_json(store, buf)
    return buf.getvalue()


def test_run_touched_names_only_the_workloads_a_run_wrote(tmp_path: Path) -> None:
    with populated(tmp_path / "h.db") as store:  # run r1 wrote CONV's records alone
        assert store.run_touched("r1", {CONV.key, "elsewhere"})
        assert not store.run_touched("r1", {DENSE.key, CONV_B8.key})
        assert not store.run_touched("r2", {CONV.key})
        assert not store.run_touched("r1", set())


def test_an_export_after_a_run_is_removed_carries_none_of_its_workloads(tmp_path: Path) -> None:
    """``history rm`` leaves workloads in history (a tune running meanwhile may be about
    to measure them); an export after it listed the removed run's shapes beside no
    records. It carries the workloads and targets its records name."""
    with populated(tmp_path / "h.db") as store:
        store.start_run("r9", model="m", target_key=CPU.key, tuner="auto", params={})
        store.add_record(workload_key=CONV_B8.key, target_key=CPU.key, space_id="s1", config={"tile": 2}, samples=[1e-3],
                         status="ok", run_id="r9")
        store.finish_run("r9", "finished", {})
        buf = io.StringIO()
        export_json(store, buf)
        assert CONV_B8.key in [w["key"] for w in json.loads(buf.getvalue())["workloads"]]
        store.remove_runs(["r9"])
        assert CONV_B8.key in [w.key for w in store.workloads()]  # left in history
        buf = io.StringIO()
        assert export_json(store, buf) == 6
        doc = json.loads(buf.getvalue())
        assert [w["key"] for w in doc["workloads"]] == [CONV.key, DENSE.key]
        assert [t["key"] for t in doc["targets"]] == [GPU.key, CPU.key]


class _RemovesRunMidway:
    """A text stream that, once the export has written its first record, has another
    connection remove run r1 (``history rm`` in another process)."""

    def __init__(self, location: Path | str) -> None:
        self.location, self.parts, self.removed = location, [], False

    def write(self, text: str) -> None:
        self.parts.append(text)
        if not self.removed and '"config"' in text:
            with open_history(str(self.location)) as other:
                assert other.remove_runs(["r1"])
            self.removed = True


def test_an_export_clears_what_a_killed_export_left_beside_it(tmp_path: Path) -> None:
    """From Python as from the CLI: a process killed mid-export left its hidden half file
    for good, unless a later command wrote to the folder."""
    from autotune.history.location import ORPHAN_AGE_S

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    left = tmp_path / f".autotune-{gone}-0123456789abcdef.json.tmp"
    left.write_text('{"format": ')
    old = time.time() - ORPHAN_AGE_S - 5
    os.utime(left, (old, old))
    with populated(tmp_path / "h.db") as store:
        export_json(store, tmp_path / "e.json")
    assert not left.exists() and (tmp_path / "e.json").exists()


def populated_with_run(path: Path | str) -> HistoryStore:
    """:func:`populated`, its records of r1 written by a run of that name."""
    store = populated(path)
    store.start_run("r1", model="m", target_key=GPU.key, tuner="random", params={})
    store.finish_run("r1", "finished", {})
    return store


def test_an_export_is_one_state_of_history_while_another_process_removes_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records are read a page at a time; a `history rm` between two pages wrote records
    of a run the export then did not list, and the import of it was refused."""
    monkeypatch.setattr(history_io, "EXPORT_PAGE", 1)
    check_export_is_one_state(str(tmp_path / "h.db"))


def check_export_is_one_state(location: str) -> None:
    with populated_with_run(location) as store:
        before = text_of(store)
        assert '"run_id": "r1"' in before
        stream = _RemovesRunMidway(location)
        assert export_json(store, stream) == 6
        assert stream.removed and "".join(stream.parts) == before  # the state it began in
        assert len(store.records()) == 3  # and the removal went through meanwhile


def test_an_export_of_a_rollback_journal_file_that_changes_midway_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where one long read would lock writers out (no WAL), pages are read apart: a run
    removed between them is an error, not an export that names a run it leaves out."""
    monkeypatch.setattr(history_io, "EXPORT_PAGE", 1)
    populated_with_run(tmp_path / "h.db").close()  # the last writer out leaves a rollback journal
    with open_history(str(tmp_path / "h.db"), readonly=True) as store:
        with store.snapshot() as held:
            assert not held
        stream = _RemovesRunMidway(tmp_path / "h.db")
        with pytest.raises(HistoryError, match=r"run r1 was removed after some of its records were written\); export again"):
            export_json(store, stream)
        assert stream.removed


def test_an_export_to_a_file_is_written_again_when_a_run_is_removed_midway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file, unlike standard output, can be written again: the export is, of the state after the removal."""
    monkeypatch.setattr(history_io, "EXPORT_PAGE", 1)
    populated_with_run(tmp_path / "h.db").close()
    to_json, calls = history_io._record_to_json, []

    def removing_r1_at_the_first_record(rec: Any) -> dict[str, Any]:
        calls.append(rec.id)
        if len(calls) == 1:
            with open_history(str(tmp_path / "h.db")) as other:
                assert other.remove_runs(["r1"])
        return to_json(rec)

    monkeypatch.setattr(history_io, "_record_to_json", removing_r1_at_the_first_record)
    with open_history(str(tmp_path / "h.db"), readonly=True) as store:
        assert export_json(store, tmp_path / "e.json") == 3
        assert (tmp_path / "e.json").read_text() == text_of(store)
    assert '"run_id": "r1"' not in (tmp_path / "e.json").read_text()


def _valid_doc(tmp_path: Path) -> dict[str, Any]:
    buf = io.StringIO()
    with populated(tmp_path / "valid-src.db") as store:
        export_json(store, buf)
    return json.loads(buf.getvalue())


def _drop(key: str) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        del doc["records"][2][key]
    return mutate


def _set(section: str, index: int, key: str, value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        doc[section][index][key] = value
    return mutate


BAD_IMPORTS: dict[str, tuple[Callable[[dict], None], str]] = {
    "wrong-format": (lambda d: d.update(format="something-else"), "not an autotune history export"),
    "wrong-version": (lambda d: d.update(version=2), "unsupported version 2"),
    "version-as-bool": (lambda d: d.update(version=True), "unsupported version"),
    "records-not-list": (lambda d: d.update(records={"a": 1}), "records: expected list"),
    "no-records-key": (lambda d: d.pop("records"), "missing field 'records'"),
    "record-not-object": (lambda d: d["records"].append([1, 2]), r"records\[6\]: expected an object"),
    "missing-config": (_drop("config"), r"records\[2\]: missing field 'config'"),
    "missing-created-at": (_drop("created_at"), "missing field 'created_at'"),
    "bad-status": (_set("records", 3, "status", "fast"), r"records\[3\]\.status: 'fast' is not one of"),
    "config-not-dict": (_set("records", 1, "config", [1, 2]), r"records\[1\]\.config: expected dict"),
    "samples-strings": (_set("records", 0, "samples", ["1"]), r"records\[0\]\.samples\[0\]"),
    "negative-sample": (_set("records", 0, "samples", [-1.0]), ">= 0"),
    "median-bool": (_set("records", 0, "latency_median", True), "latency_median"),
    # the fastest record is the one reused: a latency below zero, or other than its samples say, would win
    "median-negative": (_set("records", 0, "latency_median", -0.5), r"records\[0\]\.latency_median: must be >= 0"),
    "mean-negative": (_set("records", 2, "latency_mean", -1.0), r"records\[2\]\.latency_mean: must be >= 0"),
    "median-not-the-samples": (_set("records", 0, "latency_median", 1e-6), "is not what its samples give"),
    "ok-median-zero": (lambda d: d["records"][0].update(samples=[], latency_median=0.0, latency_mean=0.0, latency_std=0.0),
                       r"records\[0\]\.latency_median: an 'ok' record's latency must be > 0"),
    "verified-str": (_set("records", 0, "verified", "yes"), "verified"),
    "twin-null": (_set("records", 1, "twin", None), r"records\[1\]\.twin: expected bool"),
    "timing-unknown": (_set("records", 1, "timing", "ncu"), r"records\[1\]\.timing: 'ncu' is not one of launches, queued"),
    # `history best` said "timed queued" of a CPU record, which no tune makes
    "timing-queued-on-a-cpu": (_set("records", 4, "timing", "queued"),
                               r"records\[4\]\.timing: 'queued' times CUDA kernels, and the record is of llvm:x86_64:Xeon"),
    "bad-timestamp": (_set("records", 0, "created_at", "yesterday"), "ISO-8601"),
    "unknown-workload": (_set("records", 5, "workload_key", "ghost"), r"records\[5\].*unknown workload 'ghost'"),
    "target-key-mismatch": (_set("targets", 0, "key", "cuda:x:y"), r"targets\[0\]\.key"),
    "flops-string": (_set("workloads", 1, "flops", "many"), r"workloads\[1\]\.flops"),
    "top-level-list": (lambda d: (d.clear()), "not an autotune history export"),
    # a hand-edited file: each stopped the import in a traceback, or was taken
    "repeats-past-int64": (_set("records", 0, "repeats", 10**30), r"records\[0\]\.repeats: must be >= 0 and at most"),
    "repeats-not-the-samples": (_set("records", 0, "repeats", 0), r"records\[0\]\.repeats: 0 is not what its samples give"),
    "sample-past-a-float": (_set("records", 0, "samples", [10**400]), r"records\[0\]\.samples\[0\]: expected a finite number"),
    "median-past-a-float": (_set("records", 0, "latency_median", 10**400), r"records\[0\]\.latency_median: must be a finite"),
    "sample-of-ages": (_set("records", 0, "samples", [1e308]), "is none a measurement gives"),
    "impossibly-fast": (lambda d: d["records"][0].update(samples=[1e-30], latency_median=1e-30, latency_mean=1e-30,
                                                         latency_std=0.0, repeats=1), "is no kernel's time"),
}


def test_a_bad_import_through_the_cli_leaves_every_byte_of_the_history_file(tmp_path: Path, capsys) -> None:
    """Opening a history for writing rewrites its header (WAL on and off): a file that
    would be refused anyway is checked before, so not one byte of history changes."""
    from autotune.cli import main

    path = tmp_path / "h.db"
    populated(path).close()
    doc = _valid_doc(tmp_path)
    doc["records"][0]["latency_median"] = -0.5
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    before = file_sha(path)
    assert main(["history", "import", str(tmp_path / "bad.json"), "--history", str(path)]) == 2
    assert "latency_median: must be >= 0" in capsys.readouterr().err
    assert file_sha(path) == before
    # a record of a workload neither the file nor history holds: refused inside the
    # import's transaction, rolled back, but the file's bytes had changed
    doc = _valid_doc(tmp_path)
    doc["records"][5]["workload_key"] = "ghost"
    doc["workloads"] = [w for w in doc["workloads"] if w["key"] != DENSE.key]
    doc["records"][0]["workload_key"] = DENSE.key  # in history, not in the file: fine
    (tmp_path / "ghost.json").write_text(json.dumps(doc))
    assert main(["history", "import", str(tmp_path / "ghost.json"), "--history", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("records[5]: unknown workload 'ghost': neither the file nor history at "
                        f"{path} has it; nothing was imported"), err
    assert file_sha(path) == before
    assert main(["history", "import", str(tmp_path / "ghost.json"), "--history", str(tmp_path / "new.db")]) == 2
    assert "neither the file nor history (not created yet) has it" in capsys.readouterr().err
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("case", sorted(BAD_IMPORTS))
def test_malformed_import_rejected_with_nothing_written(tmp_path: Path, case: str) -> None:
    mutate, message = BAD_IMPORTS[case]
    doc = _valid_doc(tmp_path)
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    # The target store already has one of the targets, and a record of its own.
    path = tmp_path / "dst.db"
    with open_history(path) as dst:
        dst.register_target(CPU)
        dst.register_workload(DENSE)
        dst.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="x", config={}, samples=[1.0], status="ok")
        before = table_counts(path)
        with pytest.raises(HistoryError, match=message) as info:
            import_json(dst, bad)
        assert "\n" not in str(info.value)
        assert table_counts(path) == before


def test_import_rejects_non_json(tmp_path: Path) -> None:
    path = tmp_path / "dst.db"
    with open_history(path) as dst:
        for text in ("this is not json", '{"format": "autotune-history", "version": 1, "targets": [], "workloads": [], "records": [NaN]}', ""):
            bad = tmp_path / "bad.json"
            bad.write_text(text)
            with pytest.raises(HistoryError, match="not valid JSON"):
                import_json(dst, bad)
        with pytest.raises(HistoryError, match="cannot read"):
            import_json(dst, tmp_path / "missing.json")
        deep = tmp_path / "deep.json"
        deep.write_text("[" * 100_000 + "]" * 100_000)
        with pytest.raises(HistoryError, match="nested too deep"):
            import_json(dst, deep)
        assert table_counts(path) == {"targets": 0, "workloads": 0, "records": 0, "runs": 0}


# ------------------------------------------------------------ location errors


def test_text_file_at_history_path_is_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(b"my precious notes\n" * 100)
    digest = file_sha(path)
    for kwargs in ({}, {"readonly": True}, {"create": False}):
        with pytest.raises(HistoryError, match="not a SQLite database") as info:
            open_history(path, **kwargs)
        assert str(path) in str(info.value)
    assert file_sha(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.db"]


def test_foreign_sqlite_database_is_not_modified(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO accounts (name) VALUES ('x')")
    con.commit()
    con.close()
    digest = file_sha(path)
    with pytest.raises(HistoryError, match="not an autotune history"):
        open_history(path)
    assert file_sha(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_a_latency_below_zero_already_in_a_file_is_never_the_best(tmp_path: Path) -> None:
    """Imports took any latency before 2026-11-27; one at or below zero must not win."""
    path = tmp_path / "h.db"
    populated(path).close()
    edit_file(path, "UPDATE records SET latency_median = -0.5 WHERE id = 1")
    with open_history(path, readonly=True) as store:
        best = store.best(CONV.key, GPU.key)
        assert best is not None and best.id == 4 and best.latency_median == 5e-4
        assert [r.id for r in store.records(workload_key=CONV.key, target_key=GPU.key) if r.ok] == [2, 4]


def test_a_file_from_before_twins_were_marked(tmp_path: Path) -> None:
    """History files written before records carried ``twin`` stay readable read-only
    as they are, and gain the column when opened for writing; an export that lacks the
    field imports as not twins."""
    path = tmp_path / "old.db"
    populated(path).close()
    edit_file(path, "ALTER TABLE records DROP COLUMN twin")
    before = file_sha(path)
    with open_history(path, readonly=True) as store:
        assert len(store.records()) == 6 and not any(r.twin for r in store.records())
    assert file_sha(path) == before
    with open_history(path) as store:
        store.add_record(workload_key=DENSE.key, target_key=GPU.key, space_id="d1", config={"k": 8}, samples=[1e-3],
                         status="ok", twin=True)
        assert [r.twin for r in store.records(workload_key=DENSE.key)] == [False, True]
    con = sqlite3.connect(path)
    assert "twin" in {row[1] for row in con.execute("PRAGMA table_info(records)")}
    con.close()
    assert not any(r.twin for r in _imported_without(tmp_path, "twin"))


def test_a_file_from_before_the_rejected_index_gains_it_and_summaries_see_rejections(tmp_path: Path) -> None:
    """The records a check found wrong are counted through a partial index before every
    summary (the count scanned every row); a file without it gains it when opened for
    writing, is left as it is read-only, and its summaries still see a rejection."""
    path = tmp_path / "old.db"
    populated(path).close()
    edit_file(path, "DROP INDEX ix_records_rejected")
    before = file_sha(path)

    def indexes() -> set[str]:
        con = sqlite3.connect(path)
        try:
            return {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        finally:
            con.close()

    with open_history(path, readonly=True) as store:
        assert store.summary()
    assert file_sha(path) == before and "ix_records_rejected" not in indexes()
    with open_history(path) as store:
        first = {row["workload_key"]: row for row in store.summary(GPU.key)}
        assert first[CONV.key]["best_latency"] == 5e-4
        store.set_verified(4, False, "wrong output")  # nothing added: only the rejection changes
        assert {row["workload_key"]: row for row in store.summary(GPU.key)}[CONV.key]["best_latency"] == 1e-3
    assert "ix_records_rejected" in indexes()
    con = sqlite3.connect(path)
    plan = " ".join(str(row) for row in con.execute("EXPLAIN QUERY PLAN SELECT count(*) FROM records WHERE verified = 0"))
    con.close()
    assert "ix_records_rejected" in plan


def test_records_say_how_they_were_timed_and_older_files_read_as_launches(tmp_path: Path) -> None:
    """A few-microsecond CUDA kernel reads lower timed queued than launched back to back,
    so each record says which, and a layer's figures can be set beside ones timed alike.
    Files from before the column read as launches (all their records were), read-only as
    they are; an export without the field imports as launches."""
    with populated(tmp_path / "h.db") as store:
        assert [r.timing for r in store.records()] == ["launches"] * 3 + ["queued"] + ["launches"] * 2
        assert [r.id for r in store.records(timing="queued")] == [4]
        assert [r.id for r in store.records(workload_key=CONV.key, target_key=GPU.key, timing="launches")] == [1, 2, 3]
        with pytest.raises(ValueError, match="invalid record timing 'ncu'"):
            store.records(timing="ncu")
        with pytest.raises(ValueError, match="invalid record timing 'ncu'"):
            store.add_record(workload_key=DENSE.key, target_key=GPU.key, space_id="d1", config={"k": 9}, samples=[1e-3],
                             status="ok", timing="ncu")
        assert len(store.records()) == 6  # the refused one wrote nothing
    con = sqlite3.connect(tmp_path / "h.db")  # launches stored as NULL: what an older autotune writes and reads
    assert [row[0] for row in con.execute("SELECT timing FROM records ORDER BY id")] == [None, None, None, "queued", None, None]
    con.close()

    path = tmp_path / "old.db"
    populated(path).close()
    edit_file(path, "ALTER TABLE records DROP COLUMN timing")
    before = file_sha(path)
    with open_history(path, readonly=True) as store:
        assert {r.timing for r in store.records()} == {"launches"}
        assert store.records(timing="queued") == [] and len(store.records(timing="launches")) == 6
    assert file_sha(path) == before
    with open_history(path) as store:  # opened for writing: the column is added
        store.add_record(workload_key=DENSE.key, target_key=GPU.key, space_id="d1", config={"k": 8}, samples=[1e-3],
                         status="ok", timing="queued")
        assert [r.timing for r in store.records(workload_key=DENSE.key)] == ["launches", "queued"]
    assert {r.timing for r in _imported_without(tmp_path, "timing")} == {"launches"}
    (tmp_path / "nulls").mkdir()
    doc = _valid_doc(tmp_path / "nulls")  # null, as the database keeps it, is launches too
    for rec in doc["records"]:
        rec["timing"] = None if rec["timing"] == "launches" else rec["timing"]
    with open_history(tmp_path / "nulls.db") as dst:
        assert import_json(dst, doc)["added"] == 6
        assert [r.timing for r in dst.records()] == ["launches"] * 3 + ["queued"] + ["launches"] * 2


def _imported_without(tmp_path: Path, field: str) -> list[Any]:
    """The records of an export whose records lack ``field`` (as files written before it
    was added), imported into a fresh history."""
    doc = _valid_doc(tmp_path)
    for rec in doc["records"]:
        del rec[field]
    (tmp_path / f"without-{field}.json").write_text(json.dumps(doc))
    with open_history(tmp_path / f"without-{field}.db") as dst:
        assert import_json(dst, tmp_path / f"without-{field}.json")["added"] == 6
        return dst.records()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    open_history(path).close()
    edit_file(path, "UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(HistoryError, match="newer"):
        open_history(path)


def test_directory_at_history_path(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="is a directory"):
        open_history(tmp_path)


def test_parent_that_is_a_file_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    for target in (blocker / "history.db", blocker / "sub" / "deeper" / "history.db"):
        with pytest.raises(HistoryError, match="is not a directory") as info:
            open_history(target)
        assert str(target) in str(info.value)
    assert blocker.read_text() == "not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_missing_parents_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c" / "history.db"
    with open_history(path) as store:
        store.register_target(CPU)
    assert path.is_file()


def test_failed_open_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: HistoryStore, **_: Any) -> None:
        raise HistoryError("simulated failure while creating tables")

    monkeypatch.setattr(HistoryStore, "_init_schema", boom)
    with pytest.raises(HistoryError, match="simulated"):
        open_history(tmp_path / "new" / "dirs" / "history.db")
    assert list(tmp_path.iterdir()) == []


def test_readonly_missing_file_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "history.db"
    with pytest.raises(HistoryError, match="no history at") as info:
        open_history(target, readonly=True)
    assert str(target) in str(info.value)
    with pytest.raises(HistoryError, match="no history at"):
        open_history(target, create=False)
    assert list(tmp_path.iterdir()) == []


def test_readonly_store_refuses_writes_and_leaves_no_files(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    populated(path).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    digest = file_sha(path)
    with open_history(path, readonly=True) as ro:
        assert len(ro.records()) == 6 and ro.summary() and ro.runs() == []
        with pytest.raises(HistoryError, match="read-only"):
            ro.register_target(TargetInfo("x", "y", "z"))
        with pytest.raises(HistoryError, match="read-only"):
            ro.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="s", config={}, samples=[], status="timeout")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert file_sha(path) == digest


def test_empty_readonly_file_is_not_a_history(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    path.touch()
    with pytest.raises(HistoryError, match="no history"):
        open_history(path, readonly=True)
    assert path.read_bytes() == b""


def as_unprivileged(fn: Callable[[], None]) -> str:
    """Run ``fn`` without root's permission bypass; returns "OK" or "<ExcType>: message".

    As root, a forked child drops to uid/gid 65534 (modules are already loaded, so it
    needs no access to the interpreter's files); otherwise it runs in-process.
    """

    def call() -> str:
        try:
            fn()
        except HistoryError as exc:
            return f"HistoryError: {exc}"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as text
            return f"{type(exc).__name__}: {exc}"
        return "OK"

    if os.geteuid() != 0:
        return call()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        result = "child failed"
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            result = call()
        finally:
            os.write(write_fd, result.encode())
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


@pytest.fixture
def shared_dir() -> Any:
    """A directory owned by us, mode 755, outside pytest's private tmp (which is 700)."""
    d = Path(tempfile.mkdtemp(prefix="history-perm-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _seed(path: Path) -> None:
    with open_history(path) as store:
        store.register_target(CPU)
        store.register_workload(DENSE)
        store.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="d", config={}, samples=[1.0], status="ok")


def test_unwritable_directory_cannot_hold_new_history(shared_dir: Path) -> None:
    locked = shared_dir / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    result = as_unprivileged(lambda: open_history(locked / "history.db").close())
    assert result.startswith("HistoryError: cannot create history at"), result
    assert "not writable" in result and str(locked) in result
    assert list(locked.iterdir()) == []


def test_readonly_file_cannot_be_opened_for_writing(shared_dir: Path) -> None:
    path = shared_dir / "history.db"
    _seed(path)
    path.chmod(0o444)
    digest = file_sha(path)
    result = as_unprivileged(lambda: open_history(path).close())
    assert result.startswith("HistoryError:") and "read-only" in result and str(path) in result, result

    # Reading it is fine, and changes nothing.
    def read() -> None:
        with open_history(path, readonly=True) as ro:
            assert len(ro.records()) == 1

    assert as_unprivileged(read) == "OK"
    assert file_sha(path) == digest
    assert sorted(p.name for p in shared_dir.iterdir()) == ["history.db"]


def test_writable_file_in_unwritable_directory(shared_dir: Path) -> None:
    path = shared_dir / "history.db"
    _seed(path)
    path.chmod(0o666)  # the file is writable, but SQLite's journal files could not be created
    result = as_unprivileged(lambda: open_history(path).close())
    assert result.startswith("HistoryError:") and f"directory {shared_dir} is not writable" in result, result


def test_readonly_wal_database_in_unwritable_directory(shared_dir: Path) -> None:
    path = shared_dir / "history.db"
    _seed(path)
    con = sqlite3.connect(path)  # leave the file in WAL mode with no -shm, as after a crash + cleanup
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    assert not Path(str(path) + "-shm").exists()

    def read() -> None:
        with open_history(path, readonly=True) as ro:
            assert [r.latency_median for r in ro.records()] == [1.0]

    assert as_unprivileged(read) == "OK"


def test_unknown_dialect() -> None:
    with pytest.raises(HistoryError, match="unknown database type 'nosuchdb'"):
        open_history("nosuchdb://host/db")


def test_unreachable_postgres_is_one_line_without_the_password() -> None:
    """Nothing listens on port 1; the connect timeout (CONNECT_TIMEOUT_S) bounds the wait."""
    with pytest.raises(HistoryError) as info:
        open_history("postgresql://nobody:hunter2@127.0.0.1:1/x")
    message = str(info.value)
    assert "127.0.0.1:1" in message and "hunter2" not in message and "\n" not in message
    # Either the driver is missing or the server is unreachable: both are named.
    assert "not installed" in message or "cannot connect" in message


def test_a_gz_export_is_gzip_and_imports_back(tmp_path: Path) -> None:
    """``history export x.json.gz`` wrote plain JSON under a gzip name, and a gzip file
    imported read "'utf-8' codec can't decode byte 0x8b"."""
    import gzip

    with populated(tmp_path / "h.db") as store:
        assert export_json(store, tmp_path / "e.json.gz") == 6
    data = (tmp_path / "e.json.gz").read_bytes()
    assert data[:2] == b"\x1f\x8b" and json.loads(gzip.decompress(data))["format"] == "autotune-history"
    with open_history(tmp_path / "fresh.db") as fresh:
        assert import_json(fresh, tmp_path / "e.json.gz")["added"] == 6
    # parsed already, with a byte-order mark, as an editor may leave one
    doc = json.loads(gzip.decompress(data))
    with open_history(tmp_path / "fresh2.db") as fresh:
        assert import_json(fresh, doc)["added"] == 6
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + gzip.decompress(data))
    with open_history(tmp_path / "fresh3.db") as fresh:
        assert import_json(fresh, tmp_path / "bom.json")["added"] == 6


def test_an_export_replaces_only_an_earlier_export_and_a_database_is_no_export(tmp_path: Path) -> None:
    """``history export model.onnx`` replaced the user's model with JSON; a database given
    to import read as a codec error."""
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07\x12\xff\xfepytorch")
    with populated(tmp_path / "h.db") as store:
        with pytest.raises(HistoryError, match="it is not an earlier export"):
            export_json(store, model)
        assert export_json(store, tmp_path / "e.json") == 6
        assert export_json(store, tmp_path / "e.json") == 6  # an earlier export is replaced
        (tmp_path / "empty.json").write_text("")
        assert export_json(store, tmp_path / "empty.json") == 6
    assert model.read_bytes() == b"\x08\x07\x12\xff\xfepytorch"
    with open_history(tmp_path / "dst.db") as dst:
        with pytest.raises(HistoryError, match="it is a SQLite history, not an export"):
            import_json(dst, tmp_path / "h.db")
        with pytest.raises(HistoryError, match=r"not a JSON export \(binary data\)"):
            import_json(dst, model)
        with pytest.raises(HistoryError, match="cannot import a list"):
            import_json(dst, [1, 2])  # type: ignore[arg-type]


def test_an_empty_or_relative_home_puts_state_in_the_accounts_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME set empty put a root tune's history, MLflow store and reports in /.autotune."""
    import pwd

    from autotune.history.location import autotune_home

    monkeypatch.delenv("AUTOTUNE_HOME", raising=False)
    monkeypatch.setenv("HOME", "")
    assert autotune_home() == os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".autotune")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "rel")
    assert autotune_home() == str(tmp_path / "rel" / ".autotune")
    monkeypatch.setenv("AUTOTUNE_HOME", "state")
    assert autotune_home() == str(tmp_path / "state")


@pytest.mark.parametrize("sql", [
    "UPDATE records SET config_json = 'not json'",
    "UPDATE records SET config_json = '[1]'",
    "UPDATE records SET samples_json = '[\"x\"]'",
    "UPDATE records SET latency_median = 'fast'",
    "UPDATE workloads SET descriptor_json = '[]'",
    "UPDATE workloads SET flops = X'01'",
])
def test_a_row_edited_by_hand_is_one_error_naming_it(tmp_path: Path, sql: str) -> None:
    """A helper's fuzzing of history files: some 150 tracebacks (JSONDecodeError, TypeError,
    ValueError) from whichever reader met a damaged row first."""
    populated(tmp_path / "h.db").close()
    edit_file(tmp_path / "h.db", sql)
    with open_history(str(tmp_path / "h.db"), readonly=True) as store:
        with pytest.raises(HistoryError, match=r"holds a (record|workload) it cannot read .*edited by hand"):
            store.records()
            store.workloads()


def _gzip_damaged(how: str, data: bytes) -> bytes:
    """``data`` (a gzip file) damaged as a copy cut short or a bad disk leaves it."""
    if how == "deflate":  # header intact, the compressed stream flipped: zlib.error, not OSError
        return data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:]
    if how == "truncated":
        return data[: len(data) // 2]
    return data[:-8] + bytes(b ^ 1 for b in data[-8:-4]) + data[-4:]  # the CRC


@pytest.mark.parametrize("how", ["deflate", "truncated", "crc"])
def test_a_damaged_gzip_export_is_one_line_and_history_is_unchanged(tmp_path: Path, capsys, how: str) -> None:
    """A fuzzing trial: a gzip export whose deflate stream was damaged ended `history
    import` in zlib.error's traceback (only OSError and EOFError were caught)."""
    from autotune.cli import main

    path = tmp_path / "h.db"
    with populated(path) as store:
        export_json(store, tmp_path / "e.json.gz")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(_gzip_damaged(how, (tmp_path / "e.json.gz").read_bytes()))
    before = file_sha(path)
    assert main(["history", "import", str(bad), "--history", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"autotune: error: cannot import {bad}: a damaged gzip file"), err
    assert file_sha(path) == before
    with open_history(path) as store, pytest.raises(HistoryError, match="a damaged gzip file"):
        import_json(store, bad)
    if how == "deflate":  # nor is a file whose start cannot be read taken for an earlier export to write over
        assert main(["history", "export", str(bad), "--history", str(path)]) == 2
        assert "it is not an earlier export" in capsys.readouterr().err


#: Where a lone surrogate ("\ud800" in the JSON text) may sit in an export, and the field
#: the refusal names.
SURROGATES: dict[str, tuple[Callable[[dict], None], str]] = {
    "run-model": (lambda d: d["runs"][0].update(model="m\ud800"), r"runs\[0\]\.model"),
    "run-id": (lambda d: d["runs"][0].update(run_id="\udfff"), r"runs\[0\]\.run_id"),
    "run-params-key": (lambda d: d["runs"][0]["params"].update({"\ud800": 1}), r"runs\[0\]\.params: a key \('\\ud800'\)"),
    "record-space": (_set("records", 0, "space_id", "\ud800"), r"records\[0\]\.space_id"),
    # a backslash and "ud800", then a low half alone: no pair, though the text reads as one
    "record-error": (_set("records", 2, "error", "\\ud800\udc00"), r"records\[2\]\.error"),
    "record-config": (lambda d: d["records"][1]["config"].update(tile=["\ud800"]), r"records\[1\]\.config\.tile\[0\]"),
    "workload-descriptor": (lambda d: d["workloads"][0]["descriptor"].update(name="\udc80"),
                            r"workloads\[0\]\.descriptor\.name"),
}


@pytest.mark.parametrize("case", sorted(SURROGATES))
def test_an_import_holding_a_lone_surrogate_leaves_both_files_byte_for_byte(tmp_path: Path, capsys, case: str) -> None:
    """A fuzzing trial: a run's model name of "\\ud800" was refused inside the import's
    transaction (sqlite3 cannot encode it), rolled back, but opening the history to
    write had changed its header's bytes; a new history was left behind, and the
    refusal was UnicodeEncodeError's traceback."""
    from autotune.cli import main

    mutate, field = SURROGATES[case]
    path = tmp_path / "h.db"
    with populated_with_run(path) as store:
        buf = io.StringIO()
        export_json(store, buf)
    doc = json.loads(buf.getvalue())
    for rec in doc["records"]:  # records history lacks, and a run it lacks: each is written
        rec["created_at"] = "2030-01-01T00:00:00+00:00"
    doc["runs"][0]["run_id"] = "r2"
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))  # ensure_ascii: the text holds \ud800, as a hand or a tool writes it
    before = file_sha(path), file_sha(bad)
    for history_path in (path, tmp_path / "new.db"):
        assert main(["history", "import", str(bad), "--history", str(history_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err, err
        assert re.search(rf"cannot import {re.escape(str(bad))}: {field}.* holds a lone surrogate.*nothing was imported", err), err
    assert (file_sha(path), file_sha(bad)) == before
    assert not (tmp_path / "new.db").exists()
    counts = table_counts(path)
    with open_history(path) as store, pytest.raises(HistoryError, match=field):
        import_json(store, doc)  # the parsed document, in hand
    assert table_counts(path) == counts


def test_an_export_with_a_surrogate_pair_still_imports(tmp_path: Path) -> None:
    """A model named with an emoji is written "\\ud83d\\ude00" (ensure_ascii): a pair, no lone surrogate."""
    with populated(tmp_path / "h.db") as store:
        store.start_run("r9", model="net\U0001F600", target_key=GPU.key, tuner="random", params={})
        store.finish_run("r9", "finished", {})
        export_json(store, tmp_path / "e.json")
    assert "\\ud83d\\ude00" in (tmp_path / "e.json").read_text()
    with open_history(tmp_path / "fresh.db") as fresh:
        assert import_json(fresh, tmp_path / "e.json")["runs_added"] == 1
        assert fresh.run("r9")["model"] == "net\U0001F600"


def test_history_ls_over_a_median_stored_as_text_names_the_record(tmp_path: Path, capsys) -> None:
    """A fuzzing trial: a median edited to 'abc' passed ls's summary query (SQLite ranks
    text above every number) and ended in format_latency's TypeError."""
    from autotune.cli import main

    path = tmp_path / "h.db"
    populated(path).close()
    edit_file(path, "UPDATE records SET latency_median = 'abc'")
    for argv in (["history", "ls"], ["history", "ls", "--json"]):
        assert main([*argv, "--history", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and re.search(r"holds a record it cannot read \(id \d+\).*edited by hand", err), err
    with open_history(path, readonly=True) as store, pytest.raises(HistoryError, match=r"record it cannot read \(id"):
        store.summary()


@pytest.mark.parametrize("sql, what", [
    ("UPDATE runs SET model = X'616263'", r"run it cannot read \(r1\): model: bytes"),
    ("UPDATE records SET space_id = X'ff' WHERE id = 2", r"record it cannot read \(id 2\): space_id: bytes"),
    ("UPDATE targets SET tvm_version = X'00'", r"target it cannot read \(cuda:sm_90:NVIDIA H100\): tvm_version: bytes"),
    # met first in the records joined to it
    ("UPDATE workloads SET op_class = X'616263'", r"record it cannot read \(id 1\): op_class: bytes b'abc' where text"),
    ("UPDATE records SET latency_mean = 1e999", r"record it cannot read \(id \d+\): .*inf"),
    ("UPDATE records SET repeats = 1e999", r"record it cannot read \(id \d+\)"),
])
def test_history_export_over_a_value_of_the_wrong_type_names_the_row(tmp_path: Path, capsys, sql: str, what: str) -> None:
    """A fuzzing trial: a run's model stored as bytes (a BLOB) ended `history export` in
    json's "Object of type bytes is not JSON serializable"; no export is left behind."""
    from autotune.cli import main

    path = tmp_path / "h.db"
    populated_with_run(path).close()
    edit_file(path, sql)
    assert main(["history", "export", str(tmp_path / "e.json"), "--history", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and re.search(what, err) and err.endswith("was the file edited by hand?"), err
    assert not (tmp_path / "e.json").exists()
