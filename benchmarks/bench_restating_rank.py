"""How well history from another CPU ranks this CPU's measured configs, as measured or
restated for this CPU's vector width (``templates/vector_width.py``).

No measurement: for each target layer, an XGBoost ranker (``search.warm_start.HistoryRanker``,
the model the guided tuners order history with) is trained on the layer's priors exactly as
``autotune tune`` gathers them, once as measured and once restated, and scores every config
a measurement file holds for that layer on this CPU. Reported per layer: Spearman's rho of
score against measured latency, and the best latency among the ranker's top 8 and top 32.
A screen only: the configs in the file are those earlier tuners chose to measure.

Run (the figures of run 32 in ``benchmarks/HISTORY_GUIDED.md``; H imported from
``benchmarks/results/history_guided_llvm_run6_history.json``, a ``znver3`` history, on a
``znver4``):

    python benchmarks/bench_restating_rank.py --history-db H \\
        --measurements benchmarks/results/history_guided_llvm_znver4_measurements.jsonl \\
        --targets resnet18:0,resnet18:1,resnet18:4,mobilenetv2:5 --exclude resnet18:3,resnet18:7 \\
        --first-lines 6556

(the file's first 6,556 lines are run 31's, measured before restating existed; run 32
appended configs its restated rankers chose, which would favour them.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Collection

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from _emit import description, run_main  # noqa: E402


def measured_by_layer(path: str, target_key: str, workload_keys: Collection[str], first_lines: int | None = None
                      ) -> dict[str, tuple[list[dict], list[float]]]:
    """Layer -> the valid configs and their latencies a measurement file holds for it on
    one target (in its first ``first_lines`` lines: the file as it stood before a later
    run appended), for the layers ``workload_keys``, in one pass over the file."""
    from history_guided.measurers import records

    out: dict[str, tuple[list[dict], list[float]]] = {k: ([], []) for k in workload_keys}
    for rec in records(path, lines=(0, first_lines)):
        slot = out.get(rec["layer"])
        if slot is not None and rec["target"] == target_key and rec["status"] == "ok":
            slot[0].append(rec["config"])
            slot[1].append(float(rec["latency"]))
    return out


def rank_quality(priors, space, layer, configs, latencies, seed: int = 0) -> dict:
    import numpy as np
    from scipy.stats import spearmanr

    from autotune.search.features import encoder_for
    from autotune.search.tuner import prior_groups
    from autotune.search.warm_start import HistoryRanker

    groups, _, perf = prior_groups(priors)
    similarity = np.array([p.similarity * p.target_weight for p in priors])
    features = layer.features()
    encoder = encoder_for(space, len(features))
    ranker = HistoryRanker([p.config for p in priors], [p.layer_features for p in priors], perf, similarity, groups,
                           encoder, features, seed=seed)
    score = ranker.predict(encoder.encode_configs(configs, features))
    lat = np.asarray(latencies)
    order = np.argsort(-score, kind="stable")
    return {
        "spearman": round(float(spearmanr(-score, lat)[0]), 3),
        "best_of_top8_us": round(float(lat[order[:8]].min()) * 1e6, 1),
        "best_of_top32_us": round(float(lat[order[:32]].min()) * 1e6, 1),
        "best_measured_us": round(float(lat.min()) * 1e6, 1),
        "configs": len(configs),
        "priors": len(priors),
        "restated": sum(p.restated for p in priors),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--history-db", required=True, help="history with the other CPU's records")
    parser.add_argument("--measurements", required=True, help="this CPU's measurement file (bench_history_guided.py)")
    parser.add_argument("--targets", default="resnet18:0,resnet18:1,resnet18:4,mobilenetv2:5")
    parser.add_argument("--exclude", default="", help="MODEL:INDEX layers kept out of history besides --targets")
    parser.add_argument("--first-lines", type=int, metavar="N",
                        help="read only the file's first N lines: the configs measured before a run that restated "
                        "history appended its own, which its ranker chose")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args()

    from history_guided.layers import layer_at

    from autotune.target import float_lanes, resolve_target
    from autotune.priors import priors_from_match
    from autotune.history import open_history
    from autotune.history.match import match
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    for path in (args.history_db, args.measurements):
        if "://" not in path and not os.path.isfile(path):
            raise SystemExit(f"error: no such file: {path}")
    target = resolve_target("llvm")
    targets = [t for t in args.targets.split(",") if t]
    layers = {spec: layer_at(spec, args.size) for spec in targets}
    extra = [layer_at(spec, args.size) for spec in args.exclude.split(",") if spec]
    exclude = {layer.workload_key for layer in [*layers.values(), *extra]}
    measured = measured_by_layer(args.measurements, target.key, {layer.workload_key for layer in layers.values()},
                                 args.first_lines)
    lanes = float_lanes(target.kind, target.arch)
    rows = []
    with open_history(args.history_db, readonly=True) as store:
        for spec, layer in layers.items():
            configs, latencies = measured[layer.workload_key]
            if not configs:
                print(f"{spec}: no measurements on {target.key} in {args.measurements}", file=sys.stderr)
                continue
            space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
            # one match (as `autotune tune` makes it), its records taken as they are and restated
            m = match(store, layer.workload_info(), target.key, exclude=exclude)
            row = {"layer": spec, "match_score": round(m.score, 3)}
            for name, with_space in (("as_measured", None), ("restated", space)):
                priors = priors_from_match(store, m, space=with_space, lanes=lanes)
                row[name] = rank_quality(priors, space, layer, configs, latencies, args.seed)
            rows.append(row)
            a, r = row["as_measured"], row["restated"]
            print(f"{spec} (match {row['match_score']}, {r['configs']} configs, {r['restated']} of {r['priors']} "
                  f"priors restated): spearman {a['spearman']} -> {r['spearman']}, best of top 8 "
                  f"{a['best_of_top8_us']} -> {r['best_of_top8_us']} us, of top 32 {a['best_of_top32_us']} -> "
                  f"{r['best_of_top32_us']} us (best measured {r['best_measured_us']})", flush=True)
    result = {"benchmark": "restating_rank", "target": target.key, "arguments": vars(args), "layers": rows}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
