"""What an exported CUDA module needs when it is loaded: a device binary, or a compiler.

TVM 0.27 turns CUDA C into a device binary through the Python callback
``tvm_callback_cuda_compile`` (NVRTC from ``cuda-bindings``, or nvcc). This script
replaces that callback with one that refuses, loads the module, and runs it: if the
export carries a cubin the run succeeds with no compiler at all; if it carries CUDA C
the load fails with the callback's message. It then loads it again with the real
callback to time the JIT cost. Prints one JSON object.

Run on a GPU machine:  python benchmarks/gpu/load_check.py MODULE.so [MODULE.so ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

PROBE = r"""
import json, sys, time
mode, path = sys.argv[1], sys.argv[2]
import tvm, tvm_ffi
if mode == "no-compiler":
    def refuse(code):
        raise RuntimeError("JIT compile requested at load time")
    tvm_ffi.register_global_func("tvm_callback_cuda_compile", refuse, override=True)
from autotune.run import run_module
t0 = time.perf_counter()
try:
    res = run_module(path, repeat=3)
    out = {"ok": True, "latency_ms": res["latency_median_s"] * 1e3}
except Exception as err:
    out = {"ok": False, "error": str(err).strip().splitlines()[-1][:300]}
out["load_and_run_s"] = round(time.perf_counter() - t0, 2)
print(json.dumps(out))
"""


def probe(mode: str, path: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode, path], capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def main() -> int:
    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if sys.argv[1:] else 2
    report = {}
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        sidecar = Path(path + ".json")
        report[path] = {
            "bytes": len(data),
            # what autotune says the export carries (fatbin entries, or cubin / CUDA C)
            "device_code": json.loads(sidecar.read_text()).get("device_code") if sidecar.exists() else None,
            "carries_cuda_source": b"__global__" in data,
            "carries_elf_cubin": data.count(b"\x7fELF") > 1,  # the .so itself is one ELF
            "without_compiler": probe("no-compiler", path),
            "with_compiler": probe("default", path),
        }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
