"""Queued timing against TVM's evaluator on small and large kernels, on the GPU machine.

``autotune.queued_timing`` times a kernel from launches enqueued behind a spin kernel, so
that the host's launch rate does not pace it; TVM's evaluator times back-to-back launches,
which the host paces below some 4 us a kernel (benchmarks/HISTORY_GUIDED.md, twenty-second
session). Here one elementwise kernel (``y = 2x + 1``, 256 threads a block) over 2^8 to
2^24 floats, about 2 us to some 100 us, is timed both ways, in turns, each ``--repeat``
times. If queued timing works, the two agree on the large kernels (within a few percent)
and queued timing comes in under the evaluator's floor on the small ones, with every
batch queued ahead (``counts``: batches, those done again on a longer spin, and those
never queued ahead). Prints one JSON object. About 20 s.

Run on a GPU machine:  python benchmarks/gpu/queued_check.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _emit import emit, out_file  # noqa: E402


def elementwise(n: int):
    """``y = 2x + 1`` over ``n`` floats, one element a thread, 256 threads a block."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: x[i] * 2.0 + 1.0, name="y")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([x, y]).with_attr("global_symbol", "main")}))
    (i,) = sch.get_loops(sch.get_sblock("y"))
    bx, tx = sch.split(i, factors=[None, 256])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.mod


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timings each way, in turns (median kept)")
    parser.add_argument("--out", type=out_file)
    args = parser.parse_args()

    import numpy as np
    import tvm

    from autotune.queued_timing import QueuedTimer

    dev = tvm.cuda(0)
    if not dev.exist:
        raise SystemExit("error: needs a CUDA GPU (this is for the GPU machine)")
    major, minor = str(dev.compute_version).split(".")
    target = tvm.target.Target({"kind": "cuda", "arch": f"sm_{major}{minor}"}, host="llvm")
    timer = QueuedTimer(dev)
    rows = []
    for log2 in (8, 12, 16, 20, 22, 24):
        n = 1 << log2
        ex = tvm.compile(elementwise(n), target=target)
        f = ex["main"]
        evaluator = ex.mod.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=10)  # as meta-schedule's runner
        x = tvm.runtime.tensor(np.random.default_rng(0).random(n, dtype=np.float32), dev)
        y = tvm.runtime.empty((n,), "float32", dev)
        f(x, y)
        assert np.allclose(y.numpy(), x.numpy() * 2 + 1), "the kernel computes y = 2x + 1"
        launches, queued = [], []
        for _ in range(args.repeat):
            launches.append(evaluator(x, y).mean)
            queued.append(timer.time(f, (x, y), number=1, repeat=1, min_repeat_ms=10)[0])
        row = {"floats": n, "launches_us": round(statistics.median(launches) * 1e6, 3),
               "queued_us": round(statistics.median(queued) * 1e6, 3)}
        row["queued_over_launches"] = round(row["queued_us"] / row["launches_us"], 3)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    emit({"check": "queued timing against TVM's evaluator", "device": dev.device_name, "repeat": args.repeat,
          "kernels": rows, "counts": dict(timer.counts)}, args.out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
