"""Which history records to trust: layer similarity and contradiction filtering.

Two guards stand between history and a tuner:

1. *Similarity*: an importance-weighted comparison of layer features, the same function
   as the match score (:func:`autotune.history.match.similarity`). Features the cost model
   actually splits on (say the reduction size) should decide similarity more than ones
   it ignores (say the batch size that is always 1). Weights come from the cost model's
   smoothed importances over the layer-feature columns, uniform before there is a model.
   A record is kept when its layer is similar in absolute terms (``threshold``) and
   close to the most similar layer history has (``relative``): evidence from a layer
   half as similar as the best neighbour mostly dilutes the best neighbour's.
2. *Contradiction*: a workload may look similar and still rank configs the other way
   round (a different bottleneck). Once this layer has measured at least ``min_shared``
   configs that a prior workload also has (after mapping its configs onto this space),
   a Kendall tau of prior vs measured latency that is *significantly* negative drops all
   of that workload's records. Significance matters: the shared configs are mostly the
   prior's best ones (a transfer tuner measures those first), and among near-equal
   configs the order is timing noise. A bare ``tau < 0`` on those few points dropped a
   closely similar layer's history after the first batch in the synthetic test
   (tau -0.28).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, NamedTuple, Sequence

import numpy as np
from scipy.stats import kendalltau

from autotune.history.match import similarity as layer_similarity
from autotune.search.tuner import PriorRecord, TrialResult
from autotune.templates.space import KnobSpace

__all__ = [
    "LEAVE_OUT_UNRUNNABLE_BELOW",
    "SIMILARITY_FLOOR",
    "FilteredPriors",
    "contradicting_workloads",
    "filter_priors",
    "importance_weights",
    "layer_similarity",
    "leaves_out_unrunnable",
    "only_runnable",
    "runnable_priors",
]


#: Similarity below which a history record is never kept, however few better ones exist.
SIMILARITY_FLOOR = 0.25


def importance_weights(importance: np.ndarray | None, n_layer: int) -> np.ndarray:
    """Weights of the ``n_layer`` layer features (the last columns of a cost model's
    feature vector) from its importances, normalized; uniform when there is no signal."""
    if n_layer <= 0:
        return np.zeros(0)
    if importance is not None and len(importance) >= n_layer:
        part = np.asarray(importance[-n_layer:], dtype=float)
        total = part.sum()
        if total > 0:
            return part / total
    return np.full(n_layer, 1.0 / n_layer)


def contradicting_workloads(
    priors: Sequence[PriorRecord],
    measured: Sequence[TrialResult],
    space: KnobSpace,
    *,
    min_shared: int = 3,
    tau_min: float = 0.0,
    p_max: float = 0.1,
    mapped: Sequence[tuple[int, ...] | None] | None = None,
) -> dict[str, float]:
    """Workload -> Kendall tau for workloads whose ranking contradicts ours: tau below
    ``tau_min`` with a one-sided p-value (no negative association) below ``p_max``.

    Prior configs are mapped onto ``space`` (nearest candidates); several priors mapping
    to one point keep their best latency. ``mapped`` may pass precomputed index tuples
    aligned with ``priors`` (a tuner maps its priors once).
    """
    from autotune.search.features import encoder_for

    enc = encoder_for(space)
    mine: dict[tuple[int, ...], float] = {}
    for res in measured:
        if not res.ok:
            continue
        key = enc.exact_indices(res.config)
        if key is None:
            continue
        mine[key] = min(mine.get(key, math.inf), float(res.latency))
    if len(mine) < min_shared:
        return {}
    shared: dict[str, dict[tuple[int, ...], float]] = defaultdict(dict)
    for i, rec in enumerate(priors):
        if rec.latency is None or rec.status != "ok":
            continue
        key = mapped[i] if mapped is not None else enc.map_indices(rec.config)
        if key is None or key not in mine:
            continue
        slot = shared[rec.workload_key]
        slot[key] = min(slot.get(key, math.inf), float(rec.latency))
    out: dict[str, float] = {}
    for wk, points in shared.items():
        if len(points) < min_shared:
            continue
        keys = list(points)
        prior_lat = [points[k] for k in keys]
        my_lat = [mine[k] for k in keys]
        test = kendalltau(prior_lat, my_lat, alternative="less")
        tau = test.statistic
        if tau is not None and np.isfinite(tau) and tau < tau_min and test.pvalue < p_max:
            out[wk] = float(tau)
    return out


class FilteredPriors(NamedTuple):
    """Kept records and one sample weight per kept record: its similarity, less for
    other hardware."""

    records: list[PriorRecord]
    weights: np.ndarray


def runnable_priors(space: KnobSpace, mapped: Sequence[tuple[int, ...] | None]) -> np.ndarray:
    """Per prior, False where its config, mapped onto this layer (``mapped``, None where
    it does not map), is one the layer could not run (:meth:`KnobSpace.fits_device_rows`):
    its latency says nothing about this layer's configs. Unmapped priors are kept."""
    fits = np.ones(len(mapped), dtype=bool)
    at = [i for i, m in enumerate(mapped) if m is not None]
    if at:
        fits[at] = space.fits_device_rows([mapped[i] for i in at])
    return fits


#: Under this match to history (the best similarity of its records to the layer),
#: history's configs the layer cannot run are left out by default (:func:`leaves_out_unrunnable`).
#: On the H100, ResNet-18's first conv (0.31, a 7x7 layer whose history is 3x3 layers)
#: could run none of the 64 configs history offered it first, and transfer XGBoost
#: trained on them ended slower than cold XGBoost (0.5x its trials, p = 0.032); on only
#: those it could run it reached cold XGBoost's final as fast (1.04x) and ended no
#: slower (p = 0.15). At 0.62 to 0.94 (five layers) it is unmeasured; a replay answered
#: by a surrogate of the measured configs, a lead only, had it lose ground on conv2d3
#: (11.0x to 3.8x), so it is the default only where it was measured to help
#: (benchmarks/HISTORY_GUIDED.md, twelfth session).
LEAVE_OUT_UNRUNNABLE_BELOW = 0.5


def leaves_out_unrunnable(option: bool | None, priors: Sequence, *, repair: bool = False) -> bool:
    """Whether a guided tuner leaves out history's configs the layer cannot run: the
    option as given, or by default (None) where history matches the layer weakly
    (:data:`LEAVE_OUT_UNRUNNABLE_BELOW`) and they are not to be moved instead (``repair``,
    :mod:`autotune.search.repair`: left out, none would be left to move). A weak match is a layer
    of other kernel sizes or strides, whose mapped tiles overrun this one's limits; a
    close one's mapped configs differ from runnable ones by a tile or two and still say
    which values win."""
    if option is not None:
        return bool(option)
    return not repair and bool(priors) and max(float(r.similarity) for r in priors) < LEAVE_OUT_UNRUNNABLE_BELOW


def only_runnable(fits: np.ndarray | None, idx: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kept prior positions ``idx`` and their ``weights``, less those :func:`runnable_priors`
    marked (``fits``); all of them where ``fits`` is None (the option is off)."""
    if fits is None or not len(idx):
        return idx, weights
    keep = fits[idx]
    return idx[keep], weights[keep]


def filter_priors(
    priors: Sequence[PriorRecord],
    layer_features: Sequence[float],
    weights: Sequence[float] | None = None,
    threshold: float = SIMILARITY_FLOOR,
    *,
    relative: float = 0.6,
    measured: Sequence[TrialResult] = (),
    space: KnobSpace | None = None,
    min_shared: int = 3,
    tau_min: float = 0.0,
    p_max: float = 0.1,
    mapped: Sequence[tuple[int, ...] | None] | None = None,
    return_indices: bool = False,
) -> FilteredPriors | tuple[FilteredPriors, np.ndarray]:
    """Drop dissimilar and contradicting priors; weight the rest by similarity.

    Similarity: the importance-weighted :func:`layer_similarity` when both this layer and
    the record have layer features (it replaces the record's stored score, which was
    computed without importances), else the record's own ``similarity``. Records below
    ``threshold``, or below ``relative`` times the best similarity among the records,
    are dropped. With ``measured`` results and ``space``, whole workloads
    found by :func:`contradicting_workloads` are dropped too. Similarity is computed once
    per distinct (workload, features), so 100k records cost little.

    Records measured on other hardware (``target_weight`` below 1) are kept or dropped
    by similarity alone, as the tuned target's are, and then weigh less by that factor
    relative to the heaviest kept record: mixed with the target's own history they count
    less, and a history all from one other machine is weighted as it would be from this
    one, there being nothing closer to prefer.

    With ``return_indices`` also returns the positions of kept records in ``priors``.
    """
    lf = list(layer_features)
    sim_cache: dict[tuple[Any, ...], float] = {}
    sims = np.empty(len(priors))
    for i, rec in enumerate(priors):
        rf = tuple(rec.layer_features)  # C-speed; the float work happens once per key
        key = (rec.workload_key, rf, rec.similarity)
        s = sim_cache.get(key)
        if s is None:
            s = layer_similarity(lf, rf, weights) if (lf and rf) else float(rec.similarity)
            sim_cache[key] = s
        sims[i] = s
    best = float(sims.max()) if len(sims) else 0.0
    keep = sims >= max(threshold, relative * best)
    if measured and space is not None:
        bad = contradicting_workloads(
            priors, measured, space, min_shared=min_shared, tau_min=tau_min, p_max=p_max, mapped=mapped
        )
        if bad:
            keep &= np.array([rec.workload_key not in bad for rec in priors], dtype=bool)
    target_weight = np.array([rec.target_weight for rec in priors], dtype=float)
    keep &= target_weight > 0
    idx = np.flatnonzero(keep)
    weights = sims[idx]
    if len(idx):
        weights = weights * (target_weight[idx] / target_weight[idx].max())
    result = FilteredPriors([priors[i] for i in idx], weights)
    return (result, idx) if return_indices else result
