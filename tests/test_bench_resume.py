"""The history-guided benchmark's measurement file: a run cut short resumes from it, and
``--replay`` answers every measurement from it, with no hardware.

Real llvm builds and timings; the lent GPU's 10-minute calls are why this matters."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import te  # noqa: E402

from autotune.target import resolve_target  # noqa: E402
from autotune.templates import config_to_json  # noqa: E402
from autotune.templates.meta_schedule_space import MetaScheduleSpace  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from history_guided.history_setup import build_history  # noqa: E402
from history_guided.layers import layer_at, layers_of, source_layers  # noqa: E402
from history_guided.lockstep import Run, lockstep  # noqa: E402
from history_guided.measurers import CachedMeasurer, ReplayMeasurer, check_best  # noqa: E402
from history_guided.scoring import (  # noqa: E402
    as_dispatched,
    dispatched_comparison,
    final_latency_test,
    final_latency_verdict,
)
from history_guided.tables import markdown_table  # noqa: E402
from history_guided.tuner_specs import make_run_tuner, pairs_of, parse_tuner  # noqa: E402
from autotune.search import make_tuner  # noqa: E402


def _matmul_func(n: int):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")


def _space_and_configs(n: int, seed: int):
    """The llvm target, a 32^3 matmul's space and ``n`` distinct random configs of it."""
    target = resolve_target("llvm")
    space = MetaScheduleSpace(_matmul_func(32), target.tvm_target, name="mm")
    rng = np.random.default_rng(seed)
    cfgs = list({config_to_json(c): c for c in (space.random_config(rng) for _ in range(3 * n))}.values())[:n]
    assert len(cfgs) == n
    return target, space, cfgs


def test_measurement_file_answers_a_resumed_run(tmp_path):
    target, space, cfgs = _space_and_configs(3, seed=0)
    path = tmp_path / "measurements.jsonl"

    first = CachedMeasurer(target, repeat=1, path=str(path))
    try:
        got = first.measure("mm", space, cfgs[:2])
    finally:
        first.measurer.close()
    assert first.measured == 2 and all(r.ok for r in got), [r.status for r in got]
    lines = path.read_text().splitlines()
    assert [json.loads(ln)["config"] for ln in lines] == [config_to_json(c) for c in cfgs[:2]]

    # A killed run's torn last line, and another target's line, are skipped.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"target": "cuda:sm_90:other", "layer": "mm", "config": config_to_json(cfgs[2]),
                             "latency": 1e-9, "status": "ok"}) + "\n")
        fh.write('{"target": "llvm')

    resumed = CachedMeasurer(target, repeat=1, path=str(path))
    try:
        again = resumed.measure("mm", space, cfgs)
    finally:
        resumed.measurer.close()
    assert resumed.loaded == 2
    assert resumed.measured == 1  # only the config the first run never reached
    assert [r.latency for r in again[:2]] == [r.latency for r in got]
    assert again[2].ok and again[2].latency != 1e-9
    # The new line starts on a line of its own, after the torn one.
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["config"] == config_to_json(cfgs[2]) and last["target"] == target.key


def test_lines_of_one_timing_answer_only_runs_of_that_timing(tmp_path):
    """Few-us GPU kernels time differently from queued launches than by TVM's evaluator,
    so a measurement file keeps them apart: a queued run writes its lines with their
    timing, reads only those, and a run or replay of TVM's evaluator never sees them."""
    target, space, cfgs = _space_and_configs(2, seed=3)
    path = tmp_path / "measurements.jsonl"
    plain = CachedMeasurer(target, repeat=1, path=str(path))
    try:
        plain.measure("mm", space, cfgs[:1])
    finally:
        plain.close()
    queued = CachedMeasurer(target, repeat=1, path=str(path), timing="queued")
    try:
        assert queued.loaded == 0  # the evaluator's line is not an answer here
        got = queued.measure("mm", space, cfgs)
    finally:
        queued.close()
    assert queued.measured == 2 and all(r.ok for r in got)
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert ["timing" in ln for ln in lines] == [False, True, True]  # the evaluator's lines keep their old form
    assert {ln["timing"] for ln in lines[1:]} == {"queued"}
    again = CachedMeasurer(target, repeat=1, path=str(path))
    try:
        assert again.loaded == 1
    finally:
        again.close()
    assert ReplayMeasurer(str(path), target.key).loaded == 1
    replay = ReplayMeasurer(str(path), target.key, timing="queued")
    assert replay.loaded == 2 and [r.latency for r in replay.measure("mm", space, cfgs)] == [r.latency for r in got]
    assert ReplayMeasurer.targets_in(str(path), "queued") == [target.key]


def test_tuner_specs_carry_options_and_pair_with_their_baseline():
    """Variants run side by side (``tl_xgb:transfer=joint``); each guided variant is
    compared with the baseline that has the same options."""
    assert parse_tuner("gga:pop_size=16;p_elite=0.5;transfer=joint") == (
        "gga", {"pop_size": 16, "p_elite": 0.5, "transfer": "joint"})
    assert parse_tuner("xgb") == ("xgb", {})
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_tuner("ga:pop_size")
    tuners = ["xgb", "tl_xgb", "tl_xgb:transfer=joint", "ga", "ga:pop_size=16", "gga:pop_size=16"]
    assert pairs_of(tuners) == [("tl_xgb", "xgb"), ("tl_xgb:transfer=joint", "xgb"), ("gga:pop_size=16", "ga:pop_size=16")]
    assert pairs_of(["tl_xgb", "ga"]) == []  # no baseline ran: nothing to compare


@pytest.mark.parametrize("spec, says", [
    ("annealer", "unknown tuner"),
    ("tl_xgb:no_such_option=1", "no_such_option"),
    ("tl_xgb:rank_own=1;rank_sources=0", "needs rank_sources"),
])
def test_a_bad_tuner_spec_ends_the_benchmark_with_one_line(spec, says):
    _, space, _ = _space_and_configs(0, seed=0)

    class Layer:  # what make_run_tuner reads of a layer
        @staticmethod
        def features():
            return [5.0, 5.0, 5.0]

    with pytest.raises(SystemExit, match=says) as exit_:
        make_run_tuner(spec, space, Layer(), 0, [])
    assert str(exit_.value).startswith(f"error: --tuners {spec}:") and "\n" not in str(exit_.value)


def test_a_bad_tuner_spec_ends_the_benchmark_before_history_is_built(tmp_path, monkeypatch):
    """A misspelt option in the last of several tuners once ended the run only after the
    whole history was measured (minutes of the lent GPU's time); it ends it at once, and
    no database or measurement file is written."""
    import bench_history_guided

    db, measurements = tmp_path / "history.db", tmp_path / "measurements.jsonl"
    monkeypatch.setattr(sys, "argv", [
        "bench_history_guided.py", "--history-db", str(db), "--measurements", str(measurements),
        "--source", "resnet18:1", "--history-trials", "4", "--size", "32", "--targets", "resnet18:0",
        "--tuners", "xgb,gga:pop_sise=16", "--trials", "2", "--seeds", "1"])
    with pytest.raises(SystemExit, match="pop_sise") as exit_:
        bench_history_guided.main()
    assert str(exit_.value).startswith("error: --tuners gga:pop_sise=16:")
    assert not db.exists() and not measurements.exists()


def test_measuring_for_a_device_this_machine_lacks_is_refused(tmp_path, monkeypatch):
    """On a machine with no GPU, ``--target cuda:sm_90`` once built every candidate and
    filled the measurement file with run errors; it ends at once, nothing written."""
    import bench_history_guided

    if resolve_target("cuda:sm_90").has_device:
        pytest.skip("this machine has the device")
    db, measurements = tmp_path / "history.db", tmp_path / "measurements.jsonl"
    monkeypatch.setattr(sys, "argv", [
        "bench_history_guided.py", "--target", "cuda:sm_90", "--history-db", str(db), "--measurements", str(measurements),
        "--source", "resnet18:1", "--history-trials", "4", "--size", "32", "--targets", "resnet18:0",
        "--tuners", "xgb", "--trials", "2", "--seeds", "1"])
    with pytest.raises(SystemExit, match="cannot measure on cuda .*--replay FILE") as exit_:
        bench_history_guided.main()
    assert str(exit_.value).startswith("error: ") and "\n" not in str(exit_.value)
    assert not db.exists() and not measurements.exists()


def test_a_replay_of_a_layer_the_file_lacks_ends_with_one_line(tmp_path, monkeypatch):
    """Every answer for a layer the file never measured would be "invalid", and its tuner
    asked on for ever (a replay here ran 4,600 rounds before it was stopped); it ends at
    once, before a new database is written."""
    import bench_history_guided

    target = resolve_target("llvm")
    layer = layer_at("resnet18:0", 32)
    space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
    replay = tmp_path / "measurements.jsonl"
    replay.write_text(json.dumps({"target": target.key, "layer": layer.workload_key, "latency": 1e-4, "status": "ok",
                                  "config": config_to_json(space.default_config())}) + "\n")
    db = tmp_path / "history.db"

    def run(*args: str) -> None:
        monkeypatch.setattr(sys, "argv", ["bench_history_guided.py", "--replay", str(replay), "--history-db", str(db),
                                          "--size", "32", "--tuners", "xgb", "--trials", "1", "--seeds", "1", *args])
        bench_history_guided.main()

    with pytest.raises(SystemExit, match="no valid measurement .* of resnet18:conv2d1;") as exit_:
        run("--targets", "resnet18:1", "--source", "resnet18:0", "--history-trials", "1")
    assert "\n" not in str(exit_.value) and not db.exists()
    with pytest.raises(SystemExit, match="of --source resnet18:3: conv2d3;"):
        run("--targets", "resnet18:0", "--source", "resnet18:3", "--history-trials", "1")
    assert not db.exists()


def test_replay_answers_from_the_file_and_counts_approximations(tmp_path):
    _, space, cfgs = _space_and_configs(4, seed=1)
    path = tmp_path / "measurements.jsonl"
    lines = [{"target": "llvm:x:cpu", "layer": "mm", "config": config_to_json(c), "latency": lat, "status": "ok"}
             for c, lat in zip(cfgs[:3], (3e-6, 1e-6, 2e-6))]
    lines.append({"target": "cuda:sm_90:gpu", "layer": "mm", "config": config_to_json(cfgs[3]), "latency": 1e-9, "status": "ok"})
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines) + '{"target": "llvm')  # torn last line
    assert ReplayMeasurer.targets_in(str(path)) == ["cuda:sm_90:gpu", "llvm:x:cpu"]

    replay = ReplayMeasurer(str(path), "llvm:x:cpu")
    assert replay.loaded == 3 and replay.best("mm") == 1e-6
    got = replay.measure("mm", space, cfgs)
    assert [r.latency for r in got[:3]] == [3e-6, 1e-6, 2e-6]  # recorded: answered as measured
    assert got[3].ok and got[3].latency in (1e-6, 2e-6, 3e-6)  # not in the file: its nearest config's
    assert (replay.asked, replay.approximations, replay.measured) == (4, 1, 0)
    # which answers were approximated, per run: only the config the file lacks
    assert replay.approximated_in("mm", cfgs) == 1 and replay.approximated_in("mm", cfgs[:3]) == 0
    # trials answered as measured before a run's first approximated answer
    assert replay.exact_trials("mm", got) == 3 and replay.exact_trials("mm", got[3:] + got[:3]) == 0


def test_a_replayed_table_names_the_tuners_whose_answers_were_approximated():
    """A replay answers a config the file lacks with a neighbour's latency: the table
    must say so, per tuner, and say nothing when every answer was in the file."""
    curve = [4e-6, 3e-6, 3e-6, 2e-6]
    entry = {"median_trials_to_5pct": 4, "median_trials_to_25pct": 4, "median_final_latency_s": 2e-6,
             "curves": [curve, curve]}
    result = {"trials": 4, "layers": [{"layer": "m:conv", "match_score": 0.9, "tuners": {
        "xgb": {**entry, "approximated": [0, 0]}, "tl_xgb": {**entry, "approximated": [2, 1]}}}]}
    table = markdown_table(result)
    assert "tl_xgb 3 of 8 (38%)" in table and "xgb 0" not in table
    result["layers"][0]["tuners"]["tl_xgb"]["approximated"] = [0, 0]
    assert "approximated" not in markdown_table(result)


def test_final_latencies_are_compared_seed_by_seed_with_a_rank_test():
    """"Final latency no worse" is judged on every seed's final, not on two medians: a
    guided tuner whose finals all lie above the baseline's ends higher, one whose finals
    interleave with them shows no difference, and the table says which."""

    def row(base_finals, guided_finals):
        def entry(finals):
            return {"median_trials_to_5pct": 3, "median_trials_to_25pct": 3, "median_final_latency_s": float(np.median(finals)),
                    "curves": [[2 * f, f, f] for f in finals]}
        return {"layer": "m:conv", "match_score": 0.5, "tuners": {"xgb": entry(base_finals), "tl_xgb": entry(guided_finals)}}

    low = [1.0e-4, 1.1e-4, 1.2e-4, 1.3e-4, 1.4e-4, 1.5e-4]
    high = [f + 1e-4 for f in low]
    worse = final_latency_test(row(low, high), "tl_xgb", "xgb")
    assert worse["seeds"] == [6, 6] and worse["median_s"] == [1.25e-4, 2.25e-4]
    assert worse["p_higher"] < 0.01 < 0.99 < worse["p_lower"]
    assert final_latency_verdict(worse).startswith("higher")
    assert final_latency_verdict(final_latency_test(row(high, low), "tl_xgb", "xgb")).startswith("lower")
    mixed = final_latency_test(row(low[::2] + high[1::2], low[1::2] + high[::2]), "tl_xgb", "xgb")
    assert mixed["p_two_sided"] > 0.5 and final_latency_verdict(mixed).startswith("no difference shown")
    table = markdown_table({"trials": 3, "layers": [row(low, high)]})
    assert "| m:conv | 125.0 (125.0) / 225.0 (225.0) | higher (p = " in table


def test_each_layer_is_also_compared_as_autotune_would_dispatch_it():
    """Besides the paper's pairs, the table puts each layer's dispatched tuner (guided GA
    at a high match, transfer XGBoost below) next to cold XGBoost: what a user gets."""

    def entry(hit_at, final):
        curve = [1e-3] * (hit_at - 1) + [final] * (11 - hit_at)
        return {"median_trials_to_5pct": 11, "median_trials_to_25pct": 11, "median_final_latency_s": final,
                "curves": [curve, curve]}

    tuners = {"xgb": entry(10, 2e-4), "tl_xgb": entry(5, 2e-4), "gga": entry(2, 1e-4)}
    high = {"layer": "m:hi", "match_score": 0.9, "tuners": tuners}
    low = {"layer": "m:lo", "match_score": 0.5, "tuners": tuners}
    assert as_dispatched(high)["dispatched"] == "gga" and as_dispatched(low)["dispatched"] == "tl_xgb"
    assert set(as_dispatched(high)["tuners"]) == {"xgb", "autotune"}
    assert as_dispatched({**low, "match_score": 0.0}) is None  # dispatch would give cold XGBoost itself
    assert as_dispatched({**high, "tuners": {"xgb": tuners["xgb"], "tl_xgb": tuners["tl_xgb"]}}) is None
    # a run that names the tuner with options (as the GPU runs do) is still the one dispatched
    with_options = {**high, "tuners": {"xgb": tuners["xgb"], "gga:pop_size=16": tuners["gga"]}}
    assert as_dispatched(with_options)["dispatched"] == "gga:pop_size=16"
    two_variants = {**high, "tuners": {**with_options["tuners"], "gga:pop_size=8": tuners["gga"]}}
    assert as_dispatched(two_variants) is None  # which one autotune would run is not known
    # beside a variant that changes one more option, the one nearer tune's defaults
    one_more = {**high, "tuners": {**with_options["tuners"], "gga:pop_size=16;handover=0": tuners["gga"]}}
    assert as_dispatched(one_more)["dispatched"] == "gga:pop_size=16"
    # beside a variant with options, the tuner named bare is what tune runs (run 53)
    with_default = {**high, "tuners": {**tuners, "gga:model_seeds=0": tuners["gga"]}}
    assert as_dispatched(with_default)["dispatched"] == "gga"
    table = markdown_table({"trials": 10, "layers": [high, low]})
    assert "| m:hi (0.90) | gga | 10 / 2 (5.0x) |" in table
    assert "| m:lo (0.50) | tl_xgb | 10 / 5 (2.0x) |" in table
    assert "| median ratio | | 3.5x |" in table
    summary = dispatched_comparison([high, low], 10)  # what the result JSON's summary holds
    assert [(e["layer"], e["tuner"], e["match_baseline"]["ratio"]) for e in summary["per_layer"]] == [
        ("m:hi", "gga", 5.0), ("m:lo", "tl_xgb", 2.0)]
    assert summary["median_ratio"]["match_baseline"] == 3.5
    json.dumps(summary)  # JSON-ready


def test_runs_side_by_side_see_what_they_see_alone(tmp_path):
    """The bench drives every tuner and seed of a layer in lockstep (one build batch per
    round); each run's curve must be the one it gets run alone."""
    _, space, cfgs = _space_and_configs(40, seed=2)
    rng = np.random.default_rng(3)
    path = tmp_path / "measurements.jsonl"
    path.write_text("".join(json.dumps({"target": "llvm:x:cpu", "layer": "mm", "config": config_to_json(c),
                                        "latency": float(lat), "status": "ok"}) + "\n"
                            for c, lat in zip(cfgs, rng.uniform(1e-6, 1e-5, len(cfgs)))))

    def run(name, seed):
        return Run(make_tuner(name, space, seed=seed), "mm", space, trials=20)

    specs = [("xgb", 0), ("xgb", 1), ("ga", 0), ("random", 4)]
    together = [run(*s) for s in specs]
    rounds = []
    lockstep(together, ReplayMeasurer(str(path), "llvm:x:cpu"), batch=8, on_round=lambda k, active: rounds.append(len(active)))
    for spec, joint in zip(specs, together):
        alone = run(*spec)
        lockstep([alone], ReplayMeasurer(str(path), "llvm:x:cpu"), batch=8)
        assert len(joint.curve) == 20 and joint.curve == alone.curve, spec
        assert joint.best == min(c for c in joint.curve if c is not None)
    assert rounds == [4, 4, 0]  # 8 + 8 + 4 trials each

    # At most two active, the next starting as one finishes: still the same curves.
    rolling = [run(*s) for s in specs]
    rolling[1].trials = 12  # finishes a round before the others: the third takes its place
    done, active_per_round = [], []
    lockstep(rolling, ReplayMeasurer(str(path), "llvm:x:cpu"), batch=8, max_active=2, on_finish=done.append,
             on_round=lambda k, active: active_per_round.append([rolling.index(r) for r in active]))
    for spec, joint in zip(specs, rolling):
        alone = run(*spec)
        alone.trials = joint.trials
        lockstep([alone], ReplayMeasurer(str(path), "llvm:x:cpu"), batch=8)
        assert joint.curve == alone.curve and len(joint.curve) == joint.trials, spec
    assert [rolling.index(r) for r in done] == [1, 0, 2, 3]
    assert active_per_round == [[0, 1], [0, 2], [2, 3], [2, 3], [3], []]


def test_one_build_batch_measures_a_config_asked_twice_once():
    """Two seeds proposing the same config in one round: one build, one answer for both."""
    target, space, cfgs = _space_and_configs(3, seed=4)
    cm = CachedMeasurer(target, repeat=1)
    try:
        first, second = cm.measure_groups([("mm", space, cfgs[:2]), ("mm", space, cfgs[1:])])
    finally:
        cm.close()
    assert cm.measured == 3
    assert all(r.ok for r in first + second), [r.status for r in first + second]
    assert first[1].latency == second[0].latency


@pytest.mark.parametrize("resolve, spec, says", [
    (layer_at, "resnet18", "is not MODEL:INDEX"),
    (layer_at, "resnet18:first", "is not MODEL:INDEX"),
    (layer_at, "nosuchmodel:0", "no zoo model named 'nosuchmodel'"),
    (source_layers, "resnet18@", "is not MODEL, MODEL@SIZE, MODEL:INDEX or MODEL@SIZE:INDEX"),
    (source_layers, "resnet18@big:0", "is not MODEL, MODEL@SIZE, MODEL:INDEX or MODEL@SIZE:INDEX"),
    (source_layers, "resnet18@64:x", "is not MODEL, MODEL@SIZE, MODEL:INDEX or MODEL@SIZE:INDEX"),
    (source_layers, "resnet18@64:99", "tunable layers at size 64, so no layer 99"),
    (source_layers, "nosuchmodel@64", "no zoo model named 'nosuchmodel'"),
])
def test_a_bad_layer_or_source_spec_ends_the_benchmark_with_one_line(resolve, spec, says):
    with pytest.raises(SystemExit) as err:
        resolve(spec, 56)
    message = str(err.value)
    assert message.startswith("error: ") and says in message and "\n" not in message


def test_a_source_names_a_model_its_layers_at_another_size_or_one_of_them():
    """History can hold a target's counterpart at another input resolution (run 38)
    without the rest of that model."""
    at32 = source_layers("resnet18", 32)
    assert at32 == layers_of("resnet18", 32)
    at64 = source_layers("resnet18@64", 32)
    assert len(at64) == len(at32) and at64[0].workload_key != at32[0].workload_key
    (stem,) = source_layers("resnet18@64:0", 32)
    assert stem.workload_key == at64[0].workload_key
    assert source_layers("resnet18:1", 32)[0].workload_key == at32[1].workload_key


@pytest.mark.parametrize("text, says", [
    ('[{"name": "x", "config": {}}]', "every entry needs name, layer and config; one lacks 'layer'"),
    ("not json", "Expecting value"),
])
def test_a_bad_probe_file_ends_with_one_line_before_measuring(tmp_path, monkeypatch, text, says):
    import measure_configs

    bad = tmp_path / "probe.json"
    bad.write_text(text)
    monkeypatch.setattr(sys, "argv", ["measure_configs.py", str(bad)])
    with pytest.raises(SystemExit) as err:
        measure_configs.main()
    assert str(err.value).startswith(f"error: {bad}: ") and says in str(err.value) and "\n" not in str(err.value)


def test_a_bad_source_among_good_ones_writes_nothing_to_history(tmp_path):
    from autotune.history import open_history

    store = open_history(str(tmp_path / "history.db"))
    with pytest.raises(SystemExit, match="no layer 99"):
        build_history(store, resolve_target("llvm"), None, ["resnet18", "resnet18@64:99"], 32, 0, seed=0, exclude=set())
    assert store.workloads() == [] and store.targets() == []
    store.close()


def test_the_result_says_which_tuners_made_the_history(tmp_path):
    """A reused or imported history need not be what --history-tuner names (the H100 runs
    imported a cold-XGBoost history while the argument said random): the count comes from
    the records themselves, source layers only."""
    from autotune.history import open_history

    target = resolve_target("llvm")
    store = open_history(str(tmp_path / "history.db"))
    store.register_target(target.history_info())
    first, second, target_layer = layers_of("resnet18", 32)[:3]
    for layer, tuner, n in ((first, "xgb", 2), (second, "random", 1), (target_layer, "xgb", 5)):
        store.register_workload(layer.workload_info())
        for i in range(n):
            store.add_record(workload_key=layer.workload_key, target_key=target.key, space_id="s", config={"k": i},
                             samples=[1e-3], status="ok", tuner=tuner)
    made_by = build_history(store, target, None, ["resnet18"], 32, 0, seed=0, exclude={target_layer.workload_key},
                            tuner_name="random")
    assert made_by == {"xgb": 2, "random": 1}  # the excluded target layer's records are no history
    store.close()


def test_the_result_records_what_was_kept_out_of_history(tmp_path, monkeypatch):
    """A replay that keeps out other layers than its run draws on another history (the
    H100's 100-trial replay without the run's --exclude gave other guided curves): the
    result file must say what its run kept out, and with which arguments it ran."""
    import bench_history_guided
    from autotune.history import open_history

    target = resolve_target("llvm")
    layer = layer_at("resnet18:0", 32)
    space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
    rng = np.random.default_rng(0)
    replay = tmp_path / "measurements.jsonl"
    replay.write_text("".join(
        json.dumps({"target": target.key, "layer": layer.workload_key, "config": config_to_json(space.random_config(rng)),
                    "latency": lat, "status": "ok"}) + "\n" for lat in (3e-4, 2e-4, 1e-4)))
    db = tmp_path / "history.db"
    open_history(str(db)).close()
    out = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", [
        "bench_history_guided.py", "--replay", str(replay), "--history-db", str(db), "--source", "resnet18:3",
        "--size", "32", "--targets", "resnet18:0", "--exclude", "resnet18:1,resnet18:3", "--tuners", "xgb",
        "--trials", "2", "--batch", "2", "--seeds", "1", "--out", str(out)])
    assert bench_history_guided.main() == 0
    result = json.loads(out.read_text())
    assert result["history"]["kept_out"] == ["resnet18:0", "resnet18:1", "resnet18:3"]
    assert result["arguments"]["exclude"] == "resnet18:1,resnet18:3" and result["arguments"]["tuners"] == "xgb"
    assert len(result["layers"]) == 1 and len(result["layers"][0]["tuners"]["xgb"]["curves"][0]) == 2


def test_a_replay_into_a_new_database_builds_the_history_from_the_file(tmp_path, monkeypatch):
    """A run whose history was built from the measurement file (run 43b) replays on any
    machine: into a database that does not exist yet the replay builds that history from
    the file as the run did, and the guided tuner's curve comes back exactly."""
    import bench_history_guided

    measurements = tmp_path / "measurements.jsonl"

    def run(db: str, out: str, *extra: str) -> dict:
        monkeypatch.setattr(sys, "argv", [
            "bench_history_guided.py", "--history-db", db, "--source", "resnet18:1", "--history-trials", "4",
            "--size", "32", "--targets", "resnet18:0", "--tuners", "tl_xgb", "--trials", "4", "--batch", "2",
            "--seeds", "1", "--out", out, *extra])
        assert bench_history_guided.main() == 0
        with open(out, encoding="utf-8") as fh:
            return json.load(fh)

    measured = run(str(tmp_path / "measured.db"), str(tmp_path / "measured.json"), "--measurements", str(measurements))
    replayed = run(str(tmp_path / "new.db"), str(tmp_path / "replayed.json"), "--replay", str(measurements))
    assert replayed["history"]["records"] == measured["history"]["records"] == 4
    (row,), (again,) = measured["layers"], replayed["layers"]
    assert again["tuners"]["tl_xgb"]["curves"] == row["tuners"]["tl_xgb"]["curves"]
    assert again["tuners"]["tl_xgb"]["approximated"] == [0] and again["history_depth"] == row["history_depth"]
    assert row["history_depth"] == {"sources": 1, "per_source_median": 4.0, "per_source_min": 4,
                                    "nearest_similarity": row["match_score"], "nearest_configs": 4}
    # A measured run checks the kernel behind its best latency; a replay has none to run.
    assert row["best_checked"]["verified"] is True and row["best_checked"]["latency_s"] == row["best_known_s"]
    assert "best_checked" not in again


def test_a_replay_completes_an_existing_history_on_a_copy(tmp_path, monkeypatch):
    """The H100 session that deepened an imported export (64 to 256 records per source)
    replays only if the replay completes the history as the run did, from the file; and
    a replay must never leave answers the file lacked in the database it was given."""
    import shutil

    import bench_history_guided
    from autotune.history import open_history

    measurements = tmp_path / "measurements.jsonl"

    def run(db, name: str, depth: int, *extra: str) -> dict:
        monkeypatch.setattr(sys, "argv", [
            "bench_history_guided.py", "--history-db", str(db), "--source", "resnet18:1", "--history-trials", str(depth),
            "--history-tuner", "xgb", "--size", "32", "--targets", "resnet18:0", "--tuners", "tl_xgb", "--trials", "4",
            "--batch", "2", "--seeds", "1", "--out", str(tmp_path / f"{name}.json"), *extra])
        assert bench_history_guided.main() == 0
        return json.loads((tmp_path / f"{name}.json").read_text())

    def records(db) -> int:
        store = open_history(str(db), readonly=True)
        try:
            return len(store.records())
        finally:
            store.close()

    shallow = tmp_path / "shallow.db"
    run(shallow, "shallow", 2, "--measurements", str(measurements))
    before = records(shallow)
    shutil.copy(shallow, tmp_path / "deepened.db")
    measured = run(tmp_path / "deepened.db", "measured", 4, "--measurements", str(measurements))
    assert records(tmp_path / "deepened.db") > records(shallow)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    replayed = run(shallow, "replayed", 4, "--replay", str(measurements))
    assert not any(scratch.iterdir())  # the copy it completed is gone with it
    assert replayed["history"]["records"] == measured["history"]["records"] == 4
    assert replayed["layers"][0]["tuners"]["tl_xgb"]["curves"] == measured["layers"][0]["tuners"]["tl_xgb"]["curves"]
    assert replayed["layers"][0]["history_depth"] == measured["layers"][0]["history_depth"]
    assert replayed["replay"]["approximated"] == 0 and replayed["replay"]["approximation"] == "nearest"
    assert records(shallow) == before  # the replay worked on a copy
    # a source the history must complete and the file never measured: one line, nothing written
    with pytest.raises(SystemExit, match="of --source resnet18:3: conv2d3;") as exit_:
        run(shallow, "lacking", 4, "--replay", str(measurements), "--source", "resnet18:3")
    assert "\n" not in str(exit_.value) and records(shallow) == before
    # --keep-history: a replay whose history the file answered throughout writes it back,
    # so the steps of a recorded run replay one after another; one it approximated, not
    deeper = run(shallow, "deeper", 6, "--replay", str(measurements), "--keep-history")
    assert deeper["replay"]["approximated"] > 0 and records(shallow) == before
    run(shallow, "kept", 4, "--replay", str(measurements), "--keep-history")
    assert records(shallow) == records(tmp_path / "deepened.db") > before
    with pytest.raises(SystemExit, match="--keep-history: with --replay and an existing --history-db"):
        run(tmp_path / "none.db", "none", 4, "--replay", str(measurements), "--keep-history")


def test_the_fastest_config_is_checked_against_the_layers_reference():
    """A fast kernel that computes something else must not stand as the best known: the
    check runs the fastest measured config against the layer's own untuned loop nest."""
    from types import SimpleNamespace

    target, space, cfgs = _space_and_configs(2, seed=1)
    cm = CachedMeasurer(target, repeat=1)
    try:
        cm.measure("mm", space, cfgs)
        layer = SimpleNamespace(workload_key="mm", func=_matmul_func(32))
        good = check_best(cm, layer, space, target)
        assert good["verified"] is True and good["problem"] is None and good["latency_s"] == cm.best("mm")
        other = te.placeholder((32, 32), name="A")  # same shapes, another computation: A + 1
        wrong = te.compute((32, 32), lambda i, j: other[i, j] + 1.0, name="C")
        unlike = SimpleNamespace(workload_key="mm", func=te.create_prim_func(
            [other, te.placeholder((32, 32), name="B"), wrong]).with_attr("global_symbol", "main"))
        bad = check_best(cm, unlike, space, target)
        assert bad["verified"] is False and "differs from the reference" in bad["problem"]
        assert check_best(cm, SimpleNamespace(workload_key="unmeasured", func=layer.func), space, target) is None
    finally:
        cm.close()


def test_restating_rank_reads_one_layers_valid_configs_up_to_a_line(tmp_path):
    """bench_restating_rank.py screens on the file as it stood before a run appended the
    configs its own rankers chose: ``first_lines`` must cut there."""
    from bench_restating_rank import measured_by_layer

    lines = [("t", "a", {"k": 1}, 1e-3, "ok"), ("t", "a", {"k": 2}, None, "build_error"), ("u", "a", {"k": 3}, 2e-3, "ok"),
             ("t", "b", {"k": 4}, 3e-3, "ok"), ("t", "a", {"k": 5}, 4e-3, "ok")]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"target": t, "layer": w, "config": json.dumps(c), "latency": lat, "status": st}) + "\n"
                            for t, w, c, lat, st in lines))
    assert measured_by_layer(str(path), "t", ["a"]) == {"a": ([{"k": 1}, {"k": 5}], [1e-3, 4e-3])}
    assert measured_by_layer(str(path), "t", ["a"], first_lines=4) == {"a": ([{"k": 1}], [1e-3])}
    # several layers in one pass; a layer the file lacks has nothing
    assert measured_by_layer(str(path), "t", ["a", "b", "c"], first_lines=4) == {
        "a": ([{"k": 1}], [1e-3]), "b": ([{"k": 4}], [3e-3]), "c": ([], [])}


def test_the_transfer_ranking_reads_a_runs_history_and_file_and_ranks_what_it_measured(tmp_path, monkeypatch):
    """``bench_transfer_ranking.py`` ranks, offline, the configs a guided run measured, with
    the run's history: every measured config of the layer is ranked, and on LLVM (no
    device limits) ``plausible_priors`` leaves every record in."""
    import bench_history_guided
    import bench_transfer_ranking

    db, measurements, out = tmp_path / "h.db", tmp_path / "m.jsonl", tmp_path / "rank.json"
    monkeypatch.setattr(sys, "argv", [
        "bench_history_guided.py", "--history-db", str(db), "--source", "resnet18:1", "--history-trials", "4",
        "--size", "32", "--targets", "resnet18:0", "--tuners", "xgb", "--trials", "6", "--batch", "3",
        "--seeds", "1", "--measurements", str(measurements), "--out", str(tmp_path / "run.json")])
    assert bench_history_guided.main() == 0
    target_key = resolve_target("llvm").key
    layer_key = layer_at("resnet18:0", 32).workload_key
    ok = {r["config"] for r in map(json.loads, measurements.read_text().splitlines())
          if r["layer"] == layer_key and r["target"] == target_key and r["status"] == "ok"}

    monkeypatch.setattr(sys, "argv", [
        "bench_transfer_ranking.py", "--history-db", str(db), "--measurements", str(measurements), "--size", "32",
        "--targets", "resnet18:0", "--variants", "|plausible_priors=1", "--seeds", "2", "--out", str(out)])
    assert bench_transfer_ranking.main() == 0
    (row,) = json.loads(out.read_text())["layers"]
    assert row["measured"] == len(ok) >= 6 and row["priors"] == 4
    default, plausible = row["variants"]["default"], row["variants"]["plausible_priors=1"]
    assert default["kept"] == plausible["kept"] == 4
    assert [s["ranked"] for s in default["per_seed"]] == [len(ok)] * 2
    assert default["per_seed"] == plausible["per_seed"]
    assert -1.0 <= default["spearman_median"] <= 1.0
    assert default["best_of_top_us_median"]["1"] >= row["best_measured_us"]


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory):
    """A small measured run (ResNet-18's first conv at 32x32, cold and transfer XGBoost,
    two seeds of 12 trials; a source two trials deep): its measurement file, the target
    layer's measured configs and the result file, for the analyses that read them."""
    import bench_history_guided

    tmp = tmp_path_factory.mktemp("measured_run")
    measurements = tmp / "m.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", [
            "bench_history_guided.py", "--history-db", str(tmp / "h.db"), "--source", "resnet18:1", "--history-trials", "2",
            "--size", "32", "--targets", "resnet18:0", "--tuners", "xgb,tl_xgb", "--trials", "12", "--batch", "6",
            "--seeds", "2", "--measurements", str(measurements), "--out", str(tmp / "run.json")])
        assert bench_history_guided.main() == 0
    layer_key = layer_at("resnet18:0", 32).workload_key
    latency = {r["config"]: r["latency"] for r in map(json.loads, measurements.read_text().splitlines())
               if r["layer"] == layer_key and r["status"] == "ok"}
    return measurements, latency, tmp / "run.json"


def test_the_replay_approximation_judges_both_ways_on_a_runs_file(measured_run, tmp_path, monkeypatch):
    """``bench_replay_approximation.py`` answers each fifth of a layer's measured configs
    from the other four, both ways, and reports against what was measured; a file too
    thin for five folds, or no file, ends with one line."""
    import bench_replay_approximation

    measurements, latency, _ = measured_run
    out = tmp_path / "approx.json"
    ok = set(latency)

    def run(*extra: str) -> None:
        monkeypatch.setattr(sys, "argv", ["bench_replay_approximation.py", "--measurements", str(measurements),
                                          "--size", "32", "--out", str(out), *extra])
        assert bench_replay_approximation.main() == 0

    run("--targets", "resnet18:0")
    (row,) = json.loads(out.read_text())["layers"]
    assert row["measured"] == len(ok) >= 10
    for method in ("nearest", "model"):
        judged = row[method]
        assert -1.0 <= judged["spearman"] <= 1.0 and judged["median_rel_error"] >= 0
        assert 0 <= judged["false_finds"] < row["measured"] and 0 <= judged["true_fast"] <= judged["fastest_5pct"]
    with pytest.raises(SystemExit, match=r"holds 2 measured configs of resnet18:1 on .*; at least 10 are needed") as exit_:
        run("--targets", "resnet18:1")  # a source, two trials deep
    assert "\n" not in str(exit_.value)
    monkeypatch.setattr(sys, "argv", ["bench_replay_approximation.py", "--measurements", str(tmp_path / "none.jsonl")])
    with pytest.raises(SystemExit, match="--measurements: no file at"):
        bench_replay_approximation.main()


def test_the_feature_comparison_draws_a_layers_configs_from_a_runs_file(measured_run, tmp_path, monkeypatch):
    """``bench_features.py --measurements`` judges both feature sets on configs a file
    measured, drawn without measuring; a layer too thin for it, or no file, ends with
    one line."""
    import bench_features

    measurements, latency, _ = measured_run
    out = tmp_path / "features.json"

    def run(*extra: str) -> None:
        monkeypatch.setattr(sys, "argv", ["bench_features.py", "--measurements", str(measurements), "--size", "32",
                                          "--configs", "16", "--folds", "2", "--out", str(out), *extra])
        assert bench_features.main() == 0

    run("--layers", "resnet18:0")
    result = json.loads(out.read_text())
    (row,) = result["layers"]
    assert result["configs_from"] == str(measurements) and row["configs"] == 16 <= len(latency)
    for name in ("ours", "tvm_per_store"):
        assert -1.0 <= row[name]["spearman"] <= 1.0 and row[name]["dims"] > 0
    assert row["tvm_per_store"]["dims"] > row["ours"]["dims"]  # 164 numbers a store, pooled three ways
    with pytest.raises(SystemExit, match=r"holds 2 measured configs of .* on .*; at least 16 are needed") as exit_:
        run("--layers", "resnet18:1")  # a source, two trials deep
    assert "\n" not in str(exit_.value)
    monkeypatch.setattr(sys, "argv", ["bench_features.py", "--measurements", str(tmp_path / "none.jsonl")])
    with pytest.raises(SystemExit, match="--measurements: no file at"):
        bench_features.main()


def test_program_twins_are_counted_among_a_runs_measured_configs(measured_run, tmp_path, monkeypatch):
    """``bench_program_twins.py`` compiles and digests a layer's measured configs (a
    stretch of the file's lines, or a random draw) and counts schedules and programs; a
    bad stretch, or one without the layer, ends with one line."""
    import bench_program_twins

    measurements, latency, _ = measured_run
    out = tmp_path / "twins.json"

    def run(*extra: str) -> dict:
        monkeypatch.setattr(sys, "argv", ["bench_program_twins.py", "--measurements", str(measurements), "--size", "32",
                                          "--layers", "resnet18:0", "--out", str(out), *extra])
        assert bench_program_twins.main() == 0
        (row,) = json.loads(out.read_text())["layers"]
        return row

    every = run("--lines", "0:")
    assert every["measured"] == every["drawn"] == len(latency)
    assert every["distinct_programs"] <= every["distinct_schedules"] <= every["drawn"]
    assert every["twins"] == every["drawn"] - every["distinct_programs"] >= 0
    drawn = run("--configs", "5")
    assert drawn["drawn"] == 5 and drawn["distinct_programs"] <= 5
    for bad, says in (("5", "is not START:END"), ("0:2", "no measured config of resnet18:0")):
        with pytest.raises(SystemExit, match=says):
            run("--lines", bad)
    # a later stretch against an earlier one: which of its programs the earlier lines timed
    lines = measurements.read_text().splitlines()
    half = len(lines) // 2
    layer_key = layer_at("resnet18:0", 32).workload_key
    later = {r["config"] for r in map(json.loads, lines[half:]) if r["layer"] == layer_key and r["status"] == "ok"}
    earlier = {r["config"] for r in map(json.loads, lines[:half]) if r["layer"] == layer_key and r["status"] == "ok"} - later
    row = run("--lines", f"{half}:", "--against", f"0:{half}")
    assert row["drawn"] == len(later) and row["against"]["earlier_configs"] == len(earlier)
    assert 0 <= row["against"]["twins_of_earlier"] <= row["drawn"]
    with pytest.raises(SystemExit, match="give both"):
        run("--against", "0:5")


def test_each_tuners_final_configs_are_timed_again_side_by_side(measured_run, tmp_path, monkeypatch):
    """A result names each seed's final config, the one its final latency came from;
    ``retime_finals.py`` times them all again and tests the pair on those timings. A
    result without final configs, or none at all, ends with one line."""
    import retime_finals

    _, latency, run_json = measured_run
    result = json.loads(run_json.read_text())
    (row,) = result["layers"]
    for name in ("xgb", "tl_xgb"):
        entry = row["tuners"][name]
        assert len(entry["final_configs"]) == 2
        for config, curve in zip(entry["final_configs"], entry["curves"]):
            assert latency[config] == curve[-1]  # the config the final latency came from
    out = tmp_path / "retimed.json"
    monkeypatch.setattr(sys, "argv", ["retime_finals.py", "--results", str(run_json), "--rounds", "2",
                                      "--repeat", "2", "--out", str(out)])
    assert retime_finals.main() == 0
    retimed = json.loads(out.read_text())
    (again,) = retimed["layers"]
    finals = {c for e in row["tuners"].values() for c in e["final_configs"]}
    assert again["configs_retimed"] == len(finals) and retimed["rounds"] == 2
    for name in ("xgb", "tl_xgb"):
        assert again["tuners"][name]["recorded_s"] == [c[-1] for c in row["tuners"][name]["curves"]]
        assert all(t is not None and t > 0 for t in again["tuners"][name]["retimed_s"])
    pair = again["pairs"]["xgb/tl_xgb"]
    assert pair["recorded"] == row["xgb/tl_xgb@final_latency_test"] and pair["retimed"]["seeds"] == [2, 2]
    assert retimed["timing"] == "launches"
    # timed from queued launches (autotune.queued_timing): on a CPU, TVM's evaluator through it
    monkeypatch.setattr(sys, "argv", ["retime_finals.py", "--results", str(run_json), "--rounds", "1",
                                      "--repeat", "2", "--timing", "queued", "--out", str(out)])
    assert retime_finals.main() == 0
    queued = json.loads(out.read_text())
    assert queued["timing"] == "queued"
    assert all(t is not None and t > 0 for e in queued["layers"][0]["tuners"].values() for t in e["retimed_s"])
    for entry in row["tuners"].values():
        del entry["final_configs"]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(result))
    for path, says in ((stale, "has no final_configs"), (tmp_path / "none.json", "--results: no file at")):
        monkeypatch.setattr(sys, "argv", ["retime_finals.py", "--results", str(path)])
        with pytest.raises(SystemExit, match=says):
            retime_finals.main()


def test_the_transfer_ranking_without_its_files_ends_with_one_line(tmp_path, monkeypatch):
    import bench_transfer_ranking

    monkeypatch.setattr(sys, "argv", ["bench_transfer_ranking.py", "--history-db", str(tmp_path / "none.db"),
                                      "--measurements", str(tmp_path / "none.jsonl")])
    with pytest.raises(SystemExit, match="--history-db: no file at") as exit_:
        bench_transfer_ranking.main()
    assert "\n" not in str(exit_.value)


def test_the_prior_rank_trace_follows_every_transfer_fit_of_a_replayed_run(tmp_path, monkeypatch):
    """``trace_prior_rank.py`` replays a benchmark with transfer XGBoost's fits traced: an
    entry per fit with history's model kept, the layer's own results growing, each with a
    rank correlation; the benchmark's result is written as usual."""
    import bench_history_guided
    import trace_prior_rank

    db, measurements = tmp_path / "h.db", tmp_path / "m.jsonl"
    common = ["--source", "resnet18:1", "--history-trials", "8", "--size", "32", "--targets", "resnet18:0",
              "--trials", "12", "--batch", "4", "--seeds", "1"]
    monkeypatch.setattr(sys, "argv", ["bench_history_guided.py", "--history-db", str(db), "--measurements",
                                      str(measurements), "--tuners", "xgb,tl_xgb", *common])
    assert bench_history_guided.main() == 0
    trace, out = tmp_path / "trace.json", tmp_path / "replayed.json"
    monkeypatch.setattr(sys, "argv", ["trace_prior_rank.py", "--trace", str(trace), "--", "--replay", str(measurements),
                                      "--history-db", str(db), "--tuners", "tl_xgb", "--out", str(out), *common])
    from autotune.search.xgb_tuner import XGBTuner

    assert trace_prior_rank.main() == 0
    assert XGBTuner.fit_observers == []  # the trace ends with the run
    entries = json.loads(trace.read_text())
    assert len(entries) >= 2 and all(e["priors_kept"] > 0 and e["ran"] >= 4 for e in entries)
    assert len({e["space_id"] for e in entries}) == 1  # the one target layer
    assert [e["asked"] for e in entries] == sorted(e["asked"] for e in entries)
    assert all(e["spearman"] is None or -1.0 <= e["spearman"] <= 1.0 for e in entries)
    assert json.loads(out.read_text())["layers"][0]["tuners"]["tl_xgb"]["approximated"] == [0]
