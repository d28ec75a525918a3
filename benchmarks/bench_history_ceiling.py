"""What history alone offers a layer: its first K mapped history configs, measured.

The history-guided benchmark asks how many trials a tuner needs to reach what cold
XGBoost ends with. A transfer tuner that gets there within a handful of trials has to
find that quality among history's configs (mapped onto the layer), or extrapolate
beyond them on its first try: a handful of trials leaves no room for search. This
measures those configs, in the order the transfer tuner's warm start measures them
(``XGBTuner.history_configs``: by turns across source layers since run 7; the committed
``history_ceiling_llvm*.json`` were measured in the earlier similarity x performance
order), and reports the best of the first k for growing k: if even the best of 128 is
slower than cold XGBoost's final, taking history's configs cannot give a 10x pace.

Uses the same history database, target exclusion and match as
``bench_history_guided.py``, so its figures line up with that run's.

Run:  python benchmarks/bench_history_ceiling.py --history-db hist.db --targets resnet18:7,resnet18:0 --k 128
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from history_guided.history_setup import priors_for  # noqa: E402
from history_guided.layers import layer_at  # noqa: E402
from history_guided.measurers import CachedMeasurer  # noqa: E402
from history_guided.progress import log  # noqa: E402

#: The prefixes of history's order reported (those up to --k).
PREFIXES = (1, 4, 8, 16, 32, 64, 128, 256, 512)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--history-db", required=True, help="the history the guided benchmark ran with")
    parser.add_argument("--targets", default="resnet18:7,resnet18:0,resnet18:3", help="MODEL:INDEX of layers, as in the guided benchmark")
    parser.add_argument("--exclude", help="MODEL:INDEX layers kept out of matching besides --targets (the guided run's other targets)")
    parser.add_argument("--k", type=int, default=128, help="history configs measured per layer")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--device-name", help="match history filed under this device (the guided run's, if another machine)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--measurements", help="JSON-lines measurement file, shared with the guided benchmark's format")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if not os.path.exists(args.history_db):
        raise SystemExit(f"--history-db: no history at {args.history_db}")

    from autotune.target import resolve_target
    from autotune.history import open_history
    from autotune.search import make_tuner
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    t0 = time.perf_counter()
    target = resolve_target(args.target)
    history_target = dataclasses.replace(target, device_name=args.device_name) if args.device_name else target
    store = open_history(args.history_db)

    targets = [(spec, layer_at(spec, args.size)) for spec in args.targets.split(",")]
    exclude = {layer.workload_key for _, layer in targets}
    exclude |= {layer_at(spec, args.size).workload_key for spec in filter(None, (args.exclude or "").split(","))}
    groups, rows = [], []
    for spec, layer in targets:
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
        score, priors = priors_for(store, layer, history_target, exclude)
        tuner = make_tuner("tl_xgb", space, seed=0, priors=priors, layer_features=layer.features())
        offered = tuner.history_configs(args.k)
        groups.append((layer.workload_key, space, offered))
        rows.append({"layer": spec, "name": layer.name, "match_score": round(score, 3), "priors": len(priors), "offered": len(offered)})
    log(f"measuring {sum(len(g[2]) for g in groups)} history configs over {len(groups)} layers")
    cm = CachedMeasurer(target, args.repeat, args.measurements)
    try:
        answers = cm.measure_groups(groups)
    finally:
        cm.close()
        store.close()
    for row, results in zip(rows, answers):
        best, curve = None, []
        for res in results:
            if res.ok and (best is None or res.latency < best):
                best = res.latency
            curve.append(best)
        row["best_of_first_k_us"] = {str(k): (round(curve[k - 1] * 1e6, 1) if curve[k - 1] else None)
                                     for k in PREFIXES if k <= len(curve)}
        row["failed"] = sum(not r.ok for r in results)
    emit({"benchmark": "best of history's first k mapped configs (no search)", "target": target.key,
          "history_db": args.history_db, "k": args.k, "measured": cm.measured, "cost": cm.cost_summary(),
          "wall_seconds": round(time.perf_counter() - t0, 1), "layers": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
