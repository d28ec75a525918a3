"""Whole-model latency with batch norm as a kernel of its own (separate), in the
convolutions' epilogue, or folded into their weights.

Two ways to give the layerings their schedules (``--schedules``):
- **twins** (the convolutions' schedules held the same): one real tune of the model with
  batch norm separate, into a fresh history; then each layering built from it, every
  folded convolution given the very config its unfused twin won with (it must lie in
  the folded conv's knob space: stops otherwise), the pooling and dense layers their
  own records (same kernels, same keys). The builds differ only in where batch norm runs.
- **tuned**: each layering tuned on its own (``TuneSession`` with its ``batch_norm``),
  the same trial budget and seed, each into its own history: what a user gets from
  ``autotune tune --batch-norm X``.
The layerings: ``separate`` (each batch norm, with the ReLU and residual add after it,
a kernel of its own), ``epilogue`` (rewritten for inference and fused into the conv
before it, as TVM's own pipeline does) and ``weights`` (folded into the conv's weights
and bias, leaving an epilogue of one add). The builds are timed in turns in this process
(TVM's ``time_evaluator``, 5 repeats of at least 100 ms each), and their outputs compared
with the separate build's on one seeded input.

Run:  python benchmarks/bench_batch_norm_fold.py --schedules tuned --layerings weights --models resnet18,mobilenetv2 --size 56 --trials 128 --seeds 0,1,2,3,4 --out FILE
      python benchmarks/bench_batch_norm_fold.py --schedules twins --models resnet18,mobilenetv2 --size 56 --trials 128 --seeds 0,1,2 --out FILE
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


def _shape_of(layer) -> tuple:
    """What makes two convolutions the same computation, epilogue aside."""
    return (layer.op_class, layer.anchor, tuple(layer.spatial), tuple(layer.reduction), repr(layer.attrs),
            tuple(layer.weights[0]) if layer.weights else ())


def folded_with_twins_schedules(model: str, size: int, target, store, separate_layers, batch_norm: str):
    """The model in the ``batch_norm`` layering, each layer scheduled as its unfused twin
    is in ``store``."""
    from autotune import compile as compiler
    from autotune import decompose, frontend
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    _, mod = frontend.load_and_fuse(model, size=size, batch_norm=batch_norm)
    layers = decompose.decompose(mod)
    mod, applied = compiler.apply_history(mod, layers, target, store)  # pooling, dense: same keys
    twins = {_shape_of(l): l for l in separate_layers if l.tunable}
    moved = 0
    for layer in layers:
        twin = twins.get(_shape_of(layer))
        if applied.layers[layer.name]["schedule"] == "history" or twin is None:
            continue
        record = store.best(twin.workload_key, target.key)
        if record is None or record.space_id.startswith(compiler.DEFAULT_SPACE_PREFIX):
            continue
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
        if not space.contains(record.config):
            raise SystemExit(f"{layer.name}: its twin's config is not in its knob space")
        func = space.apply(record.config)["main"].without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
        mod.update_func(mod.get_global_var(layer.name), func)
        moved += 1
    return mod, layers, moved


def tune_into(store, model: str, size: int, trials: int, seed: int, target, batch_norm: str):
    """One real ``autotune tune`` of the model in the ``batch_norm`` layering, into
    ``store``: (its layers, seconds it took)."""
    from autotune.tune import TuneOptions, TuneSession

    session = TuneSession(target, store, TuneOptions(trials=trials, seed=seed, model_latency=False, batch_norm=batch_norm))
    t0 = time.perf_counter()
    try:
        session.tune_model(model, size=size)
    finally:
        session.close()
    return session.decomposition, round(time.perf_counter() - t0, 1)


def one_seed(model: str, size: int, trials: int, seed: int, target, layerings_compared: list[str]) -> dict:
    from autotune import compile as compiler
    from autotune import frontend
    from autotune.history import open_history

    with tempfile.TemporaryDirectory(prefix="autotune-bnfold-") as tmp:
        store = open_history(os.path.join(tmp, "history.db"))
        try:
            separate_layers, tune_s = tune_into(store, model, size, trials, seed, target, "separate")
            spec, separate = frontend.load_and_fuse(model, size=size, batch_norm="separate")
            separate, _ = compiler.apply_history(separate, separate_layers, target, store)
            mods, layerings, moved = {"separate": separate}, {"separate": separate_layers}, {}
            for batch_norm in layerings_compared:
                mods[batch_norm], layerings[batch_norm], moved[batch_norm] = folded_with_twins_schedules(
                    model, size, target, store, separate_layers, batch_norm
                )
            timing = time_in_turns(mods, target, next(iter(spec.input_shapes.values())))
        finally:
            store.close()
    return {
        "model": model, "seed": seed, "tune_s": tune_s,
        "kernels": {name: len(layers) for name, layers in layerings.items()},
        "launches": {name: sum(l.occurrences for l in layers) for name, layers in layerings.items()},
        "convolutions_given_twins_schedule": moved,
        **timing,
    }


def one_seed_tuned(model: str, size: int, trials: int, seed: int, target, layerings_compared: list[str]) -> dict:
    """Each layering tuned on its own, with the same trial budget and seed, into its own
    history: what a user gets from ``autotune tune --batch-norm X``."""
    from autotune import compile as compiler
    from autotune import frontend
    from autotune.history import open_history

    mods, layerings, tune_s, spec = {}, {}, {}, None
    with tempfile.TemporaryDirectory(prefix="autotune-bnfold-") as tmp:
        for batch_norm in ["separate", *layerings_compared]:
            store = open_history(os.path.join(tmp, f"{batch_norm}.db"))
            try:
                layerings[batch_norm], tune_s[batch_norm] = tune_into(store, model, size, trials, seed, target, batch_norm)
                spec, mod = frontend.load_and_fuse(model, size=size, batch_norm=batch_norm)
                mods[batch_norm], _ = compiler.apply_history(mod, layerings[batch_norm], target, store)
            finally:
                store.close()
        timing = time_in_turns(mods, target, next(iter(spec.input_shapes.values())))
    return {
        "model": model, "seed": seed, "schedules": "tuned", "tune_s": tune_s,
        "kernels": {name: len(layers) for name, layers in layerings.items()},
        "tunable_kernels": {name: sum(l.tunable for l in layers) for name, layers in layerings.items()},
        "launches": {name: sum(l.occurrences for l in layers) for name, layers in layerings.items()},
        **timing,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--trials", type=int, default=64, help="measured trials of the tune (the whole model)")
    parser.add_argument("--seeds", default="0", help="comma-separated tuner seeds: one tune each")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--schedules", choices=("twins", "tuned"), default="twins",
                        help="twins: every layering gets the separate tune's conv schedules; tuned: each layering tuned on its own")
    parser.add_argument("--layerings", default="epilogue,weights", help="compared with separate: epilogue, weights or both")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune.target import resolve_target

    target = resolve_target(args.target)
    seeds = [int(s) for s in args.seeds.split(",")]
    layerings = args.layerings.split(",")
    if not set(layerings) <= {"epilogue", "weights"}:
        parser.error("--layerings takes epilogue and/or weights")
    rows = []
    for model in args.models.split(","):
        for seed in seeds:
            print(f"[bnfold] {model} seed {seed}", file=sys.stderr, flush=True)
            run = one_seed_tuned if args.schedules == "tuned" else one_seed
            rows.append(run(model, args.size, args.trials, seed, target, layerings))
            print(f"[bnfold] {json.dumps(rows[-1])}", file=sys.stderr, flush=True)  # kept if the run is cut
    summary = {}
    for model in args.models.split(","):
        mine = [r for r in rows if r["model"] == model]
        summary[model] = {"separate_ms_median": statistics.median(r["separate_ms"] for r in mine)}
        for name in layerings:
            summary[model][f"{name}_ms_median"] = statistics.median(r[f"{name}_ms"] for r in mine)
            summary[model][f"separate_over_{name}_per_seed"] = [round(r["separate_ms"] / r[f"{name}_ms"], 3) for r in mine]
    emit({"bench": "batch_norm_fold", "target": target.key, "size": args.size, "trials": args.trials, "schedules": args.schedules, "layerings": layerings,
          "seeds": seeds, "runs": rows, "summary": summary}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
