"""Do a half-precision model's layers get tensor-core sketches, and do they compile?

For each tunable layer of a zoo model exported in float16: which rule sets its CUDA knob
space came from, how many of its sketches compute on tensor cores, and for up to
``--configs`` valid random configs of those sketches (from at most ``--tries`` draws),
whether TVM generates CUDA for them that calls ``wmma::mma_sync`` (and, with
``--fatbin``, whether nvcc compiles it for the target arch). No GPU needed; how fast the
kernels run is for one (``benchmarks/gpu/session.sh half``).

With ``--judge N``, also N random tensor-core configs per layer judged by the space's own
device-limit checks against the postprocessors' verdict.

Run:  python benchmarks/check_tensor_core_sketches.py --model resnet18 --configs 3 --fatbin --judge 200 \\
          --out benchmarks/results/tensor_core_sketches_resnet18_fp16_sm90.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _emit import description, emit, out_file, run_main  # noqa: E402


def check_layer(layer, target, arch: str, configs: int, tries: int, fatbin: bool, seed: int, judge: int = 0) -> dict:
    import numpy as np

    from autotune.device_code import compile_fatbin, generated_cuda_source
    from autotune.templates.meta_schedule_space import MetaScheduleSpace
    from autotune.templates.space import InvalidConfig

    started = time.perf_counter()
    space = MetaScheduleSpace(layer.func, target, name=layer.name)
    row = {"layer": layer.name, "op_class": layer.op_class, "rule_sets": list(space.rule_sets),
           "sketches": len(space.sketches), "tensor_core_sketches": len(space.tensor_core_sketches),
           "space_seconds": round(time.perf_counter() - started, 1)}
    if not space.tensor_core_sketches:
        return row
    rng = np.random.default_rng(seed)
    drawn = invalid = compiled = calls_tensor_cores = fatbins = 0
    failures: list[str] = []
    while compiled + len(failures) < configs and drawn < tries:
        config = space.random_config(rng)
        if int(config.get("sketch", 0)) not in space.tensor_core_sketches:
            continue
        drawn += 1
        try:
            mod = space.apply(config)
        except InvalidConfig:
            invalid += 1
            continue
        try:
            source = generated_cuda_source(mod, target)
            if fatbin:
                compile_fatbin(source, arch, target)
                fatbins += 1
        except Exception as err:  # what TVM or nvcc says, kept for the record
            failures.append(str(err).strip().splitlines()[-1][:200])
            continue
        compiled += 1
        calls_tensor_cores += "wmma::mma_sync" in source
    row.update(drawn=drawn, rejected=invalid, compiled=compiled, calls_tensor_cores=calls_tensor_cores,
               fatbins=fatbins, failures=failures)
    if judge:
        row["checks"] = judge_checks(space, judge, rng)
    return row


def judge_checks(space, n: int, rng) -> dict:
    """The space's own checks of tensor-core configs against the postprocessors'
    verdict (VerifyGPUCode last) on ``n`` random ones: a sound check rejects none the
    postprocessors accept. (Random configs from the space itself are drawn to pass its
    checks: the share of them the postprocessors still reject is ``rejected`` above.)"""
    from autotune.templates.space import InvalidConfig

    tally = {"valid_kept": 0, "valid_rejected": 0, "invalid_caught": 0, "invalid_missed": 0}
    judged = 0
    while judged < n:  # uniform over the knobs' values: random_config draws past the checks
        config = space.from_indices([int(rng.integers(len(k))) for k in space.knobs])
        if int(config.get("sketch", 0)) not in space.tensor_core_sketches:
            continue
        judged += 1
        try:
            space.apply(config, screen=False)
            valid = True
        except InvalidConfig:
            valid = False
        plausible = space.is_plausible(config)
        tally[("valid_" + ("kept" if plausible else "rejected")) if valid else ("invalid_" + ("missed" if plausible else "caught"))] += 1
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int)
    parser.add_argument("--target", default="cuda:sm_90")
    parser.add_argument("--configs", type=int, default=3, help="valid tensor-core configs to compile per layer")
    parser.add_argument("--tries", type=int, default=2000, help="tensor-core configs drawn per layer at most")
    parser.add_argument("--fatbin", action="store_true", help="also compile each with nvcc for the target arch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--judge", type=int, default=0, help="random tensor-core configs per layer to judge the space's own checks on")
    parser.add_argument("--out", type=out_file, help="also write the JSON result here (missing folders are made)")
    args = parser.parse_args()

    from autotune import zoo
    from autotune.decompose import decompose
    from autotune.frontend import load_and_fuse
    from autotune.target import resolve_target

    spec = resolve_target(args.target)
    arch = str(spec.tvm_target.attrs.get("arch", ""))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autotune-tc-") as folder:
        path = os.path.join(folder, f"{args.model}_fp16.onnx")
        zoo.export_model(args.model, path, size=args.size, dtype="float16")
        _, mod = load_and_fuse(path)
    rows = []
    for layer in (l for l in decompose(mod, batch_size=1) if l.tunable):
        rows.append(check_layer(layer, spec.tvm_target, arch, args.configs, args.tries, args.fatbin, args.seed, args.judge))
        r = rows[-1]
        print(f"{r['layer']}: {r['tensor_core_sketches']} of {r['sketches']} sketches on tensor cores"
              + (f", {r['compiled']} compiled ({r['calls_tensor_cores']} call wmma), {r['rejected']} of {r['drawn']} drawn rejected"
                 if r["tensor_core_sketches"] else ""), file=sys.stderr, flush=True)
    with_sketches = [r for r in rows if r["tensor_core_sketches"]]
    emit({
        "model": args.model, "dtype": "float16", "size": args.size, "target": args.target,
        "layers": rows, "seconds": round(time.perf_counter() - started, 1),
        "summary": {
            "tunable_layers": len(rows), "with_tensor_core_sketches": len(with_sketches),
            "configs_compiled": sum(r["compiled"] for r in with_sketches),
            "configs_calling_tensor_cores": sum(r["calls_tensor_cores"] for r in with_sketches),
            "fatbins": sum(r["fatbins"] for r in with_sketches),
            "failures": sum(len(r["failures"]) for r in with_sketches),
            "rejected_share": round(sum(r["rejected"] for r in with_sketches) / max(1, sum(r["drawn"] for r in with_sketches)), 3),
            **({"checks": {key: sum(r["checks"][key] for r in with_sketches) for key in with_sketches[0]["checks"]}}
               if args.judge and with_sketches else {}),
        },
    }, args.out)
    return 0 if all(not r.get("failures") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(run_main(main))
