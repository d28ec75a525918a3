"""NVRTC's precompiled headers for the CUDA kernels a build worker compiles.

NVRTC took about 0.9 s per ResNet-18 conv kernel here, more than half of it parsing the
libcu++ headers that TVM's NVRTC path and its generated code include (``cuda/std/cstdint``,
``limits``, ``type_traits``); on the lent H100 building was most of a measurement's time.
NVRTC 12.8+ can keep a parsed header prefix in the process and reuse it (``--pch``), but
only for the ``#include`` lines before a source's first line of code, and TVM's
preamble has ``using`` lines right after its first include. So the same headers are
pre-included (``--pre-include``), in the order TVM includes them: that order leaves the
cubin byte-identical (another order only reorders the headers' constants in it), the
source's own includes become no-ops behind their guards, and a warm worker parses the
headers once. ``benchmarks/bench_nvrtc_headers.py`` measures both claims.

TVM reads ``TVM_CUDA_NVRTC_EXTRA_OPTS`` at every NVRTC compile, so enabling is setting
it in the worker's environment: a user's own options there are kept, after ours. NVRTC
deletes its header file (60 MB for these headers) when the process exits, but not when it
is killed, as TVM's worker pool kills its workers: so each worker gets a directory of
its own (``--pch-dir``) that the builder removes.

The main process compiles CUDA too, one module at a time: each winner it verifies and
then the model. On the H100's NVRTC a kernel took 1.5 s to compile without the cache and
0.07 to 0.14 s with it, so those compiles use it as well (:func:`header_cache_during`),
with the variable set only while they run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from typing import Iterator, MutableMapping

#: TVM's NVRTC preamble includes cstdint then limits; its generated code then adds
#: type_traits. ``tests/test_nvrtc_headers.py`` checks this against the installed TVM.
PRE_INCLUDES = ("cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits")
#: Automatic precompiled headers arrived in NVRTC 12.8.
MIN_NVRTC = (12, 8)
#: TVM's variable for extra NVRTC options, read at each compile.
TVM_OPTIONS_VAR = "TVM_CUDA_NVRTC_EXTRA_OPTS"
#: Set to 0 to build without the header cache (to compare, or to rule it out).
SWITCH_VAR = "AUTOTUNE_NVRTC_PCH"


def header_cache_options(pch_dir: str | None = None) -> list[str]:
    """NVRTC's options for the cache; ``pch_dir`` (which must exist) holds its file."""
    where = [f"--pch-dir={pch_dir}"] if pch_dir else []
    return ["--pch", *where, *(f"--pre-include={header}" for header in PRE_INCLUDES)]


def nvrtc_version() -> tuple[int, int] | None:
    """The NVRTC that TVM would use, or None where there is none (no ``cuda-bindings``,
    or no ``libnvrtc`` for it to load)."""
    try:
        from cuda.bindings import nvrtc

        result, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # no bindings, or bindings without a loadable libnvrtc
        return None
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None
    return int(major), int(minor)


def _why_off(env: MutableMapping[str, str], version: tuple[int, int] | None) -> str | None:
    """Why the cache cannot be used here (None: it can); ``version`` None asks NVRTC."""
    if env.get(SWITCH_VAR, "1").strip() == "0":
        return f"off: {SWITCH_VAR}=0"
    if env.get("TVM_CUDA_COMPILE_MODE", "nvrtc").strip().lower() != "nvrtc":
        return "off: TVM compiles CUDA with nvcc here (TVM_CUDA_COMPILE_MODE)"
    version = nvrtc_version() if version is None else version
    if version is None:
        return "off: no NVRTC here"
    if version < MIN_NVRTC:
        return f"off: NVRTC {version[0]}.{version[1]} predates precompiled headers (12.8)"
    return None


def enable_header_cache(
    env: MutableMapping[str, str] | None = None,
    version: tuple[int, int] | None = None,
    pch_dir: str | None = None,
) -> str:
    """Make TVM's NVRTC compiles in this process reuse parsed headers, where they can.

    Returns what was done, for logs: ``"on"``, ``"already on"``, or ``"off: <why>"``.
    ``version`` overrides the NVRTC version (None: ask NVRTC); ``pch_dir`` is created
    if missing (None: NVRTC's own, under the system's temporary directory)."""
    env = os.environ if env is None else env
    return _why_off(env, version) or _set_options(env, pch_dir)


def _set_options(env: MutableMapping[str, str], pch_dir: str | None) -> str:
    """Put the cache's options ahead of any the user set, unless ``--pch`` is there."""
    current = env.get(TVM_OPTIONS_VAR, "").split()
    if "--pch" in current:
        return "already on"
    if pch_dir:
        os.makedirs(pch_dir, exist_ok=True)
    env[TVM_OPTIONS_VAR] = " ".join([*header_cache_options(pch_dir), *current])
    return "on"


#: This process's header folder for compiles outside the build workers (made on first use).
_process_pch_dir: str | None = None


def _own_pch_dir() -> str:
    global _process_pch_dir
    if _process_pch_dir is None:
        _process_pch_dir = tempfile.mkdtemp(prefix="autotune-nvrtc-pch-")
        atexit.register(shutil.rmtree, _process_pch_dir, True)
    return _process_pch_dir


@contextlib.contextmanager
def header_cache_during(
    env: MutableMapping[str, str] | None = None, version: tuple[int, int] | None = None
) -> Iterator[str]:
    """The header cache for the CUDA compiles inside the block, in this process.

    For the compiles the main process makes (verifying a winner, compiling the model):
    the first writes the header file, later ones reuse it. TVM's variable is put back as
    it was when the block ends, so build workers started afterwards inherit no ``--pch``
    and set up their own, each in its own folder. Yields what was done (as
    :func:`enable_header_cache` says it). The folder is this process's own, made on
    first use and removed at exit.
    """
    env = os.environ if env is None else env
    before = env.get(TVM_OPTIONS_VAR)
    state = _why_off(env, version) or _set_options(env, _own_pch_dir())
    try:
        yield state
    finally:
        if state == "on":
            if before is None:
                env.pop(TVM_OPTIONS_VAR, None)
            else:
                env[TVM_OPTIONS_VAR] = before


def header_cache_for(target_kind: str) -> contextlib.AbstractContextManager:
    """:func:`header_cache_during` for a CUDA target, nothing for any other: what the
    main process's compiles (a winner's check, the model) wrap themselves in."""
    return header_cache_during() if target_kind == "cuda" else contextlib.nullcontext()
