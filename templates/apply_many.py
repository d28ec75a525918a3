"""Applying a batch of configs on threads.

Applying a config (replaying its sketch, then the target's postprocessors; on CUDA,
VerifyGPUCode lowers the kernel to check it) ran one config after another in the main
process: on the lent H100 that was 14 s of a 57-s round of 258 candidates, while the
machine's 16 cores waited for it before a single build started. The work is TVM's C++,
which tvm-ffi calls with the GIL released, so threads share it out: 80 CUDA configs of
ResNet-18's conv2d3 took 1.63 s one by one and 0.90 s on two threads on this 2-core
machine, every module structurally equal to the serial one.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from autotune.templates.space import InvalidConfig, KnobSpace


def apply_many(items: Sequence[tuple[KnobSpace, Mapping[str, Any]]], threads: int = 0) -> list[Any]:
    """``space.apply(config)`` for each ``(space, config)``, in order: the scheduled
    module, or the :class:`InvalidConfig` it raised (any other error propagates).
    ``threads``: 0 for one per core."""

    def one(item: tuple[KnobSpace, Mapping[str, Any]]) -> Any:
        space, config = item
        try:
            return space.apply(config)
        except InvalidConfig as err:
            return err

    workers = min(len(items), threads or os.cpu_count() or 1)
    if workers <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="apply") as pool:
        return list(pool.map(one, items))
