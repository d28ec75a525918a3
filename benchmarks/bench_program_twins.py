"""How many of the configs tuners measured were twins: the same program as another config.

For each layer, configs drawn at random from what a measurement file of the
history-guided benchmark holds for it (or, with ``--lines``, every one a stretch of the
file holds: one session's) are scheduled and compiled here (device code
generated, not compiled to a binary, so no GPU and no NVRTC are needed) and digested as
the measurer does (:mod:`autotune.program_digest`). Says per layer how many distinct
schedules and distinct programs the draw holds: what a measurer that builds and times
each program once (``MeasureOptions.once_per_program``, the default) would not have
measured again. And since twins are one program timed more than once (in one session,
or in several for a random draw), how far their latencies in the file lie apart: the
measurement noise the file carries. With ``--against`` earlier lines, which configs of the
stretch are programs those lines timed, and how the two sessions' timings of one program
compare (a device that runs slower one session than another shifts every comparison of
runs made in different sessions).

Run:  python benchmarks/bench_program_twins.py --target cuda:sm_90 --device-name NVIDIA-H100-80GB-HBM3 \\
        --measurements benchmarks/results/gpu_h100/history_guided_cuda_measurements.jsonl --no-shared-memory-estimate \\
        --layers resnet18:0,resnet18:7,mobilenetv2:5,resnet18:4 --lines 18789:22422 \\
        --configs 100000 --out FILE
      (and, for drift between sessions, the same with --layers mobilenetv2:5,resnet18:0,resnet18:7
       --lines 18789: --against 0:18789)
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from history_guided.layers import layer_at  # noqa: E402
from history_guided.progress import log  # noqa: E402
from history_guided.recorded import measured_configs, recorded_space, recorded_target  # noqa: E402


def twin_groups(space, target, configs: list[str]) -> tuple[int, dict[str, list[int]], float]:
    """(distinct schedules, program digest -> positions of ``configs`` building it,
    seconds per config). Configs whose program shows no source count as their own."""
    import tvm

    from autotune.program_digest import program_digest, schedule_twins

    programs: dict[str, list[int]] = defaultdict(list)
    t0 = time.perf_counter()
    mods = [space.apply(json.loads(text)) for text in configs]
    for i, mod in enumerate(mods):
        with target:
            program = program_digest(tvm.compile(mod, target=target))
        programs[program or f"unknown-{i}"].append(i)
    schedules = sum(i == j for i, j in enumerate(schedule_twins(mods)))
    return schedules, programs, (time.perf_counter() - t0) / max(1, len(configs))


def line_range(text: str | None, flag: str) -> tuple[int, int | None] | None:
    """``START:END`` (END empty: to the end) as (start, stop), or one line saying why not."""
    if text is None:
        return None
    start, sep, stop = text.partition(":")
    if not (sep and start.isdigit() and (stop.isdigit() or not stop)):
        raise SystemExit(f"error: {flag} {text!r} is not START:END (for example 18789:)")
    return int(start), int(stop) if stop else None


def earlier_twins(path, target, layer, space, configs, latency, programs, lines) -> dict:
    """Of ``configs`` (their ``programs``), those that are a program measured in the
    earlier ``lines`` under another config, and each one's latency over the earlier
    timings' median (most earlier programs were timed once): above 1, the later session
    timed the same code slower."""
    later = set(configs)
    earlier = {c: lat for c, lat in measured_configs(path, target.key, layer.workload_key, lines).items() if c not in later}
    _, earlier_programs, _ = twin_groups(space, target.tvm_target, list(earlier))
    earlier_lat = list(earlier.values())
    ratios = [float(latency[i] / statistics.median(earlier_lat[j] for j in earlier_programs[program]))
              for program, positions in programs.items() if program in earlier_programs for i in positions]
    return {"earlier_configs": len(earlier), "earlier_programs": len(earlier_programs), "twins_of_earlier": len(ratios),
            "latency_over_earlier_median": round(statistics.median(ratios), 4) if ratios else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--measurements", required=True, help="a history-guided benchmark's JSON-lines measurement file")
    parser.add_argument("--layers", default="resnet18:0,resnet18:1,resnet18:3", help="MODEL:INDEX of layers")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--configs", type=int, default=600, help="configs drawn per layer (all, if it holds fewer)")
    parser.add_argument("--target", default="llvm", help="the file's target, as resolve_target names it")
    parser.add_argument("--device-name", help="the GPU the file was measured on (its target key names it)")
    parser.add_argument("--no-shared-memory-estimate", action="store_true",
                        help="CUDA spaces as the file's runs before 2026-11-26 drew them")
    parser.add_argument("--lines", help="START:END (zero-based, END excluded or empty: to the end): every config"
                        " measured in those lines of the file, in order, instead of a random draw (what one"
                        " session appended: what its measurer would not have measured again)")
    parser.add_argument("--against", help="START:END of earlier lines (with --lines): which of the stretch's configs"
                        " are programs those lines timed, and how their latencies compare (drift between sessions)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if not os.path.exists(args.measurements):
        raise SystemExit(f"error: --measurements: no file at {args.measurements}")
    lines, against = line_range(args.lines, "--lines"), line_range(args.against, "--against")
    if against is not None and lines is None:
        raise SystemExit("error: --against compares with the stretch --lines names; give both")

    t_start = time.perf_counter()
    target = recorded_target(args.target, args.device_name)
    rows = []
    for spec in args.layers.split(","):
        layer = layer_at(spec, args.size)
        measured = list(measured_configs(args.measurements, target.key, layer.workload_key, lines).items())
        if not measured:
            raise SystemExit(f"error: {args.measurements} holds no measured config of {spec} on {target.key}"
                             f"{f' in lines {args.lines}' if lines else ''}")
        if lines is None:
            pick = np.random.default_rng(args.seed).permutation(len(measured))[: args.configs]
        else:
            pick = np.arange(min(len(measured), args.configs))  # in the order they were measured
        configs, latency = [measured[i][0] for i in pick], np.array([measured[i][1] for i in pick])
        space = recorded_space(layer, target, shared_memory_estimate=not args.no_shared_memory_estimate)
        schedules, programs, per_config = twin_groups(space, target.tvm_target, configs)
        spreads = [float(latency[g].max() / latency[g].min()) for g in programs.values() if len(g) > 1]
        row = {
            "layer": spec, "name": layer.name, "measured": len(measured), "drawn": len(configs),
            "distinct_schedules": schedules, "distinct_programs": len(programs),
            "twins": len(configs) - len(programs), "twin_share": round(1 - len(programs) / len(configs), 3),
            "twin_groups": len(spreads),
            "twin_latency_spread_median": round(statistics.median(spreads), 4) if spreads else None,
            "twin_latency_spread_max": round(max(spreads), 4) if spreads else None,
            "seconds_per_config": round(per_config, 4),
        }
        if against is not None:
            row["against"] = earlier_twins(args.measurements, target, layer, space, configs, latency, programs, against)
        rows.append(row)
        log(json.dumps(row))
    emit({"benchmark": "program twins among measured configs", "target": target.key, "measurements": args.measurements,
          "configs_per_layer": args.configs, **({"lines": args.lines} if lines else {"seed": args.seed}),
          **({"against": args.against} if against else {}), "layers": rows,
          "twin_share_median": statistics.median(r["twin_share"] for r in rows),
          "wall_seconds": round(time.perf_counter() - t_start, 1)}, args.out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
