"""Measure named configs on named layers: the probes behind notebook entries (run 38b:
why a counterpart's winners run slowly on MobileNetV2's conv2d5; run 41: serial twins of
history's configs there), kept as files of configs so the figures can be made again.

The file is a JSON list of ``{"name": ..., "layer": "MODEL[@SIZE]:INDEX", "config":
{...}}``; layers are the history-guided benchmark's (batch norm separate), configs are
data (``json.loads``), never code. Each config is built and timed once, as the benchmark
measures (median of ``--repeat`` timed repeats).

Run:  python benchmarks/measure_configs.py benchmarks/results/probe_run38b_configs.json
Prints one JSON object: each name with its layer and latency in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from history_guided.layers import source_layers  # noqa: E402
from history_guided.measurers import CachedMeasurer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("configs", help="a JSON file: a list of {name, layer, config}")
    parser.add_argument("--size", type=int, default=56, help="image side for a layer named without @SIZE")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune.target import resolve_target
    from autotune.templates import InvalidConfig, config_from_json
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    try:
        with open(args.configs, encoding="utf-8") as fh:
            entries = json.load(fh)
        probes = [(e["name"], e["layer"], config_from_json(json.dumps(e["config"]))) for e in entries]
    except KeyError as err:
        raise SystemExit(f"error: {args.configs}: every entry needs name, layer and config; one lacks {err}") from None
    except (OSError, ValueError, TypeError, InvalidConfig) as err:
        raise SystemExit(f"error: {args.configs}: {err}") from None
    layers = {}
    for _, spec, _ in probes:
        if spec not in layers:
            if ":" not in spec:
                raise SystemExit(f"error: layer {spec!r} is not MODEL[@SIZE]:INDEX")
            (layers[spec],) = source_layers(spec, args.size)
    target = resolve_target("llvm")
    cm = CachedMeasurer(target, args.repeat, None)
    results = {}
    try:
        for spec, layer in layers.items():
            space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
            named = [(name, cfg) for name, s, cfg in probes if s == spec]
            for (name, _), res in zip(named, cm.measure(layer.workload_key, space, [cfg for _, cfg in named])):
                results[name] = {"layer": spec, "latency_us": round(res.latency * 1e6, 2) if res.latency else None,
                                 "status": res.status}
    finally:
        cm.close()
    emit({"benchmark": "named configs measured once", "target": target.key, "configs": args.configs,
          "repeat": args.repeat, "results": results}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
