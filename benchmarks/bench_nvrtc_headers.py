"""NVRTC with and without the build workers' header cache (``autotune.nvrtc_headers``).

For each layer: ``--configs`` random valid configs of its CUDA space are scheduled and
lowered to CUDA C, then each source is compiled to cubin by TVM's own NVRTC path, first
with TVM's options and then, in the same process, with the header cache's options added
(the first of those compiles writes the precompiled header; it is reported apart). Says
per layer the median seconds per kernel both ways and whether every cubin is
byte-identical. Needs NVRTC (``cuda-bindings``) and CUDA headers; no GPU. Prints one
JSON object.

Run:  python benchmarks/bench_nvrtc_headers.py --layers resnet18:3,mobilenetv2:5 --configs 8 --out FILE

On the CPU machine (no GPU, no NVRTC) the figures in the README came from NVRTC off pip,
kept out of the project's environment:
  pip install --target /tmp/nvrtc-site cuda-bindings nvidia-cuda-nvrtc==13.0.88   # nvcc's CUDA
  CUDA_PATH=/usr/local/cuda-13.0 LD_LIBRARY_PATH=/tmp/nvrtc-site/nvidia/cu13/lib \
    PYTHONPATH=/tmp/nvrtc-site python benchmarks/bench_nvrtc_headers.py --configs 8
(TVM looks for CUDA's headers beside ``nvcc``, which here is a wrapper script elsewhere.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from _emit import description, emit, out_file, run_main  # noqa: E402


def cuda_sources(layer_spec: str, size: int, configs: int, target, seed: int) -> tuple[list[str], int]:
    """CUDA C of ``configs`` random valid schedules of a zoo layer, as TVM generates it,
    and how many schedules TVM could not lower on the way (skipped)."""
    import numpy as np

    from autotune.device_code import generated_cuda_source
    from history_guided.layers import layer_at
    from autotune.templates.meta_schedule_space import MetaScheduleSpace
    from autotune.templates.space import InvalidConfig

    space = MetaScheduleSpace(layer_at(layer_spec, size).func, target, name=layer_spec)
    rng = np.random.default_rng(seed)
    sources: list[str] = []
    tries = failed = 0
    while len(sources) < configs and tries < 50 * configs:
        tries += 1
        try:
            mod = space.apply(space.random_config(rng))
        except InvalidConfig:
            continue
        try:
            sources.append(generated_cuda_source(mod, target))
        except Exception:  # TVM cannot lower it: a build error in a tune, no kernel to compile here
            failed += 1
    return sources, failed


def compile_seconds(source: str, arch: str) -> tuple[float, str]:
    from tvm.support.nvcc import compile_cuda

    t0 = time.perf_counter()
    binary = bytes(compile_cuda(source, target_format="cubin", arch=arch, compiler="nvrtc"))
    return time.perf_counter() - t0, hashlib.sha256(binary).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--layers", default="resnet18:0,resnet18:1,resnet18:3,resnet18:7,mobilenetv2:5")
    parser.add_argument("--size", type=int, default=56, help="input side (56: the history-guided benchmark's)")
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--arch", default=None, help="sm_XY (default: the GPU's, else sm_90)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune import nvrtc_headers
    from autotune.target import resolve_target

    version = nvrtc_headers.nvrtc_version()
    if version is None:
        raise SystemExit("error: no NVRTC here (install cuda-bindings with a libnvrtc it can load)")
    spec = resolve_target(f"cuda:{args.arch}" if args.arch else "cuda")
    arch = spec.arch
    generated = {name: cuda_sources(name, args.size, args.configs, spec.tvm_target, args.seed) for name in args.layers.split(",")}
    sources = {name: srcs for name, (srcs, _) in generated.items()}

    plain = {name: [compile_seconds(src, arch) for src in srcs] for name, srcs in sources.items()}
    with nvrtc_headers.header_cache_during(version=version) as status:  # as the main process compiles
        first = compile_seconds(next(iter(sources.values()))[0], arch)[0]  # writes the header cache
        cached = {name: [compile_seconds(src, arch) for src in srcs] for name, srcs in sources.items()}

    layers = {}
    for name in sources:
        a = [s for s, _ in plain[name]]
        b = [s for s, _ in cached[name]]
        layers[name] = {
            "kernels": len(a),
            "lowering_failures_skipped": generated[name][1],
            "source_lines_median": statistics.median(len(s.splitlines()) for s in sources[name]),
            "seconds_plain_median": round(statistics.median(a), 3),
            "seconds_cached_median": round(statistics.median(b), 3),
            "speedup_median": round(statistics.median(a) / statistics.median(b), 2),
            "cubins_identical": sum(x == y for (_, x), (_, y) in zip(plain[name], cached[name])),
        }
    all_a = [s for v in plain.values() for s, _ in v]
    all_b = [s for v in cached.values() for s, _ in v]
    emit({
        "benchmark": "nvrtc_headers", "nvrtc": f"{version[0]}.{version[1]}", "arch": arch, "status": status,
        "options": nvrtc_headers.header_cache_options(), "size": args.size, "configs_per_layer": args.configs, "seed": args.seed,
        "first_cached_compile_seconds": round(first, 3), "layers": layers,
        "all": {"kernels": len(all_a), "seconds_plain_total": round(sum(all_a), 2), "seconds_cached_total": round(sum(all_b), 2),
                "cubins_identical": sum(v["cubins_identical"] for v in layers.values())},
    }, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
