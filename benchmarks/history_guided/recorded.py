"""What a recorded run measured on, for the offline analyses of its files
(``bench_transfer_ranking.py``, ``bench_replay_approximation.py``): its target, named as
the file names it, its layers' spaces as the run drew them, and each layer's measured
configs. No device is asked for anything.
"""

from __future__ import annotations

import dataclasses

from history_guided.measurers import records


def recorded_target(name: str, device_name: str | None = None):
    """The target ``name`` resolves to here, filed under ``device_name`` (the GPU a file
    was measured on) where given: a CUDA file's key names its device."""
    from autotune.target import resolve_target

    target = resolve_target(name)
    return dataclasses.replace(target, device_name=device_name) if device_name else target


def recorded_space(layer, target, *, shared_memory_estimate: bool = True):
    """The layer's knob space on ``target``; without ``shared_memory_estimate`` as the CUDA
    runs before 2026-11-26 drew it (shared memory judged by TVM's verifier alone)."""
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    options = {} if shared_memory_estimate else {"estimate_shared": False}
    return MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name, **options)


def measured_configs(path: str, target_key: str, layer_key: str,
                     lines: tuple[int, int | None] | None = None) -> dict[str, float]:
    """The layer's successfully measured configs in a measurement file (in its ``lines``,
    :func:`history_guided.measurers.records`), as the file writes each config (JSON text)
    -> its latency in seconds, in the file's order."""
    return {rec["config"]: float(rec["latency"]) for rec in records(path, parse_configs=False, lines=lines)
            if rec["target"] == target_key and rec["layer"] == layer_key and rec["status"] == "ok" and rec["latency"]}
