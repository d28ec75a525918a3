"""Where one ``autotune tune``'s wall time goes: cProfile around ``TuneSession.tune_model``.

A short warm-up tune first, in the same process, so that imports and first-use costs
fall outside the profile. Prints the wall time, the budget's chunks, and the top of the
profile by cumulative time.

Run:  python benchmarks/profile_tune.py --model transformer --split adaptive --seed 0
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _emit import description, run_main  # noqa: E402


def tune(model: str, size: int, trials: int, seed: int, split: str, db: str, target) -> dict:
    from autotune.tune import TuneOptions, TuneSession
    from autotune.history import open_history

    store = open_history(db)
    session = TuneSession(target, store, TuneOptions(trials=trials, seed=seed, model_latency=False, budget_split=split))
    try:
        return session.tune_model(model, size=size)
    finally:
        session.close()
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="adaptive", choices=("adaptive", "roofline"))
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--top", type=int, default=35, help="profile lines to print")
    args = parser.parse_args()

    from autotune.target import resolve_target

    target = resolve_target(args.target)
    with tempfile.TemporaryDirectory(prefix="autotune-profile-") as tmp:
        tune(args.model, args.size, 4, args.seed, args.split, os.path.join(tmp, "warm.db"), target)
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        report = tune(args.model, args.size, args.trials, args.seed, args.split, os.path.join(tmp, "history.db"), target)
        profile.disable()
    print(f"{args.split}: {time.perf_counter() - t0:.1f} s wall; chunks {report.get('schedule')}")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
