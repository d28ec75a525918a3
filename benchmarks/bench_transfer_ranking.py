"""How transfer XGBoost's history-only model ranks a layer's measured configs, offline.

Transfer XGBoost's first picks come from a model of history alone, before the layer has
a result of its own. Whether that model can tell this layer's fast configs from its slow
ones decides its first trials, and a measurement file (the history-guided benchmark's,
``--measurements``) holds thousands of the layer's configs measured: ranking them asks no
device. For each variant of the tuner (``--variants``, options as in ``--tuners``,
``|``-separated, empty for the default) and seed, the model is fitted as the tuner
fits it at trial 0, scores every measured config it can map, and this reports the rank
correlation with measured speed and the best latency among its top 1, 8 and 16.
Measured configs are the ones tuners went for, so this ranks a biased pool: a lead for a
measured run, not a result. It also counts how many of the first configs the tuner would
take from history (warm start and ranked list) the layer's space rejects.

Uses the same history database, target exclusion and match as
``bench_history_guided.py`` (give it the database that run completed, or one a replay
completed), so its figures line up with that run's.

Run:  python benchmarks/bench_transfer_ranking.py --history-db hist.db --target cuda --device-name NVIDIA-H100-80GB-HBM3 \
        --measurements benchmarks/results/gpu_h100/history_guided_cuda_measurements.jsonl --no-shared-memory-estimate \
        --targets resnet18:0,resnet18:1 --exclude resnet18:3,resnet18:4,resnet18:7,mobilenetv2:5 --variants "|plausible_priors=1"
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, positive_int, run_main  # noqa: E402
from history_guided.history_setup import priors_for  # noqa: E402
from history_guided.layers import layer_at  # noqa: E402
from history_guided.progress import log  # noqa: E402
from history_guided.recorded import measured_configs, recorded_space, recorded_target  # noqa: E402
from history_guided.tuner_specs import make_run_tuner  # noqa: E402

#: Top-k prefixes of the model's order that are reported.
TOPS = (1, 8, 16)
#: History's configs a tuner takes first: warm start and ranked list, checked for rejection.
FIRST_FROM_HISTORY = 32


def rank_one(tuner, configs: list[str], latencies: np.ndarray) -> dict:
    """Fit as at trial 0 and rank the measured configs the tuner's encoder can map."""
    from scipy.stats import spearmanr

    tuner.fit_now()
    scored = tuner.scores([json.loads(c) for c in configs])
    if scored is None:  # every record left out: no model, no order
        ranked = sum(tuner.encoder.map_indices(json.loads(c)) is not None for c in configs)
        return {"kept": tuner.priors_kept, "ranked": ranked, "spearman": None, "best_of_top_us": {}}
    at, scores = scored
    lat = latencies[at]
    order = np.argsort(-scores)
    return {
        "kept": tuner.priors_kept,
        "ranked": len(at),
        "spearman": round(float(spearmanr(scores, -lat).statistic), 3),
        "best_of_top_us": {str(k): round(float(lat[order[:k]].min()) * 1e6, 2) for k in TOPS},
    }


def rejected_first(tuner, space) -> dict:
    """How many of history's first configs, as the tuner takes them (its warm start and
    its ranked list, distinct), the layer's space rejects."""
    configs = tuner.first_from_history(FIRST_FROM_HISTORY)
    return {"taken": len(configs), "rejected": sum(not space.applies(c) for c in configs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--history-db", required=True, help="the history the guided benchmark ran with (completed)")
    parser.add_argument("--measurements", required=True, help="the guided benchmark's JSON-lines measurement file")
    parser.add_argument("--targets", default="resnet18:0,resnet18:1,resnet18:3", help="MODEL:INDEX of layers")
    parser.add_argument("--exclude", help="MODEL:INDEX layers kept out of matching besides --targets (the guided run's)")
    parser.add_argument("--variants", default="", help="'|'-separated tuner options, e.g. '|plausible_priors=1' (empty: default)")
    parser.add_argument("--tuner", default="tl_xgb")
    parser.add_argument("--seeds", type=positive_int, default=5, help="how many tuner seeds: 0, 1, ..., SEEDS-1 (a count, where other benchmarks take a list)")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--device-name", help="the device the file and history were measured on (e.g. the GPU's)")
    parser.add_argument("--no-shared-memory-estimate", action="store_true", help="the CUDA spaces as the run had them")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    for flag, path in (("--history-db", args.history_db), ("--measurements", args.measurements)):
        if not os.path.exists(path):
            raise SystemExit(f"error: {flag}: no file at {path}")

    from autotune.history import open_history

    t0 = time.perf_counter()
    target = recorded_target(args.target, args.device_name)
    store = open_history(args.history_db)
    specs = args.targets.split(",")
    kept_out = [*specs, *filter(None, (args.exclude or "").split(","))]
    exclude = {layer_at(spec, args.size).workload_key for spec in kept_out}
    variants = args.variants.split("|")
    rows = []
    try:
        for spec in specs:
            layer = layer_at(spec, args.size)
            space = recorded_space(layer, target, shared_memory_estimate=not args.no_shared_memory_estimate)
            score, priors = priors_for(store, layer, target, exclude, space=space)
            measured = measured_configs(args.measurements, target.key, layer.workload_key)
            if not measured:
                raise SystemExit(f"error: {args.measurements} holds no measured config of {spec} on {target.key}")
            configs = list(measured)
            latencies = np.array([measured[c] for c in configs])
            row = {"layer": spec, "name": layer.name, "match_score": round(score, 3), "priors": len(priors),
                   "measured": len(configs), "best_measured_us": round(float(latencies.min()) * 1e6, 2), "variants": {}}
            for variant in variants:
                spec_string = f"{args.tuner}:{variant}" if variant else args.tuner
                per_seed = []
                for seed in range(args.seeds):
                    tuner = make_run_tuner(spec_string, space, layer, seed, priors)
                    per_seed.append(rank_one(tuner, configs, latencies))
                    if seed == 0:
                        first = rejected_first(tuner, space)
                tops = {str(k): statistics.median(s["best_of_top_us"][str(k)] for s in per_seed) if all(s["best_of_top_us"] for s in per_seed) else None for k in TOPS}
                rhos = [s["spearman"] for s in per_seed if s["spearman"] is not None]
                row["variants"][variant or "default"] = {
                    "kept": per_seed[0]["kept"], "spearman_median": statistics.median(rhos) if rhos else None,
                    "best_of_top_us_median": tops, "history_first_rejected": first, "per_seed": per_seed,
                }
                log(f"{spec} [{variant or 'default'}]: kept {per_seed[0]['kept']}, spearman {row['variants'][variant or 'default']['spearman_median']}, best of top 1/8/16 {tops} us")
            rows.append(row)
    finally:
        store.close()
    emit({"benchmark": "transfer model's history-only ranking of measured configs", "target": target.key,
          "history_db": args.history_db, "measurements": args.measurements, "tuner": args.tuner, "seeds": args.seeds,
          "wall_seconds": round(time.perf_counter() - t0, 1), "layers": rows, "arguments": vars(args)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
