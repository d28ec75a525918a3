"""Whole-model latency with batch norm folded into the convolutions' epilogue, and without,
the convolutions' schedules held the same.

For each model and seed: one real ``autotune tune`` of the model as ``autotune`` decomposes
it (each batch norm, with the ReLU and residual add after it, a kernel of its own), into
a fresh history. Then two builds of the model from that history:
- **separate**: those layers, each with history's best schedule;
- **folded**: the layers ``frontend.fuse(..., fold_batch_norm=True)`` makes (batch norm
  rewritten for inference and fused into the conv before it), each convolution given the very config its
  unfused twin won with (it must lie in the folded conv's knob space: stops otherwise), the
  pooling and dense layers their own records (same kernels, same keys).
So the two differ only in where batch norm runs. Both are timed back to back in this
process (TVM's ``time_evaluator``, 5 repeats of at least 100 ms, alternating), and
their outputs compared on one seeded input.

Run:  python benchmarks/bench_batch_norm_fold.py --models resnet18,mobilenetv2 --size 56 --trials 128 --seeds 0,1,2 --out FILE
Prints one JSON object; the README records the figures.
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

from _emit import emit  # noqa: E402


def _shape_of(layer) -> tuple:
    """What makes two convolutions the same computation, epilogue aside."""
    return (layer.op_class, layer.anchor, tuple(layer.spatial), tuple(layer.reduction), repr(layer.attrs),
            tuple(layer.weights[0]) if layer.weights else ())


def folded_with_twins_schedules(model: str, size: int, target, store, separate_layers):
    """The folded model, each layer scheduled as its unfused twin is in ``store``."""
    from autotune import compile as compiler
    from autotune import decompose, frontend
    from templates.meta_schedule_space import MetaScheduleSpace

    _, mod = frontend.load_and_fuse(model, size=size, fold_batch_norm=True)
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


def time_pair(mods: dict, target, input_shape) -> dict:
    """Median seconds per inference of each built module, timed alternately, and the
    largest difference between their outputs on one seeded input."""
    import numpy as np
    import tvm
    from tvm import relax

    from autotune import compile as compiler

    dev = target.device()
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(input_shape).astype("float32"), dev)
    vms = {name: relax.VirtualMachine(compiler.build(mod, target), dev) for name, mod in mods.items()}
    outputs = {}
    for name, vm in vms.items():
        out = vm["main"](x)
        outputs[name] = (out if hasattr(out, "numpy") else out[0]).numpy()  # one output, or a tuple of them
    samples: dict[str, list[float]] = {name: [] for name in vms}
    for _ in range(5):
        for name, vm in vms.items():
            timer = vm.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=100)
            samples[name].append(float(timer(x).results[0]))
    a, b = outputs.values()
    return {
        **{f"{name}_ms": round(statistics.median(s) * 1e3, 3) for name, s in samples.items()},
        "max_abs_output_difference": float(np.abs(a - b).max()),
    }


def one_seed(model: str, size: int, trials: int, seed: int, target) -> dict:
    from autotune import compile as compiler
    from autotune import frontend
    from autotune.tune import TuneOptions, TuneSession
    from history import open_history

    with tempfile.TemporaryDirectory(prefix="autotune-bnfold-") as tmp:
        store = open_history(os.path.join(tmp, "history.db"))
        try:
            options = TuneOptions(trials=trials, seed=seed, model_latency=False)  # batch norm separate
            session = TuneSession(target, store, options)
            t0 = time.perf_counter()
            try:
                session.tune_model(model, size=size)
            finally:
                session.close()
            tune_s = time.perf_counter() - t0
            separate_layers = session.decomposition
            spec, separate = frontend.load_and_fuse(model, size=size, fold_batch_norm=False)
            separate, _ = compiler.apply_history(separate, separate_layers, target, store)
            folded, folded_layers, moved = folded_with_twins_schedules(model, size, target, store, separate_layers)
            timing = time_pair({"separate": separate, "folded": folded}, target, next(iter(spec.input_shapes.values())))
        finally:
            store.close()
    return {
        "model": model, "seed": seed, "tune_s": round(tune_s, 1),
        "kernels": {"separate": len(separate_layers), "folded": len(folded_layers)},
        "launches": {"separate": sum(l.occurrences for l in separate_layers), "folded": sum(l.occurrences for l in folded_layers)},
        "convolutions_given_twins_schedule": moved,
        **timing,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--trials", type=int, default=64, help="measured trials of the tune (the whole model)")
    parser.add_argument("--seeds", default="0", help="comma-separated tuner seeds: one tune each")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--out")
    args = parser.parse_args()

    from autotune.target import resolve_target

    target = resolve_target(args.target)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for model in args.models.split(","):
        for seed in seeds:
            print(f"[bnfold] {model} seed {seed}", file=sys.stderr, flush=True)
            rows.append(one_seed(model, args.size, args.trials, seed, target))
            print(f"[bnfold] {rows[-1]}", file=sys.stderr, flush=True)
    summary = {}
    for model in args.models.split(","):
        mine = [r for r in rows if r["model"] == model]
        summary[model] = {
            "separate_ms_median": statistics.median(r["separate_ms"] for r in mine),
            "folded_ms_median": statistics.median(r["folded_ms"] for r in mine),
            "separate_over_folded_per_seed": [round(r["separate_ms"] / r["folded_ms"], 3) for r in mine],
        }
    emit({"bench": "batch_norm_fold", "target": target.key, "size": args.size, "trials": args.trials,
          "seeds": seeds, "runs": rows, "summary": summary}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
