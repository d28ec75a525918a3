"""Each tuner's final configs timed again, side by side: are the finals as the run had them?

The history-guided benchmark compares tuners by their final latency, each seed's best
measurement. Where a kernel's timings are noisy (the same program timed twice came back
5% apart in the median on MobileNetV2's 3-us conv2d5 on the H100, at most 47%:
``bench_program_twins.py``), a tuner that measured more configs near the optimum also
drew more chances of a low timing, so a final 6% lower may be luck. Here every seed's
final config of every tuner in a result file (its ``final_configs``) is timed again,
``--rounds`` times, all of them in each round in a shuffled order, each time on its own
(no program's earlier timing reused); a config's re-timed latency is the median of its
rounds. Then the paper's pairs are compared again on the re-timed finals by the same
rank test as the benchmark's (:func:`history_guided.scoring.final_latency_test`).

Needs the device (``--target cuda`` on the GPU machine; llvm here). Prints one JSON
object; a progress line per layer says each pair's verdict on the re-timed finals.

Run:  python benchmarks/retime_finals.py --results benchmarks/gpu/finals_h100_six_layers.json --target cuda --rounds 5 --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from history_guided.layers import model_layers  # noqa: E402
from history_guided.progress import log  # noqa: E402

from autotune.measure import TIMINGS  # noqa: E402
from history_guided.recorded import recorded_space  # noqa: E402
from history_guided.scoring import final_latency_test, final_latency_verdict  # noqa: E402


def load_results(path: str) -> dict:
    """A benchmark result file, checked to hold what a re-timing needs (one line if not)."""
    if not os.path.exists(path):
        raise SystemExit(f"error: --results: no file at {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            result = json.load(fh)
        layers = result["layers"]
        for row in layers:
            for name, entry in row["tuners"].items():
                if "final_configs" not in entry:
                    raise SystemExit(f"error: {path}: {row['layer']} {name} has no final_configs"
                                     " (results of bench_history_guided.py from 2026-11-27 on carry them)")
    except (ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"error: {path} is not a bench_history_guided.py result ({type(err).__name__}: {err})") from None
    return result


def layer_named(spec: str, size: int):
    """The tunable layer a result row names, ``MODEL:NAME``."""
    model, _, name = spec.partition(":")
    found = [layer for layer in model_layers(model, size) if layer.name == name]
    if not found:
        raise SystemExit(f"error: {model} at size {size} has no tunable layer {name!r}")
    return found[0]


def retime(measurer, space, configs: list[str], rounds: int, seed: int) -> dict[str, float | None]:
    """Config (JSON text) -> the median of its ``rounds`` timings (None: it failed every
    time); each round times them all, in a shuffled order."""
    from autotune.templates import InvalidConfig

    mods = {}
    for text in configs:
        try:
            mods[text] = space.apply(json.loads(text))
        except InvalidConfig:
            mods[text] = None
    timed: dict[str, list[float]] = {text: [] for text in configs}
    rng = np.random.default_rng(seed)
    runnable = [text for text in configs if mods[text] is not None]
    errors: set[str] = set()
    for _ in range(rounds):
        order = [runnable[i] for i in rng.permutation(len(runnable))]
        for text, res in zip(order, measurer.measure([mods[t] for t in order])):
            if res.latency is not None:
                timed[text].append(res.latency)
            elif res.error and res.error not in errors:  # each distinct failure once (a timing that cannot run)
                errors.add(res.error)
                log(f"a timing failed ({res.status}): {res.error.strip().splitlines()[-1] if res.error.strip() else ''}")
    return {text: statistics.median(v) if v else None for text, v in timed.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--results", required=True, help="a bench_history_guided.py result holding final_configs")
    parser.add_argument("--target", default="llvm", help="where to time: llvm here, cuda on the GPU machine")
    parser.add_argument("--rounds", type=int, default=5, help="timings per config, each in its own shuffled round")
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats per measurement (median kept), as the benchmark's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing", choices=TIMINGS, default=TIMINGS[0],
                        help="launches: TVM's evaluator, as the benchmark timed; queued: launches queued behind a "
                             "spin kernel, so the host's launch rate does not pace a few-us kernel (autotune.queued_timing)")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if args.rounds < 1:
        raise SystemExit("error: --rounds must be at least 1")
    result = load_results(args.results)

    from autotune.errors import AutotuneError
    from autotune.measure import MeasureOptions, Measurer
    from autotune.target import resolve_target
    from autotune.tune import ensure_measurable

    target = resolve_target(args.target)
    try:
        ensure_measurable(target, None)
    except AutotuneError as err:
        raise SystemExit(f"error: {err}") from None
    size = int(result.get("size") or result["arguments"].get("size", 56))
    shared_estimate = not result.get("arguments", {}).get("no_shared_memory_estimate", False)
    t0 = time.perf_counter()
    # every timing on its own: a twin of another final is timed again, not answered
    measurer = Measurer(target, MeasureOptions(repeat=args.repeat, min_repeat_ms=10, once_per_program=False,
                                                      timing=args.timing))
    rows = []
    try:
        for row in result["layers"]:
            layer = layer_named(row["layer"], size)
            space = recorded_space(layer, target, shared_memory_estimate=shared_estimate)
            finals = {name: entry["final_configs"] for name, entry in row["tuners"].items()}
            distinct = sorted({c for configs in finals.values() for c in configs if c is not None})
            again = retime(measurer, space, distinct, args.rounds, args.seed)
            tuners = {name: {"recorded_s": [c[-1] if c else None for c in row["tuners"][name]["curves"]],
                             "retimed_s": [again.get(c) if c is not None else None for c in configs]}
                      for name, configs in finals.items()}
            # the rank test reads each curve's last point: one-point curves of the re-timed finals
            as_curves = {"tuners": {name: {"curves": [[x] for x in e["retimed_s"]]} for name, e in tuners.items()}}
            pairs = {}
            for key in row:
                if key.endswith("@final_latency_test"):
                    base, guided = key[: -len("@final_latency_test")].split("/")
                    pairs[f"{base}/{guided}"] = {"recorded": row[key], "retimed": final_latency_test(as_curves, guided, base)}
            rows.append({"layer": row["layer"], "configs_retimed": len(distinct), "tuners": tuners, "pairs": pairs})
            log(f"{row['layer']}: {len(distinct)} final configs timed {args.rounds} times again; "
                + "; ".join(f"{pair} ends {final_latency_verdict(p['retimed']) if p['retimed'] else 'untested (under two seeds)'}" for pair, p in pairs.items()))
    finally:
        measurer.close()
    emit({"benchmark": "final configs timed again, side by side", "results": args.results,
          "recorded_on": result.get("target"), "retimed_on": target.key, "rounds": args.rounds, "repeat": args.repeat, "timing": args.timing,
          "layers": rows, "wall_seconds": round(time.perf_counter() - t0, 1)}, args.out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
