"""Running this tune's compiled code on the ``--rpc`` device: a layer winner's numerical
check and the whole-model timing.

Meta-schedule's ``RPCRunner`` times candidates in sessions of its own. The steps around
it must use that same device, not this machine: with ``--target cuda`` from a host with
no GPU there is nothing here to run on, and a CPU here is not the CPU there. So they
compile here (cross-compiling for the target), export the library, upload it through a
session the tracker hands out, load it there and run it on tensors that live there.

A server serves one session at a time and the runner needs it again for the next layer,
so a :class:`RemoteDevice` holds its session for one step only (one layer's verify, one
model timing) and lets it go when the step ends.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import socket
import tempfile
import threading
from typing import TYPE_CHECKING

from autotune.errors import AutotuneError
from autotune.target import TargetSpec

if TYPE_CHECKING:  # TVM is imported lazily (seconds), as everywhere in autotune
    from tvm.rpc import RPCSession
    from tvm.runtime import Device, Module
    from tvm.target import Target

#: Seconds to wait for the tracker to hand out a free server. The tracker queues a request
#: with no deadline of its own, so a server that never comes free (taken by another user,
#: or gone without the tracker noticing) would otherwise hang the tune for good.
REQUEST_TIMEOUT = 120.0
#: Seconds to wait for a server the tracker named to answer the session handshake.
HANDSHAKE_TIMEOUT = 30.0
#: Seconds after which the server ends one of our sessions: a kernel that never returns
#: there must not hold the device (and this tune) forever.
SESSION_TIMEOUT = 600.0


def request_session(address: str, *, timeout: float | None = None, session_timeout: float | None = None) -> RPCSession:
    """A ``tvm.rpc.RPCSession`` on a server registered under the key of ``address`` (HOST:PORT:KEY).

    Raises :class:`AutotuneError` (one line) when none can be had within ``timeout`` s.
    TVM's ``connect_tracker(...).request(...)`` would be the obvious call, but it retries a
    refused tracker for 60 s and waits for the tracker's answer with no timeout at all;
    this asks with the same protocol over a socket that gives up, then connects to the
    server it names with TVM's ``rpc.connect``, as ``request`` itself does.
    """
    from tvm import rpc
    from tvm.rpc import base

    from autotune.measure import check_rpc, tracker_call

    timeout = REQUEST_TIMEOUT if timeout is None else timeout
    session_timeout = SESSION_TIMEOUT if session_timeout is None else session_timeout
    host, port, key = check_rpc(address)  # tracker gone, or no server under the key: say so now
    try:
        answer = tracker_call(host, port, [base.TrackerCode.REQUEST, key, "", 1], timeout)
    except socket.timeout:
        raise AutotuneError(
            f"--rpc {address}: the tracker did not hand out a server under key {key!r} within {timeout:g} s (all busy?)"
        ) from None
    except (OSError, ValueError) as err:
        raise AutotuneError(f"--rpc {address}: requesting a server from the tracker failed ({err or type(err).__name__})") from None
    if not (isinstance(answer, list) and len(answer) == 2 and answer[0] == base.TrackerCode.SUCCESS):
        raise AutotuneError(f"--rpc {address}: unexpected answer from the tracker: {str(answer)[:100]}")
    server_host, server_port, matchkey = answer[1]
    outcome: dict[str, object] = {}

    def connect() -> None:
        try:
            outcome["session"] = rpc.connect(server_host, server_port, matchkey, session_timeout=session_timeout)
        except Exception as err:  # TVMError from the C++ client: refused, key mismatch
            outcome["error"] = err

    # TVM's C++ client waits for the server's handshake with no timeout: a frozen server
    # (stopped, or its host hung) accepts the TCP connection in the kernel and never
    # answers. So the connect runs in a thread we stop waiting for.
    worker = threading.Thread(target=connect, name="autotune-rpc-connect", daemon=True)
    worker.start()
    worker.join(HANDSHAKE_TIMEOUT)
    if worker.is_alive():
        raise AutotuneError(
            f"--rpc {address}: the server at {server_host}:{server_port} took the connection but did not answer"
            f" within {HANDSHAKE_TIMEOUT:g} s (stopped or hung?)"
        )
    if "error" in outcome:
        lines = str(outcome["error"]).strip().splitlines()
        raise AutotuneError(
            f"--rpc {address}: cannot open a session on the server at {server_host}:{server_port} ({lines[-1] if lines else outcome['error']})"
        ) from None
    return outcome["session"]  # type: ignore[return-value]


def remote_target(name: str | None, address: str, *, timeout: float | None = None) -> TargetSpec:
    """The target as the ``--rpc`` server's hardware defines it, not this machine's.

    Every record of the tune is filed under this target's key, and its arch and limits
    shape the code: a laptop tuning for an A100 over RPC must file A100 records and
    compile for sm_80, whatever GPU (or none) the laptop has. ``auto`` means the server's
    GPU if it has one, else its CPU. An explicit CUDA arch that is not the server's is
    refused. For ``llvm`` the CPU is asked for its LLVM name and triple; when they are
    this machine's, this machine's description (and history key) is kept, and when the
    server cannot say (a runtime-only TVM), so is everything else.
    """
    from autotune.target import resolve_target

    name = (name or "auto").strip()
    session = request_session(address, timeout=timeout)
    try:
        gpu = session.cuda(0)
        has_gpu = bool(gpu.exist)
        local = resolve_target(name if name != "auto" else ("cuda" if has_gpu else "llvm"))
        if local.kind != "cuda":
            return _server_cpu(session, local)
        if not has_gpu:
            raise AutotuneError(f"--rpc {address}: the server has no CUDA GPU (use --target llvm to tune for its CPU)")
        return _server_gpu(gpu, name, local, address)
    except AutotuneError:
        raise
    except Exception as err:  # the session broke, or the server's runtime refused the query
        lines = str(err).strip().splitlines()
        raise AutotuneError(f"--rpc {address}: asking the server for its hardware failed ({lines[-1] if lines else type(err).__name__})") from None


def _server_gpu(gpu, name: str, local: TargetSpec, address: str) -> TargetSpec:
    """The server's GPU as a target; the user's JSON keys other than the arch still apply."""
    from autotune.target import cuda_spec

    remote = cuda_spec(gpu, None, has_device=local.has_device)
    given = json.loads(name) if name.startswith("{") else {}  # resolve_target parsed it already
    requested = name.partition(":")[2] if name.startswith("cuda:") else given.get("arch")
    if requested and requested != remote.arch:
        raise AutotuneError(f"--rpc {address}: --target asks for {requested} but the server's GPU is {remote.arch} ({remote.device_name})")
    return dataclasses.replace(remote, config={**remote.config, **given})


def _server_cpu(session: RPCSession, local: TargetSpec) -> TargetSpec:
    """The server's CPU as an LLVM target: this machine's when LLVM names it the same."""
    import tvm_ffi

    try:
        cpu = str(session.get_function("tvm.codegen.llvm.GetHostCPUName")())
        triple = str(session.get_function("tvm.codegen.llvm.GetProcessTriple")())
    except Exception:  # a server without TVM's compiler library cannot say
        return local
    if cpu == local.config.get("mcpu") and triple == tvm_ffi.get_global_func("tvm.codegen.llvm.GetProcessTriple")():
        return local
    return TargetSpec("llvm", {**local.config, "mcpu": cpu, "mtriple": triple}, cpu, cpu, local.has_device)


class RemoteDevice:
    """The ``--rpc`` server's device for one step; the session is requested on first use.

    Use it as a context manager: leaving it drops the session, so the server ends it and
    is free again for the runner. (Remote modules and tensors keep the session alive too:
    let them go out of scope within the step.)
    """

    def __init__(self, address: str, kind: str, *, request_timeout: float | None = None, session_timeout: float | None = None) -> None:
        self.address = address  # HOST:PORT:KEY of the tracker
        self.kind = kind  # the target's kind: "cuda" or "llvm"
        self.request_timeout = request_timeout
        self.session_timeout = session_timeout
        self._session: RPCSession | None = None
        self._names = itertools.count()

    def __enter__(self) -> RemoteDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session(self) -> RPCSession:
        if self._session is None:
            self._session = request_session(self.address, timeout=self.request_timeout, session_timeout=self.session_timeout)
        return self._session

    def device(self) -> Device:
        """The remote device kernels for the target run on."""
        return self.session.device("cuda" if self.kind == "cuda" else "cpu", 0)

    def load(self, lib: Module, purpose: str, target: Target) -> Module:
        """Export ``lib`` (built here for ``target``), upload it and load it on the server.

        CUDA kernels travel as a fatbin where nvcc is here (``device_code.export_library``).
        The remote file is named ``autotune-<purpose>-<n>.so``, so the server's log tells
        our loads apart from the runner's.
        """
        from autotune.device_code import export_library

        name = f"autotune-{purpose}-{next(self._names)}.so"
        with tempfile.TemporaryDirectory(prefix="autotune-rpc-") as tmp:
            path = os.path.join(tmp, name)
            export_library(lib, path, target)
            session = self.session
            session.upload(path, name)
        return session.load_module(name)

    def close(self) -> None:
        """Let the session go; the next use requests a fresh one (after a crash, say)."""
        self._session = None
