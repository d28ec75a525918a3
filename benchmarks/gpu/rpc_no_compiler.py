"""An RPC tracker and one server whose TVM can compile no CUDA, for ``tune --rpc``.

TVM compiles CUDA C at load time through ``tvm_callback_cuda_compile``, whose backend
``TVM_CUDA_COMPILE_MODE`` picks (``nvrtc`` or ``nvcc``). The server runs with a value
that is neither, which every process it starts inherits, so any compile asked of it
fails (``Invalid TVM_CUDA_COMPILE_MODE``), as on a deployment box with the driver alone.
A ``tune --rpc`` against it then works only if every module it uploads (candidates, the
winner's check, the model timing) carries a device binary. Runs until killed; the
sessions' log goes to stderr.

    python benchmarks/gpu/rpc_no_compiler.py PORT KEY [--no-fork]

On the H100 (2026-11-24) the forking server (TVM's default: one forked child per
session) failed the first request of ``tune --rpc`` with ``cudaErrorInitializationError``;
``--no-fork`` starts each session's process by spawn instead (TVM's ``no_fork``, offered
for Metal, OpenCL and ROCm). Not yet run on a GPU.
"""

from __future__ import annotations

import os
import sys
import time

REFUSE = "refused-on-this-server"


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help") or not sys.argv[1].isdigit():
        print(__doc__.strip())
        return 0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2
    os.environ["TVM_CUDA_COMPILE_MODE"] = REFUSE  # before TVM starts any process
    from tvm import rpc
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    port, key = int(sys.argv[1]), sys.argv[2]
    no_fork = "--no-fork" in sys.argv[3:]
    tracker = Tracker("127.0.0.1", port=port, port_end=port + 1, silent=True)
    # both objects stop their processes when collected: keep them
    server = Server("127.0.0.1", port=port + 10, port_end=port + 100, tracker_addr=("127.0.0.1", tracker.port),
                    key=key, no_fork=no_fork)
    deadline = time.monotonic() + 60
    while not any(s["key"] == f"server:{key}" for s in rpc.connect_tracker("127.0.0.1", port).summary()["server_info"]):
        if time.monotonic() > deadline:
            print("the server never registered with the tracker", flush=True)
            return 1
        time.sleep(0.2)
    print(f"ready: tracker 127.0.0.1:{tracker.port}, key {key}, fork {not no_fork}, "
          f"TVM_CUDA_COMPILE_MODE={REFUSE}", flush=True)
    while True:
        time.sleep(60)
        assert server and tracker


if __name__ == "__main__":
    raise SystemExit(main())
