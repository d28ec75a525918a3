"""What one candidate build is made of, in this process and on the warm build pool.

On the H100 a build came to about 2.4 worker-seconds, 0.1 of it NVRTC (2026-11-26); on
this CPU machine the same conv's CUDA build is a tenth of that. This says, for random
valid configs of one benchmark layer:
- in this process, one build after another: seconds in ``tvm.compile`` (lowering, host
  code, and where a CUDA driver is loaded NVRTC, timed apart by TVM's compile callback),
  in packing device code (nvcc's fatbin where no driver is loaded) and in the export's
  link;
- on :class:`autotune.measure.WarmBuilder` (one worker per core unless ``--workers``):
  a batch's wall time against the seconds its workers spent building, so waiting shows
  as the gap between them.

Run:  python benchmarks/profile_builds.py --layer resnet18:4 --target cuda --builds 64 --serial 16
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402


def random_modules(space, n: int, seed: int) -> list:
    """``n`` scheduled modules of distinct random configs the space accepts."""
    import numpy as np

    from autotune.templates import InvalidConfig, config_to_json

    rng = np.random.default_rng(seed)
    seen, mods = set(), []
    for _ in range(50 * n):
        cfg = space.random_config(rng)
        key = config_to_json(cfg)
        if key in seen:
            continue
        seen.add(key)
        try:
            mods.append(space.apply(cfg))
        except InvalidConfig:
            continue
        if len(mods) == n:
            break
    return mods


def in_process(mods: list, target, export_dir: str) -> dict:
    """Per-phase seconds of building each module here, one after another, as a build
    worker builds it (:func:`autotune.build_worker.build`)."""
    from autotune import build_worker

    build_worker.build(mods[0], target, export_dir)  # first-build costs out of the figures
    phases = {"compile": 0.0, "device_compile": 0.0, "pack": 0.0, "export": 0.0}
    formats = set()
    for mod in mods[1:]:
        built = build_worker.build(mod, target, export_dir)
        phases["compile"] += built.seconds.compile
        phases["device_compile"] += built.seconds.device_compile
        phases["pack"] += built.seconds.pack
        phases["export"] += built.seconds.link
        if built.device_code and built.device_code.get("format"):
            formats.add(built.device_code["format"])
    n = len(mods) - 1
    timed = target.kind.name == "cuda" and build_worker.wrap_device_compiles(export_dir)
    return {"builds": n, "seconds_per_build": {k: round(v / n, 4) for k, v in phases.items()},
            "device_code": sorted(formats), "device_compile_timed": bool(timed)}


def on_pool(mods: list, target, workers: int) -> dict:
    """One batch of every module on a warm pool: wall time against the workers' own."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from autotune.measure import WarmBuilder

    builder = WarmBuilder(max_workers=workers)
    try:
        for started in builder.prewarm(target):
            started.result()
        inputs = [BuilderInput(m, target) for m in mods]
        builder.build(inputs[: builder.max_workers])  # each worker's first build
        builder.seconds = {k: 0.0 for k in builder.seconds}
        t0 = time.perf_counter()
        results = builder.build(inputs)
        wall = time.perf_counter() - t0
        n, w = len(inputs), builder.max_workers
        return {"workers": w, "builds": n, "errors": sum(1 for r in results if r.error_msg),
                "wall_s": round(wall, 2), "worker_seconds_per_build": round(wall * w / n, 4),
                "busy_per_build": round(builder.seconds["busy"] / n, 4),
                "device_compile_per_build": round(builder.seconds["device_compile"] / n, 4),
                "slowest_s": round(builder.seconds["slowest"], 3)}
    finally:
        builder.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--layer", default="resnet18:4", help="MODEL[@SIZE]:INDEX, as the history-guided benchmark names layers")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--target", default="cuda", help="cuda (the GPU here, or cuda:sm_90 without one) or llvm")
    parser.add_argument("--builds", type=int, default=64, help="configs built as one batch on the pool")
    parser.add_argument("--serial", type=int, default=16, help="of those, how many are built in this process first")
    parser.add_argument("--workers", type=int, default=0, help="build workers (default one per core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune.target import resolve_target
    from history_guided.layers import layer_at
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    target = resolve_target(args.target)
    layer = layer_at(args.layer, args.size)
    space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
    mods = random_modules(space, args.builds, args.seed)
    if len(mods) < 2:
        raise SystemExit(f"error: fewer than 2 valid configs of {args.layer} found")
    with tempfile.TemporaryDirectory(prefix="profile-builds-") as export_dir:
        result = {"benchmark": "what a candidate build is made of", "layer": args.layer, "target": target.key,
                  "cpus": os.cpu_count(), "in_process": in_process(mods[: max(2, args.serial)], target.tvm_target, export_dir),
                  "pool": on_pool(mods, target.tvm_target, args.workers)}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
