"""How far compiled float16 zoo models lie from the same models in float32.

For each model: ``autotune zoo export --dtype float16``, compiled (TVM's defaults, or the
history's schedules with ``--history``), run on seeded inputs, and compared three ways:
directly with ONNX's reference evaluator of the float16 model, and with the model widened
to float32, beside that evaluator's own distance from it. ``run --check`` passes a
half-precision module within ``autotune.half_precision.ERROR_FACTOR`` times the latter;
this records the ratio it is judged by, model by model. No timing.

Run:  python benchmarks/check_half_precision.py --size 64 --out benchmarks/results/half_precision_check_llvm.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _emit import description, emit, out_file, run_main  # noqa: E402

MODELS = "resnet18,mobilenetv2,transformer,dqn,autoencoder,speech,seq2seq,memnet,alexnet,vgg11"


def check_model(name: str, size: int | None, target: str, history: str | None, folder: Path) -> dict:
    import onnx

    from autotune import api, zoo
    from autotune.half_precision import float32_model, judged_against_float32, widen_inputs
    from autotune.run import load_metadata, onnx_reference, seeded_inputs
    from autotune.verify import max_abs_error, outputs_match

    model, module = folder / f"{name}16.onnx", folder / f"{name}16.so"
    zoo.export_model(name, model, size=size, dtype="float16")
    started = time.perf_counter()
    api.compile(str(model), module, target=target, history=history)
    compiled_s = time.perf_counter() - started
    # judged as `run --check` judges it, each reference evaluated once (the check itself
    # widens to float32 only where the direct comparison fails; both are wanted here)
    (ours,) = api.run(module, repeat=1, return_outputs=True)["output_arrays"]
    feed = seeded_inputs(load_metadata(module), 0)
    proto = onnx.load(str(model))
    (half,) = onnx_reference(proto, feed)
    (wide,) = onnx_reference(float32_model(proto), widen_inputs(feed))
    matched = outputs_match(ours, half)
    check_ok = matched or judged_against_float32([ours], [half], [wide], [matched], atol=1e-4)["ok"]  # run's atol
    ours_error, reference_error = max_abs_error(ours, wide), max_abs_error(half, wide)
    return {
        "model": name, "size": zoo.get_entry(name).default_size if size is None else size,
        "output_max_abs": float(abs(wide).max()),
        "vs_float16_reference": max_abs_error(ours, half),
        "vs_float32": ours_error, "reference_vs_float32": reference_error,
        "ratio": ours_error / reference_error if reference_error else None,
        "check_ok": check_ok, "compile_s": round(compiled_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--size", type=int, help="input size for the image and sequence models (default: each model's)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--history", help="compile with this history's schedules (default: TVM's defaults)")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()
    from autotune import zoo

    rows = []
    with tempfile.TemporaryDirectory(prefix="autotune-half-") as folder:
        for name in args.models.split(","):
            size = None if args.size is None else max(args.size, zoo.get_entry(name).min_size)
            rows.append(check_model(name, size, args.target, args.history, Path(folder)))
            print(f"{name}: ours {rows[-1]['vs_float32']:.3g} from float32, the reference {rows[-1]['reference_vs_float32']:.3g}, "
                  f"check {'OK' if rows[-1]['check_ok'] else 'MISMATCH'}", file=sys.stderr)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    emit({"target": args.target, "history": args.history, "models": rows,
          "ratio_range": [min(ratios), max(ratios)] if ratios else None}, args.out)
    return 0 if all(r["check_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(run_main(main))
