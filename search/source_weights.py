"""Which source layer to believe: the one that ranks this layer's own measurements best.

Layer similarity says which history *should* transfer; the layer's own measurements say
which history *does*. On the 256-deep llvm history the two disagree where transfer
failed. For ResNet-18's 3x3 256->256 conv (conv2d7) the most similar source layer
(similarity 0.90 after importance weighting) outweighs the next (0.68). Yet of the
2,241 configs measured on the layer, the 50 that a ranker of the first source alone
scores highest include none faster than 406.7 us, while the second source's ranker's
top 50 include one at 270.3 us (best known: 239.2). The joint prior model followed the
first, and in run 7 the transfer tuner stalled at 392.7 us in three of five seeds.

So, after RGPE (Feurer et al., "Scalable Meta-Learning for Bayesian Optimization using
Ranking-Weighted Gaussian Process Ensembles", 2018): each source workload gets its own
ranker, fitted once on its records; once the layer has measured enough configs, each
source is weighted by the probability that it misranks the fewest pairs of them,
estimated over bootstrap resamples of the layer's measurements. A source that never
ranks best gets weight 0 and leaves the prior model. Why resample rather than take
the argmin: with eight points two sources' losses often differ by one pair, and the
resamples turn such a near-tie into split weight rather than all or nothing.

A tie counts as half a misranked pair: counted as right, a ranker that cannot tell two
configs apart (a ranker of another layer scores alike every config that differs only in
knobs it never split on) would beat one that orders them wrongly *and* one that orders
them right. Ties are rare (at most 4% of pairs on conv2d7), but the bootstrap decides
between near-equal losses, so which source wins moves. Measured (run 12 against run 8),
the finals moved within seed noise on five layers; on conv2d7 the median went from 386.4
to 324.7 us, one seed of five going from 386.4 to 293.1 and another from 276.6 to 324.7.
Ten seeds (run 16) put it at 389.9 us against cold XGBoost's 379.0: no measurable gain.
The estimator, not that figure, is the reason for the change.

The layer's own model can compete too (``own=True``, RGPE's target model, scored on
cross-validation folds so that it never judges a point it trained on). Transfer XGBoost
can then let history's margin count only by the share the sources win. It measured
worse (run 12: conv2d7 390.3 against 324.7 us, MobileNetV2 14.7 against 14.0) and is
off by default. In replays the own model won most of the weight from about 40 results
on, on a layer history serves well (conv2d4) as on one it does not (conv2d7): ranking
the few configs a layer has measured is not the same as knowing the rest of the space.

Transfer XGBoost weighs its sources this way by default. The guided GA does only when
asked (``rank_sources=True``): for its immigrants it measured worse (run 10), because
the source that ranks a layer's measured configs best need not hold the config that
transfers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    from autotune.search.cost_model import CostModel

__all__ = [
    "MAX_RANKED_SOURCES",
    "OWN",
    "SourceRankers",
    "best_ranker_probability",
    "cross_validated_scores",
    "misranked_pair_matrix",
]

#: Sources ranked at most, the most similar ones; the rest are dropped once ranking starts.
#: Among hundreds of noisy rankers the one that fits a few dozen points best is mostly
#: the luckiest, and each costs a model fit.
MAX_RANKED_SOURCES = 16

#: The key under which :meth:`SourceRankers.row_weights` reports the layer's own model,
#: when it competes with the sources (no workload key looks like this).
OWN = "(this layer)"

#: Folds of the own model's cross-validation: few, because each fold costs a model fit
#: on every retraining.
OWN_FOLDS = 4


def misranked_pair_matrix(scores: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """(S, n, n): 1 where ranker s scores measured point i below j though i was faster,
    0.5 where it scores them equal (a tie tells them apart no better than a coin), else 0.

    ``scores`` (S, n): each ranker's score of the n measured configs, higher = better.
    ``latency`` (n,): measured latency, ``inf`` for failures (slower than any success;
    two failures form no pair).
    """
    scores = np.atleast_2d(np.asarray(scores, dtype=float))
    lat = np.asarray(latency, dtype=float)
    faster = lat[:, None] < lat[None, :]  # i strictly faster than j
    below = scores[:, :, None] < scores[:, None, :]
    tied = scores[:, :, None] == scores[:, None, :]
    return faster[None, :, :] * (below + 0.5 * tied)


def best_ranker_probability(
    scores: np.ndarray,
    latency: np.ndarray,
    rng: np.random.Generator,
    *,
    n_boot: int = 128,
) -> np.ndarray:
    """Per source, the share of bootstrap resamples of the measured points in which it
    misranks the fewest pairs (ties share the win). Sums to 1 over sources.

    ``scores`` (S, n) and ``latency`` (n,) as in :func:`misranked_pair_matrix`.
    """
    scores = np.atleast_2d(np.asarray(scores, dtype=float))
    n_src, n = scores.shape
    if n_src == 0:
        return np.zeros(0)
    if n < 2:
        return np.full(n_src, 1.0 / n_src)
    wrong = misranked_pair_matrix(scores, latency)
    # A resample is a multiplicity per point; the misranked pairs it holds are c^T M c.
    picks = rng.integers(n, size=(n_boot, n))
    counts = np.zeros((n_boot, n))
    np.add.at(counts, (np.repeat(np.arange(n_boot), n), picks.ravel()), 1.0)
    losses = np.einsum("bi,sij,bj->bs", counts, wrong, counts)
    winners = losses == losses.min(axis=1, keepdims=True)
    share = winners / winners.sum(axis=1, keepdims=True)
    return share.mean(axis=0)


def cross_validated_scores(
    X: np.ndarray, perf: np.ndarray, fold_seed: int, folds: int = OWN_FOLDS, **model_args: int
) -> np.ndarray:
    """Each measured config's score by a ranker fitted on the *other* folds of the
    layer's own results: what the layer's own model would say about configs it has not
    seen, comparable with a source ranker's scores, which never saw them either.

    ``fold_seed`` and n seed the split; ``model_args`` go to
    :class:`autotune.search.cost_model.CostModel`. A fold whose training part has fewer than two
    distinct labels scores its points 0 (ties, which :func:`misranked_pair_matrix`
    counts as half wrong).
    """
    from autotune.search.cost_model import CostModel

    perf = np.asarray(perf, dtype=float)
    n = len(perf)
    out = np.zeros(n)
    if n < 2:
        return out
    k = min(folds, n)
    fold = np.random.default_rng([int(fold_seed) & 0xFFFFFFFF, n]).permutation(n) % k
    for f in range(k):
        test, train = fold == f, fold != f
        if len(np.unique(perf[train])) < 2:
            continue
        model = CostModel(nthread=1, **model_args).fit(X[train], perf[train])
        out[test] = model.predict(X[test])
    return out


class SourceRankers:
    """One XGBoost ranker per source workload of a tuner's priors, each fitted on first
    use on that workload's records alone (priors never change during a run).

    ``X`` (rows x features), ``y`` (normalized performance within the workload) and
    ``groups`` (workload id per row, an index into ``names``, the workload keys) describe
    the priors; ``model_args`` go to :class:`autotune.search.cost_model.CostModel`.
    """

    #: Records a source's ranker trains on at most (a seeded random subset beyond that):
    #: a few thousand pin down a 50-tree ranker, and ten 10k-record sources took 4 s.
    max_rows = 2048

    def __init__(
        self,
        X: np.ndarray | Callable[[], np.ndarray],
        y: np.ndarray,
        groups: np.ndarray,
        names: Sequence[str],
        **model_args: int,
    ) -> None:
        # X may come as a function, called on first use: a tuner that never weighs its
        # sources then never featurizes 100k priors for them.
        self._X = X
        self.y, self.groups = y, np.asarray(groups)
        self.names = list(names)
        self.model_args = model_args
        self._models: dict[int, CostModel] = {}

    @property
    def X(self) -> np.ndarray:
        if callable(self._X):
            self._X = self._X()
        return self._X

    def scores(self, group: int, X_own: np.ndarray) -> np.ndarray:
        """Workload ``group``'s scores of ``X_own``, higher = better."""
        from autotune.search.cost_model import CostModel

        model = self._models.get(group)
        if model is None:
            rows = np.flatnonzero(self.groups == group)
            if len(rows) > self.max_rows:
                rng = np.random.default_rng([int(self.model_args.get("seed", 0)) & 0xFFFFFFFF, group])
                rows = np.sort(rng.choice(rows, self.max_rows, replace=False))
            model = CostModel(nthread=1, **self.model_args).fit(self.X[rows], self.y[rows])
            self._models[group] = model
        return model.predict(X_own)

    def weights(
        self, groups: np.ndarray, X_own: np.ndarray, perf: np.ndarray, seed: int, own: bool = False
    ) -> np.ndarray:
        """:func:`best_ranker_probability` of each workload in ``groups`` on the layer's
        own measured configs ``X_own``, whose performance ``perf`` is any measure where
        higher is better (1 / latency, or normalized throughput), 0 for a failure. The
        bootstrap is seeded by ``seed`` and the number of measurements: the same evidence
        always gives the same weights. With ``own`` the layer's own cross-validated model
        competes too, and its share comes last."""
        if not len(groups) and not own:
            return np.zeros(0)
        rows = [self.scores(int(g), X_own) for g in groups]
        if own:
            rows.append(cross_validated_scores(X_own, perf, seed, **self.model_args))
        scores = np.vstack(rows)
        perf = np.asarray(perf, dtype=float)
        with np.errstate(divide="ignore"):
            latency = np.where(perf > 0, 1.0 / perf, np.inf)
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, len(latency)])
        return best_ranker_probability(scores, latency, rng)

    def row_weights(
        self,
        groups: np.ndarray,
        similarity: np.ndarray,
        X_own: Callable[[], np.ndarray],
        perf: np.ndarray,
        seed: int,
        min_results: int = 0,
        own: bool = False,
    ) -> tuple[np.ndarray, dict[str, float]]:
        """Per prior row (workload ``groups[i]``, similarity ``similarity[i]``) its
        workload's :meth:`weights`, and those weights by workload key. Only the
        :data:`MAX_RANKED_SOURCES` workloads of highest similarity are ranked; rows of the
        others get 0. Until there are ``min_results`` successful results (fewer rank too
        few pairs to tell sources apart), or while there is nothing to compare (one
        workload, and the layer's own model not competing), every row keeps weight 1 and
        nothing is reported. ``X_own`` featurizes the results when needed.

        With ``own``, the layer's own model (:func:`cross_validated_scores`) competes as
        in RGPE, under the key :data:`OWN`: the sources then share what it does not win,
        and where it ranks the layer's results better than every source, they all leave.
        """
        groups = np.asarray(groups)
        uniq = np.unique(groups)
        if len(uniq) < (1 if own else 2) or int((np.asarray(perf) > 0).sum()) < min_results:
            return np.ones(len(groups)), {}
        X_own = X_own()
        if len(uniq) > MAX_RANKED_SOURCES:
            top = np.zeros(len(uniq))
            np.maximum.at(top, np.searchsorted(uniq, groups), np.asarray(similarity, dtype=float))
            uniq = np.sort(uniq[np.argsort(-top, kind="stable")[:MAX_RANKED_SOURCES]])
        p = self.weights(uniq, X_own, perf, seed, own=own)
        pos = np.clip(np.searchsorted(uniq, groups), 0, len(uniq) - 1)
        row = np.where(uniq[pos] == groups, p[pos], 0.0)
        by_workload = {self.names[int(g)]: float(pg) for g, pg in zip(uniq, p)}
        if own:
            by_workload[OWN] = float(p[-1])
        return row, by_workload
