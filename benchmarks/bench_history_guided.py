"""The DAC 2020 experiment, on this machine: trials to come within 5% of the best known
latency, history-guided tuners vs their history-free baselines, real measurements.

1. History: tuning records for the tunable layers of *other* layers and models
   (``--source``): a random sample or a cold-XGBoost run per layer (``--history-tuner``),
   in a history database (``--history-db``; an existing one is completed, not rebuilt).
2. Targets: ResNet-18's first conv plus other layers (``--targets``), none of which is
   in that history (exact hits would make the comparison trivial).
3. For each target layer, each tuner (xgb, tl_xgb, ga, gga) and each seed, tune with real
   measurements until ``--trials``; a config measured once is answered from a shared
   cache afterwards (same layer, same config, same machine), which keeps the experiment
   affordable without changing what any tuner sees. Runs go side by side
   (:func:`history_guided.lockstep.lockstep`), their batches built as one: the history's
   layers, then the targets' tuners and seeds, layer after layer.
4. Best known latency = the best over every measurement of that layer in the
   experiment. Report per layer and tuner the median (over seeds) of trials needed to
   come within 5% of it, and to the baseline's final latency, and the final latency.

The pieces live in ``benchmarks/history_guided/``; this script is the command line.

Run:  python benchmarks/bench_history_guided.py --seeds 5 --trials 60 --out FILE
Prints one JSON object (figures recorded in the README).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, positive_int, run_main  # noqa: E402

from history_guided.history_setup import build_history, copy_database, layers_to_complete, priors_for  # noqa: E402
from history_guided.layers import layer_at  # noqa: E402
from history_guided.lockstep import Run, lockstep  # noqa: E402
from history_guided.measurers import LAUNCHES, APPROXIMATION_WORDS, TIMINGS, CachedMeasurer, ReplayMeasurer, check_best  # noqa: E402
from history_guided.progress import log  # noqa: E402
from history_guided.scoring import (  # noqa: E402
    TOLERANCES,
    dispatched_comparison,
    final_config,
    final_latencies,
    final_latency_test,
    trials_to_match_baseline,
    trials_to_within,
)
from history_guided.tables import approximated_counts, markdown_table, plot_results  # noqa: E402
from history_guided.tuner_specs import make_run_tuner, pairs_of  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--size", type=int, default=56, help="image side for the zoo models (default 56)")
    parser.add_argument("--source", default="resnet50,vgg11",
                        help="models whose layers form the history; MODEL@SIZE at another image size, MODEL[@SIZE]:INDEX one layer")
    parser.add_argument("--history-trials", type=int, default=48, help="records per history layer")
    parser.add_argument("--history-tuner", default="random", choices=("random", "xgb"),
                        help="how history was made: a random sample, or a cold-XGBoost tuning run per source layer")
    parser.add_argument("--history-seed", type=int, default=1234,
                        help="seed of the history tuner's runs (default 1234); a --tuners seed (0, 1, ...) makes history "
                             "the runs a measurement file already holds for those layers")
    parser.add_argument("--target", default="llvm", help="llvm, or cuda on a GPU machine")
    parser.add_argument("--history-db", help="keep the history here; an existing file is reused and completed, not rebuilt")
    parser.add_argument("--targets", default="resnet18:0,resnet18:1,resnet18:3,resnet18:4,resnet18:7,resnet18:11,mobilenetv2:5",
                        help="MODEL:INDEX of tunable conv/dense layers (index into that model's list)")
    parser.add_argument("--exclude", help="MODEL:INDEX layers kept out of history and matching besides --targets "
                        "(an earlier run's other targets, so a run on fewer targets reuses its history as it was)")
    parser.add_argument("--no-vector-restating", action="store_true",
                        help="take history from a CPU of another vector width as it is (before run 32), "
                        "not restated for this CPU's (templates/vector_width.py)")
    parser.add_argument("--other-target-discount", type=float, metavar="F",
                        help="scale the similarity of history measured on another target by F "
                             "(default: history.match.OTHER_TARGET_DISCOUNT, as autotune tune does)")
    parser.add_argument("--no-shared-memory-estimate", action="store_true",
                        help="CUDA spaces as before 2026-11-26, shared memory left to VerifyGPUCode: the H100 "
                             "measurements made before then replay exactly (templates/shared_memory.py)")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seeds", type=positive_int, default=5, help="how many tuner seeds: 0, 1, ..., SEEDS-1 (a count, where other benchmarks take a list)")
    parser.add_argument("--tuners", default="xgb,tl_xgb,ga,gga",
                        help="tuners to compare; NAME:KEY=VALUE;... passes options (e.g. tl_xgb:transfer=joint)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats per measurement (median kept)")
    parser.add_argument("--measurements", help="JSON-lines file of every measurement: read first, appended to, so a run cut short resumes")
    parser.add_argument("--timing", choices=TIMINGS, default=TIMINGS[0],
                        help="how the comparison times GPU kernels: TVM's evaluator (launches, as every recorded run) or "
                             "launches queued behind a spin kernel (queued: autotune.queued_timing; the history is timed "
                             "and answered as launches still); a measurement file's lines answer only runs of their timing")
    parser.add_argument("--replay", metavar="FILE",
                        help="answer every measurement from this measurement file (no hardware); an existing --history-db is "
                             "used as it is, a new one is built from the file as the recorded run built it")
    parser.add_argument("--replay-target", help="which target's lines to replay (default: the file's only one)")
    parser.add_argument("--keep-history", action="store_true",
                        help="with --replay and an existing --history-db: write what the replay adds to history back to "
                             "it, where the file answered every one of those configs (else it is left as it was), so that "
                             "steps of a recorded run (a history completed in two calls, say) replay one after another")
    parser.add_argument("--replay-lines", type=int, metavar="N",
                        help="replay the file's first N lines only, as it stood when a result was recorded (each result "
                             "says under replay.lines how many it read): approximated answers depend on what the file holds")
    parser.add_argument("--approximate", choices=tuple(APPROXIMATION_WORDS), default="nearest",
                        help="how a replay answers a config the file lacks: the nearest measured config's latency (as every "
                             "recorded replay did), or a surrogate model's of the layer's measured configs (fewer false finds "
                             "on the H100 file: benchmarks/bench_replay_approximation.py)")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    parser.add_argument("--plot-dir", help="write one convergence plot per layer here")
    parser.add_argument("--from-json", help="print the markdown table of earlier result files, comma-separated (and plot them with --plot-dir)")
    args = parser.parse_args()
    if args.from_json:
        # Several files (comma-separated) of one experiment, e.g. a layer rerun alone,
        # print as one table whose medians cover all their layers.
        parts = []
        for path in args.from_json.split(","):
            try:
                with open(path, encoding="utf-8") as fh:
                    part = json.load(fh)
            except (OSError, ValueError) as err:
                parser.error(f"--from-json: cannot read {path}: {getattr(err, 'strerror', None) or err}")
            if not isinstance(part, dict) or not isinstance(part.get("layers"), list):
                parser.error(f"--from-json: {path} is no result of this benchmark (it has no list of layers)")
            parts.append(part)
        earlier = {**parts[0], "layers": [row for part in parts for row in part["layers"]]}
        print(markdown_table(earlier))
        if args.plot_dir:
            print("\n".join(plot_results(earlier, args.plot_dir)))
        return 0

    from autotune.target import resolve_target
    from autotune.history import open_history, split_target_key
    from autotune.search.tuner import source_depth
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    t_start = time.perf_counter()
    space_options = {"estimate_shared": False} if args.no_shared_memory_estimate else {}
    target = resolve_target(args.target)
    if args.keep_history and not (args.replay and args.history_db and os.path.exists(args.history_db)):
        raise SystemExit("--keep-history: with --replay and an existing --history-db (a new one is kept anyway)")
    if args.replay_lines is not None and (args.replay_lines < 1 or not args.replay):
        raise SystemExit("--replay-lines: a count of 1 or more, with --replay")
    if args.replay:
        if not os.path.isfile(args.replay):
            raise SystemExit(f"--replay: no measurement file at {args.replay}")
        if not args.history_db:
            raise SystemExit("--replay needs the history it ran with: --history-db of an existing database, "
                             "or of a new one to build from the file with the run's --source and --history-trials")
        keys = ReplayMeasurer.targets_in(args.replay, args.timing)
        replay_key = args.replay_target or (keys[0] if len(keys) == 1 else None)
        if replay_key not in keys:
            raise SystemExit(f"--replay-target must be one of the file's targets: {', '.join(keys) or 'none found'}")
        kind, arch, device = split_target_key(replay_key)
        if (kind, arch) != (target.kind, target.arch):
            same = f"'{{\"kind\": \"llvm\", \"mcpu\": \"{arch}\"}}'" if kind == "llvm" else f"{kind}:{arch}"
            raise SystemExit(f"--target {target.kind}:{target.arch} does not build the spaces of {replay_key}: use --target {same}")
        # History is filed under the recorded device: the replay must match against it
        # exactly as the recorded run did (another device's records count less).
        target = dataclasses.replace(target, device_name=device)
        cm = ReplayMeasurer(args.replay, replay_key, approximate=args.approximate, timing=args.timing, lines=args.replay_lines)
        log(f"replaying {cm.loaded} measurements on {replay_key} from {args.replay} ({cm.lines} lines)")
        history_cm = cm if args.timing == LAUNCHES else ReplayMeasurer(args.replay, replay_key, approximate=args.approximate,
                                                                        lines=args.replay_lines)
    else:
        from autotune.errors import AutotuneError
        from autotune.tune import ensure_measurable

        try:  # no run_error lines in the measurement file from a machine without the device
            ensure_measurable(target, None)
        except AutotuneError as err:
            raise SystemExit(f"error: {err}; --replay FILE answers from a measurement file instead") from None
        cm = None  # made once the tuners are known good: it starts a build worker per core
    targets = [(spec.partition(":")[0], layer_at(spec, args.size)) for spec in args.targets.split(",")]
    spaces = [MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name, **space_options) for _, layer in targets]
    tuners = args.tuners.split(",")
    for spec in tuners:  # a misspelt tuner or option ends the run here, not after the history is built
        make_run_tuner(spec, spaces[0], targets[0][1], seed=0, priors=[])
    if cm is None:
        # History is timed as it always was (launches); with --timing queued the comparison's
        # measurer starts once the history is built, so that one build pool runs at a time.
        history_cm = CachedMeasurer(target, args.repeat, args.measurements)
        if history_cm.loaded:
            log(f"{history_cm.loaded} earlier measurements on {target.key} read from {args.measurements}")
        cm = history_cm if args.timing == LAUNCHES else None
    # Kept out of history and matching: recorded with the result, since a replay that keeps
    # out other layers draws on another history and gives other guided curves.
    kept_out = [*args.targets.split(","), *filter(None, (args.exclude or "").split(","))]
    exclude = {layer_at(spec, args.size).workload_key for spec in kept_out}
    db = args.history_db or os.path.join(tempfile.mkdtemp(prefix="bench-hist-"), "history.db")
    fresh_db = not os.path.exists(db)
    if args.replay and not fresh_db:
        # The replay completes the history as the recorded run did (a GPU call that deepened
        # an imported export, say), but on a copy: answers the file lacks must never reach
        # the database it was given as records. The copy is scratch, removed when the
        # benchmark ends (kept alive by this name until then).
        scratch = tempfile.TemporaryDirectory(prefix="bench-replay-")
        given, db = db, copy_database(db, scratch.name)
    store = None if fresh_db else open_history(db)
    if args.replay:  # before a new database is written
        cm.check_holds({layer.workload_key: f"{model}:{layer.name}" for model, layer in targets})
        history_cm.check_holds({layer.workload_key: f"--source {spec}: {layer.name}" for spec in args.source.split(",")
                                for layer in layers_to_complete(store, target, [spec], args.size, args.history_trials, exclude)})
    if store is None:
        store = open_history(db)
    # An earlier run's history is the same evidence: only what it lacks is measured (or,
    # in a replay, answered from the file; answers it lacks are counted as approximated).
    made_by = build_history(store, target, history_cm, args.source.split(","), args.size, args.history_trials,
                            seed=args.history_seed, exclude=exclude, tuner_name=args.history_tuner, batch=args.batch,
                            space_options=space_options)
    n_hist = made_by.total()
    if args.keep_history and args.replay and not fresh_db:
        if history_cm.approximations:
            log(f"history not kept: {history_cm.approximations} of its answers were approximated; {given} is as it was")
        else:  # every record it added the file measured: the recorded run's history, as it was then
            copy_database(db, os.path.dirname(os.path.abspath(given)), name=os.path.basename(given))
            log(f"history kept in {given} (every answer from the file)")
    t_hist = time.perf_counter() - t_start
    log(f"history: {n_hist} records in {t_hist:.0f} s, {', '.join(kept_out)} kept out ({history_cm.cost_summary()})")
    if cm is None:  # measured, --timing queued: the history's measurer done, the comparison's begins
        history_cm.close()
        cm = CachedMeasurer(target, args.repeat, args.measurements, timing=args.timing)
        log(f"the comparison times from queued launches ({cm.loaded} earlier such measurements read)")

    per_layer = []

    def assemble(rows: list[dict]) -> dict:
        summary = {}
        for guided, base in pairs_of(tuners):
            for what in [f"{int(t * 100)}pct" for t in TOLERANCES] + ["final_latency"]:
                key = f"{base}/{guided}@{what}"
                ratios = [r[key] for r in rows if r.get(key) is not None]
                if ratios:
                    summary[key] = {"median_ratio": statistics.median(ratios), "per_layer": ratios}
            for suffix in ("match_baseline", "within_5pct_of_baseline"):
                ratios = [m["ratio"] for r in rows if (m := r.get(f"{base}/{guided}@{suffix}"))]
                if ratios:
                    summary[f"{base}/{guided}@{suffix}"] = {"median_ratio": statistics.median(ratios), "per_layer": ratios}
        dispatched = dispatched_comparison(rows, args.trials)
        if dispatched is not None:
            summary["dispatched"] = dispatched
        return {
            "benchmark": "trials to within 5% of best known latency (median over seeds)",
            "target": target.key, "size": args.size, "seeds": args.seeds, "trials": args.trials, "batch": args.batch,
            "history": {"models": args.source, "records": n_hist, "tuner": args.history_tuner, "made_by": dict(made_by),
                        "seconds": round(t_hist, 1), "kept_out": kept_out,
                        **({"other_target_discount": args.other_target_discount} if args.other_target_discount is not None else {})},
            "distinct_measurements": cm.measured + cm.loaded, "measured_this_run": cm.measured + (history_cm.measured if history_cm is not cm else 0),
            **({"timing": args.timing} if args.timing != LAUNCHES else {}), "wall_seconds": round(time.perf_counter() - t_start, 1),
            **({"measure_seconds": {k: round(v, 1) for k, v in cost.items()}} if (cost := cm.cost_seconds()) else {}),
            **({"measure_twins": twins} if (twins := cm.twins()) is not None else {}),
            **({"replay": {"file": args.replay, "target": cm.target_key, "asked": cm.asked, "lines": cm.lines,
                                  "approximated": cm.approximations, "approximation": cm.approximate}} if args.replay else {}),
            "layers": rows, "summary": summary,
            "arguments": {k: v for k, v in vars(args).items() if v is not None},
        }

    def layer_row(model, layer, space, score, priors, runs) -> dict:
        """One target layer's result, once every tuner and seed on it has finished."""
        curves = {t: [runs[t, seed].curve for seed in range(args.seeds)] for t in tuners}
        overhead = {t: [runs[t, seed].overhead / max(len(runs[t, seed].curve), 1) for seed in range(args.seeds)] for t in tuners}
        for (t, seed), run in runs.items():
            final = f"{run.best * 1e6:.1f} us" if run.best is not None else "no valid point"
            log(f"{model}:{layer.name} {t} seed {seed}: {final} after {len(run.curve)} trials")
        if args.replay:
            approximated = {t: [cm.approximated_in(layer.workload_key, [r.config for r in runs[t, seed].tuner.state.results])
                                for seed in range(args.seeds)] for t in tuners}
            exact = {t: [cm.exact_trials(layer.workload_key, runs[t, seed].tuner.state.results)
                         for seed in range(args.seeds)] for t in tuners}
        best_known = cm.best(layer.workload_key)
        row = {"layer": f"{model}:{layer.name}", "op_class": layer.op_class, "shapes": layer.inputs + layer.weights,
               "attrs": layer.attrs, "match_score": round(score, 3), "priors": len(priors),
               "history_depth": source_depth(priors), "best_known_s": best_known, "tuners": {}}
        if not args.replay:
            row["best_checked"] = checked = check_best(cm, layer, space, target)
            if checked is not None:
                log(f"{model}:{layer.name} fastest config ({checked['latency_s'] * 1e6:.1f} us) "
                    + ("matches the reference" if checked["verified"] else f"DOES NOT match the reference: {checked['problem']}"))
        for t in tuners:
            finals = final_latencies(curves[t])
            entry = {"median_final_latency_s": statistics.median(finals) if finals else None,
                     "overhead_s_per_config": statistics.median(overhead[t]),
                     "curves": curves[t],
                     # per seed, the config its final latency came from (JSON text; None where
                     # nothing ran): what benchmarks/retime_finals.py times again side by side
                     "final_configs": [final_config(runs[t, seed].tuner.state.results) for seed in range(args.seeds)]}
            for tol in TOLERANCES:
                hits = [trials_to_within(c, best_known, tol) for c in curves[t]]
                # an unreached target counts as trials+1 (a lower bound on the true figure)
                capped = [h if h is not None else args.trials + 1 for h in hits]
                entry[f"trials_to_{int(tol * 100)}pct"] = hits
                entry[f"median_trials_to_{int(tol * 100)}pct"] = statistics.median(capped)
            if args.replay:
                entry["approximated"] = approximated[t]  # per seed: answers not in the file
                entry["exact_trials"] = exact[t]  # per seed: trials before the first of them
            handed = [getattr(runs[t, seed].tuner, "handed_over_at", None) for seed in range(args.seeds)]
            if any(h is not None for h in handed):
                entry["handed_over_at"] = handed  # per seed: configs measured when transfer XGBoost took over
            row["tuners"][t] = entry
        if args.replay:
            log(f"{model}:{layer.name} answers approximated per tuner ({args.seeds} seeds): "
                + approximated_counts([row], with_zero=True))
        for guided, base in pairs_of(tuners):
            if guided in row["tuners"] and base in row["tuners"]:
                for tol in TOLERANCES:
                    key = f"median_trials_to_{int(tol * 100)}pct"
                    row[f"{base}/{guided}@{int(tol * 100)}pct"] = row["tuners"][base][key] / row["tuners"][guided][key]
                b, g = row["tuners"][base]["median_final_latency_s"], row["tuners"][guided]["median_final_latency_s"]
                row[f"{base}/{guided}@final_latency"] = b / g if b and g else None
                row[f"{base}/{guided}@match_baseline"] = trials_to_match_baseline(row, guided, base, args.trials)
                row[f"{base}/{guided}@within_5pct_of_baseline"] = trials_to_match_baseline(row, guided, base, args.trials, 0.05)
                row[f"{base}/{guided}@final_latency_test"] = final_latency_test(row, guided, base)
        return row

    # Every tuner and seed of a layer side by side, one build batch per round; a layer's
    # last rounds are filled with the next layer's first runs.
    layer_runs = []
    for (model, layer), space in zip(targets, spaces):
        score, priors = priors_for(store, layer, target, exclude, args.other_target_discount,
                                   space=None if args.no_vector_restating else space)
        runs = {(t, seed): Run(make_run_tuner(t, space, layer, seed, priors), layer.workload_key, space, args.trials)
                for t in tuners for seed in range(args.seeds)}
        layer_runs.append((model, layer, space, score, priors, runs))
    layer_of = {run: i for i, (*_, runs) in enumerate(layer_runs) for run in runs.values()}
    unfinished = [len(runs) for *_, runs in layer_runs]
    rows: dict[int, dict] = {}

    def finished(run: Run) -> None:
        i = layer_of[run]
        unfinished[i] -= 1
        if unfinished[i]:
            return
        rows[i] = row = layer_row(*layer_runs[i])
        per_layer[:] = [rows[k] for k in sorted(rows)]  # in --targets order, whichever finished first
        printable = {k: v for k, v in row.items() if k != "tuners"}
        printable["tuners"] = {t: {k: v for k, v in e.items() if k != "curves"} for t, e in row["tuners"].items()}
        print(json.dumps(printable), file=sys.stderr, flush=True)
        if args.out:  # partial results survive a run cut short
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(assemble(per_layer), fh, indent=1, default=str)

    def progress(rnd: int, active: list[Run]) -> None:
        going = sorted({layer_of[run] for run in active})
        names = ", ".join(f"{layer_runs[i][0]}:{layer_runs[i][1].name}" for i in going)
        log(f"round {rnd}: {len(active)} runs active ({names or 'none'}), {sum(unfinished)} of {len(layer_of)} unfinished "
            f"({cm.measured} measured; {cm.cost_summary()})")

    lockstep([run for *_, runs in layer_runs for run in runs.values()], cm, args.batch, progress,
             max_active=len(tuners) * args.seeds, on_finish=finished)

    result = assemble(per_layer)
    cm.close()
    store.close()
    emit(result, args.out)
    if args.plot_dir:
        plot_results(result, args.plot_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
