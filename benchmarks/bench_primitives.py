"""Per-primitive kernels, tuned, against TVM's defaults and the vendor library.

The primitives of the classic per-operator benchmarks (convolution, pooling, LRN,
batch norm, activation, fully connected, softmax), each at a shape from one of the
reference workloads, as a one-operator ONNX model. Each is tuned by ``autotune`` into a
fresh history, compiled, checked against ONNX's reference evaluator and timed with the
TVM runtime (``autotune run``'s loop); TVM's untuned build is timed the same way; the
same operator is timed through PyTorch, which calls the vendor libraries (cuDNN and
cuBLAS on an NVIDIA GPU; on a CPU oneDNN for convolutions and a BLAS for linear
layers, its own vectorized kernels for pooling, LRN, batch norm, ReLU and softmax), in
the same loop: warm-up, then ``repeat``
batches of back-to-back calls sized to about 50 ms, median kept.

Both sides run every core, FP32. Batch 1, as a deployed model runs. PyTorch's call
goes through its dispatcher and TVM's through its VM: each pays its own per-call cost,
which shows on the microsecond-sized primitives.

Run:  python benchmarks/bench_primitives.py --trials 64 --out benchmarks/results/primitives_llvm.json
      (needs torch: pip install torch==2.13.0)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, positive_int, run_main  # noqa: E402


@dataclass(frozen=True)
class Primitive:
    """One operator at one shape: its ONNX node and the same call in PyTorch."""

    name: str
    workload: str  # where the shape comes from
    op_type: str
    x_shape: tuple[int, ...]
    weights: dict[str, tuple[int, ...]] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


PRIMITIVES = [
    Primitive("conv", "ResNet-18 layer1: 3x3, 64 -> 64, 56x56", "Conv", (1, 64, 56, 56),
              {"W": (64, 64, 3, 3), "B": (64,)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    Primitive("pool", "ResNet-18 stem: max 3x3/2, 64 x 112x112", "MaxPool", (1, 64, 112, 112), {},
              {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Primitive("lrn", "AlexNet (2012) after conv1: 5 channels, 96 x 55x55", "LRN", (1, 96, 55, 55), {},
              {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 2.0}),
    Primitive("batch_norm", "ResNet-18 layer1, inference: 64 x 56x56", "BatchNormalization", (1, 64, 56, 56),
              {"scale": (64,), "bias": (64,), "mean": (64,), "var": (64,)}, {"epsilon": 1e-5}),
    Primitive("activation", "ReLU after ResNet-18's stem: 64 x 112x112", "Relu", (1, 64, 112, 112)),
    Primitive("fc", "AlexNet / VGG fc7: 4096 -> 4096", "Gemm", (1, 4096), {"W": (4096, 4096), "B": (4096,)},
              {"transB": 1}),
    Primitive("softmax", "transformer attention scores: 4 heads x 128 x 128", "Softmax", (1, 4, 128, 128), {},
              {"axis": -1}),
]


def onnx_model(p: Primitive, seed: int = 0):
    """A one-node model, weights seeded (a variance above 0 for batch norm)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = []
    for name, shape in p.weights.items():
        value = rng.uniform(0.5, 1.5, shape) if name == "var" else rng.standard_normal(shape) / math.sqrt(
            max(1, math.prod(shape[1:]))
        )
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
    node = helper.make_node(p.op_type, ["x", *p.weights], ["y"], **p.attrs)
    graph = helper.make_graph([node], p.name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(p.x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model, {i.name: numpy_helper.to_array(i) for i in inits}


def torch_call(p: Primitive, weights: dict[str, np.ndarray], x: np.ndarray, device: str) -> Callable[[], Any]:
    """The operator through PyTorch's own kernels (oneDNN on CPU, cuDNN/cuBLAS on CUDA)."""
    import torch
    import torch.nn.functional as F

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    w = {k: t(v) for k, v in weights.items()}
    xt = t(x)
    a = p.attrs
    if p.op_type == "Conv":
        return lambda: F.conv2d(xt, w["W"], w["B"], 1, a["pads"][0])
    if p.op_type == "MaxPool":
        return lambda: F.max_pool2d(xt, a["kernel_shape"], a["strides"], a["pads"][0])
    if p.op_type == "LRN":
        return lambda: F.local_response_norm(xt, a["size"], a["alpha"], a["beta"], a["bias"])
    if p.op_type == "BatchNormalization":
        return lambda: F.batch_norm(xt, w["mean"], w["var"], w["scale"], w["bias"], False, 0.0, a["epsilon"])
    if p.op_type == "Relu":
        return lambda: torch.relu(xt)
    if p.op_type == "Gemm":
        return lambda: F.linear(xt, w["W"], w["B"])
    if p.op_type == "Softmax":
        return lambda: torch.softmax(xt, a["axis"])
    raise ValueError(p.op_type)


def bench_one(p: Primitive, *, trials: int, target: str, repeat: int, work: Path, seed: int) -> dict[str, Any]:
    import onnx
    import torch

    from autotune import api
    from autotune.run import onnx_reference, time_calls
    from autotune.history import open_history

    model, weights = onnx_model(p)
    path = work / f"{p.name}.onnx"
    onnx.save(model, path)
    history = str(work / f"{p.name}.db")
    t0 = time.perf_counter()
    report = api.tune(str(path), trials=trials, target=target, history=history, mlflow=False, seed=seed,
                      out_dir=work / f"{p.name}-run")
    tune_s = time.perf_counter() - t0

    x = np.random.default_rng(1).standard_normal(p.x_shape).astype(np.float32)
    (want,) = onnx_reference(model, {"x": x})
    row: dict[str, Any] = {
        "primitive": p.name, "workload": p.workload, "op": p.op_type, "input": list(p.x_shape),
        "layers": [{"name": l["name"], "op_class": l["op_class"], "tuner": l.get("tuner"), "trials": l.get("trials")}
                   for l in report["layers"]],
        "trials_measured": sum(l.get("trials") or 0 for l in report["layers"]),
        "tune_wall_s": round(tune_s, 1),
    }
    empty = str(work / "empty.db")
    with open_history(empty):  # a history with nothing in it: TVM's default schedules
        pass
    for label, hist in (("tvm_default", empty), ("tuned", history)):
        out = work / f"{p.name}-{label}.so"
        api.compile(str(path), out, target=target, history=hist)
        result = api.run(out, inputs={"x": x}, repeat=repeat, return_outputs=True)
        (got,) = result["output_arrays"]
        row[f"{label}_us"] = result["latency_median_s"] * 1e6
        row[f"{label}_max_abs_error"] = float(np.max(np.abs(got - want)))
        row[f"{label}_correct"] = bool(np.allclose(got, want, rtol=1e-3, atol=1e-4))

    device = "cuda" if target.startswith("cuda") else "cpu"
    call = torch_call(p, weights, x, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.inference_mode():
        got = call().cpu().numpy()
        samples, _ = time_calls(call, sync, repeat=repeat)  # the loop api.run timed ours with
        row["vendor_us"] = statistics.median(samples) * 1e6
    row["vendor_correct"] = bool(np.allclose(got, want, rtol=1e-3, atol=1e-4))
    row["vendor_over_tuned"] = row["vendor_us"] / row["tuned_us"]
    row["default_over_tuned"] = row["tvm_default_us"] / row["tuned_us"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--trials", type=positive_int, default=64, help="measured trials per primitive")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--repeat", type=positive_int, default=20, help="timed repeats (medians kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", choices=[p.name for p in PRIMITIVES], help="a subset")
    parser.add_argument("--out", type=out_file, help="write the JSON result here too (missing folders are made)")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        parser.error("needs PyTorch, the vendor baseline it times (not a dependency of autotune): pip install torch==2.13.0")

    from autotune.roofline import local_cpu_name
    from autotune.target import resolve_target

    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-primitives-") as tmp:
        for p in PRIMITIVES:
            if args.only and p.name not in args.only:
                continue
            row = bench_one(p, trials=args.trials, target=args.target, repeat=args.repeat, work=Path(tmp), seed=args.seed)
            rows.append(row)
            print(f"{p.name:<11} default {row['tvm_default_us']:9.1f} us  tuned {row['tuned_us']:9.1f} us  "
                  f"torch {row['vendor_us']:9.1f} us  torch/tuned {row['vendor_over_tuned']:.2f}x", file=sys.stderr)
    ratios = [r["vendor_over_tuned"] for r in rows]
    emit({
        "benchmark": "primitives",
        "target": resolve_target(args.target).key,
        "cpu": local_cpu_name(),
        "threads": threads,
        "trials": args.trials,
        "seed": args.seed,
        "torch": torch.__version__,
        "vendor": "PyTorch CUDA: cuDNN, cuBLAS" if args.target.startswith("cuda")
        else "PyTorch CPU: oneDNN for conv, its BLAS for linear, ATen's own kernels for the rest",
        "rows": rows,
        "summary": {
            "primitives": len(rows),
            "at_least_vendor_speed": sum(r >= 1.0 for r in ratios),
            "geomean_vendor_over_tuned": math.exp(statistics.fmean(map(math.log, ratios))) if ratios else None,
            "all_correct": all(r["tuned_correct"] and r["tvm_default_correct"] for r in rows),
        },
    }, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
