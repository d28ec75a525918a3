"""How well history covers a layer: the match score that picks the tuner.

1.0 means the same workload on the same target has a measured winner: reuse it.
Otherwise the score is the best importance-weighted similarity of this layer's
features to a layer of the same op class that history has measured. Results for the
same layer at another batch size (same batch-invariant key) count as near-exact:
batch rarely changes the winning schedule. Features are one sample's, so the batch
leaves the comparison, and another layer read at another batch size counts
``SAME_LAYER_OTHER_BATCH`` of its similarity, as the same layer there does. Records from other hardware inform
transfer but are discounted, never count as an exact hit, and stand in only for layers
the tuned target has not measured, or has measured thinly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Collection, Sequence

import numpy as np

from .models import Record, WorkloadInfo
from .store import HistoryStore

#: Similarity given to the same layer at another batch size.
SAME_LAYER_OTHER_BATCH = 0.95
#: Factor applied to evidence measured on another target.
OTHER_TARGET_DISCOUNT = 0.5


@dataclass(frozen=True)
class Neighbour:
    workload: WorkloadInfo
    target_key: str
    similarity: float  # to the tuned layer, times target_weight
    best_latency: float | None
    #: how much its records count against the tuned target's own: 1 on the same target
    target_weight: float = 1.0
    same_target: bool = True
    #: why it is near: "same layer" (another target), "other batch" (the same layer at
    #: another batch size, :data:`SAME_LAYER_OTHER_BATCH`), or "features" (similar shapes)
    relation: str = "features"
    #: read at another batch size (known from both descriptors, or the same layer's):
    #: its configs come with the batch spread over the outermost tiles (autotune.priors)
    another_batch: bool = False


@dataclass(frozen=True)
class MatchResult:
    score: float
    exact: bool
    best: Record | None = None
    neighbours: tuple[Neighbour, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {
            "score": round(self.score, 4),
            "exact": self.exact,
            "best_record_id": self.best.id if self.best else None,
            "neighbours": [
                # the layer name history holds it under: a key alone sent the reader to `history ls`
                {"workload_key": n.workload.key, "name": (n.workload.descriptor or {}).get("name"),
                 **({"batch": b} if (b := batch_of(n.workload)) is not None else {}),
                 "target_key": n.target_key, "similarity": round(n.similarity, 4), "relation": n.relation}
                for n in self.neighbours
            ],
        }


def batch_of(workload: WorkloadInfo) -> int | None:
    """The batch size a workload was read at, where its descriptor says (workloads
    stored since 2026-11-28)."""
    batch = (workload.descriptor or {}).get("batch")
    return batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None


def at_another_batch(a: WorkloadInfo, b: WorkloadInfo) -> bool:
    """Whether two workloads were read at batch sizes known to differ."""
    x, y = batch_of(a), batch_of(b)
    return x is not None and y is not None and x != y


def similarity(a: Sequence[float], b: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """exp(-weighted mean absolute difference) of two layers' features: 1 when equal.

    The one similarity of layers in the project: the match score that picks a tuner and
    the transfer tuners' history filter both use it (the filter with the cost model's
    importances as weights). Layer features are on log2 scales (see
    ``autotune.decompose.Layer.features``), so a difference of 1 is a factor of two in a
    dimension; with n equally weighted features, one dimension off by 2x gives exp(-1/n).
    Features missing (NaN) on either side are left out and the weights renormalized;
    weights that leave nothing comparable fall back to uniform; nothing comparable is 0.
    """
    va = np.asarray(list(a), dtype=float)
    vb = np.asarray(list(b), dtype=float)
    n = min(len(va), len(vb))
    if n == 0:
        return 0.0
    va, vb = va[:n], vb[:n]
    w = np.ones(n) if weights is None else np.asarray(list(weights), dtype=float)[:n]
    if len(w) < n:
        w = np.concatenate([w, np.zeros(n - len(w))])
    comparable = np.isfinite(va) & np.isfinite(vb)
    ok = comparable & (w > 0)
    if not ok.any():
        ok, w = comparable, np.ones(n)
        if not ok.any():
            return 0.0
    dist = float((w[ok] * np.abs(va[ok] - vb[ok])).sum() / w[ok].sum())
    return math.exp(-dist)


def similarities(a: Sequence[float], others: Sequence[Sequence[float]], weights: Sequence[float] | None = None) -> list[float]:
    """:func:`similarity` of ``a`` to each of ``others``, the same numbers to the bit.

    One matrix operation for the others whose features line up with ``a`` (the same
    length, finite wherever a weight counts), :func:`similarity` itself for the rest: a
    match is scored against every layer of its class history holds, and one call a
    layer took a third of a second against 11,000 convolutions. The matrix is narrowed
    to the weighted columns first, so each row sums the same numbers in the same order
    as :func:`similarity` does."""
    out = [0.0] * len(others)
    va = np.asarray(list(a), dtype=float)
    n = len(va)
    w = np.ones(n) if weights is None else np.asarray(list(weights), dtype=float)[:n]
    if len(w) < n:
        w = np.concatenate([w, np.zeros(n - len(w))])
    cols = np.flatnonzero((w > 0) & np.isfinite(va)) if n else np.zeros(0, dtype=int)
    fast = [i for i, b in enumerate(others) if len(b) == n] if len(cols) and np.isfinite(va[w > 0]).all() else []
    if fast:
        # C order: a row's sum then runs as the 1-d one does (a column-major copy, which
        # fancy indexing makes, summed in another order and differed in the last bits)
        rows = np.ascontiguousarray(np.asarray([others[i] for i in fast], dtype=float)[:, cols])
        lined_up = np.isfinite(rows).all(axis=1)
        wk = w[cols]
        dist = (wk * np.abs(rows - va[cols])).sum(axis=1) / wk.sum()
        for i, ok, d in zip(fast, lined_up, dist):
            if ok:
                out[i] = math.exp(-float(d))
        done = {i for i, ok in zip(fast, lined_up) if ok}
    else:
        done = set()
    for i, b in enumerate(others):
        if i not in done:
            out[i] = similarity(a, b, weights)
    return out


def exact_hit(
    store: HistoryStore, workload_key: str, target_key: str, *, space_id: str | None = None, min_trials: int = 1
):
    """The record :func:`match` reuses as it is (score 1.0), or None: the fastest usable
    record (ok, not found wrong) of this very workload on this target, in knob space
    ``space_id`` if given, once at least ``min_trials`` configs of it were measured there.

    A layer measured fewer times was started, not tuned: a one-trial probe the budget
    never came back to, or a run killed after its first batch. Reused as it is, it stayed
    at that first draw in every later tune; below ``min_trials`` it is matched like any
    layer instead (its own records make it the closest neighbour) and tuned on from where
    it stopped.
    """
    best = store.best(workload_key, target_key, space_id=space_id)
    if best is None or min_trials <= 1:
        return best
    return best if store.count_measured(workload_key, target_key, space_id) >= min_trials else None


def match(
    store: HistoryStore,
    workload: WorkloadInfo,
    target_key: str,
    *,
    weights: Sequence[float] | None = None,
    max_neighbours: int = 8,
    space_id: str | None = None,
    exclude: Collection[str] = (),
    other_target_discount: float = OTHER_TARGET_DISCOUNT,
    summary: Sequence[dict] | None = None,
    min_trials: int = 1,
) -> MatchResult:
    """Score ``workload`` against everything history holds for its op class.

    With ``space_id``, only a winner from that knob space is an exact hit: a baseline
    record or a config from an older version of the space cannot be reused as is.
    Workload keys in ``exclude`` are treated as absent from history (an experiment's
    target layers, which history from other layers must not contain).
    ``other_target_discount`` scales the similarity of another target's records (an
    experiment's knob: how much history from other hardware should count).
    ``summary`` is ``store.summary(searched_only=True)`` when the caller scores many
    layers against one state of history (it is the costly query, a pass over records).
    ``min_trials``: how many measured configs make this target's winner an exact hit
    (:func:`exact_hit`).
    """
    best = None if workload.key in exclude else exact_hit(store, workload.key, target_key, space_id=space_id, min_trials=min_trials)
    if best is not None:
        return MatchResult(1.0, True, best)
    candidates: list[tuple[Neighbour, int]] = []  # with its count of successful records
    same_class = {w.key: w for w in store.workloads(op_class=workload.op_class)}
    rows = store.summary(searched_only=True) if summary is None else summary
    found = []
    for row in rows:  # a default-schedule timing is no evidence (searched_only)
        if row["n_ok"] == 0 or row["op_class"] != workload.op_class:
            continue
        other = same_class.get(row["workload_key"])
        if other is None or other.key in exclude:
            continue
        found.append((row, other))
    apart = iter(similarities(workload.features, [other.features for row, other in found
                                                  if other.key != workload.key
                                                  and other.batch_invariant_key != workload.batch_invariant_key], weights))
    for row, other in found:
        if other.key == workload.key:
            sim, relation = 1.0, "same layer"  # measured on another target
        elif other.batch_invariant_key == workload.batch_invariant_key:
            sim, relation = SAME_LAYER_OTHER_BATCH, "other batch"
        else:
            # one sample's features leave the batch out; a layer at another batch size
            # counts as the same layer there does, so that one ranks at least as high
            sim, relation = next(apart), "features"
            if at_another_batch(workload, other):
                sim *= SAME_LAYER_OTHER_BATCH
        another = relation == "other batch" or at_another_batch(workload, other)
        same = row["target_key"] == target_key
        weight = 1.0 if same else other_target_discount
        candidates.append((Neighbour(other, row["target_key"], sim * weight, row["best_latency"], weight, same, relation, another),
                           int(row["n_ok"])))
    # A layer this target has measured is taken from this target alone: another target's
    # records of it would only displace this target's records of other layers. With
    # both CPUs' histories of the same 30 layers, a `znver3` copy of a source layer took
    # a neighbour slot on a `znver4` from a less similar `znver4` layer, and the first
    # conv reached cold XGBoost's final at trial 41 instead of 21.5 (run 34,
    # benchmarks/HISTORY_GUIDED.md). Unless this target's copy is thin (fewer than half
    # the other's successful records: a one-trial probe here, a full run there): then
    # the other copy comes along, holding what this target has not measured yet.
    here = {n.workload.key: n_ok for n, n_ok in candidates if n.same_target}
    neighbours = [n for n, n_ok in candidates if n.same_target or 2 * here.get(n.workload.key, 0) < n_ok]
    neighbours.sort(key=lambda n: (-n.similarity, n.relation != "other batch"))  # the same layer first among equals
    neighbours = neighbours[:max_neighbours]
    score = neighbours[0].similarity if neighbours else 0.0
    return MatchResult(min(score, 0.99), False, None, tuple(neighbours))
