"""Which hardware we compile for, and how history names it.

``auto`` picks CUDA when a GPU answers and LLVM for the host CPU otherwise. A CUDA
target can also be asked for on a machine with no GPU (``cuda`` or ``cuda:sm_80``):
code is generated and compiled with nvcc; only measuring needs the device.
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from autotune.errors import AutotuneError

#: Used for a CUDA target requested on a machine without a GPU.
DEFAULT_CUDA_ARCH = "sm_90"


@dataclass(frozen=True)
class TargetSpec:
    """A TVM target plus the identity history files it under."""

    kind: str  # "cuda" or "llvm"
    config: dict[str, Any]  # the TVM target as a JSON dict
    arch: str
    device_name: str
    has_device: bool  # can we run kernels for it here?
    #: a CUDA arch taken by default, with no GPU to ask and none named (said where it is built)
    arch_assumed: bool = False

    @property
    def tvm_target(self):
        import tvm

        return tvm.target.Target(self.config)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.arch}:{self.device_name}"

    def history_info(self):
        from autotune.history import TargetInfo
        import tvm

        driver = runtime = ""
        if self.kind == "cuda" and self.has_device:
            dev = tvm.cuda(0)
            runtime = str(dev.compute_version)
            driver = str(getattr(dev, "driver_version", "") or "")
        return TargetInfo(
            kind=self.kind,
            arch=self.arch,
            device_name=self.device_name,
            driver_version=driver,
            runtime_version=runtime,
            tvm_version=tvm.__version__,
        )

    def device(self):
        import tvm

        return tvm.cuda(0) if self.kind == "cuda" else tvm.cpu(0)


def gpu_present() -> bool:
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # no driver library at all
        return False


def resolve_target(name: str | None = "auto") -> TargetSpec:
    """``auto`` | ``llvm`` | ``cuda`` | ``cuda:sm_80`` | a JSON target dict."""
    name = (name or "auto").strip()
    if name == "auto":
        return _cuda(None) if gpu_present() else _llvm()
    if name == "llvm":
        return _llvm()
    if name == "cuda" or name.startswith("cuda:"):
        return _cuda(name.partition(":")[2] or None)
    if name.startswith("{"):
        try:
            config = json.loads(name)
        except json.JSONDecodeError as err:
            raise AutotuneError(f"--target is not valid JSON: {err}") from None
        kind = config.get("kind")
        if kind not in ("cuda", "llvm"):
            raise AutotuneError(f"--target kind must be 'cuda' or 'llvm', not {kind!r}")
        base = _cuda(config.get("arch")) if kind == "cuda" else _llvm()
        merged = {**base.config, **config}
        # another architecture's triple (the host's with another vendor or libc is the host)
        foreign = kind == "llvm" and other_architecture(config.get("mtriple"))
        if foreign and "mcpu" not in config:
            merged.pop("mcpu", None)  # the host's CPU is no CPU of another architecture
        # History files a CPU target under the CPU it compiles for (``mcpu``, or the
        # architecture of another triple), as it files the host's; a CUDA target under its ``arch``.
        arch = str((merged.get("arch") if kind == "cuda" else merged.get("mcpu")) or
                   (triple_arch(config["mtriple"]) if foreign else base.arch))
        # Code for another CPU may run here, but its timings would be this CPU's, filed
        # under the other's name: measure only for the host's own CPU (and never for
        # another architecture, whose code does not even link here).
        measurable = base.has_device and (kind == "cuda" or (arch == base.arch and not foreign))
        spec = TargetSpec(kind, merged, arch, base.device_name, measurable, arch_assumed=kind == "cuda" and base.arch_assumed)
        try:  # TVM's own verdict on every key, now (an unknown one ended a compile in its traceback)
            spec.tvm_target
        except Exception as err:
            from autotune.errors import first_line

            raise AutotuneError(f"--target {name} is no target TVM takes: {first_line(err)}") from None
        return spec
    raise AutotuneError(f"unknown target {name!r}: use auto, llvm, cuda, cuda:sm_XX or a JSON dict")


def triple_arch(triple: object) -> str:
    return str(triple).partition("-")[0]


def other_architecture(triple: object) -> bool:
    """An LLVM triple of another architecture than this machine's (the host's own with
    another vendor or libc, ``x86_64-pc-linux-gnu`` beside ``x86_64-conda-linux-gnu``, is not)."""
    return bool(triple) and triple_arch(triple) != triple_arch(host_triple())


@lru_cache(maxsize=1)
def host_triple() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_triple())


@lru_cache(maxsize=1)
def _llvm() -> TargetSpec:
    from tvm.target import codegen

    cpu = codegen.llvm_get_system_cpu() or platform.machine()
    cores = _physical_cores()
    config = {"kind": "llvm", "mcpu": cpu, "num-cores": cores}
    return TargetSpec("llvm", config, cpu, _cpu_name(), True)


def _cuda(arch: str | None) -> TargetSpec:
    import tvm

    present = gpu_present()
    return cuda_spec(tvm.cuda(0) if present else None, arch, has_device=present)


def cuda_spec(dev, arch: str | None, *, has_device: bool) -> TargetSpec:
    """A CUDA target for the GPU ``dev`` (a local device, or one over RPC), or for no GPU
    at all (``dev`` None: ``arch`` or the default, and typical limits)."""
    name = "unknown-gpu"
    limits = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32}
    if dev is not None:
        major, minor = str(dev.compute_version).split(".")
        arch = arch or f"sm_{major}{minor}"
        name = str(dev.device_name).replace(" ", "-")
        limits = {
            "max_threads_per_block": int(dev.max_threads_per_block),
            "max_shared_memory_per_block": int(dev.max_shared_memory_per_block),
            "thread_warp_size": int(dev.warp_size),
        }
    assumed = not arch
    arch = arch or DEFAULT_CUDA_ARCH
    # two digits at least: sm_5 passed, and TVM refused it seconds later ("The arch is not expected")
    if not isinstance(arch, str) or not re.fullmatch(r"sm_[1-9]\d+[a-z]?", arch):
        raise AutotuneError(f"CUDA arch must look like sm_90 (or sm_90a), not {arch!r}")
    config = {"kind": "cuda", "arch": arch, "max_num_threads": limits["max_threads_per_block"], "registers_per_block": 65536, **limits}
    return TargetSpec("cuda", config, arch, name, has_device, arch_assumed=assumed)


#: Float32 lanes of a CPU's widest vector unit, by the first LLVM feature it has.
_VECTOR_LANES = (("avx512f", 16), ("avx", 8), ("sse2", 4), ("neon", 4))


@lru_cache(maxsize=32)
def float_lanes(kind: str, arch: str) -> int | None:
    """How many float32 values one vector register of an LLVM CPU holds (None: not a CPU
    target, or a CPU name this LLVM does not know). History names a CPU target's arch by
    its ``mcpu``, so the lanes of a CPU a record was measured on are known from its key
    alone (see :mod:`autotune.templates.vector_width`)."""
    if kind != "llvm" or not arch:
        return None
    import tvm
    from tvm.target import codegen

    triple = str(tvm.target.Target("llvm").attrs.get("mtriple", "") or "")
    if not triple or not codegen.llvm_is_valid_cpu(arch, triple):
        return None
    target = tvm.target.Target({"kind": "llvm", "mcpu": arch, "mtriple": triple})
    for feature, lanes in _VECTOR_LANES:
        if codegen.llvm_cpu_has_features(feature, target):
            return lanes
    return None


def _physical_cores() -> int:
    try:
        import psutil

        return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)
    except ImportError:
        return max(1, os.cpu_count() or 1)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip().replace(" ", "-")
    except OSError:
        pass
    return platform.processor() or platform.machine()
