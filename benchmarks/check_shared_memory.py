"""Does the CUDA spaces' shared-memory estimate decide as VerifyGPUCode does?

``templates.shared_memory`` rejects, with no TVM work, a config whose thread block would
allocate more shared memory than the target allows. A wrong estimate either lets invalid
configs through (the old state: found out one replay at a time) or, worse, removes valid
ones from the space. Two checks, no GPU needed:

* ``--measurements FILE --layers MODEL:INDEX,...``: every config of those layers in a
  benchmark's measurement file (the H100's), its recorded status against the estimate.
  A valid config the estimate rejects would be a config the space loses.
* ``--models M1,M2 --draws N``: every tunable layer of those models, N configs drawn
  where shared memory is unbounded, each judged at the real limit by VerifyGPUCode
  alone and by the estimate: over the limit VerifyGPUCode must reject, under it the
  limit must not be what decides. Also: each space's default config still applies.

Run:  python benchmarks/check_shared_memory.py --draws 24 \\
          --models resnet18,resnet50,vgg11,alexnet,mobilenetv2,transformer,dqn,autoencoder,speech,seq2seq,memnet \\
          --measurements benchmarks/results/gpu_h100/history_guided_cuda_measurements.jsonl \\
          --layers resnet18:0,resnet18:1,resnet18:3,resnet18:4,resnet18:7,mobilenetv2:5 \\
          --out benchmarks/results/shared_memory_estimate_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _emit import description, emit, out_file, run_main  # noqa: E402

#: The CUDA target the spaces are built for (the lent H100's arch); nothing is run.
TARGET = "cuda:sm_90"


def _spaces(layer, target):
    """The space as shipped, one with shared memory unbounded (to draw from), and one
    that leaves the verdict on shared memory to VerifyGPUCode alone."""
    import tvm

    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    space = MetaScheduleSpace(layer.func, target, name=layer.name)
    unbounded = MetaScheduleSpace(
        layer.func, tvm.target.Target({**dict(target.export()), "max_shared_memory_per_block": 1 << 30}), name=layer.name
    )
    verifier = MetaScheduleSpace(layer.func, target, name=layer.name, estimate_shared=False)
    return space, unbounded, verifier


def check_file(path: str, specs: list[str], size: int, target) -> dict:
    """Recorded statuses against the estimate, per layer."""
    from history_guided.layers import layer_at

    from autotune.templates import config_from_json
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    layers = {spec: layer_at(spec, size) for spec in specs}
    spaces = {l.workload_key: MetaScheduleSpace(l.func, target, name=l.name) for l in layers.values()}
    counts = {key: Counter() for key in spaces}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            space = spaces.get(rec.get("layer"))
            if space is None:
                continue
            shared = space.shared_bytes(config_from_json(rec["config"]))
            verdict = "no estimate" if shared is None else ("over" if shared > space.max_shared_bytes else "under")
            counts[rec["layer"]][f"{rec['status']}, {verdict}"] += 1
    return {spec: dict(counts[l.workload_key]) for spec, l in layers.items()}


def check_draws(models: list[str], draws: int, size: int | None, target, seed: int = 0) -> dict:
    """Random configs judged by the estimate and by VerifyGPUCode, per tunable layer."""
    import numpy as np

    from autotune import decompose, frontend

    rows = []
    for model in models:
        _, mod = frontend.load_and_fuse(model, **({} if size is None else {"size": size}))
        for layer in decompose.decompose(mod):
            if not layer.tunable:
                continue
            space, unbounded, verifier = _spaces(layer, target)
            row = {"model": model, "layer": layer.name, "op_class": layer.op_class,
                   "estimated_sketches": sum(space.shared_estimated), "sketches": len(space.shared_estimated),
                   "over": 0, "under": 0, "no_estimate": 0, "over_but_verified": 0, "under_but_limit_decides": 0}
            row["default_applies"] = space.applies(space.default_config())
            rng = np.random.default_rng(seed)
            for _ in range(draws):
                cfg = unbounded.random_config(rng)
                shared = space.shared_bytes(cfg)
                if shared is None:
                    row["no_estimate"] += 1
                elif shared > space.max_shared_bytes:
                    row["over"] += 1
                    row["over_but_verified"] += verifier.applies(cfg)
                else:
                    row["under"] += 1
                    row["under_but_limit_decides"] += verifier.applies(cfg) != unbounded.applies(cfg)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"layers": rows, "totals": {k: sum(r[k] for r in rows) for k in
                                       ("over", "under", "no_estimate", "over_but_verified", "under_but_limit_decides")},
            "default_fails": [f"{r['model']}:{r['layer']}" for r in rows if not r["default_applies"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--measurements", help="a benchmark's measurement file (JSON lines)")
    parser.add_argument("--layers", help="MODEL:INDEX of the file's layers to check (bench_history_guided's numbering)")
    parser.add_argument("--models", help="check every tunable layer of these zoo models on random draws")
    parser.add_argument("--draws", type=int, default=16)
    parser.add_argument("--size", type=int, help="image side or sequence length (default: each model's own); "
                        "the measurement file's layers are numbered at 56, as bench_history_guided numbers them")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if not (args.measurements and args.layers) and not args.models:
        parser.error("give --measurements with --layers, or --models")

    from autotune.target import resolve_target

    target = resolve_target(TARGET).tvm_target
    t0 = time.perf_counter()
    result: dict = {"target": str(target.export()), "size": args.size}
    if args.measurements and args.layers:
        result["file"] = {"path": args.measurements,
                          "layers": check_file(args.measurements, args.layers.split(","), args.size or 56, target)}
    if args.models:
        result["draws"] = {"models": args.models, "per_layer": args.draws,
                           **check_draws(args.models.split(","), args.draws, args.size, target)}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
