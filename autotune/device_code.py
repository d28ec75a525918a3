"""Device binaries inside CUDA exports built on a machine with no GPU.

TVM turns a CUDA kernel's C source into cubin only when its CUDA runtime library loads,
which needs a driver (``libcuda``). Elsewhere codegen keeps a fallback module that
carries the CUDA C, and whoever loads the export then needs TVM's Python package with
NVRTC or nvcc to compile it: on the lent H100 such an export took 3.4 s to load and run,
and failed to load with the compile callback refused, while one built there (cubin
inside) loaded with no compiler present.

So, when the export would carry CUDA C, this module compiles it here with nvcc, through
TVM's own ``compile_cuda`` (TVM's flags for its nvcc mode), to a fatbin holding SASS for
the target's arch and PTX for newer GPUs, and swaps it into the blob of imported modules
that ``export_library`` links into the ``.so``. TVM's CUDA loader hands the bytes to
``cuModuleLoadData`` as they are and only compiles a module whose format is ``cuda``,
so the result loads with the driver alone.

The blob layout (tvm-ffi's ``PackImportsToBytes``, and the CUDA module's ``SaveToBytes``)
is parsed field by field and checked to end where it must; a layout this code does not
know is an error, never a silently wrong export.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from autotune.errors import AutotuneError

#: The format tag TVM gives a CUDA module that still holds CUDA C.
SOURCE_FORMAT = "cuda"
#: What the export carries instead.
BINARY_FORMAT = "fatbin"
_LIB_MARKER = "_lib"  # an entry for the host library itself: no payload


class BlobLayoutError(ValueError):
    """The bytes are not laid out as the TVM version we pin writes them."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def u64(self) -> int:
        if self.pos + 8 > len(self.data):
            raise BlobLayoutError(f"truncated at byte {self.pos}")
        (value,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8
        return value

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise BlobLayoutError(f"a field of {n} bytes at byte {self.pos} runs past the end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def bytes_field(self) -> bytes:
        return self.raw(self.u64())

    def text(self) -> str:
        try:
            return self.bytes_field().decode("utf-8")
        except UnicodeDecodeError as err:
            raise BlobLayoutError(f"a string field is not UTF-8 ({err.reason})") from None

    def done(self) -> bool:
        return self.pos == len(self.data)


def _u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def _field(data: bytes) -> bytes:
    return _u64(len(data)) + data


@dataclass
class ImportsBlob:
    """The imported modules of a host library, as ``export_library`` links them in.

    ``modules`` lists ``(kind, payload)`` in blob order; the host library's own entry
    has no payload. The import tree (CSR rows and child indices) is kept as it is.
    """

    row_ptr: list[int]
    child_indices: list[int]
    modules: list[tuple[str, bytes | None]]

    @classmethod
    def parse(cls, blob: bytes) -> "ImportsBlob":
        reader = _Reader(blob)
        if reader.u64() != len(blob) - 8:
            raise BlobLayoutError("the length header does not match the blob")
        row_ptr = [reader.u64() for _ in range(reader.u64())]
        child_indices = [reader.u64() for _ in range(reader.u64())]
        if not row_ptr or row_ptr[0] != 0 or row_ptr[-1] != len(child_indices):
            raise BlobLayoutError("the import tree's row pointers do not match its children")
        modules: list[tuple[str, bytes | None]] = []
        for _ in range(len(row_ptr) - 1):
            kind = reader.text()
            modules.append((kind, None if kind == _LIB_MARKER else reader.bytes_field()))
        if not reader.done():
            raise BlobLayoutError(f"{len(blob) - reader.pos} bytes left after the last module")
        return cls(row_ptr, child_indices, modules)

    def to_bytes(self) -> bytes:
        body = _u64(len(self.row_ptr)) + b"".join(map(_u64, self.row_ptr))
        body += _u64(len(self.child_indices)) + b"".join(map(_u64, self.child_indices))
        for kind, payload in self.modules:
            body += _field(kind.encode("utf-8"))
            if payload is not None:
                body += _field(payload)
        return _u64(len(body)) + body


@dataclass
class CudaPayload:
    """A serialized CUDA module: format tag, kernel table (kept as bytes), code."""

    fmt: str
    fmap: bytes
    code: bytes

    @classmethod
    def parse(cls, payload: bytes) -> "CudaPayload":
        reader = _Reader(payload)
        fmt = reader.text()
        start = reader.pos
        for _ in range(reader.u64()):  # Map<String, FunctionInfo>
            reader.text()  # key
            reader.text()  # FunctionInfo.name
            reader.raw(4 * reader.u64())  # arg_types: DLDataType, 4 bytes each
            for _ in range(reader.u64()):  # launch_param_tags
                reader.text()
            reader.raw(4 * reader.u64())  # arg_extra_tags: int32 each
        fmap = payload[start : reader.pos]
        code = reader.bytes_field()
        if not reader.done():
            raise BlobLayoutError("a CUDA module has bytes after its code")
        return cls(fmt, fmap, code)

    def to_bytes(self) -> bytes:
        return _field(self.fmt.encode("utf-8")) + self.fmap + _field(self.code)


def pack_imports(host_module) -> bytes:
    """The blob ``export_library`` would link into the ``.so`` for ``host_module``."""
    import tvm_ffi

    tensor = tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(host_module)
    return tensor.numpy().tobytes()


#: Where a CUDA toolkit lives when ``$CUDA_HOME`` and ``$CUDA_PATH`` do not say.
CUDA_HOMES = ("/usr/local/cuda",)


def find_nvcc() -> str | None:
    """``nvcc``'s path: on PATH, else where CUDA installs it (``$CUDA_HOME``,
    ``$CUDA_PATH``, ``/usr/local/cuda``); an nvcc off PATH left exports carrying CUDA C."""
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *CUDA_HOMES):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return None


def _nvcc_on_path() -> None:
    """TVM calls ``nvcc`` by name: one found off PATH has its folder put on it."""
    path = find_nvcc()
    if path is not None and shutil.which("nvcc") is None:
        os.environ["PATH"] = os.path.dirname(path) + os.pathsep + os.environ.get("PATH", "")


@lru_cache(maxsize=1)
def nvcc_archs() -> tuple[int, ...]:
    """The compute capabilities this machine's nvcc compiles for (``nvcc
    --list-gpu-arch``; nvcc 13 dropped everything before sm_75), () where that is not
    known."""
    path = find_nvcc()
    if path is None:
        return ()
    try:
        text = subprocess.run([path, "--list-gpu-arch"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", text)}))


def check_arch_compiles(arch: str) -> None:
    """Refuse, before any work, a CUDA arch this machine's nvcc cannot compile for: the
    build failed at its end with TVM's empty "Compilation error:" (sm_70, V100's, is not
    in nvcc 13)."""
    known = nvcc_archs()
    number = re.match(r"sm_(\d+)", arch)
    if known and number and int(number.group(1)) not in known:
        raise AutotuneError(
            f"this machine's nvcc compiles for {', '.join(f'sm_{k}' for k in known)} (`nvcc --list-gpu-arch`), not {arch}: "
            "give an arch it has, or build where a CUDA toolkit that has it is installed"
        )


def compile_fatbin(source: str, arch: str, target) -> bytes:
    """CUDA C -> fatbin (SASS for ``arch``, PTX for later GPUs), with TVM's nvcc flags."""
    from tvm.support import nvcc

    _nvcc_on_path()
    number = arch.removeprefix("sm_")
    gencode = ["-gencode", f"arch=compute_{number},code=sm_{number}", "-gencode", f"arch=compute_{number},code=compute_{number}"]
    try:
        with target:
            return bytes(nvcc.compile_cuda(source, target_format=BINARY_FORMAT, arch=gencode, compiler="nvcc"))
    except Exception as err:  # nvcc's own report: keep its first error line
        lines = [ln for ln in str(err).splitlines() if ln.strip()]
        # nvcc's own "file(line): error: ..." or "nvcc fatal : ..." first; TVM's
        # "Compilation error:" heading says nothing (an arch nvcc lacks read so, and no more)
        first = next((ln for ln in lines if ": error" in ln.lower() or "fatal" in ln.lower()),
                     next((ln for ln in lines if "error" in ln.lower() and not ln.strip().lower().startswith("compilation error")),
                          lines[-1] if lines else repr(err)))
        raise AutotuneError(f"nvcc could not compile the generated CUDA code for {arch}: {first.strip()[:300]}") from None


@dataclass
class DeviceBinaries:
    """An import blob whose CUDA modules carry fatbins, and what was done to it."""

    blob: bytes
    info: dict[str, Any] = field(default_factory=dict)

    def packer(self) -> Callable[..., str] | None:
        """An ``fpack_imports`` for ``export_library`` that links in this blob, or None
        when nothing was compiled (TVM's own packing then writes the same bytes)."""
        if not self.info.get("modules"):
            return None

        def pack(host_module, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
            import tvm_ffi

            llvm_target = _host_llvm_target(host_module)
            obj = tvm_ffi.get_global_func("codegen.codegen_blob")(self.blob, is_system_lib, llvm_target, prefix)
            path = os.path.join(workspace_dir, f"{prefix}devc.o")
            obj.write_to_file(path)
            return path

        return pack


def _host_llvm_target(module) -> str:
    """The target string of the LLVM host library in ``module``'s import tree, which
    the blob's object file must be built for (as ``export_library`` does)."""
    stack = [module]
    while stack:
        current = stack.pop()
        if current.kind == "llvm":
            return current.get_function("_get_target_string")()
        stack.extend(current.imports)
    raise AutotuneError("cannot embed device binaries: the module has no LLVM host library")


#: Fatbin entry flags that name an arch's variant: sm_90a's arch-specific features, sm_100f's family.
_ARCH_SUFFIX_FLAGS = ((0x100000, "a"), (0x200000, "f"))


def fatbin_entries(data: bytes) -> list[str]:
    """What a fatbin holds, e.g. ``["compute_90 (PTX)", "sm_90 (SASS)"]``.

    Reads the container's entry headers (magic ``0xBA55ED50``; per entry: kind at 0,
    header size at 4, payload size at 8, arch at 28, flags at 40), the layout
    ``cuobjdump`` lists. The arch number alone is 90 for sm_90a too: the flags carry the
    suffix (0x100000 ``a``, 0x200000 ``f``; nvcc 13.0's fatbins for sm_90a, sm_100a and
    sm_100f, PTX and SASS alike, against the ``-arch`` each entry records).
    """
    if len(data) < 16:
        raise BlobLayoutError("not a fatbin")
    magic, _version, header_size, total = struct.unpack_from("<IHHQ", data, 0)
    if magic != 0xBA55ED50 or header_size + total > len(data):
        raise BlobLayoutError("not a fatbin")
    entries, pos = [], header_size
    while pos < header_size + total:
        if pos + 32 > len(data):
            raise BlobLayoutError("a fatbin entry header runs past the end")
        kind, _v, entry_header, size = struct.unpack_from("<HHIQ", data, pos)
        (arch,) = struct.unpack_from("<I", data, pos + 28)
        flags = struct.unpack_from("<Q", data, pos + 40)[0] if entry_header >= 48 else 0
        arch_name = f"{arch}{''.join(s for bit, s in _ARCH_SUFFIX_FLAGS if flags & bit)}"
        names = {1: f"compute_{arch_name} (PTX)", 2: f"sm_{arch_name} (SASS)"}
        if kind not in names or entry_header == 0:
            raise BlobLayoutError(f"unknown fatbin entry kind {kind}")
        entries.append(names[kind])
        pos += entry_header + size
    return sorted(entries)


def fatbin_packer(lib, target) -> tuple[Callable[..., str] | None, dict[str, Any] | None]:
    """``(fpack_imports, summary)`` for exporting ``lib`` (a runtime module, or a Relax
    executable whose ``mod`` holds the imports) built for the TVM ``target``.

    For CUDA, kernels still held as CUDA C are compiled to a fatbin here
    (:func:`embed_fatbins`); the packer is None when nothing was compiled (no nvcc, or
    cubin already inside), and the summary says what the export carries. For other
    targets both are None: TVM exports as it does.
    """
    if target.kind.name != "cuda":
        return None, None
    binaries = embed_fatbins(getattr(lib, "mod", lib), str(target.arch), target)
    return binaries.packer(), binaries.info


def export_library(lib, path: str, target, *, seconds: dict[str, float] | None = None) -> dict[str, Any] | None:
    """``lib.export_library(path)`` with :func:`fatbin_packer`'s packing; its summary.

    For every export that leaves this process for a GPU besides ``compile``'s (which
    reports the summary before it writes): with ``--rpc``, each candidate the runner
    uploads and each module verify or the model timing loads on the server, which then
    needs the driver only, not TVM's NVRTC. ``seconds``, if given, gets the seconds of
    its two steps, ``pack`` and ``link`` (what a build is made of, :mod:`autotune.build_worker`).
    """
    t0 = time.perf_counter()
    packer, info = fatbin_packer(lib, target)
    t1 = time.perf_counter()
    lib.export_library(path, **({"fpack_imports": packer} if packer else {}))
    if seconds is not None:
        seconds.update(pack=t1 - t0, link=time.perf_counter() - t1)
    return info


def embed_fatbins(host_module, arch: str, target) -> DeviceBinaries:
    """Compile every CUDA module still holding CUDA C to a fatbin, in a copy of the blob.

    Modules that already carry a binary (built where TVM's CUDA runtime loads) are left
    as they are; with no nvcc, so are those holding CUDA C, and ``info`` says so.
    """

    try:
        blob = ImportsBlob.parse(pack_imports(host_module))
    except BlobLayoutError as err:
        raise AutotuneError(f"cannot embed device binaries: unexpected module layout ({err})") from None
    info: dict[str, Any] = {"arch": arch, "modules": 0, "kernels_bytes": 0, "source_bytes": 0}
    formats: list[str] = []
    for index, (kind, payload) in enumerate(blob.modules):
        if kind != "cuda" or payload is None:
            continue
        try:
            module = CudaPayload.parse(payload)
        except BlobLayoutError as err:
            raise AutotuneError(f"cannot embed device binaries: unexpected CUDA module layout ({err})") from None
        formats.append(module.fmt)
        if module.fmt != SOURCE_FORMAT:
            continue
        if find_nvcc() is None:  # keep the CUDA C: loadable where TVM has NVRTC
            info["note"] = "nvcc not found: the export carries CUDA C, compiled where it is loaded (TVM with NVRTC there)"
            continue
        source = module.code.decode("utf-8")
        binary = compile_fatbin(source, arch, target)
        blob.modules[index] = (kind, CudaPayload(BINARY_FORMAT, module.fmap, binary).to_bytes())
        info["modules"] += 1
        try:  # informational: the driver, not this listing, decides what loads
            info["entries"] = sorted(set(info.get("entries", [])) | set(fatbin_entries(binary)))
        except BlobLayoutError:
            info["entries"] = None
        info["kernels_bytes"] += len(binary)
        info["source_bytes"] += len(module.code)
    info["formats_before"] = formats
    # what the export will carry: one format name, or several if the modules differ
    carried = {BINARY_FORMAT if fmt == SOURCE_FORMAT and info["modules"] else fmt for fmt in formats}
    info["format"] = ",".join(sorted(carried)) or None
    return DeviceBinaries(blob.to_bytes(), info)


def generated_cuda_source(mod, target) -> str:
    """The CUDA C that TVM generates for ``mod`` (a scheduled IRModule), as its CUDA
    compiler would receive it: captured from the compile callback where TVM compiles
    (a GPU is present), else read from the module that carries it."""
    import tvm
    import tvm_ffi

    name = "tvm_callback_cuda_compile"
    original = tvm_ffi.get_global_func(name, allow_missing=True)
    captured: list[str] = []

    def capture(code: str):
        captured.append(code)
        return original(code)

    if original is not None:
        tvm_ffi.register_global_func(name, capture, override=True)
    try:
        with target:
            lib = tvm.compile(mod, target=target)
    finally:
        if original is not None:
            tvm_ffi.register_global_func(name, original, override=True)
    if captured:
        return captured[-1]
    blob = ImportsBlob.parse(pack_imports(getattr(lib, "mod", lib)))
    modules = [CudaPayload.parse(p) for kind, p in blob.modules if kind == "cuda" and p]
    sources = [m.code.decode("utf-8") for m in modules if m.fmt == SOURCE_FORMAT]
    if not sources:
        raise AutotuneError(f"the module holds no CUDA C (formats: {[m.fmt for m in modules]})")
    return sources[0]
