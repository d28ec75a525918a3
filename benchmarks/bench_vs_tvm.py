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

from _emit import description, emit, out_file, positive_int, run_main  # noqa: E402


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


#: What meta-schedule records as the run time of a candidate that failed to build or run.
TVM_FAILED_RUN_S = 1e9


def _real_tensor_intrinsics() -> None:
    """TVM's tuner as users run it: autotune's space stubs out ``tvm.s_tir.tensor_intrin``
    (its spaces tensorize nothing), but ``tune_tir``'s x86 rules on a CPU with VNNI
    (this znver4) look up ``dot_16x4_vnni`` and stopped the benchmark without it."""
    import importlib

    stub = sys.modules.get("tvm.s_tir.tensor_intrin")
    if stub is not None and getattr(stub, "__file__", None) is None:
        del sys.modules["tvm.s_tir.tensor_intrin"]
    importlib.import_module("tvm.s_tir.tensor_intrin")


def run_tvm(func, target_spec, trials: int, batch: int) -> dict:
    import contextlib

    _real_tensor_intrinsics()
    import tvm
    from tvm.s_tir import meta_schedule as ms

    # its log lines went to stdout, ahead of the one JSON object this script prints
    with tempfile.TemporaryDirectory() as work_dir, contextlib.redirect_stdout(sys.stderr):
        t0 = time.perf_counter()
        db = ms.tune_tir(
            tvm.IRModule({"main": func}), target_spec.tvm_target, work_dir, max_trials_global=trials,
            num_trials_per_iter=batch,
        )
        elapsed = time.perf_counter() - t0
        records = db.get_all_tuning_records()
        lat = [float(sum(r.run_secs) / len(r.run_secs)) for r in records if r.run_secs]
    ok = [x for x in lat if x < TVM_FAILED_RUN_S]
    return {"trials": len(records), "failed": len(records) - len(ok), "total_seconds": elapsed,
            "seconds_per_trial": elapsed / max(len(records), 1), "best_latency_s": min(ok) if ok else None}


def main() -> int:
    from autotune.search import TUNERS

    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--n", type=positive_int, default=256, help="matmul size N (N x N x N; default 256)")
    parser.add_argument("--trials", type=positive_int, default=32, help="measured trials for each tuner (default 32)")
    parser.add_argument("--batch", type=positive_int, default=8, help="candidates built and timed together (default 8)")
    parser.add_argument("--tuner", default="random", choices=sorted(TUNERS), help="autotune's tuner (default random)")
    parser.add_argument("--seed", type=int, default=0, help="the tuner's seed (default 0)")
    parser.add_argument("--skip-tvm", action="store_true", help="time autotune's loop alone (TVM's took 434 s for 32 trials)")
    parser.add_argument("--out", type=out_file, help="also write the JSON here (folders made)")
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
        tvm_result = result["tvm_tune_tir"] = run_tvm(func, target, args.trials, args.batch)
        if tvm_result["failed"] == tvm_result["trials"]:
            # a ratio against candidates that never ran compares nothing (it read 34.9x)
            print(f"warning: every one of TVM's {tvm_result['trials']} candidates failed: no per-trial ratio", file=sys.stderr)
        else:
            result["speedup_per_trial"] = tvm_result["seconds_per_trial"] / result["autotune"]["seconds_per_trial"]
    emit(result, args.out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
