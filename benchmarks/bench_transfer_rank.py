"""How well does history alone rank a layer it has never seen? Feature sets compared.

Transfer XGBoost's first batches, and every region its own results have not reached yet,
are ranked by the model of history alone. This scores that model on real data, with no
hardware: history is a committed export (other models' layers), the layers to rank are
the benchmark's target layers, and their "truth" is every measurement of them in a
committed measurement file (thousands per layer, made by all the tuners of runs 6-17).

For each target layer and each feature set: build transfer XGBoost exactly as the
benchmark does (same history, same similarity filter, the target layers kept out of
history), score every measured config of the layer before any own result is in, and
report

* ``spearman``: rank correlation of score and measured throughput (1/latency);
* ``top8_gap``: best measured latency among the 8 highest-scored configs over the best
  known, minus 1 (what history's own pick of 8 would reach; 0 = the best known);
* ``best_pct``: the score percentile of the best known config among the measured ones.

Run:  python benchmarks/bench_transfer_rank.py --out FILE
Prints one JSON object (figures recorded in the README).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import emit  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")
DEFAULT_REPLAY = os.path.join(RESULTS, "history_guided_llvm_hist256_measurements.jsonl")
DEFAULT_HISTORY = os.path.join(RESULTS, "history_guided_llvm_run6_history.json")
DEFAULT_TARGETS = "resnet18:0,resnet18:1,resnet18:3,resnet18:4,resnet18:7,mobilenetv2:5"
#: Feature sets compared: name -> TransferXGBTuner options.
FEATURE_SETS = {"tile_fractions": {"tile_fractions": True}, "absolute_only": {"tile_fractions": False}}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def rank_quality(scores: np.ndarray, latency: np.ndarray, top: int = 8) -> dict[str, float]:
    """Spearman of score vs throughput, the top-``top`` pick's gap to the best, and the
    best config's score percentile; rows the model could not score are left out."""
    ok = np.isfinite(scores)
    s, lat = scores[ok], latency[ok]
    best = int(np.argmin(lat))
    picked = np.argsort(-s, kind="stable")[:top]
    return {
        "spearman": round(spearman(s, 1.0 / lat), 4),
        "top8_gap": round(float(lat[picked].min() / lat[best] - 1.0), 4),
        "best_pct": round(float((s < s[best]).mean()), 4),
        "configs": int(ok.sum()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", default=DEFAULT_REPLAY, help="measurement file (JSON lines) of the target layers")
    parser.add_argument("--history", default=DEFAULT_HISTORY, help="history export (JSON) to transfer from")
    parser.add_argument("--targets", default=DEFAULT_TARGETS, help="MODEL:INDEX layers to rank")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    for path, flag in ((args.measurements, "--measurements"), (args.history, "--history")):
        if not os.path.isfile(path):
            raise SystemExit(f"error: {flag}: no file at {path}")

    from bench_history_guided import ReplayMeasurer, layer_at, log, priors_for

    from autotune.target import resolve_target
    from history import import_json, open_history
    from search import make_tuner
    from templates import config_to_json
    from templates.meta_schedule_space import MetaScheduleSpace

    t0 = time.perf_counter()
    keys = ReplayMeasurer.targets_in(args.measurements)
    if len(keys) != 1:
        raise SystemExit(f"error: --measurements: expected one target, found {', '.join(keys) or 'none'}")
    key = keys[0]
    table = ReplayMeasurer(args.measurements, key).tables
    target = resolve_target(key.split(":", 1)[0])
    target = dataclasses.replace(target, device_name=key.split(":", 2)[2])
    store = open_history(os.path.join(tempfile.mkdtemp(prefix="bench-rank-"), "history.db"))
    import_json(store, args.history)
    layers = [(spec, layer_at(spec, args.size)) for spec in args.targets.split(",")]
    exclude = {layer.workload_key for _, layer in layers}

    rows = []
    for spec, layer in layers:
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
        score, priors = priors_for(store, layer, target, exclude)
        measured = {}
        for rec in table.get(layer.workload_key, []):
            if rec["status"] == "ok" and rec["latency_median"]:
                measured.setdefault(config_to_json(rec["config"]), (rec["config"], rec["latency_median"]))
        configs = [c for c, _ in measured.values()]
        latency = np.array([lat for _, lat in measured.values()])
        row = {"layer": spec, "name": layer.name, "match_score": round(score, 3), "priors": len(priors),
               "measured_configs": len(configs), "best_known_s": float(latency.min()) if len(latency) else None}
        for name, opts in FEATURE_SETS.items():
            tuner = make_tuner("tl_xgb", space, seed=args.seed, priors=priors, layer_features=layer.features(), **opts)
            row[name] = rank_quality(tuner.score_configs(configs), latency)
        rows.append(row)
        log(f"{spec}: " + "; ".join(f"{n} spearman {row[n]['spearman']:.3f} top8 +{row[n]['top8_gap']:.1%}"
                                    for n in FEATURE_SETS))
    summary = {
        name: {metric: round(statistics.mean(r[name][metric] for r in rows), 4) for metric in ("spearman", "top8_gap", "best_pct")}
        for name in FEATURE_SETS
    }
    emit({
        "benchmark": "history-only ranking of unseen layers' measured configs",
        "target": key, "measurements": os.path.relpath(args.measurements), "history": os.path.relpath(args.history),
        "wall_seconds": round(time.perf_counter() - t0, 1), "layers": rows, "mean": summary,
    }, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
