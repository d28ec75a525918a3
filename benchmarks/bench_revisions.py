"""Two revisions of autotune, side by side: the same tunes from an earlier commit and from
the working tree, for a change no option turns off (a rule inside the budget split, say).

Per model and seed, one ``autotune tune`` (the CLI, in a process of its own, a fresh
history each, no MLflow, no whole-model timing) from each revision, the one run first
alternating from seed to seed. The earlier commit runs from a ``git worktree`` made for
the purpose (and removed after), ahead of the working tree on ``PYTHONPATH``; both use
this environment's packages. Reported per tune: the *model time as tuned* (the sum over
tunable layers of calls x best latency, the default's where untried; see
``bench_budget_split.py``), each layer's trials, and the layer given the most.

Run:  python benchmarks/bench_revisions.py --base 468c577 --models convnext.onnx:512,transformer:64 --size 56 --seeds 0,1,2 --out FILE
Prints one JSON object; the README records the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402
from bench_budget_split import tuned_time  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def tune(code: str, model: str, trials: int, seed: int, size: int | None, workdir: str) -> dict:
    """One CLI tune with ``code`` first on the path; its report."""
    argv = [sys.executable, "-m", "autotune", "tune", model, "--target", "llvm", "--trials", str(trials),
            "--seed", str(seed), "--no-mlflow", "--no-model-latency", "--quiet", "--json",
            "--history", os.path.join(workdir, "history.db"), "--out-dir", os.path.join(workdir, "run")]
    if size is not None and not model.endswith(".onnx"):
        argv += ["--size", str(size)]
    env = {**os.environ, "PYTHONPATH": code, "AUTOTUNE_HOME": os.path.join(workdir, "home")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=workdir)
    if done.returncode:
        raise SystemExit(f"error: the tune from {code} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def summary(report: dict, seconds: float) -> dict:
    top = max(report["layers"], key=lambda l: l["trials"])
    return {"tuned_ms": round(tuned_time(report) * 1e3, 4), "tune_s": round(seconds, 1),
            "trials": {l["name"]: l["trials"] for l in report["layers"]}, "most_trials": [top["name"], top["trials"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--models", required=True, help="comma-separated MODEL:TRIALS (a zoo name or an ONNX path)")
    parser.add_argument("--size", type=int, default=56, help="input size of zoo models")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated tuner seeds (a list, where bench_history_guided takes a count)")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds: expected comma-separated whole numbers, got {args.seeds!r}")
    models = []
    for m in args.models.split(","):
        name, _, trials = m.rpartition(":")
        if not name or not trials.isdigit() or int(trials) < 1:
            parser.error(f"--models: expected MODEL:TRIALS (e.g. dqn:24), got {m!r}")
        models.append((name, int(trials)))
    found = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}"], capture_output=True, text=True)
    if found.returncode:
        parser.error(f"--base: {args.base!r} is no commit of {ROOT}")
    base = found.stdout.strip()
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True).stdout.strip())
    result: dict = {"bench": "revisions", "target": "llvm", "base": base, "head": head, "head_dirty": dirty,
                    "size": args.size, "seeds": seeds, "models": {}}
    with tempfile.TemporaryDirectory(prefix="autotune-revisions-") as tmp:
        old = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", old, base], check=True)
        try:
            codes = {"base": old, "head": ROOT}
            for model, trials in models:
                model_path = os.path.abspath(model) if model.endswith(".onnx") else model
                rows = []
                for seed in seeds:
                    row: dict = {"seed": seed}
                    for rule in (("base", "head") if seed % 2 == 0 else ("head", "base")):
                        workdir = tempfile.mkdtemp(dir=tmp)
                        t0 = time.perf_counter()
                        row[rule] = summary(tune(codes[rule], model_path, trials, seed, args.size, workdir), time.perf_counter() - t0)
                    rows.append(row)
                    print(f"[revisions] {model} seed {seed}: base {row['base']['tuned_ms']} ms, head {row['head']['tuned_ms']} ms",
                          file=sys.stderr, flush=True)
                ratios = [r["head"]["tuned_ms"] / r["base"]["tuned_ms"] for r in rows]
                result["models"][model] = {
                    "trials": trials,
                    "base_tuned_ms_median": statistics.median(r["base"]["tuned_ms"] for r in rows),
                    "head_tuned_ms_median": statistics.median(r["head"]["tuned_ms"] for r in rows),
                    "head_over_base_per_seed": [round(x, 3) for x in ratios],
                    "head_over_base_geomean": round(math.exp(statistics.fmean(math.log(x) for x in ratios)), 3),
                    "runs": rows,
                }
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old], check=False)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
