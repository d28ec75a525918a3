"""Timing a GPU kernel from launches queued ahead of the GPU, so that the host's launch
rate does not pace it.

TVM's ``time_evaluator`` times ``number`` back-to-back launches between two CUDA events.
A kernel shorter than the host's time to launch one (TVM's call path and
``cuLaunchKernel``) leaves the GPU idle between launches, and times at the host's launch
interval instead of its own. On the H100 of 2026-11-28, 23 of 37 small layers' best of
64 configs came to 3.55 to 4.46 us, whatever their size, and the same few-microsecond
programs timed 1.3x to 1.7x apart from one session's host to the next, where programs
of 6 us and more agreed within 4%, their medians within 2% (benchmarks/HISTORY_GUIDED.md,
plan items 9 and 10):
below the floor, configs cannot be told apart, and a tuner is steered by noise.

Here each timed batch of launches is enqueued while the GPU is still busy with a spin
kernel (one thread, a dependent multiply-add chain), so the batch runs back to back and
its two events bound GPU time alone: nvbench's blocking kernel, or Triton's ``do_bench``
launching behind a cache flush. Every batch checks that it was so: the host must finish
enqueuing before the spin ends on the GPU (an event before the spin says when that
was); if not, the spin is doubled and the batch done again.

:func:`queued_run_evaluator` is meta-schedule's ``f_run_evaluator``: the local runner
sends it to its worker by reference (``autotune.measure``, ``MeasureOptions.timing``).
On a device other than CUDA it is TVM's own evaluator. It needs ``cuda-bindings`` (the
``cuda`` extra) for the events, as TVM's NVRTC path does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: Launches queued behind one spin at most: the driver's launch queue holds about a
#: thousand; a fuller queue blocks the host, which the batch's check would then catch.
MAX_QUEUED = 512
#: The spin outlasts the host's enqueuing by this factor, and by SPIN_MARGIN_S at least.
SPIN_FACTOR = 2.0
SPIN_MARGIN_S = 50e-6
#: A batch whose enqueuing outlasted this share of the spin is done again, spin doubled.
QUEUED_AHEAD_SHARE = 0.9
MAX_RETRIES = 4
_FLOAT32 = "float32"  # the spin's buffer type (a literal in its annotation reads as a name to pyflakes)


def launches_per_batch(gpu_per_launch_s: float, min_repeat_s: float, number: int) -> int:
    """How many launches one queued batch times: enough for ``min_repeat_s`` of GPU time
    or ``number``, whichever is more, and no more than :data:`MAX_QUEUED`."""
    if gpu_per_launch_s <= 0:
        return max(1, min(number, MAX_QUEUED))
    wanted = max(number, math.ceil(min_repeat_s / gpu_per_launch_s))
    return max(1, min(wanted, MAX_QUEUED))


def spin_seconds_for(launches: int, host_per_launch_s: float) -> float:
    """GPU seconds the spin must last for the host to enqueue ``launches`` behind it."""
    return SPIN_FACTOR * launches * max(host_per_launch_s, 0.0) + SPIN_MARGIN_S


def queued_ahead(host_enqueue_s: float, spin_s: float) -> bool:
    """Whether the host finished enqueuing a batch (``host_enqueue_s`` after launching the
    spin) well before the spin ended on the GPU (``spin_s`` after it began), so that no
    launch of the batch waited on the host."""
    return host_enqueue_s < QUEUED_AHEAD_SHARE * spin_s


@dataclass
class BatchTiming:
    """One queued batch: GPU seconds per launch, and whether the batch ran queued ahead."""

    per_launch_s: float
    host_per_launch_s: float
    spin_s: float
    ahead: bool


class _CudaEvents:
    """Driver-API events on the stream TVM launches on (the legacy default stream)."""

    def __init__(self, device_index: int = 0) -> None:
        from cuda.bindings import driver as cu

        self._cu = cu
        self._check(cu.cuInit(0))  # TVM's runtime has; harmless again
        if not int(self._check(cu.cuCtxGetCurrent())):  # no context on this thread yet: the one TVM uses
            ctx = self._check(cu.cuDevicePrimaryCtxRetain(self._check(cu.cuDeviceGet(device_index))))
            self._check(cu.cuCtxSetCurrent(ctx))
        # CUDA 13 made cuEventElapsedTime_v2 the one to call; older bindings have the first
        self._elapsed_ms = getattr(cu, "cuEventElapsedTime_v2", None) or cu.cuEventElapsedTime
        self.stream = cu.CUstream(0)
        self.spin_start, self.start, self.end = (self._check(cu.cuEventCreate(0)) for _ in range(3))

    def _check(self, result):
        err, *value = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise RuntimeError(f"CUDA driver call failed: {err}")
        return value[0] if value else None

    def record(self, event) -> None:
        self._check(self._cu.cuEventRecord(event, self.stream))

    def elapsed_s(self, a, b) -> float:
        self._check(self._cu.cuEventSynchronize(b))
        return self._check(self._elapsed_ms(a, b)) / 1e3


class QueuedTimer:
    """Times one device's kernels from queued batches (one per runner worker and device)."""

    def __init__(self, device, *, events=None, spin: Callable | None = None) -> None:
        """``events`` and ``spin`` stand in for the CUDA ones (a simulated GPU's, in tests)."""
        self.device = device
        self._spin_arg = None
        if spin is None:
            import tvm

            major, minor = str(device.compute_version).split(".")
            spin = spin_module(f"sm_{major}{minor}")["spin"]
            # first: TVM's allocation makes the device's primary context current, which
            # the driver-API events are created in
            self._spin_arg = tvm.runtime.empty((1,), "float32", device)
        self._spin = spin
        self.events = events if events is not None else _CudaEvents(device.index)
        self._iters_per_s = 0.0
        self.clock = time.perf_counter  # the host's enqueuing is timed by it
        #: batches timed, batches done again on a longer spin, and batches never queued
        #: ahead after MAX_RETRIES (their timing an upper bound): what a check reports
        self.counts = {"batches": 0, "retried": 0, "not_ahead": 0}

    def _spin_iterations(self, seconds: float) -> int:
        if self._iters_per_s <= 0:  # calibrate once: 2^16 iterations, timed alone
            self.device.sync()
            self.events.record(self.events.start)
            self._spin(self._spin_arg, 1 << 16)
            self.events.record(self.events.end)
            self._iters_per_s = (1 << 16) / max(self.events.elapsed_s(self.events.start, self.events.end), 1e-9)
        return max(1, min(int(seconds * self._iters_per_s * 1.2), 2**31 - 1))

    def batch(self, f: Callable, args: Sequence[Any], launches: int, host_per_launch_s: float) -> BatchTiming:
        """Time ``launches`` launches of ``f(*args)`` queued behind a spin, checked."""
        spin_s = spin_seconds_for(launches, host_per_launch_s)
        ev = self.events
        for _ in range(MAX_RETRIES + 1):
            iters = self._spin_iterations(spin_s)
            self.device.sync()
            t0 = self.clock()
            ev.record(ev.spin_start)
            self._spin(self._spin_arg, iters)
            ev.record(ev.start)
            for _ in range(launches):
                f(*args)
            ev.record(ev.end)
            host_s = self.clock() - t0
            gpu_s = ev.elapsed_s(ev.start, ev.end)
            spun_s = ev.elapsed_s(ev.spin_start, ev.start)
            if spun_s > 0:  # the spin's pace as it ran (the GPU's clock rises under load)
                self._iters_per_s = iters / spun_s
            timing = BatchTiming(gpu_s / launches, host_s / launches, spun_s, queued_ahead(host_s, spun_s))
            if timing.ahead:
                self.counts["batches"] += 1
                return timing
            self.counts["retried"] += 1
            spin_s = max(2 * spun_s, spin_seconds_for(launches, timing.host_per_launch_s))
        self.counts["batches"] += 1
        self.counts["not_ahead"] += 1
        return timing  # still not ahead: an upper bound, as time_evaluator's would be

    def time(self, f: Callable, args: Sequence[Any], *, number: int, repeat: int, min_repeat_ms: float) -> list[float]:
        """``repeat`` costs (seconds per launch), each over ``min_repeat_ms`` of GPU time
        at least, in queued batches."""
        f(*args)  # warm-up: lazy loading, first-launch costs
        self.device.sync()
        probe = self.batch(f, args, 8, host_per_launch_s=20e-6)
        launches = launches_per_batch(probe.per_launch_s, min_repeat_ms / 1e3, number)
        host = probe.host_per_launch_s
        costs = []
        for _ in range(repeat):
            gpu = 0.0
            done = 0
            while True:
                b = self.batch(f, args, launches, host)
                host = max(host, b.host_per_launch_s)
                gpu += b.per_launch_s * launches
                done += launches
                if gpu * 1e3 >= min_repeat_ms:
                    break
            costs.append(gpu / done)
        return costs


def spin_module(arch: str):
    """A one-thread CUDA kernel, ``spin(a, n)``, that runs ``n`` dependent multiply-adds:
    GPU time in proportion to ``n``, no memory traffic to speak of. (Built with TVM, so
    that it launches as the timed kernels do, on their stream.)"""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def spin(a: T.Buffer((1,), _FLOAT32), n: T.int32):
        T.func_attr({"global_symbol": "spin", "tir.noalias": True})
        for bx in T.thread_binding(1, thread="blockIdx.x"):
            for tx in T.thread_binding(1, thread="threadIdx.x"):
                acc = T.alloc_buffer((1,), "float32", scope="local")
                acc[0] = a[0]
                for i in range(n):
                    acc[0] = acc[0] * T.float32(0.999999) + T.float32(1e-6)
                a[0] = acc[0]

    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")
    return tvm.compile(tvm.IRModule({"spin": spin}), target=target)


_timers: dict[tuple[int, int], QueuedTimer] = {}


def queued_run_evaluator(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """meta-schedule's ``f_run_evaluator`` signature: every argument set's costs, in order."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    if device.dlpack_device_type() != 2:  # kDLCUDA: elsewhere the host does not pace timing
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)
    key = (device.dlpack_device_type(), device.index)
    timer = _timers.get(key)
    if timer is None:
        timer = _timers[key] = QueuedTimer(device)
    f = rt_mod[rt_mod.entry_name]
    costs: list[float] = []
    for args in repeated_args:
        costs += timer.time(f, args, number=evaluator_config.number, repeat=evaluator_config.repeat,
                            min_repeat_ms=evaluator_config.min_repeat_ms)
    return costs

