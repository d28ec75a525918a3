"""Full-size torchvision models as users bring them: import, tune, export, run, check.

Each ONNX file (as torch's two exporters write them: ``--export``) goes through
``autotune.api``: its layers, a tune of ``--trials`` on this
machine's CPU with a fresh history per model, the export run and checked against ONNX's
reference evaluator. torchvision's weights are drawn at random here (``weights=None``):
ViT's head starts at zero, so its check compares zeros (the small models under
``tests/data`` are drawn so that it does not).

Run:  python benchmarks/torchvision_sweep.py --export DIR resnet18 vit_b_16 ...   (torch needed)
      python benchmarks/torchvision_sweep.py --models DIR --trials 8 --out sweep.json
      python benchmarks/torchvision_sweep.py --pytorch resnet18 vit_b_16 ...   (torch eager, for scale)
Prints one JSON object: per file, layers, seconds, latencies before and after, the check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402


def export(names: list[str], out: Path) -> None:
    """Each torchvision model by name, at 224x224, by both of torch's exporters."""
    import torch
    import torchvision

    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    x = torch.randn(1, 3, 224, 224)
    for name in names:
        model = getattr(torchvision.models, name)(weights=None).eval()
        for dynamo in (False, True):
            path = out / f"{name}_{'dynamo' if dynamo else 'ts'}.onnx"
            torch.onnx.export(model, (x,), str(path), dynamo=dynamo, input_names=["input"], output_names=["output"])
            print(f"wrote {path}", file=sys.stderr, flush=True)


def pytorch_eager(names: list[str]) -> dict:
    """Each model's median latency in PyTorch eager on this CPU (batch 1, 224x224, every
    core), the same random weights' speed as the vendor libraries (oneDNN) give it."""
    import statistics

    import torch
    import torchvision

    torch.set_num_threads(os.cpu_count() or 1)
    x = torch.randn(1, 3, 224, 224)
    median_ms = {}
    for name in names:
        model = getattr(torchvision.models, name)(weights=None).eval()
        with torch.inference_mode():
            for _ in range(3):
                model(x)
            times = []
            for _ in range(10):
                t0 = time.perf_counter()
                model(x)
                times.append(time.perf_counter() - t0)
        median_ms[name] = round(statistics.median(times) * 1e3, 2)
    return {"benchmark": "torchvision models in PyTorch eager (CPU)", "torch": torch.__version__,
            "threads": torch.get_num_threads(), "median_ms": median_ms}


def sweep(files: list[Path], trials: int) -> list[dict]:
    from autotune import api
    from autotune.errors import AutotuneError

    rows = []
    for path in files:
        row: dict = {"model": path.name}
        scratch = tempfile.TemporaryDirectory(prefix="tv-sweep-")  # removed after the model
        work = scratch.name
        t0 = time.perf_counter()
        try:
            row["layers"] = len(api.layers(str(path))["layers"])
            row["layers_seconds"] = round(time.perf_counter() - t0, 1)
            t1 = time.perf_counter()
            so = os.path.join(work, "model.so")
            report = api.tune(str(path), target="llvm", trials=trials, history=os.path.join(work, "history.db"),
                              out=so, mlflow=False, out_dir=os.path.join(work, "runs"))
            row["tune_seconds"] = round(time.perf_counter() - t1, 1)
            row["layers_tuned"] = sum(1 for layer in report["layers"] if layer["trials"])
            row["latency_before_ms"] = round(report["model_latency_before"] * 1e3, 2)
            row["latency_after_ms"] = round(report["model_latency_after"] * 1e3, 2)
            result = api.run(so, check=str(path))
            row["run_ms"] = round(result["latency_median_s"] * 1e3, 2)
            row["check"] = result["check"]
        except AutotuneError as err:
            row["error"] = str(err)
        finally:
            scratch.cleanup()
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("names", nargs="*", help="with --export or --pytorch: torchvision model names")
    parser.add_argument("--export", type=Path, help="write each named model's two exports into this folder, then stop")
    parser.add_argument("--models", type=Path, help="a folder of .onnx files to sweep")
    parser.add_argument("--pytorch", action="store_true", help="time the named models in PyTorch eager instead")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    if args.export:
        export(args.names, args.export)
        return 0
    if args.pytorch:
        emit(pytorch_eager(args.names), args.out)
        return 0
    if not args.models:
        parser.error("give --export DIR NAMES..., --pytorch NAMES... or --models DIR")
    files = sorted(args.models.glob("*.onnx"))
    if not files:
        parser.error(f"no .onnx files in {args.models}")
    emit({"benchmark": "torchvision models: import, tune, export, run, check (llvm)", "trials": args.trials,
          "models": sweep(files, args.trials)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
