"""Tuner overhead per proposed config, with 1,000 and 100,000 prior records.

Measures only the tuner's own work (featurizing/mapping priors, filtering, XGBoost
training, simulated annealing), never a measurement: "measurements" are answered by a
cheap synthetic roofline formula. Prints one JSON line:

    {"bench": "tuner_overhead", "batch": 16, "rounds": 6, "nthread": 2,
     "results": [{"tuner": "tl_xgb", "priors": 1000, "setup_s": ..., "propose_s_mean": ...,
                  "per_config_s": ..., "train_rows": ...}, ...]}

``setup_s`` is the one-time cost at construction (priors featurized and mapped once);
``per_config_s`` = mean time of one ``ask(batch)`` (for tl_xgb: filter + retrain +
anneal; for gga: breeding, including re-filtering the priors) / batch. ``tl_xgb`` is the
required figure; ``gga`` is measured for comparison.

Usage: python benchmarks/bench_tuner_overhead.py [--priors 1000,100000] [--batch 16]
       [--tuners tl_xgb,gga]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _emit import description, positive_int, run_main  # noqa: E402

from autotune.search import PriorRecord, make_tuner  # noqa: E402
import autotune.search.xgb_tuner  # noqa: E402,F401  (imports xgboost/scipy outside the timings)
from autotune.search.tuner import TrialResult  # noqa: E402
from autotune.templates.space import Knob, KnobSpace  # noqa: E402


def factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(d,) + r for d in range(1, n + 1) if n % d == 0 for r in factorizations(n // d, parts - 1)]


class Matmul(KnobSpace):
    """CUDA-style dense layer space: 5-part spatial tiles, 3-part reduction, unroll."""

    def __init__(self, m: int, n: int, k: int) -> None:
        self.dims = (m, n, k)
        super().__init__(
            [
                Knob("dense.i.tile", tuple(factorizations(m, 5)), "tile"),
                Knob("dense.j.tile", tuple(factorizations(n, 5)), "tile"),
                Knob("dense.k.tile", tuple(factorizations(k, 3)), "tile"),
                Knob("root.unroll_explicit", (0, 16, 64, 512), "categorical"),
            ]
        )
        self.space_id = self.shape_id("bench_matmul")

    @property
    def features(self) -> list[float]:
        """On log2 scales, as real layers' features are (``Layer.features``): raw sizes
        would make every prior look dissimilar, the filter would drop them all, and the
        benchmark would time a tuner with no history to train on."""
        m, n, k = self.dims
        return [math.log2(m), math.log2(n), math.log2(k), math.log2(2.0 * m * n * k)]

    def apply(self, config):  # pragma: no cover - never built here
        return config

    def default_config(self):
        return self.from_indices([0] * len(self.knobs))


def latency(space: Matmul, cfg: dict) -> float | None:
    """Cheap roofline-ish stand-in for a measurement."""
    m, n, k = space.dims
    i, j, kk = cfg["dense.i.tile"], cfg["dense.j.tile"], cfg["dense.k.tile"]
    threads = i[2] * j[2]
    if threads > 1024:
        return None
    lanes = min(i[0] * j[0] * threads, 1024)
    acc = i[1] * i[3] * i[4] * j[1] * j[3] * j[4]
    ilp = (min(acc, 8) / 8) ** 0.6 * max(1.0, acc / 32) ** -1.5
    return m * n * k / lanes / ilp * 4e-9 + kk[0] * 3e-8 + 5e-7


def make_priors(n_records: int, rng: np.random.Generator) -> list[PriorRecord]:
    shapes = [(64, 64, 128), (64, 128, 64), (128, 64, 64), (32, 64, 64), (64, 64, 256),
              (128, 128, 64), (64, 32, 64), (32, 32, 64), (64, 64, 32), (128, 64, 128)]
    out: list[PriorRecord] = []
    per = int(math.ceil(n_records / len(shapes)))
    for m, n, k in shapes:
        sp = Matmul(m, n, k)
        sizes = [len(kn) for kn in sp.knobs]
        for _ in range(per):
            if len(out) >= n_records:
                break
            cfg = sp.from_indices(rng.integers(sizes))
            lat = latency(sp, cfg)
            out.append(
                PriorRecord(cfg, lat, 0.9, sp.features, f"mm_{m}_{n}_{k}", "ok" if lat else "invalid")
            )
    return out


def bench(name: str, n_priors: int, batch: int, rounds: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    space = Matmul(64, 64, 64)
    priors = make_priors(n_priors, rng)
    t0 = time.perf_counter()
    tuner = make_tuner(name, space, seed=seed, priors=priors, layer_features=space.features)
    setup = time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        cfgs = tuner.ask(batch)
        times.append(time.perf_counter() - t0)
        res = []
        for c in cfgs:
            lat = latency(space, c)
            res.append(TrialResult(c, lat, "ok" if lat else "invalid"))
        tuner.tell(res)
    mean = float(np.mean(times))
    out = {
        "tuner": name,
        "priors": n_priors,
        "setup_s": round(setup, 3),
        "propose_s_mean": round(mean, 3),
        "propose_s_max": round(float(np.max(times)), 3),
        "per_config_s": round(mean / batch, 4),
    }
    if hasattr(tuner, "priors_kept"):
        out["train_rows"] = tuner.priors_kept + len(tuner.state.results)
    return out


def main() -> None:
    from autotune.search import TUNERS

    def counts(text: str) -> list[int]:
        return [positive_int(part) for part in text.split(",")]

    def tuners(text: str) -> list[str]:
        names = text.split(",")
        unknown = [n for n in names if n not in TUNERS]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown tuner {unknown[0]!r} (choose from {', '.join(TUNERS)})")
        return names

    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--priors", type=counts, default="1000,100000", help="history records the tuners hold, comma-separated (default 1000,100000)")
    ap.add_argument("--batch", type=positive_int, default=16, help="configs proposed per round (default 16)")
    ap.add_argument("--rounds", type=positive_int, default=6, help="rounds timed (default 6)")
    ap.add_argument("--tuners", type=tuners, default="tl_xgb,gga", help="comma-separated (default tl_xgb,gga)")
    args = ap.parse_args()
    results = [bench(t, n, args.batch, args.rounds) for t in args.tuners for n in args.priors]
    print(json.dumps({"bench": "tuner_overhead", "batch": args.batch,
                      "rounds": args.rounds, "nthread": 2, "results": results}))


if __name__ == "__main__":
    raise SystemExit(run_main(main))
