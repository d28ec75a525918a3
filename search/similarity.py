"""Which history records to trust: layer similarity and contradiction filtering.

Two guards stand between history and a tuner:

1. *Similarity*: an importance-weighted comparison of layer features. Features the cost
   model actually splits on (say the reduction size) should decide similarity more than
   ones it ignores (say the batch size that is always 1). Weights come from the cost
   model's smoothed importances over the layer-feature columns, uniform before there is a
   model. Features are compared on a sign-preserving log2 scale, since a 2x change of a
   dimension matters about as much at 64 as at 4096.
2. *Contradiction*: a workload may look similar and still rank configs the other way
   round (a different bottleneck). Once this layer has measured at least ``min_shared``
   configs that a prior workload also has (after mapping its configs onto this space),
   the Kendall tau of prior vs measured latency must not be negative, else all of that
   workload's records are dropped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, NamedTuple, Sequence

import numpy as np
from scipy.stats import kendalltau

from search.tuner import PriorRecord, TrialResult
from templates.space import KnobSpace

__all__ = [
    "FilteredPriors",
    "contradicting_workloads",
    "filter_priors",
    "importance_weights",
    "layer_similarity",
]


def _symlog2(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log2(1.0 + np.abs(x))


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


def layer_similarity(
    a: Sequence[float], b: Sequence[float], weights: Sequence[float] | None = None, *, tau: float = 2.0
) -> float:
    """Similarity in [0, 1] of two layer-feature vectors (1 = identical).

    Per feature: ``2 ** (-|symlog2(a) - symlog2(b)| / tau)`` (with tau=2, a 4x difference
    halves it); combined as a weighted mean. Features missing (NaN) on either side are
    left out and the weights renormalized; no comparable feature gives 0.
    """
    va = np.asarray(list(a), dtype=float)
    vb = np.asarray(list(b), dtype=float)
    n = min(len(va), len(vb))
    if n == 0:
        return 0.0
    va, vb = va[:n], vb[:n]
    w = np.full(n, 1.0) if weights is None else np.asarray(list(weights), dtype=float)[:n]
    if len(w) < n:
        w = np.concatenate([w, np.zeros(n - len(w))])
    ok = np.isfinite(va) & np.isfinite(vb) & (w > 0)
    if not ok.any():
        # Weights may be concentrated on features this pair lacks: fall back to uniform.
        ok = np.isfinite(va) & np.isfinite(vb)
        if not ok.any():
            return 0.0
        w = np.ones(n)
    d = np.abs(_symlog2(va[ok]) - _symlog2(vb[ok]))
    per = np.power(2.0, -d / tau)
    return float(np.clip((w[ok] * per).sum() / w[ok].sum(), 0.0, 1.0))


def contradicting_workloads(
    priors: Sequence[PriorRecord],
    measured: Sequence[TrialResult],
    space: KnobSpace,
    *,
    min_shared: int = 3,
    tau_min: float = 0.0,
    mapped: Sequence[tuple[int, ...] | None] | None = None,
) -> dict[str, float]:
    """Workload -> Kendall tau for workloads whose ranking contradicts ours (tau < tau_min).

    Prior configs are mapped onto ``space`` (nearest candidates); several priors mapping
    to one point keep their best latency. ``mapped`` may pass precomputed index tuples
    aligned with ``priors`` (a tuner maps its priors once).
    """
    from search.features import encoder_for

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
        tau = kendalltau(prior_lat, my_lat).statistic
        if tau is not None and np.isfinite(tau) and tau < tau_min:
            out[wk] = float(tau)
    return out


class FilteredPriors(NamedTuple):
    """Kept records and one sample weight (their similarity) per kept record."""

    records: list[PriorRecord]
    weights: np.ndarray


def filter_priors(
    priors: Sequence[PriorRecord],
    layer_features: Sequence[float],
    weights: Sequence[float] | None = None,
    threshold: float = 0.5,
    *,
    measured: Sequence[TrialResult] = (),
    space: KnobSpace | None = None,
    min_shared: int = 3,
    tau_min: float = 0.0,
    mapped: Sequence[tuple[int, ...] | None] | None = None,
    return_indices: bool = False,
) -> FilteredPriors | tuple[FilteredPriors, np.ndarray]:
    """Drop dissimilar and contradicting priors; weight the rest by similarity.

    Similarity: the importance-weighted :func:`layer_similarity` when both this layer and
    the record have layer features (it replaces the record's stored score, which was
    computed without importances), else the record's own ``similarity``. Records below
    ``threshold`` are dropped. With ``measured`` results and ``space``, whole workloads
    found by :func:`contradicting_workloads` are dropped too. Similarity is computed once
    per distinct (workload, features), so 100k records cost little.

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
    keep = sims >= threshold
    if measured and space is not None:
        bad = contradicting_workloads(
            priors, measured, space, min_shared=min_shared, tau_min=tau_min, mapped=mapped
        )
        if bad:
            keep &= np.array([rec.workload_key not in bad for rec in priors], dtype=bool)
    idx = np.flatnonzero(keep)
    result = FilteredPriors([priors[i] for i in idx], sims[idx])
    return (result, idx) if return_indices else result
