"""The measurer on the llvm target: real builds and timings."""

from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

from tvm import te  # noqa: E402

from autotune import build_worker, measure  # noqa: E402
from autotune.measure import MeasureOptions, Measurer  # noqa: E402
from autotune.target import resolve_target  # noqa: E402


def _matmul(n: int):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})


def _unrolled(n: int, max_step: int):
    """The matmul with its reduction loop unrolled up to ``max_step``: any limit at or
    above the loop's extent gives one program, as an unroll knob's upper values do."""
    from tvm.s_tir import Schedule

    sch = Schedule(_matmul(n))
    _, _, k = sch.get_loops(sch.get_sblock("C"))
    sch.annotate(k, "pragma_auto_unroll_max_step", max_step)
    sch.annotate(k, "pragma_unroll_explicit", 1)
    return sch.mod


def test_the_program_digest_tells_twins_from_other_programs() -> None:
    """Schedules that differ only in what lowering erases are one program; a build of
    one schedule digests the same each time (LLVM IR's pointer-named metadata aside);
    another program digests otherwise."""
    from autotune.program_digest import canonical_source, program_digest, same_schedule, scheduled_key

    target = resolve_target("llvm").tvm_target

    def digest(mod):
        with target:
            return program_digest(tvm.compile(mod, target=target))

    full_16, full_64, none = _unrolled(8, 16), _unrolled(8, 64), _unrolled(8, 0)
    assert scheduled_key(full_16) != scheduled_key(full_64) and not same_schedule(full_16, full_64)
    assert digest(full_16) == digest(full_64) == digest(_unrolled(8, 16))
    assert digest(none) != digest(full_16) and digest(_matmul(16)) != digest(_matmul(8))
    assert same_schedule(_matmul(8), _matmul(8)) and scheduled_key(_matmul(8)) == scheduled_key(_matmul(8))
    ir = '!7 = !{!"0x55d1", !8}\n!9 = !{!"0x55e2.w256.b0", !7}\n!10 = !{!"0x55d1.w512.b0"}\n!11 = !{!"0x1 total"}'
    assert canonical_source(ir) == '!7 = !{!"p0", !8}\n!9 = !{!"p1.w256.b0", !7}\n!10 = !{!"p0.w512.b0"}\n!11 = !{!"0x1 total"}'


def test_each_program_is_built_and_timed_once_and_its_twins_take_its_timing() -> None:
    """A structurally equal module is not built, one that builds to a program already
    timed (this batch or an earlier one) is not timed; each twin gets that timing, and
    the measurer counts both kinds. With ``once_per_program=False`` every candidate is
    built and timed on its own."""
    opts = dict(repeat=2, min_repeat_ms=1, build_workers=1)
    measurer = Measurer(resolve_target("llvm"), MeasureOptions(**opts))
    try:
        batch = [_unrolled(8, 16), _unrolled(8, 16), _unrolled(8, 64), _unrolled(8, 0)]
        first = measurer.measure(batch)
        assert [r.status for r in first] == ["ok"] * 4, [r.error for r in first]
        assert [r.twin for r in first] == [False, True, True, False]
        assert first[0].samples == first[1].samples == first[2].samples != first[3].samples
        assert measurer.twins == {"not_built": 1, "not_timed": 1}
        assert measurer.builder._uses == 3  # the structural twin was never sent to a worker
        (later,) = measurer.measure([_unrolled(8, 32)])  # another schedule, a program timed above
        assert later.twin and later.samples == first[0].samples
        assert measurer.twins == {"not_built": 1, "not_timed": 2}
    finally:
        measurer.close()
    each = Measurer(resolve_target("llvm"), MeasureOptions(**opts, once_per_program=False))
    try:
        results = each.measure([_unrolled(8, 16), _unrolled(8, 16)])
        assert [r.status for r in results] == ["ok", "ok"] and [r.twin for r in results] == [False, False]
        assert each.builder._uses == 2 and each.twins == {"not_built": 0, "not_timed": 0}
    finally:
        each.close()


def test_local_runner_worker_is_recycled_and_timing_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's worker loads every module it times and never unloads one; long
    sessions must get a fresh worker instead of one that eventually hangs."""
    monkeypatch.setattr(measure, "_RUNNER_RECYCLE_AFTER", 2)
    measurer = Measurer(resolve_target("llvm"), MeasureOptions(repeat=2, min_repeat_ms=1, build_workers=1))
    try:
        first_pool = measurer.runner.pool
        results = []
        for n in (8, 16, 24):
            results += measurer.measure([_matmul(n)])
        assert [r.status for r in results] == ["ok", "ok", "ok"], [r.error for r in results]
        assert all(r.latency and r.latency > 0 for r in results)
        assert measurer.runner_generation == 1  # 2 timed, then a fresh worker for the third
        assert measurer.runner.pool is not first_pool
        # the time went into both phases, and is accounted per phase
        assert measurer.seconds["build"] > 0 and measurer.seconds["run"] > 0
    finally:
        measurer.close()


def test_a_builder_never_closed_leaves_no_folder_behind() -> None:
    """Its export folder goes with it when it is collected (or Python exits), and close()
    may be called again after that without error."""
    import gc
    import os

    builder = measure.WarmBuilder(max_workers=1)
    folder = builder.export_dir
    assert os.path.isdir(folder)
    del builder
    gc.collect()
    assert not os.path.exists(folder)
    closed = measure.WarmBuilder(max_workers=1)
    closed.close()
    closed.close()
    assert not os.path.exists(closed.export_dir)


def test_a_ctrl_c_while_a_pool_shuts_down_is_raised_after_it_is_down() -> None:
    """TVM's pool shutdown holds its lock while it kills its workers; a KeyboardInterrupt
    there left the lock taken and the pool not shut down, and its destructor waited on
    that lock for good at exit (a tune interrupted while it closed hung). Here the press
    lands inside, from the pool's own kill of its worker."""
    import os
    import signal

    from tvm.support import popen_pool

    from autotune import errors

    pool = popen_pool.PopenPoolExecutor(max_workers=1)
    assert pool.submit(os.getpid).result() != os.getpid()  # a worker to kill
    (worker,) = pool._worker_map.values()
    kill = worker.kill

    def kill_and_press() -> None:
        worker.kill = kill  # once
        os.kill(os.getpid(), signal.SIGINT)  # Python raises it at the next bytecode
        kill()

    worker.kill = kill_and_press
    presses = errors.interrupt_mark()
    errors.keep_interrupts_through_tvm()
    with pytest.raises(KeyboardInterrupt):
        measure._shut_down(pool)
    free = pool._lock.acquire(blocking=False)
    pool._lock.release()  # taken either way now: the pool's destructor must not wait on it
    assert free and pool._shutdown
    assert errors.interrupt_mark() == presses + 1  # counted as any press is


def test_a_worker_whose_process_goes_mid_shutdown_does_not_leave_the_pool_locked() -> None:
    """The pool's own thread killing a timed-out worker while the tune shut the pool
    down: TVM checks the worker's process, the other thread clears it, TVM's kill then
    reads None (``AttributeError``). The lock stayed taken and the stopped tune never
    exited. Here the process is cleared between TVM's check and its kill."""
    import os

    from tvm.support import popen_pool

    pool = popen_pool.PopenPoolExecutor(max_workers=1)
    assert pool.submit(os.getpid).result() != os.getpid()
    (worker,) = pool._worker_map.values()
    process = worker._proc
    kill = worker.kill

    def kill_raced() -> None:
        worker.kill = kill  # once: the other thread's kill, done first, cleared the process
        kill()
        raise AttributeError("'NoneType' object has no attribute 'kill'")  # TVM's, reading it after

    worker.kill = kill_raced
    measure._shut_down(pool)
    free = pool._lock.acquire(blocking=False)
    if free:
        pool._lock.release()
    assert free and pool._shutdown and process.poll() is not None


def test_the_build_pool_is_recycled_by_builds_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool of more workers builds proportionally more before it is restarted (at 200
    for the pool, the H100's 16 workers restarted every 12 builds each)."""
    from tvm.s_tir import meta_schedule as ms

    monkeypatch.setattr(measure, "_BUILDS_PER_WORKER", 2)
    target = resolve_target("llvm").tvm_target
    builder = measure.WarmBuilder(max_workers=2)
    pools = []
    try:
        for _ in range(5):
            (res,) = builder.build([ms.builder.BuilderInput(_matmul(8), target)])
            assert res.error_msg is None
            pools.append(builder._pool)
    finally:
        builder.close()
    # four builds (2 per worker x 2 workers) on the first pool, the fifth on a new one
    assert pools[0] is pools[1] is pools[2] is pools[3] and pools[4] is not pools[0]


def test_prewarm_starts_every_worker_before_any_build() -> None:
    """Each worker gets a task of its own as soon as the pool exists (TVM's imports, and
    for CUDA NVRTC's headers, off the first round's path); they do not count toward
    recycling, and builds then go to the same pool."""
    import os

    from tvm.s_tir import meta_schedule as ms

    target = resolve_target("llvm").tvm_target
    builder = measure.WarmBuilder(max_workers=2)
    try:
        pids = {future.result(timeout=300) for future in builder.prewarm(target)}
        assert len(pids) == 2 and os.getpid() not in pids
        assert builder._uses == 0
        pool = builder._pool
        (res,) = builder.build([ms.builder.BuilderInput(_matmul(8), target)])
        assert res.error_msg is None and builder._pool is pool
    finally:
        builder.close()


def test_the_builder_accounts_for_its_workers_time_and_each_batch_slowest_build() -> None:
    """What a batch's wall time is made of: seconds inside the workers (summed) and the
    slowest build of each batch (summed over batches), at least as long as the average."""
    from tvm.s_tir import meta_schedule as ms

    target = resolve_target("llvm").tvm_target
    builder = measure.WarmBuilder(max_workers=2)
    try:
        batches = [[_matmul(8), _matmul(16), _matmul(24)], [_matmul(32)]]
        for batch in batches:
            results = builder.build([ms.builder.BuilderInput(m, target) for m in batch])
            assert all(r.error_msg is None for r in results)
        busy, slowest = builder.seconds["busy"], builder.seconds["slowest"]
        assert 0 < slowest <= busy
        assert slowest >= busy / 4  # two batches' slowest of four builds: at least the mean
    finally:
        builder.close()


def test_a_killed_builders_folder_is_removed_by_the_next_and_no_other_is() -> None:
    """A tune killed outright leaves its build folder (on CUDA, 60 MB of NVRTC headers per
    worker); the next builder on the host removes the folders of processes that are gone,
    and only those."""
    import os
    import socket
    import subprocess
    import sys
    import tempfile

    host = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with tempfile.TemporaryDirectory() as parent:
        def folder(name: str) -> str:
            path = os.path.join(parent, name)
            os.mkdir(path)
            with open(os.path.join(path, "candidate.so"), "wb") as fh:
                fh.write(b"\0")
            return name

        orphan = folder(f"autotune-build-{host}-{gone.pid}-ab12_x")
        kept = [
            folder(f"autotune-build-{host}-{os.getpid()}-cd34_y"),  # this process
            folder(f"autotune-build-{host}-1-ef56_z"),  # a live process (init)
            folder(f"autotune-build-another-host-{gone.pid}-gh78_w"),  # another host's
            folder("autotune-build-k9_old"),  # no owner in the name
            folder(f"not-ours-{host}-{gone.pid}-ij90_v"),
        ]
        assert measure.remove_orphaned_exports(parent) == [orphan]
        assert sorted(os.listdir(parent)) == sorted(kept)


def test_a_cuda_workers_device_compiles_are_timed_and_a_source_compiled_before_is_reused(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """TVM's codegen hands CUDA C to a registered callback (NVRTC by default) only where
    a driver is loaded; the worker's wrapper must still call through and add up its
    seconds, here with nvcc as the callback's compiler. A source compiled before (a twin
    program's, by any worker of the builder) comes from the builder's folder, the same
    bytes, uncompiled; another source, or the same for another arch, is compiled."""
    import tvm_ffi

    from tests.conftest import has_nvcc

    if not has_nvcc():
        pytest.skip("nvcc not found")
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    build_worker.wrap_device_compiles.cache_clear()
    try:
        assert build_worker.wrap_device_compiles(str(tmp_path))
        callback = tvm_ffi.get_global_func("tvm_callback_cuda_compile")

        def compile_(code: str, arch: str) -> tuple[bytes, int]:
            reused = build_worker.device_compiles_reused()
            with resolve_target(f"cuda:{arch}").tvm_target:
                binary = bytes(callback(code))
            return binary, build_worker.device_compiles_reused() - reused

        before = build_worker.device_compile_seconds()
        first, reused = compile_('extern "C" __global__ void k() {}\n', "sm_90")
        assert len(first) > 0 and reused == 0
        assert build_worker.device_compile_seconds() > before
        assert compile_('extern "C" __global__ void k() {}\n', "sm_90") == (first, 1)
        assert len(list((tmp_path / build_worker.DEVICE_CACHE_DIR).iterdir())) == 1
        other, reused = compile_('extern "C" __global__ void k2() {}\n', "sm_90")
        assert reused == 0 and other != first
        assert compile_('extern "C" __global__ void k() {}\n', "sm_80")[1] == 0
    finally:
        build_worker.wrap_device_compiles.cache_clear()


def test_a_winners_check_feeds_both_values_of_a_flag():
    """All-False flags took one branch of a Where, and a wrong schedule of the other
    passed the winner's check."""
    from tvm import te

    from autotune.verify import random_args

    flag = te.placeholder((64,), "bool", name="flag")
    x = te.placeholder((64,), "float32", name="x")
    y = te.compute((64,), lambda i: te.if_then_else(flag[i], x[i], 0.0), name="y")
    flags = random_args(te.create_prim_func([flag, x, y]))[0]
    assert flags.dtype == bool and flags.any() and not flags.all()


def test_a_winners_check_feeds_integer_data_values_and_indices_zeros():
    """An int32 matmul's winner was checked on all-zero inputs, where any kernel that
    writes zeros matched the reference; integer data now gets small values of both signs,
    and a gather's positions (read in another buffer's indices) stay zeros, in range."""
    import numpy as np
    from tvm import tirx

    from autotune.defaults import as_module
    from autotune.verify import check, index_params, random_args

    a = te.placeholder((8, 16), "int32", name="a")
    b = te.placeholder((16, 4), "int32", name="b")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((8, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    matmul = te.create_prim_func([a, b, c])
    args = random_args(matmul)
    assert index_params(matmul) == set()
    for arr in args[:2]:
        assert arr.dtype == np.int32 and arr.min() < 0 < arr.max() and np.abs(arr).max() <= 8
    # a wrong kernel (it writes zeros) of the same signature: the zeros passed the check
    zeros = te.compute((8, 4), lambda i, j: tirx.const(0, "int32") + a[0, 0] * 0, name="c")
    wrong = as_module(te.create_prim_func([a, b, zeros]))
    target = resolve_target("llvm")
    assert check(as_module(matmul), matmul, target) is None
    assert "output 2 differs from the reference" in (check(wrong, matmul, target) or "")

    table = te.placeholder((50, 16), "float32", name="table")
    ids = te.placeholder((4, 6), "int64", name="ids")
    rows = te.compute((4, 6, 16), lambda i, j, d: table[ids[i, j], d], name="rows")
    gather = te.create_prim_func([table, ids, rows])
    assert index_params(gather) == {"ids"}
    assert not random_args(gather)[1].any()
