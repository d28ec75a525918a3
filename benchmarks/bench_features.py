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

Run:  python benchmarks/bench_features.py --configs 120 --out FILE
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

from _emit import emit  # noqa: E402


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
    from search.features import batch_config_features

    t0 = time.perf_counter()
    x = np.asarray(batch_config_features(space, configs, layer.features()))
    return x, (time.perf_counter() - t0) / max(len(configs), 1)


def evaluate(x, latency, folds: int, seed: int) -> dict:
    from search.cost_model import CostModel

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="resnet18:0,resnet18:4,resnet18:11,mobilenetv2:5")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--configs", type=int, default=120)
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--out")
    args = parser.parse_args()

    from autotune import decompose, frontend
    from autotune.measure import Measurer
    from autotune.target import resolve_target
    from search import make_tuner
    from templates import InvalidConfig
    from templates.meta_schedule_space import MetaScheduleSpace

    target = resolve_target("llvm")
    measurer = Measurer(target)
    rows = []
    for spec in args.layers.split(","):
        model, idx = spec.split(":")
        _, mod = frontend.load_and_fuse(model, size=args.size, batch_norm="separate")  # as recorded
        layer = [l for l in decompose.decompose(mod) if l.tunable and l.op_class in ("conv2d", "depthwise_conv2d", "dense")][int(idx)]
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
        configs, mods = [], []
        for cfg in make_tuner("random", space, seed=7).ask(args.configs):
            try:
                mods.append(space.apply(cfg))
                configs.append(cfg)
            except InvalidConfig:
                pass
        results = measurer.measure(mods)
        keep = [i for i, r in enumerate(results) if r.latency]
        configs = [configs[i] for i in keep]
        latency = np.array([results[i].latency for i in keep])
        ours, t_ours = our_features(space, configs, layer)
        theirs, t_theirs = tvm_features(space, configs, target.tvm_target)
        row = {
            "layer": f"{model}:{layer.name}", "op_class": layer.op_class, "configs": len(configs),
            "ours": {**evaluate(ours, latency, args.folds, 0), "dims": int(ours.shape[1]), "seconds_per_config": t_ours},
            "tvm_per_store": {**evaluate(theirs, latency, args.folds, 0), "dims": int(theirs.shape[1]), "seconds_per_config": t_theirs},
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    measurer.close()
    summary = {
        name: {
            "mean_spearman": statistics.fmean(r[name]["spearman"] for r in rows),
            "mean_top8_within_5pct": statistics.fmean(r[name]["top8_within_5pct"] for r in rows),
            "median_seconds_per_config": statistics.median(r[name]["seconds_per_config"] for r in rows),
        }
        for name in ("ours", "tvm_per_store")
    }
    result = {"benchmark": "held-out rank prediction of measured latency", "target": target.key, "layers": rows, "summary": summary}
    emit(result, args.out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
