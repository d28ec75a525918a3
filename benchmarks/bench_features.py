"""Which config features predict measured rank better: ours or TVM's loop-structure ones?

Ours (``search.features``): knob indices, log tile factors and derived quantities
(threads, vthreads, work per thread, footprints, unroll) plus layer features; computed
from the config alone, microseconds each. TVM's (meta-schedule ``PerStoreFeature``,
164 numbers per buffer store of the *scheduled* program, pooled here by sum/mean/max);
each needs the schedule applied and lowered first.

For each layer: measure ``--configs`` random configs for real, then 4-fold cross-validate
the XGBoost ranking model (``search.cost_model``) on each feature set and report the
Spearman rank correlation between predicted score and measured throughput on the
held-out fold, plus how often the model's top-8 pick contains a config within 5% of the
fold's best. Prints one JSON object.

Or, with ``--measurements``, no measuring at all: each layer's configs drawn at random
from what a measurement file of the history-guided benchmark holds for it (the H100's,
so the question is asked of a GPU's latencies on a machine without one). Those are the
configs tuners went for, a narrower and better pool than random ones, and the same pool
for both feature sets.

Run:  python benchmarks/bench_features.py --configs 120 --out FILE
      python benchmarks/bench_features.py --target cuda:sm_90 --device-name NVIDIA-H100-80GB-HBM3 \\
        --measurements benchmarks/results/gpu_h100/history_guided_cuda_measurements.jsonl --no-shared-memory-estimate \\
        --layers resnet18:0,resnet18:1,resnet18:3,resnet18:4,mobilenetv2:5,resnet18:7 --configs 600 --out FILE
      (add --measurement-lines 22422 to draw what features_h100_file.json drew, from the file as it stood)
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

from _emit import description, emit, out_file, run_main  # noqa: E402


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def tvm_features(space, configs, target):
    """PerStoreFeature vectors of the scheduled programs, pooled to one row per config."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir import Schedule

    ctx = ms.TuneContext(mod=space.mod, target=target, task_name="features")
    extractor = ms.feature_extractor.PerStoreFeature(extract_workload=True)
    rows = []
    t0 = time.perf_counter()
    for cfg in configs:
        mod = space.apply(cfg)
        cand = ms.MeasureCandidate(Schedule(mod), ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
        feats = extractor.extract_from(ctx, [cand])[0].numpy()
        rows.append(np.concatenate([feats.sum(0), feats.mean(0), feats.max(0)]))
    return np.array(rows), (time.perf_counter() - t0) / max(len(configs), 1)


def our_features(space, configs, layer):
    from autotune.search.features import batch_config_features

    t0 = time.perf_counter()
    x = np.asarray(batch_config_features(space, configs, layer.features()))
    return x, (time.perf_counter() - t0) / max(len(configs), 1)


def evaluate(x, latency, folds: int, seed: int) -> dict:
    from autotune.search.cost_model import CostModel

    thr = latency.min() / latency
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(latency))
    rhos, hits = [], []
    for k in range(folds):
        test = order[k::folds]
        train = np.setdiff1d(order, test)
        model = CostModel()
        model.fit(x[train], thr[train])
        pred = model.predict(x[test])
        rhos.append(spearman(pred, thr[test]))
        top = test[np.argsort(-pred)[:8]]
        hits.append(float(latency[top].min() <= latency[test].min() * 1.05))
    return {"spearman": statistics.fmean(rhos), "top8_within_5pct": statistics.fmean(hits)}


def measured_at_random(layer, space, measurer, n: int) -> tuple[list, np.ndarray]:
    """``n`` random configs of the layer, measured here (those that build and run)."""
    from autotune.search import make_tuner
    from autotune.templates import InvalidConfig

    configs, mods = [], []
    for cfg in make_tuner("random", space, seed=7).ask(n):
        try:
            mods.append(space.apply(cfg))
            configs.append(cfg)
        except InvalidConfig:
            pass
    results = measurer.measure(mods)
    keep = [i for i, r in enumerate(results) if r.latency]
    return [configs[i] for i in keep], np.array([results[i].latency for i in keep])


def drawn_from_file(path: str, target_key: str, layer, n: int, seed: int = 0, lines: int | None = None) -> tuple[list, np.ndarray]:
    """``n`` of the layer's measured configs in a measurement file (its first ``lines``),
    drawn at random: from a file that has grown since, other configs are drawn."""
    from history_guided.recorded import measured_configs

    measured = sorted(measured_configs(path, target_key, layer.workload_key, lines=(0, lines)).items())
    if len(measured) < 2 * 8:
        raise SystemExit(f"error: {path} holds {len(measured)} measured configs of {layer.name} on {target_key}; "
                         "at least 16 are needed")
    pick = np.random.default_rng(seed).permutation(len(measured))[:n]
    return [json.loads(measured[i][0]) for i in pick], np.array([measured[i][1] for i in pick])


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--layers", default="resnet18:0,resnet18:4,resnet18:11,mobilenetv2:5")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--configs", type=int, default=120)
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--target", default="llvm", help="llvm (measured here), or the target of --measurements")
    parser.add_argument("--measurements", help="draw each layer's configs from this measurement file instead of measuring")
    parser.add_argument("--measurement-lines", type=int, metavar="N",
                        help="draw from the file's first N lines only, as it stood when a result was recorded (each result "
                             "says how many it read under measurement_lines)")
    parser.add_argument("--device-name", help="the GPU the file was measured on (its target key names it)")
    parser.add_argument("--no-shared-memory-estimate", action="store_true",
                        help="CUDA spaces as the file's runs before 2026-11-26 drew them")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if args.measurements and not os.path.exists(args.measurements):
        raise SystemExit(f"error: --measurements: no file at {args.measurements}")

    from history_guided.layers import layer_at
    from history_guided.measurers import line_count
    from history_guided.recorded import recorded_space, recorded_target

    target = recorded_target(args.target, args.device_name)
    measurer = None
    if not args.measurements:
        from autotune.measure import Measurer

        measurer = Measurer(target)
    rows = []
    for spec in args.layers.split(","):
        layer = layer_at(spec, args.size)
        space = recorded_space(layer, target, shared_memory_estimate=not args.no_shared_memory_estimate)
        if args.measurements:
            configs, latency = drawn_from_file(args.measurements, target.key, layer, args.configs, lines=args.measurement_lines)
        else:
            configs, latency = measured_at_random(layer, space, measurer, args.configs)
        ours, t_ours = our_features(space, configs, layer)
        theirs, t_theirs = tvm_features(space, configs, target.tvm_target)
        row = {
            "layer": f"{spec.partition(':')[0]}:{layer.name}", "op_class": layer.op_class, "configs": len(configs),
            "ours": {**evaluate(ours, latency, args.folds, 0), "dims": int(ours.shape[1]), "seconds_per_config": t_ours},
            "tvm_per_store": {**evaluate(theirs, latency, args.folds, 0), "dims": int(theirs.shape[1]), "seconds_per_config": t_theirs},
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    if measurer is not None:
        measurer.close()
    summary = {
        name: {
            "mean_spearman": statistics.fmean(r[name]["spearman"] for r in rows),
            "mean_top8_within_5pct": statistics.fmean(r[name]["top8_within_5pct"] for r in rows),
            "median_seconds_per_config": statistics.median(r[name]["seconds_per_config"] for r in rows),
        }
        for name in ("ours", "tvm_per_store")
    }
    result = {"benchmark": "held-out rank prediction of measured latency", "target": target.key,
              "configs_from": args.measurements or "random, measured here", "layers": rows, "summary": summary,
              **({"measurement_lines": args.measurement_lines or line_count(args.measurements)} if args.measurements else {})}
    emit(result, args.out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
