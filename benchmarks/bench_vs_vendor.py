"""Tuned layers against the vendor libraries (cuDNN, cuBLAS through PyTorch) on the GPU.

For every tunable layer of a zoo model, the best tuned record and TVM's default schedule
(dlight) are read from a history database that ``autotune tune`` filled on this GPU; the
same operator is then timed through PyTorch, which calls cuDNN for convolutions and
cuBLAS for matrix products. Vendor timing mirrors TVM's ``time_evaluator``: warm-up,
then ``repeat`` batches of back-to-back calls timed with CUDA events, median kept.

Each layer runs on the vendor side in the dtype it has in the model: FP32 with TF32
tensor cores off by default (our FP32 kernels are plain FP32; ``--tf32`` shows what the
vendor gets when allowed to round inputs to TF32), and a float16 model (``autotune zoo
export NAME --dtype float16``, tuned from that file) against cuDNN's and cuBLAS's
half-precision kernels, which use tensor cores and accumulate in float32 as ours do.
Our fused layers may carry an epilogue (bias, ReLU) the vendor call does without: that
favours the vendor.

Run:  python benchmarks/bench_vs_vendor.py --model resnet18 --history H.db --out FILE
      python benchmarks/bench_vs_vendor.py --model resnet18_fp16.onnx --torchvision resnet18 --history H.db
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402

from autotune.frontend import BATCH_NORM_LAYERINGS, DEFAULT_BATCH_NORM  # noqa: E402

#: zoo model -> torchvision constructor, for the whole-model comparison.
TORCHVISION = {"resnet18": "resnet18", "resnet50": "resnet50", "vgg11": "vgg11", "alexnet": "alexnet", "mobilenetv2": "mobilenet_v2"}


def time_cuda(fn, *, warmup: int = 10, repeat: int = 7, min_repeat_ms: float = 20.0) -> float:
    """Median seconds per call: ``repeat`` batches of ``number`` calls between CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    number = max(1, math.ceil(min_repeat_ms / max(start.elapsed_time(end), 1e-3)))
    samples = []
    for _ in range(repeat):
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / number / 1e3)
    return statistics.median(samples)


def vendor_call(layer):
    """A PyTorch closure computing the layer's operator, or None for classes we skip."""
    import torch
    import torch.nn.functional as F

    dev, dtype = "cuda", getattr(torch, layer.dtype)
    rand = lambda shape: torch.randn(*shape, device=dev, dtype=dtype)  # noqa: E731
    a = layer.attrs
    cls = layer.op_class
    if cls in ("conv2d", "depthwise_conv2d"):
        x, w = rand(layer.inputs[0]), rand(layer.weights[0])
        # a per-channel bias: ONNX's (C,), or (1, C, 1, 1) where batch norm was folded in
        per_channel = len(layer.weights) > 1 and math.prod(layer.weights[1]) == layer.weights[0][0]
        b = rand([layer.weights[0][0]]) if per_channel else None
        return lambda: F.conv2d(x, w, b, tuple(a["stride"]), tuple(a["padding"][:2]), tuple(a["dilation"]), a["groups"])
    if cls == "pool":
        x = rand(layer.inputs[0])
        k, p = tuple(a["kernel"]), tuple(a["padding"][:2])
        stride = tuple(
            (layer.inputs[0][2 + i] + 2 * p[i] - k[i]) // max(layer.output[2 + i] - 1, 1) for i in range(2)
        )
        pool = F.max_pool2d if a.get("kind") == "max" else F.avg_pool2d
        return lambda: pool(x, k, stride, p)
    if cls == "dense":
        x, w = rand(layer.inputs[0]), rand(layer.weights[0])
        b = rand(layer.weights[1]) if len(layer.weights) > 1 else None
        if b is not None:
            x2 = x.reshape(-1, x.shape[-1])
            return lambda: torch.addmm(b, x2, w)
        return lambda: x @ w
    if cls == "batch_matmul":
        x, y = rand(layer.inputs[0]), rand(layer.inputs[1])
        return lambda: torch.matmul(x, y)
    if cls == "softmax":
        x = rand(layer.inputs[0])
        return lambda: torch.softmax(x, -1)
    if cls == "reduction":
        x = rand(layer.inputs[0])
        return lambda: x.mean((2, 3), keepdim=True)
    if cls == "norm":
        x = rand(layer.inputs[0])
        w, b = rand(layer.weights[0]), rand(layer.weights[1])
        return lambda: F.layer_norm(x, w.shape, w, b)
    return None


def summarize(rows: list[dict]) -> dict:
    """Ratios > 1 mean our kernel is faster; the time-weighted one counts repeated layers."""
    ratios = [r["vendor_over_ours"] for r in rows]
    ours = sum(r["applied_us"] * r["occurrences"] for r in rows)
    return {
        "layers": len(rows),
        "layers_at_least_vendor_speed": sum(r >= 1.0 for r in ratios),
        "median_vendor_over_ours": statistics.median(ratios) if ratios else None,
        "time_weighted_vendor_over_ours": sum(r["vendor_us"] * r["occurrences"] for r in rows) / ours if ours else None,
    }


def model_dtype(layers) -> str:
    """The dtype the whole model runs in on the vendor side: its tunable layers' one
    dtype (float16 for a float16 export), else float32."""
    dtypes = {layer.dtype for layer in layers if layer.tunable}
    return dtypes.pop() if len(dtypes) == 1 else "float32"


def model_latency_torch(ctor: str, size: int, dtype: str) -> float:
    import torch
    import torchvision

    model = getattr(torchvision.models, ctor)().eval().cuda().to(getattr(torch, dtype))
    x = torch.randn(1, 3, size, size, device="cuda", dtype=getattr(torch, dtype))
    with torch.inference_mode():
        return time_cuda(lambda: model(x), warmup=5, repeat=7)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--model", default="resnet18", help="a zoo name or the ONNX file that was tuned")
    parser.add_argument("--torchvision", help="torchvision model for the whole-model comparison "
                        "(default: the zoo model's counterpart, none for a file)")
    parser.add_argument("--size", type=int, help="a zoo model's image side (default its own, 224); a file has its own")
    parser.add_argument("--history", help="history database that 'autotune tune' filled on this GPU")
    parser.add_argument("--batch-norm", default=DEFAULT_BATCH_NORM, choices=BATCH_NORM_LAYERINGS,
                        help="the layering that tune used (its --batch-norm): it decides the layers' keys")
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--tf32", action="store_true", help="let cuDNN/cuBLAS use TF32 tensor cores")
    parser.add_argument("--ours-model-ms", type=float, help="whole-model latency of our tuned export (autotune run)")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    parser.add_argument("--rescore", help="recompute the summary of an earlier result file (no GPU needed)")
    args = parser.parse_args()
    if args.rescore:
        with open(args.rescore, encoding="utf-8") as fh:
            earlier = json.load(fh)
        for row in earlier["layers"]:
            row["applied_us"] = min(v for v in (row["ours_us"], row["tvm_default_us"]) if v is not None)
            row["vendor_over_ours"] = row["vendor_us"] / row["applied_us"]
        earlier["summary"] = summarize(earlier["layers"])
        emit(earlier, args.out)
        return 0

    if not args.history:
        parser.error("--history is required (the database 'autotune tune' filled on this GPU)")
    import torch

    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm per shape
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    # cuBLAS may otherwise sum a float16 product's split-K parts in float16; ours sum in float32
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False

    from autotune import decompose, frontend
    from autotune.compile import DEFAULT_SPACE_PREFIX
    from autotune.target import resolve_target
    from autotune.history import open_history

    target = resolve_target(args.target)
    store = open_history(args.history, readonly=True)
    spec, mod = frontend.load_and_fuse(args.model, size=args.size, batch_norm=args.batch_norm)
    size = next(iter(spec.input_shapes.values()))[-1]  # the side torchvision's peer runs at
    layers = decompose.decompose(mod)
    dtype = model_dtype(layers)
    rows = []
    for layer in layers:
        if not layer.tunable:
            continue
        tuned = [r for r in store.records(workload_key=layer.workload_key, target_key=target.key, status="ok")
                 if r.ok and not r.space_id.startswith(DEFAULT_SPACE_PREFIX)]
        default = store.best(layer.workload_key, target.key, space_id=DEFAULT_SPACE_PREFIX + target.kind)
        fn = vendor_call(layer)
        if not tuned or fn is None:
            continue
        best = min(tuned, key=lambda r: r.latency_median)
        # `autotune compile` keeps TVM's default where it beats every tuned record
        applied_s = min(best.latency_median, default.latency_median) if default else best.latency_median
        with torch.inference_mode():
            vendor_s = time_cuda(fn)
        rows.append({
            "layer": layer.name, "op_class": layer.op_class, "inputs": layer.inputs, "weights": layer.weights,
            "attrs": layer.attrs, "dtype": layer.dtype, "epilogue": layer.epilogue, "occurrences": layer.occurrences,
            "gflop": layer.flops / 1e9, "trials": len(tuned),
            "ours_us": best.latency_median * 1e6, "tvm_default_us": default.latency_median * 1e6 if default else None,
            "applied_us": applied_s * 1e6, "vendor_us": vendor_s * 1e6, "vendor_over_ours": vendor_s / applied_s,
        })
        print(f"{layer.name:>24} {layer.op_class:>16}  ours {rows[-1]['applied_us']:9.1f} us  vendor {vendor_s * 1e6:9.1f} us"
              f"  ratio {rows[-1]['vendor_over_ours']:.2f}", file=sys.stderr, flush=True)
    store.close()
    result = {
        "benchmark": f"tuned layers vs cuDNN/cuBLAS (PyTorch), {dtype}", "dtype": dtype,
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
        "tf32": args.tf32, "fp16_reduced_precision_reduction": False, "model": args.model, "size": size, "target": target.key,
        "layers": rows,
        "summary": summarize(rows),
    }
    ctor = args.torchvision or TORCHVISION.get(args.model)
    if ctor:
        torch_model_s = model_latency_torch(ctor, size, dtype)
        result["whole_model"] = {"torchvision": ctor, "torch_eager_ms": torch_model_s * 1e3, "ours_ms": args.ours_model_ms}
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
