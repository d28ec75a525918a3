"""Measuring through a real TVM RPC tracker and server (``autotune tune --rpc``), on llvm.

A tracker and one server registered under a key run on 127.0.0.1 for the whole module.
The server writes its log (``connected from ...``, ``load_module ...``) to a file, which
is how the tests see that candidates were really timed by the server and not locally, and
that the winner's check and the model timing ran there too (their uploads are named
``autotune-verify-<n>.so`` and ``autotune-model-<n>.so``; the runner's are not).
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

tvm = pytest.importorskip("tvm")

from tvm import te  # noqa: E402

from autotune import measure, remote, verify  # noqa: E402
from autotune.cli import main  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.measure import MeasureOptions, Measurer  # noqa: E402
from autotune.target import resolve_target  # noqa: E402
from autotune.tune import TuneSession  # noqa: E402
from autotune.history import open_history  # noqa: E402
from tests.test_measure import _matmul  # noqa: E402

KEY = "autotune-test"


def _free_port() -> int:
    """A port nothing listens on right now (the kernel's pick, released again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_log_to(path: str):
    """The server's ``server_init_callback``: its log goes to ``path``, not to stderr.

    A closure, so that cloudpickle sends it by value to the server's worker process
    (which cannot import this test module). Session processes are forked from that
    worker and inherit the handler.
    """

    def init() -> None:
        import logging

        log = logging.getLogger("RPCServer")
        for handler in list(log.handlers):
            log.removeHandler(handler)
        log.addHandler(logging.FileHandler(path))
        log.setLevel(logging.INFO)

    return init


def _wait_registered(host: str, port: int, key: str, timeout: float = 30.0) -> dict:
    """Until the server is in the tracker's queue, free to be handed out. Its connection
    (``server_info``) is listed a step before that: a server stopped (SIGSTOP) between
    the two was never handed out, and a test waited 120 s for it, then failed."""
    from tvm import rpc

    deadline = time.monotonic() + timeout
    while True:
        summary = rpc.connect_tracker(host, port).summary()
        listed = any(s["key"] == f"server:{key}" for s in summary["server_info"])
        if listed and summary["queue_info"].get(key, {}).get("free", 0) >= 1:
            return summary
        if time.monotonic() > deadline:
            raise RuntimeError(f"RPC server never registered with the tracker: {summary}")
        time.sleep(0.1)


class RPCSetup:
    def __init__(self, host: str, port: int, key: str, log: Path) -> None:
        self.host, self.port, self.key, self.log = host, port, key, log

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}:{self.key}"

    def _lines(self, marker: str) -> list[str]:
        return [ln for ln in self.log.read_text().splitlines() if marker in ln] if self.log.exists() else []

    def loads(self, purpose: str | None = None) -> int:
        """Modules the server has loaded so far: one per candidate it timed, plus, for
        ``purpose`` "verify" or "model", those that autotune.remote uploaded for that."""
        lines = self._lines("load_module ")
        if purpose is not None:
            lines = [ln for ln in lines if f"/autotune-{purpose}-" in ln]
        return len(lines)

    def sessions(self) -> int:
        """Sessions the server has accepted so far."""
        return len(self._lines("connected from "))


@pytest.fixture(scope="module")
def rpc_setup(tmp_path_factory):
    """A real tracker and one server registered under KEY, both on 127.0.0.1."""
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    log = tmp_path_factory.mktemp("rpc") / "server.log"
    # Tracker and Server bind the first free port in [port, port_end).
    start = _free_port()
    tracker = Tracker("127.0.0.1", port=start, port_end=start + 100, silent=True)
    server = None
    try:
        start = _free_port()
        server = Server(
            "127.0.0.1", port=start, port_end=start + 100, tracker_addr=("127.0.0.1", tracker.port), key=KEY,
            server_init_callback=_server_log_to(str(log)),
        )
        _wait_registered("127.0.0.1", tracker.port, KEY)
        yield RPCSetup("127.0.0.1", tracker.port, KEY, log)
    finally:
        if server is not None:
            server.terminate()
        tracker.terminate()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_layer_model(path: Path) -> Path:
    """MatMul+Relu with static shapes: a single tunable layer."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "one_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# --- the happy path ---------------------------------------------------------------------------
def test_measurer_times_on_the_rpc_server(rpc_setup):
    from tvm.s_tir import meta_schedule as ms

    measurer = Measurer(resolve_target("llvm"), MeasureOptions(repeat=2, min_repeat_ms=1, build_workers=1, rpc=rpc_setup.address))
    try:
        assert isinstance(measurer.runner, ms.runner.RPCRunner)
        assert (measurer.runner.rpc_config.tracker_port, measurer.runner.rpc_config.tracker_key) == (rpc_setup.port, KEY)
        before = rpc_setup.loads()
        results = measurer.measure([_matmul(8), _matmul(16)])
    finally:
        measurer.close()
    assert [r.status for r in results] == ["ok", "ok"], [r.error for r in results]
    assert all(len(r.samples) == 2 and all(math.isfinite(s) and s > 0 for s in r.samples) for r in results)
    assert rpc_setup.loads() - before == 2  # both candidates were loaded and timed by the server


def test_cli_tune_measures_through_rpc(rpc_setup, workdir, capsys):
    model = _one_layer_model(workdir / "one.onnx")
    before = rpc_setup.loads()
    code = main([
        "tune", str(model), "--target", "llvm", "--trials", "4", "--batch", "4", "--tuner", "random",
        "--repeat", "2", "--rpc", rpc_setup.address, "--history", "rpc.db", "--no-mlflow", "--quiet", "--json",
        "--no-verify", "--no-model-latency", "--out-dir", str(workdir / "run"),
    ])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert [l["trials"] for l in report["layers"]] == [4]
    with open_history(str(workdir / "rpc.db"), readonly=True) as store:
        records = store.records()
    tuned = [r for r in records if r.tuner == "random" and r.status != "invalid"]
    assert len(tuned) == 4
    timed = [r for r in records if r.status in ("ok", "run_error", "timeout")]  # built, so sent to the runner
    ok = [r for r in records if r.status == "ok"]
    assert ok and any(r.tuner == "random" for r in ok), [(r.status, r.error) for r in records]
    assert all(math.isfinite(r.latency_median) and r.latency_median > 0 for r in ok)
    assert report["layers"][0]["best_latency"] == min(r.latency_median for r in ok)
    # every candidate that reached the runner (4 tuned + the default schedule) went to the server
    assert len(ok) <= rpc_setup.loads() - before <= len(timed)
    assert len(timed) >= 4


def test_cli_tune_verifies_and_times_the_model_on_the_server(rpc_setup, workdir, capsys, monkeypatch):
    """Without --no-verify and --no-model-latency: the winner's check and both model
    timings run on the server, not here."""
    # TVM's default schedule is recorded as verified without a check, and on a layer this
    # small it often wins, which would leave nothing to check: measure no default, so the
    # winner is always a tuned candidate that must be checked.
    monkeypatch.setattr(TuneSession, "default_latency", lambda self, layer: None)
    model = _one_layer_model(workdir / "one.onnx")
    before = {p: rpc_setup.loads(p) for p in (None, "verify", "model")}
    code = main([
        "tune", str(model), "--target", "llvm", "--trials", "4", "--batch", "4", "--tuner", "random",
        "--repeat", "2", "--rpc", rpc_setup.address, "--history", "rpc.db", "--no-mlflow", "--quiet", "--json",
        "--out-dir", str(workdir / "run"),
    ])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["rpc"] == rpc_setup.address
    (layer,) = report["layers"]
    assert layer["trials"] == 4
    with open_history(str(workdir / "rpc.db"), readonly=True) as store:
        records = store.records()
    assert {r.tuner for r in records} == {"random"}
    # every record with a verdict was checked once, by uploading it to the server
    checked = [r for r in records if r.verified is not None]
    passed = [r for r in checked if r.verified]
    assert len(passed) == 1, [(r.id, r.verified, r.error) for r in checked]
    assert layer["verified"] is True and layer["best_record_id"] == passed[0].id
    assert rpc_setup.loads("verify") - before["verify"] == len(checked)
    # the model was uploaded and timed there twice: default schedules, then the tuned ones
    assert rpc_setup.loads("model") - before["model"] == 2
    for key in ("model_latency_before", "model_latency_after"):
        assert isinstance(report[key], float) and math.isfinite(report[key]) and report[key] > 0, report.get(key)
    # and everything else the server loaded was a candidate the runner timed
    timed = [r for r in records if r.status in ("ok", "run_error", "timeout")]
    ok = [r for r in records if r.status == "ok"]
    runner = rpc_setup.loads() - before[None] - len(checked) - 2
    assert len(ok) <= runner <= len(timed)


def test_remote_check_runs_on_the_server_in_one_session(rpc_setup):
    """verify.check with a RemoteDevice: a right kernel passes, a wrong one is caught,
    both uploaded to the server through a single session."""
    target = resolve_target("llvm")
    a = te.placeholder((8, 8), name="A")
    b = te.placeholder((8, 8), name="B")
    wrong = te.create_prim_func([a, b, te.compute((8, 8), lambda i, j: a[i, j] + b[i, j], name="C")])
    sessions, loads = rpc_setup.sessions(), rpc_setup.loads("verify")
    with remote.RemoteDevice(rpc_setup.address, target.kind) as device:
        assert verify.check(_matmul(8), _matmul(8)["main"], target, remote=device) is None
        problem = verify.check(_matmul(8), wrong, target, remote=device)
    assert problem is not None and "differs from the reference" in problem
    assert rpc_setup.loads("verify") - loads == 2
    assert rpc_setup.sessions() - sessions == 1


def test_remote_check_without_a_free_server_is_an_error_not_a_hang(rpc_setup):
    """The only server is taken: the request gives up after its timeout with one clear
    error, which is not mistaken for a failed check."""
    target = resolve_target("llvm")
    held = remote.request_session(rpc_setup.address)
    try:
        with remote.RemoteDevice(rpc_setup.address, target.kind, request_timeout=1.0) as device:
            with pytest.raises(AutotuneError, match="did not hand out a server under key 'autotune-test' within 1 s"):
                verify.check(_matmul(8), _matmul(8)["main"], target, remote=device)
    finally:
        del held  # the server ends the session and registers again


def test_remote_check_when_the_key_has_no_server(rpc_setup):
    target = resolve_target("llvm")
    device = remote.RemoteDevice(f"{rpc_setup.host}:{rpc_setup.port}:other-key", target.kind)
    with pytest.raises(AutotuneError, match="no RPC server is registered under key 'other-key'"):
        verify.check(_matmul(8), _matmul(8)["main"], target, remote=device)


# --- refusals: one line, exit 2, nothing written, no waiting --------------------------------------
def _tune_rpc(address: str, target: str = "llvm") -> list[str]:
    return ["tune", "model-not-read.onnx", "--target", target, "--trials", "4", "--rpc", address,
            "--history", "tune.db", "--no-mlflow", "--quiet"]


def _refused(capsys, workdir, address: str, *contains: str, target: str = "llvm") -> str:
    """The refusal comes from the check before tuning (a hang would stall the test, not
    pass it): one error line, exit 2, no history written."""
    rc = main(_tune_rpc(address, target))  # a traceback would surface here as an exception
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: "), err
    assert "Traceback" not in err
    for word in contains:
        assert word in lines[0], (word, lines[0])
    assert not (workdir / "tune.db").exists()
    return lines[0]


@pytest.mark.parametrize("bad", [
    "nonsense", "127.0.0.1:9190", "127.0.0.1:port:key", "127.0.0.1:99999:key", ":9190:key", "127.0.0.1:9190:",
    "::1:9190:key", "[::1:9190:key", "[::1]9190:key", "[]:9190:key", "[::1]:9190",
])
def test_malformed_rpc_value(capsys, workdir, bad):
    _refused(capsys, workdir, bad, "--rpc must be HOST:PORT:KEY", repr(bad))


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_cli_tune_through_a_tracker_on_ipv6(workdir, capsys):
    """``--rpc [::1]:PORT:KEY``: the tracker, the server and the runner all on IPv6."""
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        start = sock.getsockname()[1]
    tracker = Tracker("::1", port=start, port_end=start + 100, silent=True)
    server = None
    try:
        server = Server("::1", port=start + 100, port_end=start + 200, tracker_addr=("::1", tracker.port), key=KEY, silent=True)
        _wait_registered("::1", tracker.port, KEY)
        code = main([
            "tune", str(_one_layer_model(workdir / "one.onnx")), "--target", "llvm", "--trials", "4", "--batch", "4",
            "--tuner", "random", "--repeat", "2", "--rpc", f"[::1]:{tracker.port}:{KEY}", "--history", "rpc.db",
            "--no-mlflow", "--quiet", "--json", "--no-model-latency", "--out-dir", str(workdir / "run"),
        ])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert json.loads(out.strip().splitlines()[-1])["rpc"] == f"[::1]:{tracker.port}:{KEY}"
        with open_history(str(workdir / "rpc.db"), readonly=True) as store:
            assert [r for r in store.records() if r.tuner == "random" and r.status == "ok"]
    finally:
        if server is not None:
            server.terminate()
        tracker.proc.kill()  # Tracker.terminate stops it through 127.0.0.1, which an IPv6 tracker is not on


def test_tracker_not_listening_on_ipv6_is_named_in_brackets(capsys, workdir):
    port = _free_port()
    _refused(capsys, workdir, f"[::1]:{port}:{KEY}", "cannot reach an RPC tracker", f"[::1]:{port}")


def test_tracker_not_listening(capsys, workdir):
    port = _free_port()
    _refused(capsys, workdir, f"127.0.0.1:{port}:{KEY}", "cannot reach an RPC tracker", f"127.0.0.1:{port}")


def test_silent_listener_is_not_waited_on(capsys, workdir, monkeypatch):
    """Something accepts connections but never answers: give up after the probe timeout."""
    monkeypatch.setattr(measure, "_TRACKER_PROBE_TIMEOUT", 0.5)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        _refused(capsys, workdir, f"127.0.0.1:{port}:{KEY}", "cannot reach an RPC tracker", "no answer")


def test_something_else_listens_there(capsys, workdir):
    """A port that answers, but not with the tracker's magic number."""
    import threading

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4)
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        _refused(capsys, workdir, f"127.0.0.1:{port}:{KEY}", "cannot reach an RPC tracker", "not a TVM RPC tracker")
        thread.join(5)


def test_no_server_under_that_key(capsys, workdir, rpc_setup):
    """A tracker with no server for the key would queue the request forever."""
    line = _refused(capsys, workdir, f"{rpc_setup.host}:{rpc_setup.port}:other-key", "no RPC server", "'other-key'")
    assert KEY in line  # names the keys that are registered


# --- the target is the server's hardware, not this machine's ------------------------------------
def test_cuda_target_needs_a_gpu_on_the_server(capsys, workdir, rpc_setup):
    """This server has no GPU: tuning for CUDA there is refused up front, whether or not
    this machine has one (before, candidates were compiled for this machine's GPU, or
    the default sm_90, and filed under its key)."""
    _refused(capsys, workdir, rpc_setup.address, "the server has no CUDA GPU", "--target llvm", target="cuda")
    _refused(capsys, workdir, rpc_setup.address, "the server has no CUDA GPU", target="cuda:sm_80")


def test_remote_target_asks_the_server(rpc_setup):
    """``auto`` over RPC is the server's CPU here (it has no GPU); asked in one session.
    The server runs on this machine, so its LLVM CPU and triple are this machine's and
    so is the description (and history key)."""
    sessions = rpc_setup.sessions()
    target = remote.remote_target("auto", rpc_setup.address)
    assert rpc_setup.sessions() - sessions == 1
    assert target == resolve_target("llvm")


# --- a server that stops answering: an error, not a hang or a budget of timeouts ----------------
@contextlib.contextmanager
def _private_rpc(tmp_path):
    """A tracker and a server of the test's own: (address, the server's pid, the tracker)."""
    import os
    import signal

    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    start = _free_port()
    tracker = Tracker("127.0.0.1", port=start, port_end=start + 100, silent=True)
    server = None
    try:
        start = _free_port()
        server = Server("127.0.0.1", port=start, port_end=start + 100, tracker_addr=("127.0.0.1", tracker.port), key="private",
                        server_init_callback=_server_log_to(str(tmp_path / "private.log")))
        _wait_registered("127.0.0.1", tracker.port, "private")
        pid = server.proc._proc.pid
        try:
            yield f"127.0.0.1:{tracker.port}:private", pid, tracker
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        if server is not None:
            server.terminate()
        tracker.terminate()


@pytest.fixture
def private_server(tmp_path):
    """A tracker and a server of this test's own, so it can stop (SIGSTOP) the server as a
    hung host looks: still listed, its port still accepts, it never answers. Yields the
    address and the server's pid; the server is resumed and ended afterwards."""
    with _private_rpc(tmp_path) as (address, pid, _):
        yield address, pid


@pytest.fixture
def frozen_server(private_server):
    import os
    import signal

    address, pid = private_server
    os.kill(pid, signal.SIGSTOP)
    return address


def test_a_hung_server_is_an_error_at_the_start(capsys, workdir, frozen_server, monkeypatch):
    """The handshake has its own timeout: before it, asking the hung server for its
    hardware waited forever in TVM's client."""
    monkeypatch.setattr(remote, "HANDSHAKE_TIMEOUT", 2.0)
    _refused(capsys, workdir, frozen_server, "did not answer within 2 s")


def test_a_server_that_stops_answering_mid_tune_stops_the_tune(frozen_server, monkeypatch):
    """Every candidate then times out in the runner; after such a batch the server is
    asked for a session, none comes, and measuring stops with one error, the batch
    unreturned (its candidates never ran: they went to history as timeouts)."""
    monkeypatch.setattr(remote, "HANDSHAKE_TIMEOUT", 2.0)
    measurer = Measurer(resolve_target("llvm"), MeasureOptions(repeat=1, rpc=frozen_server, run_timeout=1.0))
    try:
        with pytest.raises(AutotuneError, match="stopped when a batch had nothing timed on the server"):
            measurer.measure([_matmul(16)])
    finally:
        measurer.close()


def test_a_tracker_gone_mid_tune_stops_it_with_one_error_and_no_chatter(tmp_path, capfd, monkeypatch):
    """The runner's worker then retried the tracker every 5 s, each time a warning, and
    its connecting threads died with tracebacks: some 18 warnings and two tracebacks
    printed before the one line that said so. Its stderr is TVM's chatter, now unshown."""
    monkeypatch.setattr(remote, "HANDSHAKE_TIMEOUT", 2.0)
    with _private_rpc(tmp_path) as (address, _, tracker):
        measurer = Measurer(resolve_target("llvm"), MeasureOptions(repeat=1, rpc=address, run_timeout=1.0))
        try:
            assert [m.status for m in measurer.measure([_matmul(16)])] == ["ok"]
            tracker.terminate()
            with pytest.raises(AutotuneError, match="stopped when a batch had nothing timed on the server"):
                measurer.measure([_matmul(17)])  # another program: one timed already is answered without the server
        finally:
            measurer.close()
    err = capfd.readouterr().err
    assert "Cannot connect to tracker" not in err and "Traceback" not in err, err


def _wrong_arity():
    """A kernel of two parameters, checked against the three-parameter matmul: it builds,
    and fails when called with the matmul's arguments."""
    a = te.placeholder((8, 8), name="A")
    return tvm.IRModule({"main": te.create_prim_func([a, te.compute((8, 8), lambda i, j: a[i, j] + 1.0, name="B")])})


def test_a_candidate_that_fails_on_the_server_fails_its_check(private_server):
    address, _ = private_server
    with remote.RemoteDevice(address, "llvm") as device:
        problem = verify.check(_wrong_arity(), _matmul(8)["main"], resolve_target("llvm"), remote=device)
    assert problem is not None and problem.startswith("candidate failed to run on the RPC server: ")


def test_a_server_that_stops_answering_during_a_check_is_an_error(private_server, monkeypatch):
    """The candidate fails while the server is stopping: whether it was the kernel or the
    server cannot be told from the failure, so the server is asked for a new session;
    none comes, and that stops the tune rather than failing the candidate."""
    import os
    import signal

    address, pid = private_server
    monkeypatch.setattr(remote, "HANDSHAKE_TIMEOUT", 2.0)
    with remote.RemoteDevice(address, "llvm", request_timeout=5.0) as device:
        device.device()  # this check's session is open (served by a process of its own)
        os.kill(pid, signal.SIGSTOP)  # then the server itself stops answering
        with pytest.raises(AutotuneError, match="did not"):
            verify.check(_wrong_arity(), _matmul(8)["main"], resolve_target("llvm"), remote=device)
