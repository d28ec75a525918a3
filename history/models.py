"""Plain frozen values passed in and out of the store, so callers never see SQL rows."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: Space id prefix of baseline records (TVM's own default schedule, config ``{}``): a
#: layer's time before tuning, not evidence of which knob values are good.
BASELINE_SPACE_PREFIX = "tvm-default:"
#: The tuner name of a record that times, at one batch size, the winner of the same layer
#: at another (``autotune tune`` does for a layer its budget misses): a copy, not a search.
OTHER_BATCH_TUNER = "other batch"
#: Every status a measurement record may carry; "ok" is the only one with a usable latency.
RECORD_STATUSES: tuple[str, ...] = ("ok", "build_error", "run_error", "timeout", "wrong_result", "invalid")
#: Every status a tuning run may carry.
RUN_STATUSES: tuple[str, ...] = ("running", "finished", "failed", "killed")
#: How a record's samples were timed: "launches" back to back by TVM's evaluator (every
#: record before 2026-12-07, and every CPU record), or "queued" behind a spin kernel so
#: that the host's launch rate does not pace them (``autotune.queued_timing``, CUDA only).
#: Few-microsecond kernels time lower queued; configs of 6 us and more agree within 4%.
RECORD_TIMINGS: tuple[str, ...] = ("launches", "queued")
#: Error texts are cut to this many characters: compiler logs can be megabytes.
MAX_ERROR_CHARS = 4000


def _jsonable(value: Any) -> Any:
    """numpy scalars/arrays -> Python values, so configs built with numpy still hash equal."""
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalar or array
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def canonical_json(value: Any) -> str:
    """Canonical JSON text: equal configs give equal strings (keys sorted, no spaces)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_jsonable)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not JSON-serializable: {exc}") from None


def config_hash(config_json: str) -> str:
    """sha256 of a config's canonical JSON: a short fixed-size key to index configs by."""
    return hashlib.sha256(config_json.encode("utf-8")).hexdigest()


def check_samples(samples: Sequence[float]) -> list[float]:
    """The samples as floats, each finite and >= 0 seconds."""
    values = [float(s) for s in samples]
    for v in values:
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"latency samples must be finite and >= 0 seconds, got {v!r}")
    return values


def sample_stats(samples: Sequence[float]) -> tuple[float | None, float | None, float | None, int]:
    """(mean, median, std, repeats) of latency samples in seconds; Nones when there are none."""
    values = check_samples(samples)
    if not values:
        return None, None, None, 0
    # in Python: a record holds a few samples, and numpy's median and std per record were
    # two fifths of importing 100,000 records. The median is numpy's to the bit (the middle
    # one, or the two middle ones' mean); the mean and the population std correctly rounded
    # (fsum), where numpy's may differ in the last place
    n = len(values)
    ordered = sorted(values)
    half = n // 2
    median = ordered[half] if n % 2 else (ordered[half - 1] + ordered[half]) / 2
    mean = math.fsum(values) / n
    # the deviations scaled by a power of two (exactly) first: squared as they are, those
    # past 1e154 s overflowed, where numpy's std had read inf
    top = max(abs(v - mean) for v in values)
    scale = 2.0 ** math.frexp(top)[1] if top > 0 and math.isfinite(top) else 1.0
    std = scale * math.sqrt(math.fsum(((v - mean) / scale) ** 2 for v in values) / n)
    return mean, median, std, n


@dataclass(frozen=True)
class TargetInfo:
    """A device a config was measured on; ``key`` identifies it across machines."""

    kind: str
    arch: str
    device_name: str
    driver_version: str = ""
    runtime_version: str = ""
    tvm_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.arch}:{self.device_name}"


def split_target_key(key: str) -> tuple[str, str, str]:
    """(kind, arch, device name) of a :attr:`TargetInfo.key`: records and neighbours
    carry only the key, and what another target can tell the tuned one depends on its
    kind and arch. The device name may itself hold colons."""
    kind, _, rest = key.partition(":")
    arch, _, device = rest.partition(":")
    return kind, arch, device


@dataclass(frozen=True)
class WorkloadInfo:
    """One operator instance (shapes, dtype, attrs) that configs are tuned for."""

    key: str
    batch_invariant_key: str
    op_class: str
    descriptor: Mapping[str, Any]
    flops: float
    features: tuple[float, ...] = ()


@dataclass(frozen=True)
class Record:
    """One measured (or failed) config of one workload on one target."""

    id: int
    workload_key: str
    batch_invariant_key: str
    op_class: str
    target_key: str
    space_id: str
    config: dict
    latency_median: float | None
    latency_mean: float | None
    latency_std: float | None
    repeats: int
    samples: tuple[float, ...]
    status: str
    error: str | None
    verified: bool | None
    run_id: str | None
    tuner: str
    created_at: str
    #: Its samples are another config's, whose program this config compiled to.
    twin: bool = False
    #: How its samples were timed: one of :data:`RECORD_TIMINGS`.
    timing: str = RECORD_TIMINGS[0]

    @property
    def ok(self) -> bool:
        """Usable as a result: measured fine and not shown wrong."""
        return self.status == "ok" and self.verified is not False and self.latency_median is not None and self.latency_median > 0
