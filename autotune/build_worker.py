"""What a warm build worker does: compile one candidate schedule and export it, timed.

These functions run inside the builder's worker processes (:class:`autotune.measure.WarmBuilder`
sends them there), and in one process for a profile of what a build is made of
(``benchmarks/profile_builds.py``), so both time the same steps. Each worker sets up
once, on its first task: NVRTC's header cache, and a wrapper around TVM's CUDA compile
callback that times it and answers a source compiled before from the builder's cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass

#: Each build worker's NVRTC header file goes in ``<export dir>/<this>-<pid>``.
PCH_DIR = "nvrtc-pch"
#: What a CUDA worker compiles ahead of its first build, to write NVRTC's header file.
_EMPTY_KERNEL = 'extern "C" __global__ void autotune_prewarm() {}\n'
#: Device binaries by CUDA source, shared by the builder's workers: ``<export dir>/<this>/``.
DEVICE_CACHE_DIR = "device-code"
#: Binaries kept at most (a conv's cubin is tens of KB; a long tune builds thousands).
DEVICE_CACHE_ENTRIES = 8192
#: What else decides the binary TVM's callback makes of a source, besides the target.
_COMPILE_ENV = ("TVM_CUDA_COMPILE_MODE", "TVM_CUDA_PTXAS_REG_LEVEL", "TVM_CUDA_PTXAS_EXTRA_OPTS", "TVM_KERNEL_DUMP")

#: What is known of TVM's CUDA compile callback in this process so far: its seconds, and
#: how many sources it answered from the cache without compiling.
_device_compiles = {"seconds": 0.0, "reused": 0}


@dataclass(frozen=True)
class BuildSeconds:
    """Where one build's seconds went, inside the worker."""

    compile: float  # tvm.compile, device code included
    device_compile: float  # of ``compile``, in TVM's CUDA compile callback (NVRTC); 0 where untimed
    pack: float  # device code packed for the export (a fatbin where no CUDA driver is loaded)
    link: float  # the shared library written
    digest: float = 0.0  # the generated code hashed (:func:`autotune.program_digest.program_digest`)

    @property
    def total(self) -> float:
        return self.compile + self.pack + self.link + self.digest


def warm() -> None:
    """The pool's initializer: TVM's imports, once per worker."""
    import tvm  # noqa: F401
    import tvm.s_tir  # noqa: F401


@functools.lru_cache(maxsize=1)
def header_cache(export_dir: str) -> str:
    """Once per worker: NVRTC reuses the headers it parsed for the worker's first kernel
    (about half of a conv kernel's compile, :mod:`autotune.nvrtc_headers`). Returns its
    status ("on", or "off: why")."""
    from autotune.nvrtc_headers import enable_header_cache

    return enable_header_cache(pch_dir=os.path.join(export_dir, f"{PCH_DIR}-{os.getpid()}"))


@functools.lru_cache(maxsize=1)
def wrap_device_compiles(export_dir: str) -> bool:
    """Once per worker: TVM's CUDA compile callback (``tvm.support.nvcc``, called by its
    codegen where a CUDA driver is loaded) goes through a wrapper that adds up its
    seconds and keeps each binary in ``export_dir``'s :data:`DEVICE_CACHE_DIR`, by its
    source. A config that compiles to the source of one built before (a twin program,
    :mod:`autotune.program_digest`, found only once built) then skips NVRTC, most of
    a build of the configs tuners pick on the H100 (0.5 to 0.8 of 0.8 to 1.1
    worker-seconds, 2026-11-27), in whichever worker built the first. False where
    that callback is not there to wrap."""
    try:
        import tvm_ffi
        from tvm.support import nvcc

        compile_cuda = nvcc.tvm_callback_cuda_compile
    except (ImportError, AttributeError):
        return False
    cache = os.path.join(export_dir, DEVICE_CACHE_DIR)

    def wrapped(code, *args):  # TVM 0.27 passes the code alone; whatever it passes goes through
        t0 = time.perf_counter()
        try:
            path = os.path.join(cache, _device_code_key(code, args) + ".bin")
            try:
                with open(path, "rb") as fh:
                    binary = bytearray(fh.read())
                _device_compiles["reused"] += 1
                return binary
            except OSError:
                pass
            binary = compile_cuda(code, *args)
            _store(path, bytes(binary))
            return binary
        finally:
            _device_compiles["seconds"] += time.perf_counter() - t0

    try:
        tvm_ffi.register_global_func("tvm_callback_cuda_compile", wrapped, override=True)
    except Exception:  # timing is a figure, never a reason for a build to fail
        return False
    return True


def _device_code_key(code: str, args: tuple) -> str:
    """What TVM's callback compiles ``code`` into depends on: the target it reads inside,
    its compile-mode and ptxas variables, and any further arguments."""
    import tvm

    digest = hashlib.sha256(code.encode())
    for part in (str(tvm.target.Target.current(allow_none=True)), repr(args), *(os.environ.get(v, "") for v in _COMPILE_ENV)):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()


def _store(path: str, binary: bytes) -> None:
    """Written whole or not at all, since another worker may read it at any time; a
    cache that cannot be written, or is full, only loses its reuse."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if len(os.listdir(os.path.dirname(path))) >= DEVICE_CACHE_ENTRIES:
            return
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(binary)
        os.replace(tmp, path)
    except OSError:
        pass


def device_compile_seconds() -> float:
    """Seconds this process has spent in TVM's CUDA compile callback, once wrapped."""
    return _device_compiles["seconds"]


def device_compiles_reused() -> int:
    """Sources this process's CUDA compile callback answered from the cache, once wrapped."""
    return _device_compiles["reused"]


def prewarm(target, export_dir: str) -> int:
    """A new worker's first task, sent before any build: TVM's imports (the pool's
    initializer) and, for CUDA, NVRTC's header file, as TVM's compile callback would
    write it for the worker's first kernel. On the H100 the first round of a benchmark
    spent 8 s building one candidate and the second 15 s on 36 while the 16 workers
    started (2026-11-26). Returns the worker's pid."""
    if target.kind.name == "cuda" and not header_cache(export_dir).startswith("off"):
        from tvm.support import nvcc

        with target:  # the arch from the target, as in the callback
            nvcc.compile_cuda(_EMPTY_KERNEL, target_format="cubin", compiler="nvrtc")
    return os.getpid()


@dataclass(frozen=True)
class Built:
    """One candidate's shared library, what its build took, what it carries for the
    GPU (:func:`autotune.device_code.fatbin_packer`'s summary; None off CUDA), and which
    program it is (:func:`autotune.program_digest.program_digest`; None: unknown)."""

    path: str
    seconds: BuildSeconds
    device_code: dict | None = None
    program: str | None = None
    #: CUDA sources its device code came from the builder's cache for, not compiled
    device_compiles_reused: int = 0


def build(mod, target, export_dir: str) -> Built:
    """Compile one scheduled module and export a shared library.

    Built without a GPU (for an ``--rpc`` server), CUDA kernels go as a fatbin compiled
    here, so the server loads them with the driver alone (:mod:`autotune.device_code`)."""
    import tvm

    from autotune.device_code import export_library
    from autotune.program_digest import program_digest

    cuda = target.kind.name == "cuda"
    if cuda:
        header_cache(export_dir)
    timed = cuda and wrap_device_compiles(export_dir)
    before, reused = device_compile_seconds(), device_compiles_reused()
    t0 = time.perf_counter()
    with target:
        rt_mod = tvm.compile(mod, target=target)
    t1 = time.perf_counter()
    program = program_digest(rt_mod)
    t2 = time.perf_counter()
    fd, path = tempfile.mkstemp(suffix=".so", dir=export_dir)
    os.close(fd)
    phases: dict[str, float] = {}
    info = export_library(rt_mod, path, target, seconds=phases)
    seconds = BuildSeconds(
        compile=t1 - t0, device_compile=(device_compile_seconds() - before) if timed else 0.0,
        pack=phases["pack"], link=phases["link"], digest=t2 - t1,
    )
    return Built(path, seconds, info, program, device_compiles_reused() - reused)
