"""Report rendering, load_report, roofline math and progress reporters."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import roofline
from autotune.errors import AutotuneError
from autotune.progress import JsonReporter, Reporter, make_reporter
from autotune.report import (
    COLUMNS,
    format_table,
    load_report,
    plot_convergence,
    summary_rows,
    write_artifacts,
    write_csv,
    write_json,
)
from autotune.roofline import Peaks, lookup_gpu, roofline_fraction

try:  # the same fake report as the tracking tests, whether or not tests/ is a package
    from tests.test_tracking import make_report
except ImportError:  # pragma: no cover
    from test_tracking import make_report  # type: ignore[no-redef]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home" / ".autotune"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


# -- summary rows ---------------------------------------------------------------------------------
def test_summary_rows_derived_numbers() -> None:
    rows = summary_rows(make_report())
    assert [r["name"] for r in rows] == ["fused_conv2d_add_relu", "fused_dense_add"]
    conv = rows[0]
    assert list(conv) == COLUMNS
    assert conv["best_latency_ms"] == pytest.approx(0.21)
    assert conv["default_latency_ms"] == pytest.approx(0.94)
    assert conv["speedup"] == pytest.approx(0.94 / 0.21)
    # of the measured time (conv: 0.21 ms, twice; dense 0.12 ms), not the stored estimate (0.31)
    assert conv["share"] == pytest.approx(0.42 / 0.54)
    assert rows[1]["share"] == pytest.approx(0.12 / 0.54)
    assert conv["gflops"] == pytest.approx(1.2e8 / 0.00021 / 1e9)
    # report's stored peaks: 1 TFLOP/s, 50 GB/s; AI = 1.2e8/3.4e6 = 35.3 -> memory roof 1.76 TFLOP/s
    # so the compute roof (1 TFLOP/s) binds
    assert conv["roofline_fraction"] == pytest.approx((1.2e8 / 0.00021) / 1.0e12)
    dense = rows[1]
    # AI = 0.5 flop/byte -> memory roof 25 GFLOP/s binds
    assert dense["roofline_fraction"] == pytest.approx((1.024e6 / 0.00012) / (1.024e6 / 2.05e6 * 5.0e10))


def test_summary_rows_fills_missing_fields() -> None:
    report = make_report()
    for layer in report["layers"]:
        del layer["speedup"], layer["share"]
    report["layers"][1]["best_latency"] = None  # a layer whose every trial failed
    del report["roofline"]
    report["target"] = {"kind": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}
    rows = summary_rows(report)
    assert rows[0]["speedup"] == pytest.approx(0.94 / 0.21)
    assert rows[0]["share"] == pytest.approx(1.0)  # the only layer with a latency
    assert rows[1]["best_latency_ms"] is None and rows[1]["speedup"] is None and rows[1]["gflops"] is None
    h100 = lookup_gpu("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    expected = roofline_fraction(1.2e8, 3.4e6, 0.00021, h100.peak_flops, h100.peak_bw)
    assert rows[0]["roofline_fraction"] == pytest.approx(expected)


def test_summary_rows_unknown_device_has_no_fraction() -> None:
    report = make_report()
    del report["roofline"]
    report["target"] = {"kind": "llvm", "device_name": "Never Measured CPU"}
    rows = summary_rows(report)  # must not measure: the report may come from another machine
    assert all(r["roofline_fraction"] is None for r in rows)
    assert not (roofline.default_cache_path()).exists()


# -- files ----------------------------------------------------------------------------------------
def test_write_csv(tmp_path: Path) -> None:
    path = write_csv(make_report(), tmp_path / "r.csv")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["name"] for r in rows] == ["fused_conv2d_add_relu", "fused_dense_add"]
    assert list(rows[0]) == COLUMNS
    assert float(rows[0]["best_latency_ms"]) == pytest.approx(0.21)
    assert rows[1]["tuner"] == "history" and rows[1]["dispatch"] == "warm"
    assert float(rows[1]["match_score"]) == pytest.approx(0.87)


def test_write_json_is_strict(tmp_path: Path) -> None:
    report = make_report()
    report["model_latency_after"] = math.nan
    report["layers"][0]["curve"].append((6, math.inf))
    path = write_json(report, tmp_path / "r.json")
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert data["model_latency_after"] is None
    assert data["layers"][0]["curve"][-1] == [6, None]
    assert data["layers"][1] == make_report()["layers"][1]


def test_format_table_lists_each_layer() -> None:
    text = format_table(make_report())
    assert "\x1b[" not in text  # plain text, also with no TTY
    for name in ("fused_conv2d_add_relu", "fused_dense_add"):
        assert name in text
    assert "resnet18" in text and "12.300 ms -> 8.100 ms" in text
    assert "4.48x" in text  # conv speedup 0.94/0.21
    assert "history (warm)" in text
    assert "8 twin programs answered unmeasured" in " ".join(text.split())  # 3 not built + 5 not timed


@pytest.mark.parametrize("width", [60, 80, 100])
def test_format_table_fits_a_narrow_terminal_with_names_figures_and_notes_whole(width) -> None:
    """At 80 columns each layer's name was folded into five-letter pieces over five lines,
    and the caption's notes ran into each other (a run's id split from "run")."""
    report = {**make_report(), "run_id": "cee0e54fbc2b"}
    text = format_table(report, width=width)
    lines = [line.strip() for line in text.splitlines()]
    assert max(len(line) for line in text.splitlines()) <= width
    for row in summary_rows(report):
        assert row["name"] in text
    assert "run cee0e54fbc2b" in lines  # each note a line of its own
    assert any(line.startswith("measuring: build 42 s") for line in lines)
    assert "left out at this terminal's width: " in text or width >= 100
    assert "left out" not in format_table(report)  # a file's table: every column


def test_format_table_keeps_the_digits_of_a_kernel_that_runs_for_nanoseconds() -> None:
    """A fixed "ms" with four decimals printed a 40 ns layer as 0.0000."""
    report = make_report()
    report["layers"][1] = dict(report["layers"][1], best_latency=4.0e-8)
    text = format_table(report)
    assert "40.0 ns" in text and "0.0000" not in text
    assert "210.0 us" in text  # the conv's 0.21 ms


def test_the_model_timings_keep_their_digits() -> None:
    """A model of one small layer read "model latency: 0.001 ms -> 0.000 ms (1.04x)"."""
    caption = " ".join(format_table(dict(make_report(), model_latency_before=1.3e-6, model_latency_after=1.25e-6)).split())
    assert "model latency: 1.3 us -> 1.2 us" in caption


def test_format_table_says_when_history_was_empty() -> None:
    """A mistyped ``--history`` folder is created, as the first run's must be, and the
    tune went on cold without a word: the caption says history was empty, and where."""
    report = dict(make_report(), history="sqlite:////work/typo/h.db")
    assert "history was empty" not in format_table(report)
    caption = " ".join(format_table(dict(report, history_was_empty=True), width=200).split())
    assert "history was empty: /work/typo/h.db" in caption


def test_format_table_says_when_the_model_timings_rounds_spread_wide() -> None:
    """The before and after models are timed in turn, rounds of each: rounds far apart
    say the machine was busy, which no figure showed before."""
    report = make_report()
    assert "rounds varied" not in format_table(dict(report, model_latency_rounds={"before": [1.0, 1.1, 1.05], "after": [0.5, 0.52]}))
    caption = " ".join(format_table(dict(report, model_latency_rounds={"before": [1.0, 1.1], "after": [0.5, 0.9, 0.6]}),
                                    width=200).split())
    assert "its rounds varied by up to 80%: other work on the machine weighs on it" in caption
    assert "rounds varied" not in format_table(dict(report, model_latency_rounds={"before": [1.0], "after": [None, 2.0]}))


def test_format_table_says_when_the_roofline_peaks_were_measured_on_a_busy_machine() -> None:
    """Peaks measured while other work ran read low, and every roofline % high; a report
    kept no sign of it (``autotune info`` alone said so, of the cache as it is now)."""
    report = make_report()
    assert "roofline peaks measured while" not in format_table(report)
    report["roofline"] = dict(report["roofline"], load_per_core=0.2)
    assert "roofline peaks measured while" not in format_table(report)
    report["roofline"]["load_per_core"] = 0.69
    assert ("roofline peaks measured while other work kept the cores 69% busy: its percentages read high"
            in " ".join(format_table(report, width=300).split()))


def test_the_cpu_peaks_say_when_and_under_what_load_they_were_measured(tmp_path) -> None:
    """The load is other processes' CPU time during the measurement (the 1-minute load
    average lags), and travels with the peaks into a report's ``roofline`` entry."""
    import time

    from autotune.roofline import _cpu_seconds, _others_load_per_core, cpu_peaks

    before = _cpu_seconds()
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # this process alone busy: no one else's load
        pass
    load = _others_load_per_core(before, _cpu_seconds())
    assert load is not None and 0.0 <= load < 1.0
    assert _others_load_per_core(None, before) is None
    peaks = cpu_peaks(cache_path=tmp_path / "r.json")
    assert peaks.measured_at and peaks.load_per_core is not None
    cached = cpu_peaks(cache_path=tmp_path / "r.json")
    assert cached.source == "cache" and (cached.measured_at, cached.load_per_core) == (peaks.measured_at, peaks.load_per_core)
    assert {"measured_at", "load_per_core"} <= set(cached.to_dict())


def test_format_table_says_when_the_model_was_not_timed_by_request() -> None:
    from dataclasses import asdict

    from autotune.tune import TuneOptions

    report = dict(make_report(), model_latency_before=None, model_latency_after=None)
    assert "model latency: - -> -" in format_table(report)  # not timed, reason unknown
    report["options"] = asdict(TuneOptions(model_latency=False))
    text = format_table(report)
    assert "model latency: not timed (--no-model-latency)" in " ".join(text.split()) and "- -> -" not in text


def test_format_table_says_figures_from_history_are_earlier_runs_timings() -> None:
    """A layer's default and a reused or resumed layer's best are the timings of the run
    that made them, under that run's load, beside this run's own: a tune's new layers read
    2x another run's with nothing said."""
    report = make_report()
    note = "figures history held (defaults, reused and resumed bests) are the timings of the runs that made them"
    assert note not in " ".join(format_table(dict(report, history_was_empty=True), width=300).split())
    assert note not in " ".join(format_table(report, width=300).split())  # a report from before the key: nothing said
    assert note in " ".join(format_table(dict(report, history_was_empty=False), width=300).split())


def test_format_table_says_why_a_models_table_is_empty() -> None:
    """A model with no tunable layer printed an empty table and "timing noise"; with
    --quiet, no note said why."""
    report = make_report()
    assert "no tunable layer" not in format_table(dict(report, tunable_layers=2))
    caption = " ".join(format_table(dict(report, layers=[], tunable_layers=0), width=200).split())
    assert "no tunable layer: nothing to tune, its kernels keep TVM's defaults" in caption


def test_format_table_shows_a_models_name_as_it_is() -> None:
    """``net[red]v2`` read "netv2": rich took the brackets for markup."""
    assert "net[red]v2" in format_table(dict(make_report(), model="net[red]v2"))


def test_format_table_says_when_the_two_model_timings_are_of_one_module() -> None:
    """No layer's schedule changed, and the caption read 0.48x, as a slowdown."""
    report = dict(make_report(), model_latency_before=1.0e-3, model_latency_after=2.1e-3)
    assert "timing noise" not in format_table(report)
    assert "(0.48x) no layer's schedule changed: timing noise" in format_table(dict(report, model_layers_changed=0))
    assert "timing noise" not in format_table(dict(report, model_layers_changed=3))


def test_format_table_says_when_the_layers_that_changed_cannot_explain_the_model_timing() -> None:
    """A tune where history changed one layer of 0.1% of the time read 0.68x, as a
    slowdown; only a module with no layer changed was called timing noise."""
    report = make_report()
    report["layers"][1] = dict(report["layers"][1], best_latency=4.0e-7)  # 0.1% of the measured time
    report = dict(report, model_latency_before=1.0e-3, model_latency_after=1.47e-3)
    caption = " ".join(format_table(dict(report, model_layers_changed=1, model_changed_layers=["fused_dense_add"])).split())
    assert "(0.68x) the layers that changed hold 0.095% of the time: the rest is timing noise" in caption
    # the conv (99.9%) changed too: the timing may be what it says
    both = dict(report, model_layers_changed=2, model_changed_layers=["fused_conv2d_add_relu", "fused_dense_add"])
    assert "timing noise" not in format_table(both)


def test_format_table_says_how_many_trials_went_unused_and_why() -> None:
    """A tune of a model history covers spent 0 of 32 trials and said nothing of it."""
    report = make_report()  # budget 64; the layers took 5 and 3
    assert "56 of 64 trials unused" in " ".join(format_table(report).split())
    covered = dict(report, layers=[dict(l, dispatch="exact", trials=0) for l in report["layers"]])
    caption = " ".join(format_table(covered).split())
    assert "64 of 64 trials unused: history covers every tunable layer (`--min-trials N` tunes on those measured fewer than N times)" in caption
    spent = dict(report, budget=8)
    assert "unused" not in format_table(spent)
    # one layer tuned until its space ran out, history covering the other: 280 of 1000 were
    # left unused with no reason given
    conv, dense = report["layers"]
    ran_out = dict(report, budget=1000, layers=[dict(conv, trials=720, exhausted=True), dict(dense, dispatch="exact", trials=0)])
    caption = " ".join(format_table(ran_out).split())
    assert (f"280 of 1000 trials unused: the layers tuned ran out of new configs to measure ({conv['name']} (720)), and "
            "history covers the others (`--min-trials N`") in caption


def test_format_table_says_when_the_trials_went_to_a_sliver_of_the_model() -> None:
    """Every layer but one reused from history, and the whole budget spent on a layer of
    0.2% of the model's time: the caption says a smaller budget would have done; it says
    nothing where the tuned layers hold more, or where nothing was reused."""
    report = make_report()
    conv, dense = report["layers"]
    conv.update(dispatch="exact", trials=0, tuner="reuse", best_latency=0.05)
    dense.update(trials=64)  # 0.12 ms against the conv's 2 x 50 ms: 0.12% of the time
    caption = " ".join(format_table(report).split())
    assert ("the 64 trials went to layers holding 0.12% of the model's time, history's winners the rest: a smaller "
            "--trials would have done") in caption
    conv.update(best_latency=0.00021)  # the dense layer now holds 22%
    assert "a smaller --trials" not in format_table(report)
    conv.update(best_latency=0.05, dispatch="cold", trials=1, tuner="xgb")  # nothing reused
    assert "a smaller --trials" not in format_table(report)


def test_format_table_says_when_another_run_measured_meanwhile() -> None:
    """Of two tunes started together, the first heard of the second only in report.json:
    its caption read 0.58x for a model the other, with the same schedules, read 1.48x."""
    report = make_report()
    assert "meanwhile" not in format_table(report)
    report["concurrent_runs"] = ["c72a1a5a8563"]
    caption = " ".join(format_table(report).split())
    assert "another run measured on this machine meanwhile (c72a1a5a8563): its timings, these too, ran slower" in caption
    report["concurrent_runs"] = ["a1", "b2", "c3", "d4"]
    assert "4 other runs measured on this machine meanwhile (a1, b2, c3, ...)" in " ".join(format_table(report).split())


def test_format_table_says_when_candidates_were_timed_queued() -> None:
    """Queued timings of few-microsecond kernels read lower than TVM's evaluator's: a
    table set beside another tune's says how its figures were timed."""
    from dataclasses import asdict

    from autotune.tune import TuneOptions
    from autotune.measure import MeasureOptions

    report = make_report()
    report["options"] = asdict(TuneOptions())
    assert "queued" not in format_table(report)
    report["options"] = asdict(TuneOptions(measure=MeasureOptions(timing="queued")))
    assert "candidates timed queued behind a spin kernel (GPU time alone)" in " ".join(format_table(report).split())


def test_format_table_says_which_layers_the_budget_did_not_reach() -> None:
    report = make_report()
    conv, dense = report["layers"]
    conv.update(budget=0, trials=0, dispatch="cold", tuner="xgb")  # the budget ran out before it
    dense.update(budget=0, trials=0, dispatch="exact", tuner="reuse")  # history's winner, no trial needed
    text = format_table(report)
    assert "- (no budget left)" in text and "xgb (cold)" not in text
    assert "reuse (exact)" in text
    assert [r["budget"] for r in summary_rows(report)] == [0, 0]


def test_format_table_marks_a_probed_layer() -> None:
    """A layer given a one-trial first chunk (history covers it closely) says so."""
    report = make_report()
    conv, dense = report["layers"]
    conv.update(budget=1, trials=1, dispatch="guided", tuner="gga", probe=True)
    dense.update(budget=4, trials=4, dispatch="cold", tuner="xgb")
    text = format_table(report)
    assert "gga (guided, probe)" in text and "xgb (cold)" in text and "xgb (cold, probe)" not in text
    assert [r["probe"] for r in summary_rows(report)] == [True, False]
    conv.update(budget=4, trials=4)  # the rest of its first chunk followed: "probe" read as if one trial was all
    assert "gga (guided, probed first)" in format_table(report)


def test_format_table_says_a_match_taken_from_the_same_layer_at_another_batch() -> None:
    """The table showed 0.95 beside the guided GA, and only --json's neighbours said the
    layer it was taken from was this one at another batch size."""
    report = make_report()
    conv, _ = report["layers"]
    conv.update(budget=4, trials=4, dispatch="guided", tuner="gga",
                match={"neighbours": [{"workload_key": "k", "name": "c", "similarity": 0.95, "relation": "other batch"}]})
    assert "gga (guided, from another batch size)" in format_table(report)
    conv["match"]["neighbours"][0]["relation"] = "features"
    assert "gga (guided)" in format_table(report)


def test_format_table_says_which_tuner_took_a_layer_over() -> None:
    """A guided GA that handed a shallow history's layer to transfer XGBoost keeps its
    name as the dispatched tuner, and the table and rows say who took over, and when."""
    report = make_report()
    conv, dense = report["layers"]
    conv.update(budget=100, trials=100, dispatch="guided", tuner="gga", handed_over={"to": "tl_xgb", "after_configs": 32})
    dense.update(budget=4, trials=4, dispatch="cold", tuner="xgb")
    text = format_table(report, width=240)
    assert "gga (guided, then tl_xgb after 32)" in text and "xgb (cold)" in text
    assert [r["handed_over"] for r in summary_rows(report)] == ["tl_xgb after 32", None]


def test_plot_convergence_layers_and_tuners(tmp_path: Path) -> None:
    report = make_report()
    png = plot_convergence(report, tmp_path / "a.png")
    assert png.read_bytes().startswith(PNG_MAGIC)
    report["tuners"] = {
        "random": [[[1, 0.002], [2, 0.001]], [[1, 0.003], [3, 0.0009]]],
        "history": [[[1, 0.0011], [2, 0.0009], [3, None]]],
    }
    png2 = plot_convergence(report, tmp_path / "b.png")
    assert png2.read_bytes().startswith(PNG_MAGIC)
    assert png2.stat().st_size > png.stat().st_size  # the extra tuner panel was drawn
    empty = plot_convergence({"model": "m", "layers": []}, tmp_path / "c.png")
    assert empty.read_bytes().startswith(PNG_MAGIC)


def test_write_artifacts_and_load_from_dir(tmp_path: Path) -> None:
    report = make_report()
    paths = write_artifacts(report, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["convergence.png", "layers.txt", "report.csv", "report.json"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert "fused_dense_add" in (tmp_path / "out" / "layers.txt").read_text()
    assert load_report(tmp_path / "out") == report
    assert load_report(str(tmp_path / "out" / "report.json")) == report


def test_a_report_that_cannot_be_written_whole_is_one_error_and_no_file(tmp_path: Path) -> None:
    """On a full disk the report files were left empty after a traceback. A file-size
    limit (the kernel's own refusal, EFBIG, as a full disk's ENOSPC) stands in for it."""
    script = (
        "import json, resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "from autotune.errors import AutotuneError\n"
        "from autotune.report import write_artifacts\n"
        "report = json.loads(sys.stdin.read())\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))\n"
        "try:\n"
        "    write_artifacts(report, sys.argv[1])\n"
        "except AutotuneError as err:\n"
        "    print(err)\n"
    )
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", script, str(out)], input=json.dumps(make_report()), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() == f"cannot write {out / 'report.json'}: File too large"
    assert list(out.iterdir()) == []  # no empty report.json, no temporary file


def test_load_report_by_autotune_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The id ``tune`` prints first and ``history runs`` lists: found under the autotune
    home where ``tune`` writes reports, else through the MLflow run tagged with it (a
    report written to an --out-dir elsewhere)."""
    from autotune.tracking import Tracker, finish_with_report

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{(tmp_path / 'store' / 'mlflow.db').as_posix()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    report = make_report()
    write_artifacts(dict(report, model="in-home"), tmp_path / "home" / "runs" / "0a1b2c3d4e5f")
    assert load_report("0a1b2c3d4e5f")["model"] == "in-home"  # no MLflow run needed
    with Tracker.create(True, uri) as tracker:
        tracker.start("tune-resnet18", tags={"autotune.run_id": "feedc0ffee00"})
        finish_with_report(tracker, report, tmp_path / "elsewhere")
    loaded = load_report("feedc0ffee00")
    assert loaded["run_id"] == tracker.run_id and loaded["layers"] == report["layers"]
    for unknown in ("abcdef012345", "x' OR '1'='1"):
        with pytest.raises(AutotuneError, match="neither a directory"):
            load_report(unknown)


def test_report_of_a_run_whose_folder_holds_its_files_writes_no_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Each `autotune report RUN` wrote a folder of copies into the working directory, of
    files tune had written to the run's folder already."""
    from autotune.cli import main

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "home" / "runs" / "0a1b2c3d4e5f"
    write_artifacts(dict(make_report(), run_id="0a1b2c3d4e5f"), folder)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["report", "0a1b", "--history", str(tmp_path / "none.db")]) == 0
    out = capsys.readouterr().out
    assert "fused_dense_add" in out and f"its files {folder / 'report.json'}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    # the model's layer table tune writes beside them is one of its files (4 of 6 were listed)
    (folder / "decomposition.txt").write_text("layers\n")
    assert main(["report", "0a1b", "--history", str(tmp_path / "none.db"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"][-1] == str(folder / "decomposition.txt")
    # a folder missing its plot, or --out-dir, writes them
    (folder / "convergence.png").unlink()
    assert main(["report", "0a1b", "--history", str(tmp_path / "none.db")]) == 0
    assert "wrote autotune-report-0a1b2c3d4e5f/report.json" in capsys.readouterr().out
    assert (tmp_path / "autotune-report-0a1b2c3d4e5f" / "convergence.png").is_file()
    # from a working directory that takes no file (/proc: root is not stopped by chmod),
    # the summary is still printed; it had refused to print it at all
    monkeypatch.chdir("/proc")
    assert main(["report", "0a1b", "--history", str(tmp_path / "none.db")]) == 0
    out = capsys.readouterr().out
    assert "fused_dense_add" in out and "its files not written: cannot write" in out and "(give --out-dir)" in out


def test_a_failed_run_is_explained_alike_by_its_full_id_and_a_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By its full id a failed tune was explained by MLflow ("ended failed before its
    report was written"), by a prefix by history, which also says how many records it
    left: history's word now comes either way."""
    from autotune.history import TargetInfo, open_history
    from autotune.tracking import Tracker

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{(tmp_path / 'mlflow.db').as_posix()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    history = str(tmp_path / "h.db")
    with open_history(history) as store:
        store.register_target(TargetInfo("llvm", "znver4", "cpu"))
        store.start_run("adfc66066398", model="resnet18", target_key="llvm:znver4:cpu", tuner="auto", params={})
        store.finish_run("adfc66066398", "failed", {})
    with pytest.raises(RuntimeError), Tracker.create(True, uri) as tracker:
        tracker.start("tune-resnet18", tags={"autotune.run_id": "adfc66066398"})
        raise RuntimeError("the server died")
    said = {}
    for given in ("adfc66066398", "adfc"):
        with pytest.raises(AutotuneError) as err:
            load_report(given, history=history)
        said[given] = str(err.value)
    assert said["adfc"].startswith("run adfc66066398 (resnet18 on llvm:znver4:cpu) has no report: it failed before the end")
    # and the prefix finds the MLflow run too (by its autotune.run_id tag), as the full id does
    assert said["adfc66066398"] == said["adfc"] and said["adfc"].endswith(f"; MLflow run {tracker.run_id}")


def test_a_run_id_prefix_two_runs_share_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``report 9`` took the one report folder of two runs starting with 9 (the other had
    failed before writing one) without a word, where ``history rm 9`` refused."""
    from autotune.history import TargetInfo, open_history

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{(tmp_path / 'mlflow.db').as_posix()}")
    history = str(tmp_path / "h.db")
    write_artifacts(dict(make_report(), model="finished"), tmp_path / "home" / "runs" / "9f262ea362ca")
    assert load_report("9", history=history)["model"] == "finished"  # no history there: the folder's
    with open_history(history) as store:
        store.register_target(TargetInfo("llvm", "znver4", "cpu"))
        for run_id, status in (("92a01db26cae", "failed"), ("9f262ea362ca", "finished")):
            store.start_run(run_id, model="resnet18", target_key="llvm:znver4:cpu", tuner="auto", params={})
            store.finish_run(run_id, status, {})
    with pytest.raises(AutotuneError) as err:
        load_report("9", history=history)
    assert str(err.value) == "run id prefix '9' matches 2 runs: 92a01db26cae, 9f262ea362ca; give more characters"
    assert load_report("9f", history=history)["model"] == "finished"
    assert load_report("9f262ea362ca", history=history)["model"] == "finished"


def test_a_run_with_no_report_is_explained_by_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tune killed with ``--no-mlflow`` has no report and no MLflow run; history's runs
    table knows it. It was 'neither a directory with report.json nor a run in tracking
    store', which read as a mistyped id."""
    from autotune.history import TargetInfo, open_history

    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{(tmp_path / 'mlflow.db').as_posix()}")
    history = str(tmp_path / "h.db")
    with open_history(history) as store:
        key = store.register_target(TargetInfo("llvm", "znver4", "cpu")) and "llvm:znver4:cpu"
        for run_id, status in (("0123456789ab", "killed"), ("ba9876543210", "finished")):
            store.start_run(run_id, model="dqn", target_key=key, tuner="auto", params={})
            store.finish_run(run_id, status, {})
    with pytest.raises(AutotuneError) as err:
        load_report("0123456789ab", history=history)
    assert str(err.value) == ("run 0123456789ab (dqn on llvm:znver4:cpu) has no report: it was stopped before the end; "
                              f"what it measured (0 records) is in history at sqlite:///{history} "
                              f"(`autotune history runs --history {history}`)")
    with pytest.raises(AutotuneError, match="^run 0123456789ab .*stopped before the end"):
        load_report("01234", history=history)  # a unique prefix, as report takes of run folders
    with pytest.raises(AutotuneError, match=r"it ended finished, but its report is neither in .*ba9876543210 nor in MLflow"):
        load_report("ba9876543210", history=history)
    with pytest.raises(AutotuneError, match=r"neither a directory .*, nor in history at sqlite:///"):
        load_report("cccccccccccc", history=history)
    with pytest.raises(AutotuneError, match=r", nor in history at sqlite:///\S+\.db$"):
        load_report("0123456789ab")  # the default history, which holds no such run


def test_load_report_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(AutotuneError, match="no report.json"):
        load_report(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.json").write_text("[1, 2")
    with pytest.raises(AutotuneError, match="cannot read report"):
        load_report(tmp_path / "bad")
    # any other JSON object (a history export) printed an empty table titled '? on ?'
    (tmp_path / "export.json").write_text(json.dumps({"format": "autotune-history", "records": []}))
    with pytest.raises(AutotuneError, match="is not an autotune report"):
        load_report(tmp_path / "export.json")
    # an id looked up in a store not made yet: said, and the store is not made to be asked
    store = tmp_path / "never" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store.as_posix()}")
    with pytest.raises(AutotuneError, match="neither a directory"):
        load_report("abcdef012345")
    assert not store.parent.exists()


def test_report_refuses_a_file_for_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    write_artifacts(make_report(), tmp_path / "run")
    (tmp_path / "afile").write_text("keep")
    assert main(["report", "run", "--out-dir", "afile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["autotune: error: cannot write the report in afile: it is a file, not a directory"]
    assert (tmp_path / "afile").read_text() == "keep"
    assert main(["report", "run", "--out-dir", "again"]) == 0 and (tmp_path / "again" / "report.csv").is_file()


def test_load_report_by_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.tracking import Tracker, finish_with_report

    uri = f"sqlite:///{(tmp_path / 'store' / 'mlflow.db').as_posix()}"
    report = make_report()
    with Tracker.create(True, uri) as tracker:
        finish_with_report(tracker, report, tmp_path / "out")
    loaded = load_report(tracker.run_id, tracking_uri=uri)
    assert loaded["run_id"] == tracker.run_id
    assert loaded["layers"] == report["layers"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the CLI's usual path: URI from the environment
    assert load_report(tracker.run_id)["model"] == "resnet18"
    with pytest.raises(AutotuneError, match="neither a directory"):
        load_report("0123456789abcdef0123456789abcdef", tracking_uri=uri)
    # a run without the artifact
    with Tracker.create(True, uri) as bare:
        bare.start("bare")
    with pytest.raises(AutotuneError, match="no report.json artifact"):
        load_report(bare.run_id, tracking_uri=uri)
    # one that ended first, and a layer's run: said so, not 'has no report.json artifact'
    with pytest.raises(KeyboardInterrupt), Tracker.create(True, uri) as killed:
        killed.start("tune-resnet18", tags={"autotune.run_id": "abc123"})
        with killed.layer("fused_conv2d"):
            layer_id = killed.current_run_id
        raise KeyboardInterrupt
    with pytest.raises(AutotuneError) as err:
        load_report(killed.run_id, tracking_uri=uri)
    assert str(err.value) == (f"MLflow run {killed.run_id} ended killed before its report was written; what autotune run "
                              "abc123 measured is in history (`autotune history runs`)")
    with pytest.raises(AutotuneError) as err:
        load_report(layer_id, tracking_uri=uri)
    assert str(err.value) == f"MLflow run {layer_id} is layer 'fused_conv2d' of tune run {killed.run_id}: report that one"


def test_load_report_by_the_start_of_an_mlflow_run_id(tmp_path: Path) -> None:
    """tune prints the MLflow run's 32-digit id; its first digits are taken as git takes a
    commit's, and a start two runs share is refused with both named."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from autotune.tracking import Tracker, finish_with_report

    db = tmp_path / "store" / "mlflow.db"
    uri = f"sqlite:///{db.as_posix()}"
    with Tracker.create(True, uri) as tracker:
        finish_with_report(tracker, make_report(), tmp_path / "out")
    first = tracker.run_id
    assert load_report(first[:7], tracking_uri=uri)["run_id"] == first
    with pytest.raises(AutotuneError, match="neither a directory"):  # three digits are no prefix
        load_report(first[:3], tracking_uri=uri)
    # a second run whose id shares the first's six digits (uuid4s rarely do: made so here)
    client = MlflowClient(uri)
    other = client.create_run(client.get_run(first).info.experiment_id).info.run_id
    twin = first[:6] + ("1" if first[6] == "0" else "0") + "0" * 25
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET run_uuid = ? WHERE run_uuid = ?", (twin, other))
    with pytest.raises(AutotuneError) as err:
        load_report(first[:6], tracking_uri=uri)
    assert str(err.value) == f"MLflow run id prefix {first[:6]!r} matches 2 runs: {', '.join(sorted([first, twin]))}"
    assert load_report(first[:7], tracking_uri=uri)["run_id"] == first


# -- roofline -------------------------------------------------------------------------------------
def test_roofline_fraction_math() -> None:
    # compute-bound: AI = 100 flop/B, memory roof 100 * 1e11 = 1e13 > 1e12 -> compute roof binds
    assert roofline_fraction(1e9, 1e7, 0.002, 1e12, 1e11) == pytest.approx(0.5)
    # memory-bound: AI = 1 flop/B, roof = 1e11 FLOP/s; achieved 1e8 / 0.01 = 1e10 -> 0.1
    assert roofline_fraction(1e8, 1e8, 0.01, 1e12, 1e11) == pytest.approx(0.1)
    # at the ridge point both roofs agree
    assert roofline_fraction(1e10, 1e9, 0.01, 1e12, 1e11) == pytest.approx(1.0)
    assert roofline_fraction(1e9, 0, 0.001, 1e12, 1e11) == pytest.approx(1.0)  # no byte count: compute roof
    assert roofline_fraction(1e9, 1e7, 0.0, 1e12, 1e11) == 0.0
    assert roofline_fraction(0, 1e7, 0.001, 1e12, 1e11) == 0.0


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
        ("NVIDIA A10G", "A10"),
        ("NVIDIA L4", "L4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce GTX 1080 Ti", "GTX 1080 Ti"),
    ],
)
def test_gpu_table_lookup(name: str, label: str) -> None:
    peaks = lookup_gpu(name)
    assert peaks is not None and peaks.source == f"table:{label}"
    assert 1e12 < peaks.peak_flops < 1e14 and 1e11 < peaks.peak_bw < 1e13


def test_gpu_table_unknown() -> None:
    assert lookup_gpu("Some Integrated GPU") is None
    assert lookup_gpu(None) is None
    assert roofline.peaks_for_target({"kind": "cuda", "device_name": "Mystery GPU"}) is None


def test_cpu_peaks_cached_by_device_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []

    def fake_measure(device_name: str | None = None, seconds: float = 0.8) -> Peaks:
        calls.append(device_name)
        return Peaks(2e11, 3e10, source="measured", device_name=device_name or "")

    monkeypatch.setattr(roofline, "measure_cpu", fake_measure)
    cache = tmp_path / "rf.json"
    first = roofline.cpu_peaks("Cpu A", cache_path=cache)
    second = roofline.cpu_peaks("Cpu A", cache_path=cache)
    assert calls == ["Cpu A"]
    assert first is not None and second is not None
    assert (second.peak_flops, second.peak_bw, second.source) == (2e11, 3e10, "cache")
    assert roofline.cpu_peaks("Cpu B", cache_path=cache, measure=False) is None
    assert set(json.loads(cache.read_text())) == {"Cpu A"}
    # default location honours AUTOTUNE_HOME (tests never write to ~)
    roofline.peaks_for_target({"kind": "llvm", "device_name": "Cpu C"})
    assert "Cpu C" in json.loads(roofline.default_cache_path().read_text())
    assert str(roofline.default_cache_path()).startswith(str(tmp_path))


@pytest.mark.parametrize("entry", [
    ["not", "an", "entry"], {"method": "x", "peak_flops": 1e11, "peak_bw": 1e10}, {"method": 2, "peak_flops": 10**400,
    "peak_bw": 1e10}, {"method": 2, "peak_flops": -1.0, "peak_bw": 1e10}, {"method": 2, "peak_flops": 1e11},
], ids=["list", "method-text", "huge-int", "negative", "no-bandwidth"])
def test_an_edited_roofline_cache_entry_is_measured_again(tmp_path: Path, entry) -> None:
    """The cache is a file a person may edit: a list for an entry or a peak of 10^400 was
    a traceback (AttributeError, OverflowError), a negative peak a negative roofline."""
    cache = tmp_path / "rf.json"
    cache.write_text(json.dumps({"Cpu A": entry}))
    assert roofline.cpu_peaks("Cpu A", cache_path=cache, measure=False) is None


def test_a_roof_that_rounds_to_nothing_is_no_division_by_zero() -> None:
    assert roofline.roofline_fraction(1e-300, 1e300, 1e-3, 1e12, 1e9) == 0.0  # 1e-600 FLOP a byte: 0.0


def test_measure_cpu_is_plausible() -> None:
    peaks = roofline.measure_cpu("this cpu", seconds=0.2)
    assert 1e8 < peaks.peak_flops < 1e14
    assert 1e8 < peaks.peak_bw < 1e13
    assert peaks.source == "measured"
    if roofline.last_level_cache_bytes() >= 1024 * 1024:  # the cache roof is measured, and no lower than DRAM's
        assert peaks.cache_bw >= peaks.peak_bw and peaks.cache_bytes == roofline.last_level_cache_bytes() // 2


def test_cache_resident_layers_meet_the_cache_roof() -> None:
    """Timed runs repeat on warm caches: bytes that fit in the last-level cache are held to
    its bandwidth, larger ones to DRAM's; a GPU table entry has no cache roof."""
    peaks = Peaks(1e12, 2e10, source="measured", cache_bw=8e10, cache_bytes=16e6)
    assert peaks.memory_bw(4e6) == 8e10 and peaks.memory_bw(16e6) == 8e10
    assert peaks.memory_bw(64e6) == 2e10 and peaks.memory_bw(0) == 2e10
    assert Peaks.from_dict(peaks.to_dict()) == peaks
    assert Peaks.from_dict({"peak_flops": 1e12, "peak_bw": 2e10}).memory_bw(4e6) == 2e10
    rows = summary_rows({"layers": [{"name": "l", "flops": 4e7, "bytes": 4e6, "best_latency": 1e-3}]}, peaks)
    # 4e10 FLOP/s achieved; at 10 FLOP/B the roof is 8e11 (the cache's), not 2e11 (DRAM's)
    assert rows[0]["roofline_fraction"] == pytest.approx(4e10 / 8e11)


def test_cached_peaks_of_an_older_method_are_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "rf.json"
    cache.write_text(json.dumps({"Cpu A": {"peak_flops": 1e11, "peak_bw": 1e10, "source": "measured", "device_name": "Cpu A"}}))
    monkeypatch.setattr(roofline, "measure_cpu", lambda device_name=None, seconds=0.8: Peaks(2e11, 3e10, "measured", device_name or "", 9e10, 8e6))
    peaks = roofline.cpu_peaks("Cpu A", cache_path=cache)
    assert peaks is not None and (peaks.peak_flops, peaks.cache_bw) == (2e11, 9e10)
    again = roofline.cpu_peaks("Cpu A", cache_path=cache)
    assert again is not None and again.source == "cache" and (again.cache_bw, again.cache_bytes) == (9e10, 8e6)


# -- progress -------------------------------------------------------------------------------------
def drive(reporter: Reporter) -> None:
    reporter.start_model("resnet18", [("conv_a", 3), ("dense_b", 2)])
    reporter.stage("timing TVM's default schedule of 2 layers")
    reporter.start_layer("conv_a", 3, "random", 0.0)
    for done, best in [(1, 0.001), (2, math.inf), (3, 0.0004)]:
        reporter.trial("conv_a", done, best)
    reporter.end_layer("conv_a", {"tuner": "random", "trials": 3, "best_latency": 0.0004, "speedup": 2.5})
    reporter.message("history hit [reuse]")
    reporter.start_layer("dense_b", 2, "history", 0.91)
    reporter.trial("dense_b", 1, None)
    reporter.end_layer("dense_b", {"trials": 1, "best_latency": None})
    reporter.close()
    reporter.close()


def test_json_reporter_lines_parse() -> None:
    buf = io.StringIO()
    reporter = make_reporter("json", buf)
    assert isinstance(reporter, JsonReporter)
    drive(reporter)
    events = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [e["event"] for e in events] == [
        "start_model", "stage", "start_layer", "trial", "trial", "trial", "end_layer",
        "message", "start_layer", "trial", "end_layer",
    ]
    events.pop(1)
    assert events[0]["layers"] == [{"name": "conv_a", "trials": 3}, {"name": "dense_b", "trials": 2}]
    assert events[1] == {**events[1], "layer": "conv_a", "tuner": "random", "match_score": 0.0, "trials": 3}
    assert events[3]["best_latency"] is None  # inf is not valid JSON
    assert events[4]["done"] == 3 and events[4]["best_latency"] == 0.0004
    assert events[5]["summary"]["speedup"] == 2.5
    assert events[6]["text"] == "history hit [reuse]"


def test_json_reporter_defaults_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    make_reporter("json").message("hi")
    assert json.loads(capsys.readouterr().out)["text"] == "hi"


def test_rich_reporter_renders_without_tty() -> None:
    buf = io.StringIO()
    drive(make_reporter("rich", buf))
    text = buf.getvalue()
    assert "done conv_a" in text and "2.50x" in text
    assert "history hit [reuse]" in text  # markup in messages is escaped, not interpreted
    assert "resnet18" in text


def test_rich_reporter_says_what_it_does_before_the_first_trial() -> None:
    """24 s at "0/12 eta -:--:--" with no word of why: the model's bar says the stage
    until the first layer starts."""
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    reporter.start_model("mobilenetv2", [("conv_a", 3)])
    reporter.stage("timing TVM's default schedule of 1 layer")
    rendered = reporter._progress.tasks[0].description
    reporter.start_layer("conv_a", 3, "xgb", 0.0)
    assert rendered == "mobilenetv2 (1 tunable layer): timing TVM's default schedule of 1 layer"
    assert reporter._progress.tasks[0].description == "mobilenetv2 (1 tunable layer)"
    reporter.close()


def test_rich_reporter_off_a_terminal_says_each_stage_and_layer_as_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal rich draws no bars: a tune piped to a log said nothing for 27 s, then
    every layer's "done" line at once, and read as a hung run."""
    from autotune import progress

    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    reporter.start_model("mobilenetv2", [("conv_a", 3)])
    reporter.stage("timing TVM's default schedule of 1 layer")
    reporter.stage("timing TVM's default schedule of 1 layer")  # said once
    reporter.start_layer("conv_a", 3, "xgb", 0.0)
    reporter.trial("conv_a", 1, 0.002)  # within PLAIN_EVERY_S of the start: no line
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    reporter.trial("conv_a", 2, 0.001)
    reporter.close()
    lines = buf.getvalue().splitlines()
    assert lines.count("mobilenetv2 (1 tunable layer): timing TVM's default schedule of 1 layer") == 1
    assert "tuning conv_a [xgb match 0.00], 3 trials" in lines
    assert "  conv_a: 2 of 3 trials, best 1.000 ms" in lines and not any("1 of 3 trials" in line for line in lines)
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    reporter.start_model("m", [("conv_a", None)], total=4)
    reporter.start_layer("conv_a", 0, "gga", 0.9)  # the adaptive split gives its trials later: no "0 trials"
    reporter.close()
    assert "tuning conv_a [gga match 0.90]" in buf.getvalue().splitlines()


def test_rich_reporter_names_a_layer_the_budget_did_not_reach() -> None:
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    reporter.start_model("m", [("conv_a", 0), ("conv_b", 0)])
    for name, dispatch in (("conv_a", "cold"), ("conv_b", "exact")):
        reporter.start_layer(name, 0, "xgb" if dispatch == "cold" else "reuse", 0.0)
        reporter.end_layer(name, {"tuner": "xgb" if dispatch == "cold" else "reuse", "dispatch": dispatch, "budget": 0, "trials": 0})
    reporter.close()
    lines = [l for l in buf.getvalue().splitlines() if l.startswith("done")]
    assert lines == ["done conv_a  no budget left  0 trials", "done conv_b  reuse  0 trials"]


def test_rich_reporter_says_one_trial_in_the_singular() -> None:
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    reporter.start_model("m", [("conv_a", 1)])
    reporter.start_layer("conv_a", 1, "gga", 0.9)
    reporter.end_layer("conv_a", {"tuner": "gga", "dispatch": "gga", "budget": 1, "trials": 1, "best_latency": 87e-6})
    reporter.close()
    assert [l for l in buf.getvalue().splitlines() if l.startswith("done")] == ["done conv_a  gga  1 trial  best 87.0 us"]


def test_rich_reporter_lines_are_not_broken_into_a_log() -> None:
    """Written to a file (no terminal), rich broke lines at 80 columns: a layer's "done"
    line left a lone "default" on the next, and a long note came in pieces."""
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    name = "fused_conv2d20_add14_add15_relu11_and_a_name_long_enough_to_pass_eighty_columns"
    reporter.start_model("m", [(name, 4)])
    reporter.start_layer(name, 4, "tl_xgb", 0.66)
    reporter.message(f"{name}: history is shallow, " + "and this note goes on " * 6)
    reporter.end_layer(name, {"tuner": "tl_xgb", "dispatch": "transfer", "budget": 4, "trials": 4, "best_latency": 1.97e-4,
                              "speedup": 11.8})
    reporter.close()
    lines = buf.getvalue().splitlines()
    assert f"done {name}  tl_xgb  4 trials  best 197.0 us  11.80x vs default" in lines
    assert any(line.startswith(f"{name}: history is shallow") and line.rstrip().endswith("goes on") for line in lines)


def _drive_by_turns(reporter: Reporter) -> None:
    """An adaptive split: budgets unknown up front, layers given trials by turns."""
    reporter.start_model("m", [("conv_a", None), ("conv_b", None)], total=12)
    reporter.start_layer("conv_a", 0, "xgb", 0.0)
    reporter.layer_budget("conv_a", 4)
    reporter.trial("conv_a", 4, 0.002)
    reporter.start_layer("conv_b", 0, "gga", 0.9)
    reporter.layer_budget("conv_b", 4)
    reporter.trial("conv_b", 4, 0.003)
    reporter.layer_budget("conv_a", 8)
    reporter.trial("conv_a", 8, 0.001)
    for name, trials, best in (("conv_a", 8, 0.001), ("conv_b", 4, 0.003)):
        reporter.end_layer(name, {"tuner": "xgb", "budget": trials, "trials": trials, "best_latency": best})
    reporter.close()


def test_json_reporter_tells_budgets_given_by_turns() -> None:
    buf = io.StringIO()
    _drive_by_turns(make_reporter("json", buf))
    events = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert events[0]["trials"] == 12 and events[0]["layers"] == [{"name": "conv_a", "trials": None}, {"name": "conv_b", "trials": None}]
    budgets = [(e["layer"], e["trials"]) for e in events if e["event"] == "layer_budget"]
    assert budgets == [("conv_a", 4), ("conv_b", 4), ("conv_a", 8)]


def test_rich_reporter_follows_budgets_given_by_turns() -> None:
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    _drive_by_turns(reporter)
    overall = reporter._progress.tasks[0]
    assert (overall.total, overall.completed) == (12, 12)
    lines = [l for l in buf.getvalue().splitlines() if l.startswith("done")]
    assert lines == ["done conv_a  xgb  8 trials  best 1.000 ms", "done conv_b  xgb  4 trials  best 3.000 ms"]


def test_quiet_reporter_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    drive(make_reporter("quiet"))
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_unknown_mode() -> None:
    with pytest.raises(ValueError):
        make_reporter("loud")  # type: ignore[arg-type]


def test_max_abs_error_counts_a_nan_or_infinity_both_have_as_agreement() -> None:
    """An all-NaN output against an all-NaN reference read "max abs error nan"."""
    import numpy as np

    from autotune.verify import max_abs_error, outputs_match

    nan, inf = np.full(3, np.nan), np.array([np.inf, -np.inf, 1.0])
    assert max_abs_error(nan, nan) == 0.0 and outputs_match(nan, nan)
    assert max_abs_error(inf, inf) == 0.0 and outputs_match(inf, inf)
    assert max_abs_error(np.array([1.0, np.nan]), np.array([1.0, 2.0])) == math.inf
    assert max_abs_error(np.array([1.0, 2.0]), np.array([1.5, 2.0])) == 0.5


def test_rich_reporter_keeps_the_count_and_eta_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long layer name pushed the count, the time and the ETA off an 80-column line
    (each line read "... eta 0..."): the name gives way, with an ellipsis."""
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    reporter = make_reporter("rich", buf)
    reporter.start_model("resnet50", [("fused_conv2d3_add1_relu1_and_more", 10)], total=160)
    reporter.start_layer("fused_conv2d3_add1_relu1_and_more", 10, "gga", 0.95)
    reporter.trial("fused_conv2d3_add1_relu1_and_more", 3, 1.2e-3)
    from rich.console import Console

    frame = io.StringIO()  # the bars as a terminal of 80 columns shows them (a log keeps no frame of them)
    Console(file=frame, width=80).print(reporter._progress.get_renderable())
    reporter.close()
    lines = [line for line in frame.getvalue().splitlines() if "fused_conv2d3" in line]
    assert lines and all(len(line) <= 80 and "3/10" in line and "eta" in line and "…" in line for line in lines)
    assert not any(" eta" in line for line in buf.getvalue().splitlines())  # no last frame, cut short, in the log


def test_report_copies_stay_in_the_working_directory_whatever_the_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper's fuzzing: `"run_id": "/../../.."` in a report.json named the copies'
    folder, and `report` wrote them over files three folders up."""
    from autotune.cli import main

    report = make_report()
    report["run_id"] = "/../../.."
    report["tuners"] = {"x": [[[0, 0.001], [1e15, 0.0005]]]}  # a trial every number up to which was drawn (a hang)
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.json").write_text(json.dumps(report))
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    (tmp_path / "a" / "layers.txt").write_text("precious")
    monkeypatch.chdir(work)
    assert main(["report", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "a" / "layers.txt").read_text() == "precious"
    assert [p.name for p in work.iterdir()] == ["autotune-report-run"]


# -- a damaged or hand-edited report.json ---------------------------------------------------------
def _damaged(change) -> dict:
    report = make_report()
    change(report)
    return report


def _set(path: str, value):
    """A change setting the field at ``path`` ("layers.0.curve.0.0") to ``value``."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]

    def change(report: dict) -> None:
        target = report
        for key in parents:
            target = target[key]
        target[last] = value

    return change


@pytest.mark.parametrize("change, said", [
    (_set("layers.1.best_latency", "abc"), 'layers[1].best_latency is "abc", not a number'),
    (_set("layers.0.occurrences", "2"), 'layers[0].occurrences is "2", not a whole number'),
    (_set("layers.0.default_latency", -1), "layers[0].default_latency is -1, not a number of 0 or more"),
    (_set("model_latency_after", math.nan), "model_latency_after is NaN, which JSON does not hold"),
    (_set("layers.1.curve.2.1", -math.inf), "layers[1].curve[2][1] is -Infinity, which JSON does not hold"),
    (_set("layers.0.trials", 10**400), "layers[0].trials is a number of 401 digits, not a whole number from 0 to"),
    (_set("layers.0.flops", 10**400), "layers[0].flops is a number of 401 digits, too large a number"),
    (_set("tuners", {"random": [[[1e300, 0.002], [2, 0.001]], [[1, 0.003]]]}),
     "tuners.random[0][0][0] is 1e+300, not a trial number from 0 to 9223372036854775807"),
    (_set("layers.0.curve.1", [2]), "layers[0].curve[1] is a list, not a list of 2 items"),
    (_set("layers.0.curve", {"1": 0.001}), "layers[0].curve is an object, not a list"),
    (_set("layers.1", []), "layers[1] is an empty list, not an object"),
    (_set("layers.1", None), "layers[1] is null, not an object"),
    (_set("layers.0.name", ["conv"]), "layers[0].name is a list, not a string"),
    (_set("target", ["llvm"]), "target is a list, not an object"),
    (_set("roofline", {"peak_flops": "1e12", "peak_bw": 5e10}), 'roofline.peak_flops is "1e12", not a number'),
    (_set("tuners", {"random": [[[1, 0.002]], "abc"]}), 'tuners.random[1] is "abc", not a list'),
    (_set("model_latency_rounds", {"before": 0.01}), "model_latency_rounds.before is 0.01, not a list"),
    (_set("layers.0.probe", "no"), 'layers[0].probe is "no", not true or false'),
    (_set("versions", {"tvm": math.inf}), "versions.tvm is Infinity, which JSON does not hold"),  # read by nothing, printed by --json
])
def test_a_damaged_report_is_one_error_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, change,
                                                       said: str) -> None:
    """A helper's fuzzing: a report.json edited by hand or damaged (a string for a number,
    -1, NaN, a trial of 401 digits, a list for an object) ended `report` in some 16
    tracebacks. Each is one line naming the file and the field, exit 2, and nothing written."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "report.json"
    path.write_text(json.dumps(_damaged(change)))
    with pytest.raises(AutotuneError) as err:
        load_report(path)
    assert str(err.value).startswith(f"{path}: {said}")
    for extra in ([], ["--json"]):
        assert main(["report", str(tmp_path / "run"), *extra]) == 2
        out, errors = capsys.readouterr()
        assert out == "" and errors.splitlines() == [f"autotune: error: {err.value}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_report_nested_too_deeply_is_one_error(tmp_path: Path) -> None:
    """JSON 100000 lists deep was json's RecursionError, a traceback."""
    path = tmp_path / "report.json"
    path.write_text('{"layers": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(AutotuneError, match=r"^cannot read report .*report\.json: its JSON is nested too deeply$"):
        load_report(path)


def test_report_json_is_strict_json_whatever_the_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`report --json` printed NaN and Infinity, which no strict JSON reader takes: a file
    holding them is refused, and figures derived from finite ones (1e300 / 1e-300) that
    overflow are null, as unknown ones are."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    write_artifacts(make_report(), tmp_path / "run")
    report = make_report()
    report["layers"][0].update(best_latency=1e-300, default_latency=1e300, flops=1e300, speedup=None)
    report["layers"][1].update(flops=1e-300, bytes=1e300)  # its roof is 0: it divided by zero
    (tmp_path / "run" / "report.json").write_text(json.dumps(report))
    assert main(["report", str(tmp_path / "run"), "--json"]) == 0

    def refuse(constant: str):
        raise ValueError(f"{constant} in report --json")

    rows = json.loads(capsys.readouterr().out, parse_constant=refuse)["rows"]
    assert rows[0]["speedup"] is None and rows[0]["gflops"] is None and rows[0]["share"] is not None
    assert rows[1]["roofline_fraction"] is None
    (tmp_path / "run" / "report.json").write_text(json.dumps(dict(report, model_latency_before=math.nan)))
    assert main(["report", str(tmp_path / "run"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "model_latency_before is NaN, which JSON does not hold" in err


def test_report_shows_the_control_characters_of_a_report_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys) -> None:
    """Names in an edited report.json holding terminal escape sequences were printed as
    they were: the terminal was retitled, cleared, recoloured by `report`. They are shown
    escaped, as repr writes them; and a layer named ``[/]`` was rich's MarkupError."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    report = make_report()
    report.update(model="net\x1b]0;pwned\x07", run_id="\x9b2J", concurrent_runs=["\x1bc"])
    report["layers"][0].update(name="conv\x1b[2J\r\nx", op_class="conv2d\x08\x08\x08")
    report["layers"][1]["name"] = "[/]dense"
    write_artifacts(report, tmp_path / "run")
    assert main(["report", str(tmp_path / "run")]) == 0
    out, err = capsys.readouterr()
    shown = out + err
    assert not [c for c in shown if not c.isprintable() and c != "\n"]
    flat = "".join(shown.split())
    for escaped in (r"net\x1b]0;pwned\x07", r"conv\x1b[2J\r\nx", r"conv2d\x08\x08\x08", r"run\x9b2J", r"\x1bc",
                    "[/]dense"):
        assert escaped in flat, escaped
    assert r"net\x1b]0;pwned\x07" in format_table(report)  # layers.txt too
    # and the error line quoting a value from the file
    (tmp_path / "run" / "report.json").write_text(json.dumps(dict(report, budget="\x1b[2J")))
    assert main(["report", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err == f'autotune: error: {tmp_path / "run" / "report.json"}: budget is "\\u001b[2J", not a whole number\n'
