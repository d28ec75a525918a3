"""The build workers' NVRTC header cache: the headers it pre-includes are TVM's, in the
order TVM includes them (the order that keeps cubins byte-identical), it is switched on
only where NVRTC can use it, a user's own NVRTC options survive it, and a CUDA build
worker turns it on. Where NVRTC is installed, cubins with and without it are compared."""

from __future__ import annotations

import hashlib
import inspect
import os
import re

import pytest

from autotune import nvrtc_headers
from autotune.nvrtc_headers import PRE_INCLUDES, SWITCH_VAR, TVM_OPTIONS_VAR, enable_header_cache, header_cache_options
from autotune.target import resolve_target
from tests.conftest import has_nvcc


def _includes(text: str) -> list[str]:
    return re.findall(r"#include <([^>]+)>", text)


def _rtc_branch(source: str) -> str:
    """The ``#ifdef __CUDACC_RTC__`` part of TVM's generated CUDA C: what NVRTC sees."""
    start = source.index("#ifdef __CUDACC_RTC__")
    return source[start : source.index("#else", start)]


@pytest.fixture(scope="module")
def generated_source(cuda_mod):
    from autotune.device_code import generated_cuda_source

    return generated_cuda_source(cuda_mod, resolve_target("cuda:sm_90").tvm_target)


def test_pre_includes_are_the_libcu_headers_tvm_includes_in_its_order(generated_source):
    from tvm.support import nvcc

    body = inspect.getsource(nvcc._compile_cuda_nvrtc)
    preamble = re.search(r'nvrtc_preamble = """(.*?)"""', body, re.S)
    assert preamble, "TVM's NVRTC preamble moved: re-check PRE_INCLUDES against it"
    order: list[str] = []
    for header in _includes(preamble.group(1)) + _includes(_rtc_branch(generated_source)):
        if header.startswith("cuda/std/") and header not in order:
            order.append(header)
    assert tuple(order) == PRE_INCLUDES


def test_on_where_nvrtc_has_precompiled_headers_and_the_users_options_are_kept():
    env = {TVM_OPTIONS_VAR: "--ftz=false"}
    assert enable_header_cache(env, version=(13, 0)) == "on"
    options = env[TVM_OPTIONS_VAR].split()
    assert options == header_cache_options() + ["--ftz=false"]  # the user's last: they can override
    assert "--pch-dir" not in " ".join(options)  # none asked for: NVRTC's own
    assert enable_header_cache(env, version=(13, 0)) == "already on"
    assert env[TVM_OPTIONS_VAR].split() == options


@pytest.mark.parametrize(
    ("env", "version", "why"),
    [
        ({}, (12, 6), "predates"),
        ({"TVM_CUDA_COMPILE_MODE": "nvcc"}, (13, 0), "nvcc"),
        ({SWITCH_VAR: "0"}, (13, 0), f"{SWITCH_VAR}=0"),
    ],
)
def test_off_leaves_tvms_options_alone(env, version, why):
    before = dict(env)
    status = enable_header_cache(env, version=version)
    assert status.startswith("off:") and why in status
    assert env == before


def test_without_nvrtc_nothing_is_set():
    if nvrtc_headers.nvrtc_version() is not None:
        pytest.skip("NVRTC is installed here")
    env: dict[str, str] = {}
    assert enable_header_cache(env) == "off: no NVRTC here"
    assert env == {}


def _pch_dir(options: str) -> str:
    (where,) = [o.split("=", 1)[1] for o in options.split() if o.startswith("--pch-dir=")]
    return where


@pytest.mark.parametrize("users", [None, "--ftz=false"])
def test_in_process_compiles_get_it_for_the_block_only(users):
    env = {} if users is None else {TVM_OPTIONS_VAR: users}
    with nvrtc_headers.header_cache_during(env, version=(13, 0)) as state:
        assert state == "on"
        options = env[TVM_OPTIONS_VAR]
        ours = header_cache_options(_pch_dir(options))
        assert options.split()[: len(ours)] == ours
        assert options.endswith(users or "--pre-include=cuda/std/type_traits")  # the user's still last
        assert os.path.isdir(_pch_dir(options))  # this process's own folder, not NVRTC's shared one
    # as it was, so build workers started later set up their own folders
    assert env == ({} if users is None else {TVM_OPTIONS_VAR: users})


def test_in_process_block_puts_the_options_back_when_the_compile_fails():
    env = {TVM_OPTIONS_VAR: "--ftz=false"}
    with pytest.raises(RuntimeError), nvrtc_headers.header_cache_during(env, version=(13, 0)):
        assert "--pch" in env[TVM_OPTIONS_VAR]
        raise RuntimeError("the compile failed")
    assert env == {TVM_OPTIONS_VAR: "--ftz=false"}


@pytest.mark.parametrize(
    ("env", "version", "state"),
    [
        ({SWITCH_VAR: "0"}, (13, 0), f"off: {SWITCH_VAR}=0"),
        ({}, (12, 6), "off: NVRTC 12.6 predates precompiled headers (12.8)"),
        ({TVM_OPTIONS_VAR: "--pch --pch-dir=/mine"}, (13, 0), "already on"),  # the user's cache, kept
    ],
)
def test_in_process_block_leaves_tvms_options_alone_where_it_is_off_or_the_users(env, version, state):
    before = dict(env)
    with nvrtc_headers.header_cache_during(env, version=version) as got:
        assert got == state
        assert env == before
    assert env == before


def test_the_in_process_folder_is_removed_when_the_process_exits():
    import subprocess
    import sys

    code = (
        "import os; from autotune import nvrtc_headers as h\n"
        "env = {}\n"
        "with h.header_cache_during(env, version=(13, 0)):\n"
        f"    d = [o.split('=', 1)[1] for o in env['{TVM_OPTIONS_VAR}'].split() if o.startswith('--pch-dir=')][0]\n"
        "    open(os.path.join(d, 'header.pch'), 'w').write('x')  # as NVRTC's file would be\n"
        "print(d)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    where = out.stdout.strip()
    assert where and not os.path.exists(where)


@pytest.mark.skipif(not has_nvcc(), reason="the CUDA export needs nvcc")
def test_a_cuda_build_worker_turns_it_on_and_an_llvm_one_does_not(cuda_mod, tmp_path, monkeypatch):
    from autotune import build_worker

    monkeypatch.delenv(TVM_OPTIONS_VAR, raising=False)
    monkeypatch.delenv(SWITCH_VAR, raising=False)
    monkeypatch.delenv("TVM_CUDA_COMPILE_MODE", raising=False)
    monkeypatch.setattr(nvrtc_headers, "nvrtc_version", lambda: (13, 0))  # as on the lent H100
    build_worker.header_cache.cache_clear()
    try:
        build_worker.build(_cpu_mod(), resolve_target("llvm").tvm_target, str(tmp_path))
        assert TVM_OPTIONS_VAR not in os.environ
        built = build_worker.build(cuda_mod, resolve_target("cuda:sm_90").tvm_target, str(tmp_path))
        assert os.path.getsize(built.path) > 0 and built.seconds.compile > 0 and built.seconds.link > 0
        pch_dir = tmp_path / f"nvrtc-pch-{os.getpid()}"  # the worker's own, in the builder's folder
        assert pch_dir.is_dir()
        assert os.environ[TVM_OPTIONS_VAR].split() == header_cache_options(str(pch_dir))
    finally:
        build_worker.header_cache.cache_clear()


def _cpu_mod():
    import tvm
    from tvm import te

    a = te.placeholder((64,), name="A")
    return tvm.IRModule({"main": te.create_prim_func([a, te.compute((64,), lambda i: a[i] + 1.0, name="B")])})


def test_the_builder_removes_the_header_files_its_killed_workers_leave(tmp_path):
    from autotune.measure import WarmBuilder

    builder = WarmBuilder(max_workers=1)
    left = os.path.join(builder.export_dir, "nvrtc-pch-12345")
    os.makedirs(left)
    open(os.path.join(left, "tvm_kernels_0.pch"), "wb").close()
    kept = os.path.join(builder.export_dir, "candidate.so")
    open(kept, "wb").close()
    builder._drop_header_files()  # what a pool recycle does after killing its workers
    assert not os.path.exists(left) and os.path.exists(kept)
    builder.close()
    assert not os.path.exists(builder.export_dir)


@pytest.mark.skipif(nvrtc_headers.nvrtc_version() is None, reason="no NVRTC here (cuda-bindings)")
def test_a_prewarmed_cuda_worker_has_written_its_header_file_before_any_build(monkeypatch):
    """The worker's first task compiles an empty kernel as TVM's callback would, so
    NVRTC's header file is in the worker's own folder before its first candidate."""
    from autotune.measure import WarmBuilder

    monkeypatch.delenv(TVM_OPTIONS_VAR, raising=False)
    builder = WarmBuilder(max_workers=1)
    try:
        (pid,) = [f.result(timeout=300) for f in builder.prewarm(resolve_target("cuda:sm_90").tvm_target)]
        folder = os.path.join(builder.export_dir, f"nvrtc-pch-{pid}")
        assert os.path.isdir(folder) and os.listdir(folder)
    finally:
        builder.close()


def test_a_prewarmed_cuda_worker_without_nvrtc_writes_nothing():
    if nvrtc_headers.nvrtc_version() is not None:
        pytest.skip("NVRTC is installed here")
    from autotune.measure import WarmBuilder

    builder = WarmBuilder(max_workers=1)
    try:
        (pid,) = [f.result(timeout=300) for f in builder.prewarm(resolve_target("cuda:sm_90").tvm_target)]
        assert pid != os.getpid() and os.listdir(builder.export_dir) == []
    finally:
        builder.close()


def _cubin(source: str, options: str) -> str:
    from tvm.support.nvcc import compile_cuda

    os.environ[TVM_OPTIONS_VAR] = options
    return hashlib.sha256(bytes(compile_cuda(source, target_format="cubin", arch="sm_90", compiler="nvrtc"))).hexdigest()


@pytest.mark.skipif(nvrtc_headers.nvrtc_version() is None, reason="no NVRTC here (cuda-bindings)")
def test_cubins_are_byte_identical_with_the_header_cache(generated_source, monkeypatch):
    monkeypatch.setenv(TVM_OPTIONS_VAR, "")
    try:
        plain = _cubin(generated_source, "")
    except RuntimeError as err:  # NVRTC loads, but TVM finds no CUDA headers for it
        if "Cannot find CUDA headers" not in str(err):
            raise
        pytest.skip(f"NVRTC without CUDA headers here (set CUDA_PATH): {str(err).splitlines()[0][:120]}")
    cached = " ".join(header_cache_options())
    assert _cubin(generated_source, cached) == plain  # writes the precompiled header
    assert _cubin(generated_source, cached) == plain  # uses it
