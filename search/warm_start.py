"""Which history configs a guided tuner measures first.

Ranking every prior by similarity x normalized performance lets the most similar source
layer fill the whole warm start: at similarity 0.84, each of its configs within 0.66 of
its best outranks the winner of a layer at similarity 0.55. Those configs are mostly
variants of one schedule, so the first batches explore one neighbourhood. On the
256-deep llvm history (run 6), ResNet-18's 3x3 128->128 conv drew its first 31 configs
from the most similar source layer, none faster than 324 us there; the configs of a
layer at similarity 0.59 came from the 43rd on and measured a median 253 us (best
known: 244.5). Taken by turns, the best of the first 8 is 254 us against 347 us.

So the order here is by turns: the winner of every kept source layer (most similar
first), then every layer's second best, and so on. The paper's guided GA seeds "the best
configs of matched history layers"; this is that, applied to both guided tuners.

Turns decide *which* configs; :class:`HistoryRanker` decides in which order the
guided GA measures them. A source's ranking of its own configs says little about how
they rank on another layer: on ResNet-18's conv2d3 the first 32 configs by turns measure
188 to 797 us but one, 151.2 us, the 14th best of a source at similarity 0.55 and so
28th in turn. A ranker trained on all kept sources together, layer features included
(as transfer XGBoost's prior model is), measures it 16th. Over six llvm layers (run 25)
the guided GA then reaches the plain GA's final latency at trial 1, 1, 16, 5, 1 and 4
instead of 8, 2, 28, 3, 1 and 1: later on two layers, by two and three trials, and
much sooner where turns did worst.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

import numpy as np

__all__ = ["HistoryRanker", "history_seed_order", "ranked_history_keys"]


def history_seed_order(
    mapped: Sequence[Hashable | None],
    groups: np.ndarray,
    perf: np.ndarray,
    similarity: np.ndarray,
    limit: int,
) -> list[Hashable]:
    """Distinct mapped configs of the prior rows, by turns across source workloads.

    ``mapped[i]`` is row i's config mapped onto this layer's space (None: no mapping),
    ``groups[i]`` its source workload, ``perf[i]`` its normalized performance on that
    workload (best latency / its latency, 0 for failures), ``similarity[i]`` the kept
    weight of that workload. Rows that failed, or repeat a config already ranked, take no
    turn. At most ``limit`` configs.
    """
    n = len(mapped)
    if not n or limit <= 0:
        return []
    groups, perf, similarity = np.asarray(groups), np.asarray(perf, dtype=float), np.asarray(similarity, dtype=float)
    # Turn of each row within its workload: 0 for the workload's best distinct config.
    # A workload's turns at or past ``limit`` can never be reached (its own earlier turns
    # already fill the list), so each workload is read only that far.
    turn = np.full(n, np.inf)
    by_workload = np.lexsort((-perf, groups))  # workload by workload, best first
    sorted_groups = groups[by_workload]
    bounds = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1], True])
    for start, stop in zip(bounds[:-1], bounds[1:]):
        seen: set[Hashable] = set()
        for row in by_workload[start:stop]:
            if perf[row] <= 0 or len(seen) >= limit:
                break  # best first: the rest failed too, or lie past the last turn
            key = mapped[row]
            if key is None or key in seen:
                continue
            seen.add(key)
            turn[row] = len(seen) - 1
    order = np.lexsort((-perf, -similarity, turn))  # by turn, then most similar workload, then best
    out: list[Hashable] = []
    taken: set[Hashable] = set()
    for row in order:
        if not np.isfinite(turn[row]):
            break
        key = mapped[row]
        if key in taken:  # the same config from another workload: ranked once
            continue
        taken.add(key)
        out.append(key)
        if len(out) >= limit:
            break
    return out


class HistoryRanker:
    """An XGBoost ranker of this layer's configs trained on history alone.

    The prior rows are ``configs`` measured on layers with ``config_layer_features``, at
    normalized performance ``perf`` on their workload ``groups``, weighted by
    ``similarity`` (at most ``max_rows``, default :data:`autotune.search.cost_model.MAX_PRIOR_ROWS`;
    :func:`autotune.search.cost_model.capped_rows`). One ranking group per source workload and
    the layer features as columns, as transfer XGBoost's prior model: sources agree on
    what makes a config good for a layer like this one, not on latencies.
    ``encoder`` featurizes configs with this layer's features (``encoder_for(space,
    len(layer_features))``).
    """

    def __init__(
        self,
        configs: Sequence[Mapping[str, Any]],
        config_layer_features: Sequence[Sequence[float]],
        perf: np.ndarray,
        similarity: np.ndarray,
        groups: np.ndarray,
        encoder: Any,
        layer_features: Sequence[float],
        *,
        seed: int = 0,
        max_rows: int | None = None,
    ) -> None:
        from autotune.search.cost_model import MAX_PRIOR_ROWS, CostModel, capped_rows

        self.encoder = encoder
        self.layer_features = list(layer_features)
        self.model: CostModel | None = None
        if not len(configs):
            return
        perf, similarity, groups = (np.asarray(a) for a in (perf, similarity, groups))
        cap = MAX_PRIOR_ROWS if max_rows is None else max_rows
        rows = capped_rows(similarity * perf, cap, np.random.default_rng([int(seed) & 0xFFFFFFFF, len(perf)]))
        X = encoder.encode_configs([configs[i] for i in rows], [tuple(config_layer_features[i]) for i in rows])
        self.model = CostModel(seed=seed).fit(X, perf[rows], similarity[rows], groups[rows])

    def features(self, candidates: np.ndarray) -> np.ndarray:
        """Feature rows of ``candidates`` (index rows of this layer's space)."""
        return self.encoder.encode_indices(np.asarray(candidates, dtype=np.int64), self.layer_features)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """History's score of feature rows ``X`` (from :meth:`features`), higher = better;
        zeros with no priors. For callers that feed the same rows to another model too."""
        if self.model is None or not len(X):
            return np.zeros(len(X))
        return self.model.predict(X)

    def score(self, candidates: np.ndarray) -> np.ndarray:
        """History's score of each candidate, higher = better (zeros with no priors)."""
        return self.predict(self.features(candidates))

    def order(self, candidates: np.ndarray) -> np.ndarray:
        """Positions of ``candidates``, best first. Ties keep the candidates' order, so
        an uninformative model leaves it as it was."""
        return np.argsort(-self.score(candidates), kind="stable")

    @classmethod
    def for_rows(
        cls,
        priors: Sequence[Any],
        rows: np.ndarray,
        similarity: np.ndarray,
        perf: np.ndarray,
        groups: np.ndarray,
        encoder: Any,
        layer_features: Sequence[float],
        *,
        seed: int = 0,
    ) -> "HistoryRanker":
        """The ranker of prior records ``priors[rows]`` (:class:`autotune.search.tuner.PriorRecord`)
        at their kept ``similarity``; ``perf`` and ``groups`` index all of ``priors``
        (:func:`autotune.search.tuner.prior_groups`)."""
        return cls(
            [priors[i].config for i in rows], [priors[i].layer_features for i in rows],
            perf[rows], similarity, groups[rows], encoder, layer_features, seed=seed,
        )


def ranked_history_keys(
    priors: Sequence[Any],
    mapped: Sequence[Hashable | None],
    rows: np.ndarray,
    similarity: np.ndarray,
    perf: np.ndarray,
    groups: np.ndarray,
    encoder: Any,
    layer_features: Sequence[float],
    limit: int,
    *,
    seed: int = 0,
) -> list[Hashable]:
    """History's first ``limit`` configs by turns (:func:`history_seed_order` over the
    kept rows ``rows`` at ``similarity``), best first as a :class:`HistoryRanker` of the
    same rows predicts for this layer: the guided GA's first population, in the order it
    measures it. ``mapped`` indexes all of ``priors`` (each record's config mapped onto
    this layer's space), as ``perf`` and ``groups`` do."""
    rows = np.asarray(rows, dtype=np.int64)
    keys = history_seed_order([mapped[i] for i in rows], groups[rows], perf[rows], similarity, limit)
    if not keys:
        return []
    ranker = HistoryRanker.for_rows(priors, rows, similarity, perf, groups, encoder, layer_features, seed=seed)
    return [keys[i] for i in ranker.order(np.array(keys, dtype=np.int64))]

