"""Wall time per measured trial: autotune's loop vs TVM's ``meta_schedule.tune_tir``.

Same layer (a 256^3 float32 matmul), same target (LLVM on this host), same number of
measured trials. Both use meta-schedule's design space, builder interface and runner;
the difference is the loop around them (warm build workers, no per-batch process
start, no tensor-intrinsic import in every worker, a light tuner).

Run:  python benchmarks/bench_vs_tvm.py --trials 32 [--skip-tvm] [--out FILE]
Prints one JSON object; the README records the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import emit  # noqa: E402


def matmul_func(n: int):
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    return te.create_prim_func([a, b, c])


def run_autotune(func, target_spec, trials: int, batch: int, tuner_name: str, seed: int) -> dict:
    from autotune.measure import Measurer
    from autotune.search import make_tuner
    from autotune.search.tuner import TrialResult
    from autotune.templates import InvalidConfig
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    t0 = time.perf_counter()
    space = MetaScheduleSpace(func, target_spec.tvm_target, name="matmul")
    t_space = time.perf_counter() - t0
    measurer = Measurer(target_spec)
    tuner = make_tuner(tuner_name, space, seed=seed)
    t1 = time.perf_counter()
    done, best = 0, None
    while done < trials:
        cfgs = tuner.ask(min(batch, trials - done))
        mods, kept, results = [], [], []
        for c in cfgs:
            try:
                mods.append(space.apply(c))
                kept.append(c)
            except InvalidConfig:
                results.append(TrialResult(c, None, "invalid"))
        for c, m in zip(kept, measurer.measure(mods)):
            results.append(TrialResult(c, m.latency, m.status))
            done += 1
            if m.latency and (best is None or m.latency < best):
                best = m.latency
        tuner.tell(results)
    t_loop = time.perf_counter() - t1
    measurer.close()
    return {
        "trials": done,
        "space_seconds": t_space,
        "loop_seconds": t_loop,
        "total_seconds": t_space + t_loop,
        "seconds_per_trial": (t_space + t_loop) / done,
        "loop_seconds_per_trial": t_loop / done,
        "best_latency_s": best,
        "tuner": tuner_name,
    }


def run_tvm(func, target_spec, trials: int, batch: int) -> dict:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    with tempfile.TemporaryDirectory() as work_dir:
        t0 = time.perf_counter()
        db = ms.tune_tir(
            tvm.IRModule({"main": func}), target_spec.tvm_target, work_dir, max_trials_global=trials,
            num_trials_per_iter=batch,
        )
        elapsed = time.perf_counter() - t0
        records = db.get_all_tuning_records()
        lat = [float(sum(r.run_secs) / len(r.run_secs)) for r in records if r.run_secs]
    return {"trials": len(records), "total_seconds": elapsed, "seconds_per_trial": elapsed / max(len(records), 1), "best_latency_s": min(lat) if lat else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tuner", default="random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-tvm", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()

    from autotune.target import resolve_target

    target = resolve_target("llvm")
    func = matmul_func(args.n)
    result = {
        "benchmark": "wall time per measured trial",
        "layer": f"matmul {args.n}x{args.n}x{args.n} float32",
        "target": target.key,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "autotune": run_autotune(func, target, args.trials, args.batch, args.tuner, args.seed),
    }
    if not args.skip_tvm:
        result["tvm_tune_tir"] = run_tvm(func, target, args.trials, args.batch)
        result["speedup_per_trial"] = result["tvm_tune_tir"]["seconds_per_trial"] / result["autotune"]["seconds_per_trial"]
    emit(result, args.out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
