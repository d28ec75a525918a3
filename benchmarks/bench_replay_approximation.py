"""How faithfully a replay answers the configs its measurement file lacks, per layer.

A replay (``bench_history_guided.py --replay FILE``) answers a config nobody measured
with an approximation: the nearest measured config's latency, or a surrogate model's
(``--approximate``). A tuner variant screened that way is only as good as those answers,
and what decides a trials-to-target ratio is whether a config is called fast: a false
find ends a search early that the device would not have ended. So each layer's measured
configs are split five ways; each fifth is answered by a :class:`autotune.search.replay.ReplayBench`
built on the other four, as a replay would answer it, and compared with what was
measured: rank correlation, median relative error (all configs, and the fastest 5%),
false finds (answered within 5% of the best measured, measured slower) and true finds
(a measured-fastest-5% config answered as fast as the fastest 5%).

Measured configs are the ones tuners went for, so this judges a biased pool, the one a
screen's tuners mostly ask about.

Run:  python benchmarks/bench_replay_approximation.py --target cuda:sm_90 --device-name NVIDIA-H100-80GB-HBM3 \\
        --measurements benchmarks/results/gpu_h100/history_guided_cuda_measurements.jsonl --no-shared-memory-estimate \\
        --targets resnet18:0,resnet18:1,resnet18:3,resnet18:4,mobilenetv2:5,resnet18:7
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from history_guided.layers import layer_at  # noqa: E402
from history_guided.progress import log  # noqa: E402
from history_guided.recorded import measured_configs, recorded_space, recorded_target  # noqa: E402

#: The approximations a replay offers (``--approximate``).
METHODS = ("nearest", "model")
FOLDS = 5
#: A config answered within this of the best measured counts as a find.
WITHIN = 0.05


def held_out_answers(space, measured: list[tuple[dict, float]], method: str, seed: int) -> np.ndarray:
    """Each measured config's answer from a replay built without its fifth."""
    from autotune.search.replay import ReplayBench

    folds = np.random.default_rng(seed).permutation(len(measured)) % FOLDS
    answers = np.zeros(len(measured))
    for f in range(FOLDS):
        recs = [{"config": c, "latency_median": lat, "status": "ok"} for (c, lat), k in zip(measured, folds) if k != f]
        bench = ReplayBench(space, recs, missing=method)
        for i in np.flatnonzero(folds == f):
            answers[i] = bench.approximate(measured[i][0])
    return answers


def judge(answers: np.ndarray, measured: np.ndarray) -> dict:
    from scipy.stats import spearmanr

    err = np.abs(answers / measured - 1)
    best = measured.min()
    fast = measured <= np.quantile(measured, 0.05)
    called_fast = answers <= best * (1 + WITHIN)
    return {"spearman": round(float(spearmanr(answers, measured).statistic), 3),
            "median_rel_error": round(float(np.median(err)), 3),
            "fastest_5pct_median_rel_error": round(float(np.median(err[fast])), 3),
            "false_finds": int((called_fast & (measured > best * (1 + WITHIN))).sum()),
            "true_fast": int(((answers <= np.quantile(measured, 0.05)) & fast).sum()), "fastest_5pct": int(fast.sum())}


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--measurements", required=True, help="a history-guided benchmark's JSON-lines measurement file")
    parser.add_argument("--targets", default="resnet18:0,resnet18:1,resnet18:3", help="MODEL:INDEX of layers")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--device-name", help="the device the file was measured on (e.g. the GPU's)")
    parser.add_argument("--no-shared-memory-estimate", action="store_true", help="the CUDA spaces as the run had them")
    parser.add_argument("--seed", type=int, default=0, help="how the configs are split into fifths")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if not os.path.exists(args.measurements):
        raise SystemExit(f"error: --measurements: no file at {args.measurements}")

    t0 = time.perf_counter()
    target = recorded_target(args.target, args.device_name)
    rows = []
    for spec in args.targets.split(","):
        layer = layer_at(spec, args.size)
        measured = [(json.loads(c), lat) for c, lat in measured_configs(args.measurements, target.key, layer.workload_key).items()]
        if len(measured) < 2 * FOLDS:
            raise SystemExit(f"error: {args.measurements} holds {len(measured)} measured configs of {spec} on "
                             f"{target.key}; at least {2 * FOLDS} are needed")
        space = recorded_space(layer, target, shared_memory_estimate=not args.no_shared_memory_estimate)
        lat = np.array([m[1] for m in measured])
        row = {"layer": spec, "name": layer.name, "measured": len(measured), "best_measured_us": round(float(lat.min()) * 1e6, 2)}
        for method in METHODS:
            row[method] = judge(held_out_answers(space, measured, method, args.seed), lat)
        log(f"{spec}: " + "; ".join(f"{m} {row[m]}" for m in METHODS))
        rows.append(row)
    emit({"benchmark": "replay approximation of unmeasured configs, five-fold on measured ones", "target": target.key,
          "measurements": args.measurements, "folds": FOLDS, "within": WITHIN, "layers": rows,
          "wall_seconds": round(time.perf_counter() - t0, 1), "arguments": vars(args)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
