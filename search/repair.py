"""History's configs that a layer cannot run, moved to the nearest one it can.

A source layer's config is mapped onto this layer knob by knob (the nearest candidate of
each, :class:`autotune.search.features.ConfigMapper`), which keeps the source's tile shapes. On
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
thread, footprints), or where no one-knob move fits, the nearest such two-knob move.
Ties go to the first move in knob order. A config with no such move is left as it was.
On LLVM no config overruns anything, so nothing moves.

It is an option of both guided tuners (``repair_history``, off by default): which of
these moved configs run fast has yet to be measured. With ``plausible_priors`` as well,
the records whose configs would move are left out altogether, so nothing moves.
"""

from __future__ import annotations

import weakref
from itertools import combinations
from typing import Hashable, Sequence

import numpy as np

from autotune.search.features import encoder_for
from autotune.search.similarity import runnable_priors
from autotune.templates.space import KnobSpace

__all__ = ["nearest_runnable", "runnable_mapping", "judge_mapped_priors"]

Key = tuple[int, ...]

#: The most knobs a move may change. Fewer come first: a two-knob move only where no
#: one-knob move fits. Of the 32 configs the H100's history offered first, 4 on conv2d3,
#: 2 on conv2d4 and 6 on conv2d7 had no one-knob move that fits (on conv2d7, blocks of 16
#: threads, below a warp, whose every one-knob move overran another limit).
MAX_MOVED_KNOBS = 2
#: Moves judged per call of the space's check, nearest first (:func:`_nearest_move`).
_JUDGED_AT_ONCE = 256

#: Per space, each key judged so far and where it goes (itself, a move, or None).
_MOVED: "weakref.WeakKeyDictionary[KnobSpace, dict[Key, Key | None]]" = weakref.WeakKeyDictionary()


def _memo(space: KnobSpace) -> dict[Key, Key | None]:
    try:
        return _MOVED.setdefault(space, {})
    except TypeError:  # a space that cannot be weakly referenced: no memo
        return {}


def nearest_runnable(space: KnobSpace, keys: Sequence[Key]) -> dict[Key, Key | None]:
    """For each index key: itself where the layer can run it, else the nearest move of
    the fewest knobs (up to ``MAX_MOVED_KNOBS``) that it can run, else None. Memoized
    per space: every seed's tuner of a layer asks about the same history."""
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
    here = encoder.encode_indices(np.array([key], dtype=np.int64))[0]
    for knobs in range(1, MAX_MOVED_KNOBS + 1):
        moves = _moves(sizes, key, knobs)
        if not len(moves):
            continue
        distance = np.nansum((encoder.encode_indices(moves) - here) ** 2, axis=1)
        # nearest first (stable: the first in knob order among equals), judged a slice at
        # a time: a two-knob search has some 50,000 moves, and the space's shared-memory
        # estimate goes config by config
        order = np.argsort(distance, kind="stable")
        for start in range(0, len(order), _JUDGED_AT_ONCE):
            part = order[start : start + _JUDGED_AT_ONCE]
            fits = space.fits_device_rows(moves[part])
            if fits.any():
                return tuple(int(v) for v in moves[part[int(np.argmax(fits))]])
    return None


def _moves(sizes: Sequence[int], key: Key, knobs: int) -> np.ndarray:
    """Every key that differs from ``key`` in exactly ``knobs`` knobs, in knob order."""
    base = np.asarray(key, dtype=np.int64)
    blocks = []
    for which in combinations(range(len(sizes)), knobs):
        others = [np.array([v for v in range(sizes[i]) if v != key[i]], dtype=np.int64) for i in which]
        if any(not len(o) for o in others):
            continue
        grid = np.stack(np.meshgrid(*others, indexing="ij"), axis=-1).reshape(-1, knobs)
        rows = np.repeat(base[None, :], len(grid), axis=0)
        rows[:, list(which)] = grid
        blocks.append(rows)
    return np.concatenate(blocks) if blocks else np.zeros((0, len(sizes)), dtype=np.int64)


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


def judge_mapped_priors(
    space: KnobSpace, mapped: Sequence[Hashable | None], *, plausible: bool, repair: bool
) -> tuple[np.ndarray | None, list]:
    """What both guided tuners do to history's mapped configs before using them, in this
    order: with ``plausible``, mark the ones the layer cannot run (:func:`runnable_priors`,
    judged as mapped, so a repaired record is still left out); with ``repair``, move those
    to the nearest the layer can run (:func:`runnable_mapping`). Returns the marks (None
    without ``plausible``) and the mapping to use."""
    fits = runnable_priors(space, mapped) if plausible else None
    return fits, (runnable_mapping(space, mapped) if repair else list(mapped))
