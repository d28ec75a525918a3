"""History configs from a CPU of another SIMD width, restated for this one.

On a CPU, meta-schedule vectorizes the innermost loop of a block's last spatial axis
(``xx`` of an NCHW convolution), so the innermost factor of that axis' tile is the vector
length a config asks for. The best configs fill the machine's vector registers: of
the fastest 2% of the configs each CPU measured for ResNet-18's conv2d1 and MobileNetV2's
conv2d5, 290 of 291 end ``xx`` in 7 on a ``znver3`` (AVX2, 8 float lanes) and all 65
end it in 14 on a ``znver4`` (AVX-512, 16 lanes); on ResNet-18's first conv all 33 of
the ``znver4``'s end in 14 (``benchmarks/HISTORY_GUIDED.md``, run 32). Taken as they
are, the other CPU's winners steer transfer to half-filled vectors.

So a record measured on a CPU with ``from_lanes`` is restated for ``to_lanes``: its
innermost factor is scaled by the ratio of the vector lengths the axis can fill
(``min(lanes, extent)`` on each machine, rounded to a power of two), the factor moved
from (or to) the outer levels of the same tile, so the tile still covers the axis. A
tile that cannot be restated exactly (no such factor in its outer levels) stays as it
was. Only 4-part tiles, the CPU layout ``[outer, outer2, inner, innermost]``, are touched.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["restate_vector_width", "vector_axis_knobs"]

_CPU_SPATIAL_PARTS = 4


def vector_axis_knobs(knobs: Sequence[Any]) -> list[str]:
    """Names of the tile knobs whose innermost factor is a block's vector length: per
    block (the name up to its axis), its last 4-part tile in the space's order."""
    last: dict[str, str] = {}
    for knob in knobs:
        if knob.kind != "tile" or "." not in knob.name:
            continue
        first = knob.candidates[0] if knob.candidates else None
        if isinstance(first, (list, tuple)) and len(first) == _CPU_SPATIAL_PARTS:
            block = knob.name.rsplit(".", 2)[0]
            last[block] = knob.name
    return list(last.values())


def _ratio(extent: int, from_lanes: int, to_lanes: int) -> int:
    """log2 of how many times longer the vector this axis can fill is on the new CPU."""
    filled_from, filled_to = min(from_lanes, extent), min(to_lanes, extent)
    return round(math.log2(filled_to / filled_from))


def _restate_tile(tile: Sequence[int], from_lanes: int, to_lanes: int) -> list[int] | None:
    parts = [int(p) for p in tile]
    if len(parts) != _CPU_SPATIAL_PARTS or any(p <= 0 for p in parts):
        return None
    shift = _ratio(math.prod(parts), from_lanes, to_lanes)
    if shift == 0:
        return None
    need = 2 ** abs(shift)
    if shift > 0:  # a wider machine: take factors of 2 from the outer levels, innermost-near first
        for level in (2, 1, 0):
            take = math.gcd(parts[level], need)
            parts[level] //= take
            parts[3] *= take
            need //= take
    else:  # a narrower one: hand factors of the innermost to the next level out
        take = math.gcd(parts[3], need)
        parts[3] //= take
        parts[2] *= take
        need //= take
    return parts if need == 1 else None


def restate_vector_width(
    config: Mapping[str, Any], vector_knobs: Sequence[str], from_lanes: int, to_lanes: int
) -> dict[str, Any]:
    """``config`` (measured with ``from_lanes`` float lanes) as it would fill ``to_lanes``.

    ``vector_knobs``: from :func:`vector_axis_knobs` of the tuned layer's space (a source
    layer of the same op class has the same knob names). Returns a new dict; knobs that
    need no change, or cannot be restated exactly, keep their values."""
    out = dict(config)
    if from_lanes == to_lanes or from_lanes <= 0 or to_lanes <= 0:
        return out
    for name in vector_knobs:
        value = out.get(name)
        if isinstance(value, (list, tuple)):
            restated = _restate_tile(value, from_lanes, to_lanes)
            if restated is not None:
                out[name] = restated
    return out
