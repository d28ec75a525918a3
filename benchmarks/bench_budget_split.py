"""Model latency at a fixed trial budget: the budget split over layers adaptively (chunk by
chunk, from what was measured) or by roofline time, fixed up front.

Per model and seed, one real ``autotune tune`` per split (``TuneSession``, same budget and
seed, each into a fresh history; the split tuned first alternates from seed to seed,
since the first tune of a pair also warms this process for the second, and each tune's
wall time is reported), then the tuned models built from their histories and
timed in turns in this process (TVM's ``time_evaluator``, 5 repeats of at least 100 ms),
their outputs compared. Also reported: each tune's *model time as tuned*, the sum over
tunable layers of calls x best latency (default latency for a layer left untried), which
is what a split tries to minimise and is free of the whole-model timing's noise.

Run:  python benchmarks/bench_budget_split.py --models transformer,mobilenetv2,resnet18 --size 56 --trials 64 --seeds 0,1,2,3,4 --out FILE
      (``--splits adaptive,adaptive_no_probes``: the adaptive split with and without its
      one-trial probes of layers history covers closely)
      (``--splits adaptive,adaptive_no_rematch``: with and without matching a layer
      dispatched cold again before its later chunks)
Prints one JSON object; the README records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from _timing import time_in_turns  # noqa: E402

#: what each name given to ``--splits`` tunes with (TuneOptions fields)
SPLITS = {
    "adaptive": {"budget_split": "adaptive"},
    "roofline": {"budget_split": "roofline"},
    # the adaptive split before probes: every first chunk min_trials, however well
    # history covers the layer
    "adaptive_no_probes": {"budget_split": "adaptive", "probes": False},
    # probes from a lower match than the guided GA's threshold
    "adaptive_probe_at_0.5": {"budget_split": "adaptive", "probe_at": 0.5},
    # a layer dispatched cold stays with cold XGBoost for all its chunks (before 2026-11-25)
    "adaptive_no_rematch": {"budget_split": "adaptive", "rematch": False},
}


def layer_times(report: dict) -> dict[str, float]:
    """Seconds per inference each tunable layer takes as tuned (calls x best latency, the
    default's for a layer left untried)."""
    return {layer["name"]: layer["occurrences"] * (layer.get("best_latency") or layer.get("default_latency") or 0.0)
            for layer in report["layers"]}


def tuned_time(report: dict) -> float:
    """Seconds per inference the tunable layers take as tuned: what the split minimises."""
    return sum(layer_times(report).values())


def one_seed(model: str, size: int, trials: int, seed: int, target, splits: list[str]) -> dict:
    from autotune import compile as compiler
    from autotune import frontend
    from autotune.tune import TuneOptions, TuneSession
    from autotune.history import open_history

    order = splits if seed % 2 == 0 else splits[::-1]
    mods, row, spec = {}, {"model": model, "seed": seed, "order": list(order)}, None
    with tempfile.TemporaryDirectory(prefix="autotune-split-") as tmp:
        for split in order:
            store = open_history(os.path.join(tmp, f"{split}.db"))
            options = TuneOptions(trials=trials, seed=seed, model_latency=False, **SPLITS[split])
            session = TuneSession(target, store, options)
            try:
                t0 = time.perf_counter()
                report = session.tune_model(model, size=size)
                row[f"{split}_tune_s"] = round(time.perf_counter() - t0, 1)
                row[f"{split}_tuned_ms"] = round(tuned_time(report) * 1e3, 4)
                row[f"{split}_trials"] = {l["name"]: l["trials"] for l in report["layers"]}
                row[f"{split}_probes"] = [l["name"] for l in report["layers"] if l.get("probe")]
                # layers dispatched cold and matched again mid-tune: {name: [from, at trial, now]}
                row[f"{split}_rematched"] = {l["name"]: [l["rematched"]["from"], l["rematched"]["at_trial"], l["tuner"]]
                                             for l in report["layers"] if l.get("rematched")}
                row[f"{split}_layer_ms"] = {k: round(v * 1e3, 4) for k, v in layer_times(report).items()}
                spec, mod = frontend.load_and_fuse(model, size=size)
                mods[split], _ = compiler.apply_history(mod, session.decomposition, target, store)
            finally:
                session.close()
                store.close()
        row.update(time_in_turns({s: mods[s] for s in splits}, target, next(iter(spec.input_shapes.values()))))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--models", default="transformer,mobilenetv2,resnet18")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--trials", type=int, default=64, help="measured trials of each tune (the whole model)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated tuner seeds: one tune per split each")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--splits", default="adaptive,roofline",
                        help=f"comma-separated, the first the reference the others are divided by: {', '.join(SPLITS)}")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune.target import resolve_target

    target = resolve_target(args.target)
    seeds = [int(s) for s in args.seeds.split(",")]
    models = args.models.split(",")
    splits = args.splits.split(",")
    unknown = [s for s in splits if s not in SPLITS]
    if unknown or len(splits) < 2:
        parser.error(f"--splits: at least two of {', '.join(SPLITS)}")
    ref, others = splits[0], splits[1:]
    rows = []
    for model in models:
        for seed in seeds:
            print(f"[split] {model} seed {seed}", file=sys.stderr, flush=True)
            rows.append(one_seed(model, args.size, args.trials, seed, target, splits))
            print(f"[split] {json.dumps(rows[-1])}", file=sys.stderr, flush=True)  # kept if the run is cut
    summary = {}
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        summary[model] = {
            **{f"{s}_ms_median": statistics.median(r[f"{s}_ms"] for r in mine) for s in splits},
            **{f"{s}_tuned_ms_median": statistics.median(r[f"{s}_tuned_ms"] for r in mine) for s in splits},
        }
        for s in others:
            summary[model].update({
                f"{s}_over_{ref}_per_seed": [round(r[f"{s}_ms"] / r[f"{ref}_ms"], 3) for r in mine],
                f"{s}_over_{ref}_tuned_per_seed": [round(r[f"{s}_tuned_ms"] / r[f"{ref}_tuned_ms"], 3) for r in mine],
                f"{ref}_over_{s}_tune_s_per_seed": [round(r[f"{ref}_tune_s"] / r[f"{s}_tune_s"], 3) for r in mine],
            })
    emit({"bench": "budget_split", "target": target.key, "size": args.size, "trials": args.trials, "seeds": seeds,
          "splits": splits, "runs": rows, "summary": summary}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
