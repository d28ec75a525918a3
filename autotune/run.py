"""Load an exported module with the TVM runtime, feed seeded inputs, time it."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import AutotuneError


def load_metadata(path: str | os.PathLike) -> dict[str, Any]:
    from autotune.compile import sidecar

    path = Path(path)
    if not path.exists():
        raise AutotuneError(f"module not found: {path}")
    meta_path = sidecar(path)
    if not meta_path.exists():
        raise AutotuneError(f"{meta_path} is missing: it is written by 'autotune compile' next to the module")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise AutotuneError(f"cannot read {meta_path}: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != "autotune-module" or not isinstance(meta.get("inputs"), dict):
        raise AutotuneError(f"{meta_path} is not an autotune module description")
    return meta


def seeded_inputs(meta: dict[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """The same inputs for the same seed: lets runs be compared with a reference."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, info in meta["inputs"].items():
        dtype = info.get("dtype", "float32")
        shape = [int(d) for d in info["shape"]]
        if dtype.startswith("float"):
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[name] = rng.integers(0, 2, size=shape).astype(dtype)
    return out


def load(path: str | os.PathLike, meta: dict[str, Any]):
    """(VirtualMachine, device) for an exported module on the device it was built for."""
    import tvm
    from tvm import relax

    kind = meta.get("target_kind", "llvm")
    dev = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
    if kind == "cuda" and not dev.exist:
        raise AutotuneError(f"{path} was built for CUDA but no GPU is available here")
    try:
        lib = tvm.runtime.load_module(str(path))
    except Exception as err:
        raise AutotuneError(f"cannot load {path}: {str(err).strip().splitlines()[-1]}") from None
    return relax.VirtualMachine(lib, dev), dev


def run_module(path: str | os.PathLike, *, seed: int = 0, repeat: int = 10, number: int = 0, warmup: int = 2) -> dict[str, Any]:
    """Outputs and latency statistics (seconds) of the exported module on seeded inputs."""
    import time

    import tvm

    meta = load_metadata(path)
    vm, dev = load(path, meta)
    inputs = seeded_inputs(meta, seed)
    args = [tvm.runtime.tensor(inputs[name], dev) for name in meta["inputs"]]
    result = vm["main"](*args)
    outputs = _flatten(result)
    for _ in range(warmup):
        vm["main"](*args)
    dev.sync()
    if not number:  # enough calls per repeat for ~50 ms
        t0 = time.perf_counter()
        vm["main"](*args)
        dev.sync()
        one = max(time.perf_counter() - t0, 1e-6)
        number = max(1, min(1000, int(0.05 / one)))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            vm["main"](*args)
        dev.sync()
        samples.append((time.perf_counter() - t0) / number)
    return {
        "module": str(path),
        "model": meta.get("model"),
        "target": meta.get("target_key"),
        "inputs": {k: list(v.shape) for k, v in inputs.items()},
        "outputs": [list(o.shape) for o in outputs],
        "latency_median_s": statistics.median(samples),
        "latency_mean_s": statistics.fmean(samples),
        "latency_std_s": statistics.pstdev(samples),
        "repeat": repeat,
        "number": number,
        "output_arrays": outputs,
    }


def _flatten(result) -> list[np.ndarray]:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    out: list[np.ndarray] = []
    for item in result:
        out.extend(_flatten(item))
    return out


def onnx_reference(model_path_or_proto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of the ONNX reference evaluator: the ground truth for ``--check``."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    proto = onnx.load(str(model_path_or_proto)) if isinstance(model_path_or_proto, (str, os.PathLike)) else model_path_or_proto
    return [np.asarray(o) for o in ReferenceEvaluator(proto).run(None, inputs)]
