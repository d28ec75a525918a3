"""Roofline peaks per device, so a report can say how close each tuned layer is to the hardware limit.

GPU peaks come from a table of published specs (fp32 non-tensor-core FLOP/s and DRAM bandwidth),
matched by device name. CPUs vary too much for a table, so their peaks are measured once (a numpy
matmul, and array copies on every core sized for DRAM and for the last-level cache, about a
second) and cached as JSON under ``~/.autotune/roofline.json`` keyed by device name. Only
stdlib is imported at module level; numpy is imported when measuring.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

CACHE_FILE = "roofline.json"
#: How CPU peaks are measured; cached entries from an older method are measured again
#: (2: bandwidth on every core, plus the last-level cache's).
MEASURE_METHOD = 2
#: Other work's share of the cores while the CPU peaks were measured from which they are
#: said to read low (every roofline percentage high): by `autotune info` and reports.
BUSY_LOAD = 0.5


@dataclass(frozen=True)
class Peaks:
    """Peak compute (FLOP/s) and memory bandwidth (bytes/s) of one device; `source` says where from."""

    peak_flops: float
    peak_bw: float
    source: str = "table"
    device_name: str = ""
    #: Bandwidth of the last-level cache and its size (0: unknown). Timed runs repeat on
    #: warm caches, so a layer whose bytes fit there is held to this roof, not DRAM's:
    #: against DRAM alone, cache-resident layers read 129% to 308% on this CPU.
    cache_bw: float = 0.0
    cache_bytes: float = 0.0
    #: When measured, and what other work kept each core busy with meanwhile (0 to 1;
    #: None: unknown), which lowers every peak and so raises every roofline percentage.
    measured_at: str = ""
    load_per_core: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, as stored in a report's ``"roofline"`` entry."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Peaks":
        return cls(
            peak_flops=float(data["peak_flops"]),
            peak_bw=float(data["peak_bw"]),
            source=str(data.get("source", "table")),
            device_name=str(data.get("device_name", "")),
            cache_bw=float(data.get("cache_bw", 0.0)),
            cache_bytes=float(data.get("cache_bytes", 0.0)),
            measured_at=str(data.get("measured_at") or ""),
            load_per_core=None if data.get("load_per_core") is None else float(data["load_per_core"]),
        )

    def memory_bw(self, nbytes: float) -> float:
        """The memory roof for a layer that moves ``nbytes``: the cache's if they fit there."""
        if self.cache_bw > 0 and 0 < nbytes <= self.cache_bytes:
            return self.cache_bw
        return self.peak_bw


# (pattern over the normalized name, label, peak fp32 FLOP/s, bandwidth bytes/s).
# Order matters: the first match wins, so specific variants come before the family default.
# Names are normalized to lower case with '-', '_' turned into spaces ("NVIDIA A100-SXM4-80GB"
# -> "nvidia a100 sxm4 80gb"), and patterns use word boundaries so "a10" does not match "a100".
_GPU_TABLE: list[tuple[str, str, float, float]] = [
    (r"\bh100\b.*\bpcie\b", "H100 PCIe", 51.2e12, 2.0e12),
    (r"\bh100\b.*\bnvl\b", "H100 NVL", 60.0e12, 3.9e12),
    (r"\bh100\b", "H100 SXM", 67.0e12, 3.35e12),
    (r"\bgh200\b", "GH200", 67.0e12, 4.0e12),
    (r"\bh200\b", "H200", 67.0e12, 4.8e12),
    (r"\ba100\b.*\bpcie\b.*\b80\s*gb\b|\ba100\b.*\b80\s*gb\b.*\bpcie\b", "A100 80GB PCIe", 19.5e12, 1.935e12),
    (r"\ba100\b.*\b80\s*gb\b", "A100 80GB SXM", 19.5e12, 2.039e12),
    (r"\ba100\b", "A100 40GB", 19.5e12, 1.555e12),
    (r"\ba10g?\b", "A10", 31.2e12, 600e9),
    (r"\ba30\b", "A30", 10.3e12, 933e9),
    (r"\ba40\b", "A40", 37.4e12, 696e9),
    (r"\bl40s\b", "L40S", 91.6e12, 864e9),
    (r"\bl40\b", "L40", 90.5e12, 864e9),
    (r"\bl4\b", "L4", 30.3e12, 300e9),
    (r"\bv100s\b", "V100S", 16.4e12, 1134e9),
    (r"\bv100\b.*\bpcie\b", "V100 PCIe", 14.0e12, 900e9),
    (r"\bv100\b", "V100 SXM2", 15.7e12, 900e9),
    (r"\bp100\b.*\bpcie\b", "P100 PCIe", 9.3e12, 732e9),
    (r"\bp100\b", "P100 SXM2", 10.6e12, 732e9),
    (r"\bt4\b", "T4", 8.1e12, 320e9),
    (r"\brtx\s*a6000\b", "RTX A6000", 38.7e12, 768e9),
    (r"\b4090\b", "RTX 4090", 82.6e12, 1008e9),
    (r"\b4080\b", "RTX 4080", 48.7e12, 716.8e9),
    (r"\b3090\s*ti\b", "RTX 3090 Ti", 40.0e12, 1008e9),
    (r"\b3090\b", "RTX 3090", 35.6e12, 936e9),
    (r"\b3080\b", "RTX 3080", 29.8e12, 760e9),
    (r"\btitan\s*v\b", "Titan V", 14.9e12, 652.8e9),
    (r"\b1080\s*ti\b", "GTX 1080 Ti", 11.3e12, 484e9),
]

_GPU_KINDS = {"cuda", "nvidia", "gpu", "rocm", "vulkan", "opencl", "metal"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_/]+", " ", name.lower()).strip()


def lookup_gpu(device_name: str | None) -> Peaks | None:
    """Published peaks for a known GPU name (substring match), or None when the name is not in the table."""
    if not device_name:
        return None
    norm = _normalize(device_name)
    for pattern, label, flops, bw in _GPU_TABLE:
        if re.search(pattern, norm):
            return Peaks(flops, bw, source=f"table:{label}", device_name=device_name)
    return None


def autotune_home() -> Path:
    from autotune.history.location import autotune_home as home

    return Path(home())


def default_cache_path() -> Path:
    return autotune_home() / CACHE_FILE


def local_cpu_name() -> str:
    """The CPU model name of this machine, used as the cache key for measured CPU peaks."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def last_level_cache_bytes() -> int:
    """Size of this CPU's largest cache level (Linux sysfs), 0 when it cannot be read."""
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
            sizes[level] = max(sizes.get(level, 0), int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return sizes[max(sizes)] if sizes else 0


def _copy_bandwidth(total_floats: int, seconds: float, threads: int) -> float:
    """Best bytes/s of ``threads`` threads each copying its share of ``total_floats``
    float32s at once (numpy's copy releases the GIL): kernels run on every core, so one
    thread's bandwidth would be too low a roof."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    n = max(1, total_floats // threads)
    pairs = [(np.ones(n, dtype=np.float32), np.empty(n, dtype=np.float32)) for _ in range(threads)]
    with ThreadPoolExecutor(threads) as pool:

        def copy_all() -> None:
            list(pool.map(lambda p: np.copyto(p[1], p[0]), pairs))

        copy_all()  # fault in the pages
        best = _best_seconds(copy_all, seconds)
    return 2.0 * 4 * n * threads / best  # one read and one write per element


def _best_seconds(fn, seconds: float) -> float:
    """The fastest of repeated calls of ``fn`` within about ``seconds`` (at least one)."""
    best = math.inf
    deadline = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            return best


def measure_cpu(device_name: str | None = None, seconds: float = 0.8) -> Peaks:
    """Measure this CPU's attainable FLOP/s (fp32 matmul) and copy bandwidths (DRAM, and
    the last-level cache) in about `seconds`.

    Best-of-several repetitions so a noisy first run (page faults, thread pool start) is not the
    number kept. These are attainable, not datasheet, peaks: good enough to rank layers.
    """
    import numpy as np

    part = max(seconds, 0.1) / 3
    n = 1024
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = np.random.default_rng(1).random((n, n), dtype=np.float32)
    a @ b  # warm up BLAS threads
    flops = 2.0 * n**3 / _best_seconds(lambda: a @ b, part)

    from autotune.target import _physical_cores

    threads = _physical_cores()  # the cores a kernel for this target runs on (its num-cores)
    bw = _copy_bandwidth(32 * 1024 * 1024, part, threads)  # 128 MiB a side, larger than any LLC
    llc = last_level_cache_bytes()
    # sources and destinations together fill half the cache, so they stay resident
    cache_bw = _copy_bandwidth(llc // 16, part, threads) if llc >= 1024 * 1024 else 0.0
    return Peaks(flops, bw, source="measured", device_name=device_name or local_cpu_name(),
                 cache_bw=max(cache_bw, bw) if cache_bw else 0.0, cache_bytes=float(llc // 2) if cache_bw else 0.0)


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _cached_peaks(entry: Any) -> Peaks | None:
    """The peaks a cache entry holds, where it holds sound ones of today's method; else None
    (measured again): the cache is a file a person may edit, and an entry of a list or a
    peak of 1e400 had ended a tune in a traceback."""
    if not isinstance(entry, dict):
        return None
    try:
        if entry.get("method", 1) < MEASURE_METHOD:
            return None
        peaks = Peaks.from_dict(entry)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    sound = all(math.isfinite(v) and v >= 0 for v in (peaks.peak_flops, peaks.peak_bw, peaks.cache_bw, peaks.cache_bytes))
    return peaks if sound and peaks.peak_flops > 0 and peaks.peak_bw > 0 else None


def cpu_peaks(
    device_name: str | None = None,
    cache_path: Path | None = None,
    measure: bool = True,
    refresh: bool = False,
) -> Peaks | None:
    """Cached CPU peaks for `device_name` (default: this CPU), measuring and caching on a miss.

    With ``measure=False`` only the cache is consulted (used when reading a report on another
    machine, where measuring the local CPU would give the wrong answer).
    """
    name = device_name or local_cpu_name()
    path = cache_path or default_cache_path()
    cache = _read_cache(path)
    entry = _cached_peaks(cache.get(name)) if not refresh else None
    if entry is not None:
        return replace(entry, source="cache", device_name=name)
    if not measure:
        return None
    before = _cpu_seconds()
    peaks = measure_cpu(name)
    load = _others_load_per_core(before, _cpu_seconds())
    if load is None:
        load = _load_per_core()
    cache[name] = {**peaks.to_dict(), "method": MEASURE_METHOD, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                   # other work on the cores lowers every peak (two tunes at once read about
                   # 0.55x the compute and 0.6x the cache bandwidth here): said by `info`,
                   # whose --measure-roofline measures again, and by reports
                   "load_per_core": load}
    peaks = replace(peaks, measured_at=cache[name]["measured_at"], load_per_core=load)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # one name per process: tunes start together
        tmp.write_text(json.dumps(cache, indent=2), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs a re-measure next time
    return peaks


def _cpu_seconds() -> tuple[float, float, float] | None:
    """(wall, this machine's busy CPU seconds, this process's), now; None where
    /proc/stat cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [float(v) for v in fh.readline().split()[1:]]
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and iowait
    own = os.times()
    return time.monotonic(), (sum(fields[:8]) - idle) / ticks, own.user + own.system


def _others_load_per_core(before, after) -> float | None:
    """What other processes kept the cores busy with between two :func:`_cpu_seconds`,
    per core: the 1-minute load average lags a minute behind, and read 0.27 for a
    measurement that came out at 103 GFLOP/s against 166 idle."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return round(max(0.0, others) / ((after[0] - before[0]) * (os.cpu_count() or 1)), 2)


def _load_per_core() -> float | None:
    """The 1-minute load average over the cores, as the peaks were measured (None: unknown)."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
    except (AttributeError, OSError):
        return None


def cached_cpu_entry(device_name: str | None = None, cache_path: Path | None = None) -> dict[str, Any] | None:
    """This CPU's cache entry as stored (peaks, when, under what load), or None."""
    name = device_name or local_cpu_name()
    entry = _read_cache(cache_path or default_cache_path()).get(name)
    return dict(entry) if isinstance(entry, dict) else None


def peaks_for_target(
    target: Mapping[str, Any] | None, measure: bool = True, cache_path: Path | None = None
) -> Peaks | None:
    """Peaks for a report's target dict (kind, device_name): GPU table, else CPU cache/measurement.

    Returns None for an unknown GPU or, with ``measure=False``, an uncached CPU.
    """
    target = target or {}
    kind = str(target.get("kind") or "").lower()
    name = str(target.get("device_name") or "")
    if kind in _GPU_KINDS:
        return lookup_gpu(name)
    if not kind and lookup_gpu(name):
        return lookup_gpu(name)
    return cpu_peaks(name or None, cache_path=cache_path, measure=measure)


def achieved_flops(flops: float | None, latency: float | None) -> float | None:
    """FLOP/s achieved by one run of `flops` operations in `latency` seconds; None if unknown."""
    if not flops or not latency or latency <= 0 or not math.isfinite(latency):
        return None
    return float(flops) / float(latency)


def roofline_fraction(
    flops: float, bytes: float, latency: float, peak_flops: float, peak_bw: float
) -> float:
    """achieved FLOP/s / min(peak_flops, arithmetic_intensity * peak_bw).

    The attainable ceiling is the lower of compute and memory roofs at this layer's arithmetic
    intensity (flops / bytes). Not clamped: a value above 1 means the byte count or the peaks are
    underestimates. Returns 0.0 when latency or flops are not positive; bytes <= 0 means compute-bound.
    """
    if latency <= 0 or flops <= 0 or peak_flops <= 0 or not math.isfinite(latency):
        return 0.0
    achieved = flops / latency
    ceiling = peak_flops
    if bytes > 0 and peak_bw > 0:
        ceiling = min(peak_flops, (flops / bytes) * peak_bw)
    if not ceiling > 0:  # an intensity of 1e-320 FLOP a byte: a roof that rounds to nothing
        return 0.0
    return achieved / ceiling
