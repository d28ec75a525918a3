"""How far a tune's per-layer speed-ups stand from the same two programs timed again: the
table's figure sets a layer's default, timed once when the tune began, against its best,
the least of the many timings the search made; here both are built again and timed in
turn, ROUNDS times each, after the tune.

Run:  python benchmarks/retime_layer_speedups.py resnet18 --size 32 --trials 48 --rounds 3
Prints one JSON object: per tuned layer, the speed-up as reported and as timed again (medians
of the rounds), with the four latencies behind them. A fresh history is made under --workdir
(default: a temporary folder); layers whose winner is TVM's default are left out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, positive_int, run_main  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("model", help="a zoo model")
    parser.add_argument("--size", type=positive_int, default=32)
    parser.add_argument("--trials", type=positive_int, default=48)
    parser.add_argument("--rounds", type=positive_int, default=3, help="times each program is timed again, in turn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", help="where the history and module go (default: a temporary folder)")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune import api
    from autotune.compile import DEFAULT_SPACE_PREFIX
    from autotune.defaults import default_schedule
    from autotune.history import open_history
    from autotune.measure import Measurer, MeasureOptions
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace
    from autotune.tune import load_layers

    workdir = args.workdir or tempfile.mkdtemp(prefix="retime-layers-")
    os.makedirs(workdir, exist_ok=True)
    history = os.path.join(workdir, "history.db")
    if os.path.exists(history):
        parser.error(f"{history} exists: the tune needs a fresh history (another --workdir)")
    started = time.perf_counter()
    report = api.tune(args.model, size=args.size, trials=args.trials, seed=args.seed, target="llvm", history=history,
                      mlflow=False, out=os.path.join(workdir, "model.so"))
    tune_s = time.perf_counter() - started
    target = resolve_target("llvm")
    layers = {layer.name: layer for layer in load_layers(args.model, size=args.size).layers}
    rows = []
    with open_history(history) as store:
        for entry in report["layers"]:
            if not entry.get("best_record_id") or entry.get("speedup") is None:
                continue
            layer = layers[entry["name"]]
            (record,) = [r for r in store.records(workload_key=layer.workload_key) if r.id == entry["best_record_id"]]
            if record.space_id.startswith(DEFAULT_SPACE_PREFIX):
                continue
            space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
            default_s, best_s = [], []
            for _ in range(args.rounds):
                measurer = Measurer(target, MeasureOptions())  # a fresh one: a measurer times a program once
                try:
                    default, best = measurer.measure([default_schedule(layer.func, target), space.apply(record.config)])
                finally:
                    measurer.close()
                default_s.append(default.latency)
                best_s.append(best.latency)
            default_again, best_again = statistics.median(default_s), statistics.median(best_s)
            rows.append({"layer": entry["name"], "speedup_reported": entry["speedup"], "speedup_retimed": default_again / best_again,
                         "default_reported_s": entry["default_latency"], "default_retimed_s": default_again,
                         "best_reported_s": entry["best_latency"], "best_retimed_s": best_again})
            print(f"{entry['name']}: reported {entry['speedup']:.2f}x, timed again {default_again / best_again:.2f}x", file=sys.stderr)
    ratios = [row["speedup_reported"] / row["speedup_retimed"] for row in rows]
    emit({"benchmark": "per-layer speed-ups as reported and as timed again in turn", "model": args.model, "size": args.size,
          "trials": args.trials, "rounds": args.rounds, "seed": args.seed, "target": target.key, "tune_s": round(tune_s, 1),
          "load_average": os.getloadavg(), "layers": rows,
          "reported_over_retimed": {"min": min(ratios, default=None), "median": statistics.median(ratios) if ratios else None,
                                    "max": max(ratios, default=None), "above_1": sum(r > 1 for r in ratios)}}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
