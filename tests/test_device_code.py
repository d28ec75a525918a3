"""CUDA exports built with no GPU carry device binaries (a fatbin compiled by nvcc here),
not CUDA C for the loading machine to compile: the import blob is parsed, rewritten and
linked in by ``autotune.device_code``, and anything it does not recognise is refused."""

from __future__ import annotations

import os
import struct

import pytest

from autotune.device_code import (
    BlobLayoutError,
    CudaPayload,
    ImportsBlob,
    compile_fatbin,
    embed_fatbins,
    fatbin_entries,
    pack_imports,
)
from autotune.errors import AutotuneError
from autotune.target import resolve_target
from tests.conftest import has_nvcc

ARCH = "sm_80"


@pytest.fixture(scope="module")
def cuda_lib(cuda_mod):
    """A two-kernel CUDA library, built here as on any machine without a GPU."""
    import tvm

    target = resolve_target(f"cuda:{ARCH}")
    return tvm.compile(cuda_mod, target=target.tvm_target), target


def cuda_payloads(blob: ImportsBlob) -> list[CudaPayload]:
    return [CudaPayload.parse(p) for kind, p in blob.modules if kind == "cuda"]


def test_import_blob_and_cuda_module_round_trip_byte_for_byte(cuda_lib):
    lib, _ = cuda_lib
    raw = pack_imports(lib.mod)
    blob = ImportsBlob.parse(raw)
    assert blob.to_bytes() == raw
    assert [kind for kind, _ in blob.modules] == ["_lib", "cuda"]
    (module,) = cuda_payloads(blob)
    assert module.fmt == "cuda"  # no CUDA runtime here: TVM kept the source
    assert module.code.decode() == lib.mod.imports[0].inspect_source()
    assert module.to_bytes() == dict(blob.modules)["cuda"]


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_100f"])
def test_a_fatbin_names_the_arch_variant_it_was_compiled_for(cuda_lib, arch):
    """A fatbin's arch number reads 90 for sm_90a too: the export said it carried
    sm_90 SASS where it had been compiled for sm_90a."""
    lib, target = cuda_lib
    source = lib.mod.imports[0].inspect_source()
    number = arch.removeprefix("sm_")
    assert fatbin_entries(compile_fatbin(source, arch, target.tvm_target)) == [f"compute_{number} (PTX)", f"{arch} (SASS)"]


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
def test_fatbin_replaces_the_cuda_source_and_keeps_the_kernel_table(cuda_lib, tmp_path):
    lib, target = cuda_lib
    before = cuda_payloads(ImportsBlob.parse(pack_imports(lib.mod)))[0]
    binaries = embed_fatbins(lib.mod, ARCH, target.tvm_target)
    assert binaries.info["formats_before"] == ["cuda"] and binaries.info["modules"] == 1
    assert binaries.info["entries"] == ["compute_80 (PTX)", f"{ARCH} (SASS)"]
    (after,) = cuda_payloads(ImportsBlob.parse(binaries.blob))
    assert after.fmt == "fatbin" and after.fmap == before.fmap
    assert struct.unpack_from("<I", after.code)[0] == 0xBA55ED50
    assert fatbin_entries(after.code) == binaries.info["entries"]

    out = tmp_path / "k.so"
    lib.export_library(str(out), fpack_imports=binaries.packer())
    data = out.read_bytes()
    assert binaries.blob in data  # linked in as built
    assert b"__global__" not in data and b"__global__" in before.code


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
def test_tvms_loader_hands_the_fatbin_module_to_the_cuda_loader(cuda_lib, tmp_path):
    """TVM's own reader of the exported ``.so`` (dlopen, then the import blob) must give
    the CUDA loader our payload byte for byte. Here no CUDA runtime registers that loader,
    so the test registers one that records what it gets; where a GPU runtime has one, the
    GPU tests load and run exports instead."""
    import tvm
    import tvm_ffi
    from tvm import te

    name = "ffi.Module.load_from_bytes.cuda"
    if tvm_ffi.get_global_func(name, allow_missing=True) is not None:
        pytest.skip("a real CUDA loader is registered: nothing to stand in for")
    lib, target = cuda_lib
    binaries = embed_fatbins(lib.mod, ARCH, target.tvm_target)
    out = tmp_path / "k.so"
    lib.export_library(str(out), fpack_imports=binaries.packer())
    a = te.placeholder((4,), name="A")
    stand_in = tvm.compile(te.create_prim_func([a, te.compute((4,), lambda i: a[i], name="C")]), target="llvm").mod
    received: list[bytes] = []
    tvm_ffi.register_global_func(name, lambda data: received.append(bytes(data)) or stand_in)
    try:
        tvm.runtime.load_module(str(out))
    finally:
        tvm_ffi.remove_global_func(name)
    assert received == [dict(ImportsBlob.parse(binaries.blob).modules)["cuda"]]
    assert CudaPayload.parse(received[0]).fmt == "fatbin"


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
def test_rpc_candidates_and_server_loads_carry_a_fatbin(cuda_mod, cuda_lib, tmp_path):
    """What ``--rpc`` uploads: each candidate from the warm builder's workers, and each
    module that verify or the model timing loads on the server (``RemoteDevice.load``
    exports through the same ``export_library``). Neither may leave CUDA C for the server."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from autotune.device_code import export_library
    from autotune.measure import WarmBuilder

    lib, target = cuda_lib
    builder = WarmBuilder(max_workers=1)
    try:
        (result,) = builder.build([BuilderInput(cuda_mod, target.tvm_target)])
        assert result.error_msg is None
        candidate = open(result.artifact_path, "rb").read()
    finally:
        builder.close()
    out = tmp_path / "verify.so"
    info = export_library(lib, str(out), target.tvm_target)
    assert info["format"] == "fatbin" and info["modules"] == 1
    for data in (candidate, out.read_bytes()):
        assert struct.pack("<I", 0xBA55ED50) in data
        assert b"__global__" not in data
    llvm = resolve_target("llvm").tvm_target  # other targets export as TVM does
    a = te.placeholder((16,), name="A")
    cpu = tvm.compile(te.create_prim_func([a, te.compute((16,), lambda i: a[i] + 1.0, name="C")]), target=llvm)
    assert export_library(cpu, str(tmp_path / "cpu.so"), llvm) is None
    assert (tmp_path / "cpu.so").stat().st_size > 0


def test_a_build_without_cuda_source_is_left_to_tvm(cuda_lib, monkeypatch):
    lib, target = cuda_lib
    import autotune.device_code

    monkeypatch.setenv("PATH", "/nonexistent")  # no nvcc: the CUDA C stays, and we say so
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(autotune.device_code, "CUDA_HOMES", ())  # nor where CUDA installs it
    binaries = embed_fatbins(lib.mod, ARCH, target.tvm_target)
    assert binaries.info["format"] == "cuda" and "nvcc not found" in binaries.info["note"]
    assert binaries.packer() is None
    assert binaries.blob == pack_imports(lib.mod)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
def test_nvcc_off_path_is_found_where_cuda_installs_it(cuda_lib, monkeypatch, tmp_path):
    """An nvcc off PATH (in $CUDA_HOME/bin) left exports carrying CUDA C; it is found
    there, and its folder goes on PATH for TVM, which calls it by name."""
    import os
    import shutil

    import autotune.device_code
    from autotune.device_code import find_nvcc

    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    os.symlink(shutil.which("nvcc"), home / "bin" / "nvcc")
    gcc = os.path.dirname(shutil.which("gcc") or shutil.which("cc") or "/usr/bin/cc")  # nvcc's host compiler
    monkeypatch.setenv("PATH", gcc)
    monkeypatch.setattr(autotune.device_code, "CUDA_HOMES", ())
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert find_nvcc() == str(home / "bin" / "nvcc")
    lib, target = cuda_lib
    assert embed_fatbins(lib.mod, ARCH, target.tvm_target).info["format"] != "cuda"  # compiled, not carried as C


@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
def test_nvcc_failure_is_one_clear_error(cuda_lib):
    _, target = cuda_lib
    with pytest.raises(AutotuneError, match=f"nvcc could not compile the generated CUDA code for {ARCH}: .*error"):
        compile_fatbin('extern "C" __global__ void k() { undefined_thing(); }', ARCH, target.tvm_target)


def test_unknown_layouts_are_refused(cuda_lib):
    lib, _ = cuda_lib
    raw = pack_imports(lib.mod)
    with pytest.raises(BlobLayoutError, match="length header"):
        ImportsBlob.parse(raw[:-1])
    with pytest.raises(BlobLayoutError, match="left after the last module"):
        ImportsBlob.parse(struct.pack("<Q", len(raw) - 8 + 3) + raw[8:] + b"xyz")
    payload = dict(ImportsBlob.parse(raw).modules)["cuda"]
    with pytest.raises(BlobLayoutError, match="after its code"):
        CudaPayload.parse(payload + b"\0")
    with pytest.raises(BlobLayoutError, match="runs past the end"):
        CudaPayload.parse(payload[:-5])
    with pytest.raises(BlobLayoutError, match="not a fatbin"):
        fatbin_entries(os.urandom(64))
