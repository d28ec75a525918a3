"""Building and timing candidate schedules with TVM's meta-schedule engine.

The builder implements meta-schedule's ``PyBuilder`` interface, but keeps its worker
processes warm: TVM's own ``LocalBuilder`` starts fresh workers for every batch and
its default build imports ``tvm.s_tir.tensor_intrin`` (30-45 s) in each, which made
8 builds take 39 s here. Our workers import TVM once and build in ~0.1 s.

Timing uses meta-schedule's ``LocalRunner`` (or its ``RPCRunner`` for remote devices):
warm-up, ``repeat`` timed runs, each of ``number`` calls, median reported. Every
failure (build error, crash, timeout) becomes a :class:`Measurement` with an error
status, never an exception out of the tuning loop.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import struct
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

from autotune import build_worker
from autotune.errors import interrupts_held, threads_started_deaf_to_ctrl_c
from autotune.history.models import RECORD_TIMINGS
from autotune.target import TargetSpec

#: The build pool is recycled (PopenPool leaks slowly) once it has built this many
#: candidates per worker. Until 2026-11-26 it was 200 for the whole pool: 100 builds a
#: worker on this 2-core machine, but 12 on the H100's 16 cores, each restart paying
#: TVM's imports and, on CUDA, NVRTC's headers again.
_BUILDS_PER_WORKER = 100
#: The local runner's worker is recycled after timing this many modules. It loads every
#: module it times and never unloads one: after about 13,000 (9 GB resident) it hung for
#: good in a benchmark here, unable to start the thread that enforces its timeout.
_RUNNER_RECYCLE_AFTER = 500


@dataclass
class Measurement:
    """One timed candidate: per-repeat seconds, or an error status with its text."""

    status: str  # "ok" | "build_error" | "run_error" | "timeout" | "invalid"
    samples: list[float] = field(default_factory=list)
    error: str | None = None
    #: Answered with the result of the same program built or timed for another candidate
    #: (:mod:`autotune.program_digest`), not built or not timed itself.
    twin: bool = False

    @property
    def latency(self) -> float | None:
        return statistics.median(self.samples) if self.status == "ok" and self.samples else None


#: MeasureOptions.timing's values, the first the default (TVM's evaluator): history's, as
#: each record says how it was timed
TIMINGS = RECORD_TIMINGS


@dataclass(frozen=True)
class MeasureOptions:
    repeat: int = 5
    number: int = 1  # calls per repeat; raised automatically up to min_repeat_ms
    min_repeat_ms: int = 20
    build_timeout: float = 60.0
    run_timeout: float = 30.0
    build_workers: int = 0  # 0: one per core
    rpc: str | None = None  # "host:port:key" of an RPC tracker
    #: Build and time each program once, answering its twins (other candidates that are
    #: the same program) with its result; False times every candidate on its own.
    once_per_program: bool = True
    #: How a GPU kernel is timed: "launches", TVM's evaluator (back-to-back launches,
    #: which the host's launch rate paces below some 4 us a kernel); "queued", launches
    #: queued behind a spin kernel, GPU time alone (:mod:`autotune.queued_timing`; local
    #: runner only). The same on a CPU.
    timing: str = TIMINGS[0]

    def __post_init__(self) -> None:
        from autotune.errors import INT32_MAX, OptionError, check_choice, check_count, check_flag, quoted

        check_flag(self.once_per_program, "once_per_program")
        check_choice(self.timing, "timing", TIMINGS)
        if self.timing == "queued" and self.rpc is not None:
            raise OptionError("{timing} 'queued' times in the local runner, not through {rpc} (a server times with TVM's evaluator)", "timing", "rpc")
        if self.rpc is not None and not isinstance(self.rpc, str):
            raise OptionError(f"{{rpc}} must be 'host:port:key', got {quoted(self.rpc)}", "rpc")
        check_count(self.repeat, "repeat", maximum=INT32_MAX)
        check_count(self.number, "number", maximum=INT32_MAX)
        check_count(self.min_repeat_ms, "min_repeat_ms", zero_ok=True, maximum=INT32_MAX)
        check_count(self.build_timeout, "build_timeout", integer=False)
        check_count(self.run_timeout, "run_timeout", integer=False)
        check_count(self.build_workers, "build_workers", zero_ok=True, maximum=INT32_MAX)
        timed_s = self.repeat * self.min_repeat_ms / 1000
        if self.run_timeout <= timed_s:
            # each repeat runs for min_repeat_ms at least: every candidate would time out
            # (0.05 s timed out all of them, and a far shorter one failed TVM's own start)
            raise OptionError(
                f"{{run_timeout}} of {self.run_timeout:g} s is no longer than a candidate's timing takes at least "
                f"({{repeat}} {self.repeat} x {{min_repeat_ms}} {self.min_repeat_ms} = {timed_s:g} s): every candidate would time out",
                "run_timeout", "repeat", "min_repeat_ms",
            )


#: A builder's folder: ``<this><host>-<pid>-<random>`` in the temporary directory.
_EXPORT_PREFIX = "autotune-build-"


def _export_owner(name: str) -> tuple[str, int] | None:
    """(host, pid) of the builder that made a folder so named, None for any other name
    (mkdtemp's random part has no '-'; a host name may)."""
    if not name.startswith(_EXPORT_PREFIX):
        return None
    owner, _, random_part = name[len(_EXPORT_PREFIX):].rpartition("-")
    host, _, pid = owner.rpartition("-")
    return (host, int(pid)) if host and pid.isdigit() and random_part else None


def owned_temporary_folder() -> str:
    """A fresh folder in the temporary directory that names this host and process, so
    that :func:`remove_orphaned_exports` clears it once the process is gone."""
    return tempfile.mkdtemp(prefix=f"{_EXPORT_PREFIX}{socket.gethostname()}-{os.getpid()}-")


def remove_orphaned_exports(parent: str | None = None) -> list[str]:
    """Remove the folders of builders on this host whose process is gone.

    A tune killed outright (SIGKILL, the OOM killer) cannot remove its folder, and on CUDA
    it holds each build worker's NVRTC header file (60 MB each: about 1 GB on the H100's
    16 workers) besides the candidates being timed. The next builder clears them. Folders
    of other hosts (a shared temporary directory) or of live processes are left alone.
    Returns the names removed."""
    from autotune.history.processes import pid_alive

    parent = parent or tempfile.gettempdir()
    host = socket.gethostname()
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        owner = _export_owner(name)
        if owner is None or owner[0] != host or owner[1] == os.getpid() or pid_alive(owner[1]):
            continue
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        removed.append(name)
    return removed


class WarmBuilder:
    """meta-schedule builder interface (``build(list[BuilderInput])``) on warm workers."""

    def __init__(self, *, max_workers: int = 0, timeout_sec: float = 60.0) -> None:
        self.max_workers = max_workers or max(1, os.cpu_count() or 1)
        self.timeout_sec = timeout_sec
        remove_orphaned_exports()
        self.export_dir = owned_temporary_folder()
        # removed by close(), or when the builder is collected or Python exits without it
        # (49 empty folders had piled up under /tmp here from builders never closed)
        self._remove_exports = weakref.finalize(self, shutil.rmtree, self.export_dir, True)
        self._pool = None
        self._warming: list[Any] = []  # the current pool's first tasks (prewarm)
        self._uses = 0
        #: Seconds summed over batches: ``busy``, every build inside its worker, of which
        #: ``device_compile`` in TVM's CUDA compile callback (NVRTC); ``slowest``, each
        #: batch's slowest build, a floor under its wall time however many workers.
        #: On the H100 a batch's wall time came to about 2.4 worker-seconds a build, of
        #: which NVRTC was 0.1 (2026-11-26); these say whether the rest is work or waiting.
        self.seconds = {"busy": 0.0, "device_compile": 0.0, "slowest": 0.0}
        #: CUDA sources whose binary a worker took from the builder's cache, uncompiled
        #: (:func:`autotune.build_worker.wrap_device_compiles`).
        self.device_compiles_reused = 0

    def _executor(self, target=None):
        from tvm.support.popen_pool import PopenPoolExecutor

        if self._pool is None or self._uses >= _BUILDS_PER_WORKER * self.max_workers:
            if self._pool is not None:
                _shut_down(self._pool)
                self._drop_header_files()
            self._pool = PopenPoolExecutor(
                max_workers=self.max_workers, timeout=self.timeout_sec, initializer=build_worker.warm
            )
            self._uses = 0
            # every thread the pool will have, started now, deaf to a terminal's Ctrl-C,
            # and with them the workers (the pool starts a thread per task while it has
            # fewer than max_workers, and a worker in the thread's first task)
            with threads_started_deaf_to_ctrl_c():
                self._warming = [
                    self._pool.submit(build_worker.prewarm, target, self.export_dir) if target is not None
                    else self._pool.submit(build_worker.warm)
                    for _ in range(self.max_workers)
                ]
        return self._pool

    def prewarm(self, target) -> list[Any]:
        """Start every worker now, in the background (futures of their pids).

        Whatever the caller does before its first build (reading history, making spaces
        and tuners) then overlaps the workers' start; a build sent meanwhile waits its
        turn. These tasks do not count toward the pool's recycling."""
        self._executor(target)
        return self._warming

    def build(self, build_inputs: Sequence[Any]) -> list[Any]:
        """meta-schedule's ``BuilderResult`` per input, in order."""
        return [res for res, _ in self.build_programs(build_inputs)]

    def build_programs(self, build_inputs: Sequence[Any]) -> list[tuple[Any, str | None]]:
        """Each input's ``BuilderResult`` and which program it built
        (:func:`autotune.program_digest.program_digest`; None when unknown or failed)."""
        from tvm.s_tir.meta_schedule.builder import BuilderResult
        from tvm.support.popen_pool import StatusKind

        pool = self._executor()
        self._uses += len(build_inputs)
        results = []
        slowest = 0.0
        # each build's seconds inside its worker, and those in TVM's CUDA compile callback
        # (NVRTC): what a batch's wall time is made of (compiling device code, the rest of
        # a build, the slowest build, or none of these)
        for res in pool.map_with_error_catching(
            lambda x: build_worker.build(*x), [(b.mod, b.target, self.export_dir) for b in build_inputs]
        ):
            if res.status == StatusKind.COMPLETE:
                built = res.value
                self.seconds["busy"] += built.seconds.total
                self.seconds["device_compile"] += built.seconds.device_compile
                self.device_compiles_reused += built.device_compiles_reused
                slowest = max(slowest, built.seconds.total)
                results.append((BuilderResult(built.path, None), built.program))
            elif res.status == StatusKind.TIMEOUT:
                results.append((BuilderResult(None, f"timeout: build killed after {self.timeout_sec:.0f} s"), None))
            else:
                results.append((BuilderResult(None, f"build error: {res.value}"), None))
        self.seconds["slowest"] += slowest
        return results

    def _drop_header_files(self) -> None:
        """The pool kills its workers, so NVRTC leaves their header files (60 MB each)."""
        for name in os.listdir(self.export_dir):
            if name.startswith(f"{build_worker.PCH_DIR}-"):
                shutil.rmtree(os.path.join(self.export_dir, name), ignore_errors=True)

    def close(self) -> None:
        if self._pool is not None:
            _shut_down(self._pool)
            self._pool = None
        self._remove_exports()


class Measurer:
    """Builds and times scheduled PrimFunc modules for one target."""

    def __init__(self, target: TargetSpec, options: MeasureOptions | None = None) -> None:
        from tvm.s_tir import meta_schedule as ms

        from autotune.errors import keep_interrupts_through_tvm

        keep_interrupts_through_tvm()  # Ctrl-C while the runner waits: an interrupt, not an error

        self.target = target
        self.options = options or MeasureOptions()
        opts = self.options
        self.builder = WarmBuilder(max_workers=opts.build_workers, timeout_sec=opts.build_timeout)
        self.builder.prewarm(target.tvm_target)  # the workers start while the caller gets ready
        self._evaluator = ms.runner.EvaluatorConfig(
            number=max(1, opts.number),
            repeat=opts.repeat,
            min_repeat_ms=opts.min_repeat_ms,
            enable_cpu_cache_flush=False,
        )
        self._ms = ms
        try:  # the local runner waits for its worker's start: a Ctrl-C often lands here
            self.runner = self._make_runner()
        except BaseException:
            # no one else holds the builder to close it: its pool, collected later in a
            # thread of its own, printed "cannot join current thread" twice under the line
            self.builder.close()
            raise
        self._runner_uses = 0
        self.runner_generation = 0  # how many times the local runner's worker was replaced
        #: Wall seconds spent building and timing, cumulative: where measurement time goes.
        self.seconds = {"build": 0.0, "run": 0.0}
        #: Candidates answered by their twins (:meth:`measure`): structurally equal to one
        #: built in the same batch (``not_built``), or built and found to be a program
        #: timed already (``not_timed``).
        self.twins = {"not_built": 0, "not_timed": 0}
        self._timed: dict[str, Measurement] = {}  # program digest -> its timing

    def _make_runner(self):
        ms, opts = self._ms, self.options
        if opts.rpc:
            from tvm.support.popen_pool import PopenPoolExecutor

            host, port, key = _parse_rpc(opts.rpc)
            runner = ms.runner.RPCRunner(
                rpc_config=ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key, session_timeout_sec=opts.run_timeout),
                evaluator_config=self._evaluator,
            )
            # The runner's worker pool has no timeout of its own: a candidate whose server
            # hangs (or whose tracker never hands one out) would be waited on forever, its
            # "killed after session_timeout_sec" message notwithstanding. Same pool, bounded:
            # the server ends a session at run_timeout; the rest is request and upload.
            _shut_down(runner.pool)
            # its worker's stderr is TVM's retry chatter and threads' tracebacks (a tracker
            # gone mid-tune printed some 18 warnings and two tracebacks before the one line
            # that says so); what a candidate did comes back through the pool, as with
            # LocalRunner, whose worker's stderr TVM sends to null too
            runner.pool = PopenPoolExecutor(
                max_workers=1, timeout=2 * opts.run_timeout + _RPC_GRACE_S, stderr=subprocess.DEVNULL
            )
            return runner
        if opts.timing == "queued":
            from autotune.queued_timing import queued_run_evaluator

            # sent to the worker by reference: it imports this module there
            return ms.runner.LocalRunner(timeout_sec=opts.run_timeout, evaluator_config=self._evaluator,
                                         f_run_evaluator=queued_run_evaluator)
        return ms.runner.LocalRunner(timeout_sec=opts.run_timeout, evaluator_config=self._evaluator)

    def _current_runner(self):
        """The runner to use now: a local one gets a fresh worker once it has timed enough modules."""
        if self._runner_uses >= _RUNNER_RECYCLE_AFTER and not self.options.rpc:
            self._shutdown_runner()
            self.runner = self._make_runner()
            self._runner_uses = 0
            self.runner_generation += 1
        return self.runner

    @property
    def can_run(self) -> bool:
        return bool(self.options.rpc) or self.target.has_device

    def measure(self, mods: Sequence[Any]) -> list[Measurement]:
        """Build all, then time each successful build; order matches ``mods``.

        Each program is built and timed once (:mod:`autotune.program_digest`): a module
        structurally equal to another of the batch is not built, and one whose generated
        code is a program built in this batch or timed before is not timed; each gets that
        program's result, marked ``twin``. ``twins`` counts both kinds."""
        from autotune.program_digest import schedule_twins

        ms = self._ms
        target = self.target.tvm_target
        once = self.options.once_per_program
        same_as = schedule_twins(mods) if once else list(range(len(mods)))
        firsts = [i for i, j in enumerate(same_as) if i == j]
        t0 = time.perf_counter()
        built = self.builder.build_programs([ms.builder.BuilderInput(mods[i], target) for i in firsts])
        self.seconds["build"] += time.perf_counter() - t0
        out: dict[int, Measurement] = {}
        run_inputs, run_slots, run_programs = [], [], []
        running: dict[str, int] = {}  # program -> the slot of this batch that times it
        takes_from: dict[int, int] = {}  # slot -> the slot of this batch whose timing it takes
        device_type = "cuda" if self.target.kind == "cuda" else "cpu"
        for i, (res, program) in zip(firsts, built):
            if res.error_msg:
                status = "timeout" if res.error_msg.startswith("timeout") else "build_error"
                out[i] = Measurement(status, error=_short(res.error_msg))
                continue
            if once and program is not None:
                if program in self._timed or program in running:
                    if program in self._timed:
                        out[i] = _twin_of(self._timed[program])
                    else:
                        takes_from[i] = running[program]
                    self.twins["not_timed"] += 1
                    _remove(res.artifact_path)
                    continue
                running[program] = i
            args_info = ms.arg_info.ArgInfo.from_prim_func(mods[i]["main"])
            run_inputs.append(ms.runner.RunnerInput(res.artifact_path, device_type, args_info))
            run_slots.append(i)
            run_programs.append(program)
        t0 = time.perf_counter()
        if run_inputs:
            runner = self._current_runner()
            self._runner_uses += len(run_inputs)
            if self.options.rpc:  # its run only sends (LocalRunner's waits, its worker's stderr is null)
                with threads_started_deaf_to_ctrl_c():
                    futures = runner.run(run_inputs)
            else:
                futures = runner.run(run_inputs)
            for slot, fut, rin, program in zip(run_slots, futures, run_inputs, run_programs):
                result = fut.result()
                if result.error_msg:
                    status = "timeout" if "timeout" in result.error_msg.lower() else "run_error"
                    out[slot] = Measurement(status, error=_short(result.error_msg))
                else:
                    out[slot] = Measurement("ok", samples=[float(s) for s in result.run_secs])
                    if once and program is not None:
                        self._timed[program] = out[slot]  # a failure is not kept: it may pass next time
                _remove(rin.artifact_path)
        self.seconds["run"] += time.perf_counter() - t0
        for i, j in takes_from.items():
            out[i] = _twin_of(out[j])
        for i, j in enumerate(same_as):
            if i != j:
                out[i] = _twin_of(out[j])
                self.twins["not_built"] += 1
        if self.options.rpc and run_slots:
            self._check_server([out[slot] for slot in run_slots])
        return [out[i] for i in range(len(mods))]

    def _check_server(self, timed: list[Measurement]) -> None:
        """Stop the tune when the ``--rpc`` server has stopped answering.

        A server that hangs mid-tune stays listed with the tracker, and the runner then
        fails every candidate after its pool timeout (2 x ``run_timeout`` + 5 s), for as
        long as the budget lasts. After a batch with nothing timed the server is asked for
        a session; if none comes, that is one error for the user, and the batch is not
        returned, so its candidates are not recorded as timed out: they never ran. (After
        two such batches, as before, a dead server's first batch went to history as
        timeouts, and the tune took minutes more to stop.)
        """
        from autotune.errors import AutotuneError
        from autotune.remote import request_session

        if any(m.status == "ok" for m in timed):
            return
        try:
            request_session(self.options.rpc, timeout=max(10.0, 2 * self.options.run_timeout))
        except AutotuneError as err:
            raise AutotuneError(
                f"{err}; stopped when a batch had nothing timed on the server (measurements before it are kept; "
                "its own, which never ran, are not recorded)"
            ) from None
        # it answers: the candidates themselves failed, and are recorded as they did

    def close(self) -> None:
        try:
            self.builder.close()
        finally:  # a Ctrl-C held through the builder's shutdown is raised as it ends
            self._shutdown_runner()

    def _shutdown_runner(self) -> None:
        pool = getattr(self.runner, "pool", None)
        if pool is not None:
            _shut_down(pool)


def _shut_down(pool) -> None:
    """TVM's pool shutdown, whole: stopped halfway by Ctrl-C, it left its lock taken, and
    the pool's destructor waited on it at exit (:func:`autotune.errors.interrupts_held`).

    A worker the pool's own thread is killing meanwhile (its candidate timed out as the
    tune was stopped) can lose its process between TVM's check and its kill: the
    ``AttributeError`` left the lock taken the same way, and the tune, after a traceback,
    never exited (1 of 11 Ctrl-Cs in a user's trial). The lock is let go and the
    shutdown finished; a worker whose process is gone is skipped then."""
    with interrupts_held():
        for _ in range(3):
            try:
                pool.shutdown()
                return
            except AttributeError:
                lock = getattr(pool, "_lock", None)
                if lock is not None and lock.locked():
                    lock.release()


def _twin_of(m: Measurement) -> Measurement:
    return Measurement(m.status, list(m.samples), m.error, twin=True)


def _parse_rpc(text: str) -> tuple[str, int, str]:
    """``HOST:PORT:KEY``; an IPv6 host in brackets, as in URLs: ``[::1]:9190:h100``."""
    from autotune.errors import OptionError, quoted_text

    usage = OptionError(f"{{rpc}} must be HOST:PORT:KEY of an RPC tracker (an IPv6 host in brackets: [::1]:9190:KEY), "
                        f"not {quoted_text(repr(text))}", "rpc")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise usage
        parts = [host, *rest[1:].split(":")]
    else:
        parts = text.split(":")
    if len(parts) != 3 or not parts[0] or not parts[2] or not parts[1].isdigit() or not 0 < int(parts[1]) < 65536:
        raise usage
    return parts[0], int(parts[1]), parts[2]


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


#: Seconds an RPC candidate may take beyond twice ``run_timeout`` (session request, upload).
_RPC_GRACE_S = 5.0

#: Seconds to wait for the tracker to accept and answer before ``--rpc`` is refused.
_TRACKER_PROBE_TIMEOUT = 5.0


def check_rpc(text: str, timeout: float | None = None) -> tuple[str, int, str]:
    """Parse ``HOST:PORT:KEY`` and ask that tracker whether a server is registered under KEY.

    Raises :class:`AutotuneError` (one line for the user) when it is not, before anything
    is written. Without this check meta-schedule's ``RPCRunner`` finds out only inside its
    worker, per candidate: it retries a refused connection every 5 s, gives up after
    ``session_timeout_sec`` (our ``run_timeout``, 30 s) with a run error and a traceback on
    stderr, and does that again for every candidate; a 4-trial tune took 2 min 51 s and
    exited 0 with nothing measured. A tracker with no server under the key is worse: it
    queues the request forever, so the tune hangs. (A busy server stays listed: it keeps
    its tracker connection open while serving.)
    """
    from autotune.errors import AutotuneError

    host, port, key = _parse_rpc(text)
    timeout = _TRACKER_PROBE_TIMEOUT if timeout is None else timeout
    try:
        summary = _tracker_summary(host, port, timeout)
    except (OSError, ValueError) as err:  # refused, unresolvable, silent, or not a tracker
        reason = f"no answer in {timeout:g} s" if isinstance(err, socket.timeout) else (str(err) or type(err).__name__)
        raise AutotuneError(f"--rpc {text}: cannot reach an RPC tracker at {_host_port(host, port)} ({reason})") from None
    keys = sorted({str(s.get("key", "")).partition(":")[2] for s in summary.get("server_info", [])} - {""})
    if key not in keys:
        raise AutotuneError(
            f"--rpc {text}: no RPC server is registered under key {key!r} with the tracker at {_host_port(host, port)}"
            f" (registered keys: {', '.join(keys) or 'none'})"
        )
    return host, port, key


def tracker_call(host: str, port: int, message: list[Any], timeout: float) -> Any:
    """Send one message to the tracker and return its answer, over a socket that gives up
    after ``timeout`` s (``socket.timeout``, an ``OSError``) at every step.

    TVM's own ``connect_tracker`` retries refused connections for 60 s and has no read
    timeout, hence this small client of the same protocol (tvm.rpc.base constants).
    """
    from tvm.rpc import base

    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise ValueError("not a TVM RPC tracker")
        base.sendjson(sock, message)
        return base.recvjson(sock)


def _tracker_summary(host: str, port: int, timeout: float) -> dict[str, Any]:
    """The tracker's ``SUMMARY`` answer (see :func:`tracker_call`)."""
    from tvm.rpc import base

    value = tracker_call(host, port, [base.TrackerCode.SUMMARY], timeout)
    if not (isinstance(value, list) and len(value) == 2 and value[0] == base.TrackerCode.SUCCESS and isinstance(value[1], dict)):
        raise ValueError(f"unexpected answer to SUMMARY: {str(value)[:100]}")
    return value[1]


def _short(text: str, limit: int = 2000) -> str:
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    head = (errors[-1] if errors else (lines[-1] if lines else "")).strip()
    return (head + ("\n" + "\n".join(lines[-20:]) if len(lines) > 1 else ""))[:limit]


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
