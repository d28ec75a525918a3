"""Queued timing (autotune.queued_timing): its plan, its check, and its place in the runner.

No GPU runs here, so the timer's logic is driven by a simulated one: a stream that runs
kernels in order, each starting when both its launch has arrived and the kernel before
it is done, with a host that takes a fixed time to launch one. On it, back-to-back
launches time at the host's launch interval (what TVM's evaluator reports for a kernel
shorter than that), and queued batches at the kernel's own time. On a CPU, the measurer
with ``timing="queued"`` times with TVM's evaluator, through the same runner path."""

from __future__ import annotations

import pytest

from autotune import queued_timing as qt


class SimulatedGPU:
    """One in-order stream, on a host clock advanced by what the host does."""

    def __init__(self, kernel_s: float, host_launch_s: float, spin_s_per_iter: float = 2e-9) -> None:
        self.now = 0.0  # the host's clock
        self.gpu_free_at = 0.0
        self.kernel_s, self.host_launch_s, self.spin_s_per_iter = kernel_s, host_launch_s, spin_s_per_iter
        self.times: dict[str, float] = {}
        self.spin_start, self.start, self.end = "spin_start", "start", "end"  # the events' names

    def _launch(self, seconds: float) -> None:
        self.now += self.host_launch_s
        begin = max(self.now, self.gpu_free_at)
        self.gpu_free_at = begin + seconds

    def kernel(self, *args) -> None:
        self._launch(self.kernel_s)

    def spin(self, _arg, iters: int) -> None:
        self._launch(iters * self.spin_s_per_iter)

    def sync(self) -> None:
        self.now = max(self.now, self.gpu_free_at)

    # the events' interface (QueuedTimer's ``events``)
    def record(self, event: str) -> None:
        self.times[event] = max(self.now, self.gpu_free_at)

    def elapsed_s(self, a: str, b: str) -> float:
        self.sync()
        return self.times[b] - self.times[a]

    def timer(self) -> qt.QueuedTimer:
        timer = qt.QueuedTimer(self, events=self, spin=self.spin)
        timer.clock = lambda: self.now
        return timer

    def back_to_back(self, launches: int) -> float:
        """What TVM's evaluator does: an event, the launches, an event."""
        self.sync()
        self.record("start")
        for _ in range(launches):
            self.kernel()
        self.record("end")
        return self.elapsed_s("start", "end") / launches


@pytest.mark.parametrize("kernel_s,host_s", [(3e-6, 4.5e-6), (1e-6, 8e-6), (20e-6, 4.5e-6)])
def test_queued_batches_time_the_kernel_where_back_to_back_launches_time_the_host(kernel_s, host_s) -> None:
    gpu = SimulatedGPU(kernel_s, host_s)
    assert gpu.back_to_back(1000) == pytest.approx(max(kernel_s, host_s), rel=1e-3)
    costs = gpu.timer().time(gpu.kernel, (), number=1, repeat=3, min_repeat_ms=10)
    assert len(costs) == 3
    assert costs == pytest.approx([kernel_s] * 3, rel=1e-3)


def test_a_spin_the_host_outlasts_is_doubled_and_the_batch_done_again() -> None:
    """The host slows down after the probe (its launches cost 4x): the first spin, sized
    for the probe's pace, ends before the batch is enqueued, and the check catches it."""
    gpu = SimulatedGPU(2e-6, 3e-6)
    timer = gpu.timer()
    timer.time(gpu.kernel, (), number=1, repeat=1, min_repeat_ms=1)  # probe and calibrate at 3 us
    gpu.host_launch_s = 12e-6
    launches = 200
    spins = []
    real_spin = gpu.spin
    gpu.spin = lambda arg, iters: (spins.append(iters), real_spin(arg, iters))
    timer._spin = gpu.spin
    result = timer.batch(gpu.kernel, (), launches, host_per_launch_s=3e-6)
    assert result.ahead and result.per_launch_s == pytest.approx(2e-6, rel=1e-3)
    assert len(spins) >= 2 and spins[-1] > 2 * spins[0]  # done again, on a longer spin
    assert timer.counts["retried"] >= 1 and timer.counts["not_ahead"] == 0
    assert result.host_per_launch_s == pytest.approx(12e-6, rel=0.01)


def test_batch_sizes_and_spins_follow_the_kernel_and_the_host() -> None:
    # enough launches for the repeat's GPU time, or ``number``; never past the queue's bound
    assert qt.launches_per_batch(1e-3, 10e-3, 1) == 10
    assert qt.launches_per_batch(1e-3, 10e-3, 40) == 40
    assert qt.launches_per_batch(3e-6, 10e-3, 1) == qt.MAX_QUEUED
    assert qt.launches_per_batch(0.0, 10e-3, 3) == 3
    # the spin covers the host's enqueuing twice over, plus a margin
    assert qt.spin_seconds_for(100, 5e-6) == pytest.approx(2 * 100 * 5e-6 + qt.SPIN_MARGIN_S)
    assert qt.queued_ahead(0.5e-3, 1e-3) and not qt.queued_ahead(0.95e-3, 1e-3)


def test_the_spin_kernel_builds_for_cuda_without_a_gpu() -> None:
    """CUDA code is generated and compiled here (NVRTC), only running it needs the GPU:
    the spin is one thread's loop of n dependent multiply-adds."""
    pytest.importorskip("tvm")
    ex = qt.spin_module("sm_90")
    source = ex.mod.imports[0].inspect_source()
    assert "spin_kernel" in source and "for (int i = 0; i < n; ++i)" in source


def test_the_measurer_times_through_the_queued_evaluator_on_a_cpu_as_tvm_does() -> None:
    """The runner's worker gets the evaluator by reference and, on a CPU, times with
    TVM's own; a bad timing name or one with --rpc is refused where options are made."""
    tvm = pytest.importorskip("tvm")
    from tvm import te

    from autotune.errors import OptionError
    from autotune.measure import MeasureOptions, Measurer
    from autotune.target import resolve_target

    a = te.placeholder((32, 32), name="A")
    b = te.compute((32, 32), lambda i, j: a[i, j] * 2.0, name="B")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b]).with_attr("global_symbol", "main")})
    measurer = Measurer(resolve_target("llvm"), MeasureOptions(repeat=2, min_repeat_ms=1, build_workers=1, timing="queued"))
    try:
        assert measurer.runner.f_run_evaluator is qt.queued_run_evaluator
        (result,) = measurer.measure([mod])
        assert result.status == "ok", result.error
        assert len(result.samples) == 2 and result.latency > 0
    finally:
        measurer.close()
    from autotune import api

    assert api.tune_options(timing="queued", trials=4).measure.timing == "queued"  # a flat keyword, as documented
    with pytest.raises(OptionError, match="timing must be one of launches, queued"):
        MeasureOptions(timing="fast")
    with pytest.raises(OptionError, match="local runner"):
        MeasureOptions(timing="queued", rpc="127.0.0.1:9190:gpu")


def test_the_gpu_check_refuses_a_machine_without_one_and_builds_its_kernels_for_cuda(monkeypatch):
    """``benchmarks/gpu/queued_check.py`` (the GPU plan's item 12a) ends with one line here;
    its elementwise kernels schedule and compile for CUDA without a GPU."""
    import sys
    from pathlib import Path

    tvm = pytest.importorskip("tvm")
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.syspath_prepend(str(root / "gpu"))
    import queued_check

    monkeypatch.setattr(sys, "argv", ["queued_check.py"])
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        queued_check.main()
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host="llvm")
    source = tvm.compile(queued_check.elementwise(1 << 12), target=target).mod.imports[0].inspect_source()
    assert "threadIdx.x" in source and "blockIdx.x" in source
