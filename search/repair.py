"""History's configs that a layer cannot run, moved to the nearest one it can.

A source layer's config is mapped onto this layer knob by knob (the nearest candidate of
each, :class:`search.features.ConfigMapper`), which keeps the source's tile shapes. On
CUDA those often overrun this layer's limits. On the H100 all 32 of the configs history
offered ResNet-18's first conv first (from 3x3 layers) asked for 52,880 bytes of shared
memory against 49,152, and 12 to 24 of 32 on four of five other layers overran some
limit (2026-11-26). Such a config costs no trial, since the space rejects it, but it
seeds nothing either: the guided tuners' first picks then come from elsewhere.

The issue asks for history's best configs "mapped onto this layer's valid candidates".
This finishes that mapping where the knob-by-knob one falls short. A mapped config the
layer cannot run, as far as :meth:`KnobSpace.fits_device_rows` can tell without TVM
work, goes to the one-knob move from it that the layer can run and that lies nearest in
the encoder's feature space (knob values and derived quantities: threads, work per
thread, footprints). Ties go to the first move in knob order. A config with no such
move is left as it was. On LLVM no config overruns anything, so nothing moves.

It is an option of both guided tuners (``repair_history``, off by default): which of
these moved configs run fast has yet to be measured. With ``plausible_priors`` as well,
the records whose configs would move are left out altogether, so nothing moves.
"""

from __future__ import annotations

import weakref
from typing import Hashable, Sequence

import numpy as np

from search.features import encoder_for
from templates.space import KnobSpace

__all__ = ["nearest_runnable", "runnable_mapping"]

Key = tuple[int, ...]

#: Per space, each key judged so far and where it goes (itself, a move, or None).
_MOVED: "weakref.WeakKeyDictionary[KnobSpace, dict[Key, Key | None]]" = weakref.WeakKeyDictionary()


def _memo(space: KnobSpace) -> dict[Key, Key | None]:
    try:
        return _MOVED.setdefault(space, {})
    except TypeError:  # a space that cannot be weakly referenced: no memo
        return {}


def nearest_runnable(space: KnobSpace, keys: Sequence[Key]) -> dict[Key, Key | None]:
    """For each index key: itself where the layer can run it, else the nearest one-knob
    move that it can run, else None. Memoized per space: every seed's tuner of a layer
    asks about the same history."""
    memo = _memo(space)
    plain = {tuple(int(v) for v in k) for k in keys}
    todo = sorted(plain - memo.keys())
    if todo:
        fits = space.fits_device_rows(todo)
        sizes = [len(k) for k in space.knobs]
        encoder = encoder_for(space)
        for key, ok in zip(todo, fits):
            memo[key] = key if ok else _nearest_move(space, encoder, sizes, key)
    return {key: memo[key] for key in plain}


def _nearest_move(space: KnobSpace, encoder, sizes: Sequence[int], key: Key) -> Key | None:
    moves = np.array(
        [key[:i] + (v,) + key[i + 1 :] for i, size in enumerate(sizes) for v in range(size) if v != key[i]],
        dtype=np.int64,
    )
    if not len(moves):
        return None
    moves = moves[space.fits_device_rows(moves)]
    if not len(moves):
        return None
    here = encoder.encode_indices(np.array([key], dtype=np.int64))[0]
    distance = np.nansum((encoder.encode_indices(moves) - here) ** 2, axis=1)
    return tuple(int(v) for v in moves[int(np.argmin(distance))])  # argmin: the first of equals


def runnable_mapping(space: KnobSpace, mapped: Sequence[Hashable | None]) -> list[Key | None]:
    """``mapped`` (history's configs as index keys of this space, None where one does not
    map) with each key the layer cannot run replaced by :func:`nearest_runnable`'s move,
    and kept where there is none."""
    keys = [m for m in mapped if m is not None]
    moved = nearest_runnable(space, keys) if keys else {}
    out: list[Key | None] = []
    for m in mapped:
        if m is None:
            out.append(None)
        else:
            key = tuple(int(v) for v in m)
            out.append(moved[key] or key)
    return out
