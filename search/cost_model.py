"""XGBoost ranking cost model with smoothed feature importances.

Why ranking: a tuner only needs to know which configs are *better*, and latencies of
different layers (or runs on a busy machine) differ in scale but rarely in order. So the
target is normalized throughput (``best_latency / latency`` in (0, 1], failures 0) and the
objective is ``rank:pairwise``: pairs are formed within a group only, one group per layer,
which is exactly what transfer across layers needs. XGBoost weights ranking *groups*, not
rows, so per-row weights are averaged per group (rows of one prior workload share one
similarity anyway). With fewer than 2 distinct labels there are no pairs to rank and the
model falls back to ``reg:squarederror``.

Why importance smoothing: split-count ("weight") importances of a 50-tree model jump
around between retrainings on a few more points. The similarity of layers is weighted by
these importances, and a weight vector that flips every batch would flip which priors
are kept; an exponential moving average across retrainings keeps it steady.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

# XGBoost's OpenMP team spins at barriers by default; on cores shared with builders,
# runners or other processes a 2-thread training then stalls 10x or worse (observed:
# 0.47 s -> 7.6 s per retrain on a busy 2-core box). Passive waiting removes most of it.
# Only a default: an explicit setting wins, and it only acts if OpenMP is not yet loaded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import xgboost as xgb  # noqa: E402

__all__ = ["MAX_PRIOR_ROWS", "CostModel", "capped_rows"]

#: History rows a transfer model trains on at most (:func:`capped_rows` picks them).
MAX_PRIOR_ROWS = 20000


def capped_rows(score: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of at most ``cap`` training rows, sorted: half the highest ``score``
    (similarity x performance, say), half drawn at random from the rest.

    Training cost grows with rows while 20k rows already pin down a 50-tree model; the
    best rows carry what matters most to transfer, the random half keeps the model aware
    of what is bad.
    """
    n = len(score)
    if n <= cap:
        return np.arange(n)
    order = np.argsort(-np.asarray(score, dtype=float), kind="stable")
    top = order[: cap // 2]
    rest = order[cap // 2 :]
    pick = rng.choice(len(rest), size=cap - len(top), replace=False)
    return np.sort(np.concatenate([top, rest[pick]]))


class CostModel:
    """A small, fast XGBoost ranker (``fit`` / ``predict``) with EMA-smoothed importances."""

    #: Training sets smaller than this train single-threaded (see :meth:`fit`).
    single_thread_rows = 4096

    def __init__(
        self,
        *,
        n_estimators: int = 50,
        max_depth: int = 6,
        learning_rate: float = 0.3,
        nthread: int = 2,
        ema_decay: float = 0.6,
        pairs_per_sample: int = 8,
        seed: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.params = {
            "max_depth": max_depth,
            "eta": learning_rate,
            "nthread": nthread,
            "tree_method": "hist",
            "min_child_weight": 1e-3,
            "subsample": 1.0,
            "seed": seed,
            "verbosity": 0,
        }
        self.nthread = nthread
        self.pairs_per_sample = pairs_per_sample
        self.ema_decay = ema_decay
        self.booster: xgb.Booster | None = None
        self.objective: str | None = None
        self.n_features: int | None = None
        self.n_fits = 0
        self.raw_importance: np.ndarray | None = None
        self._smoothed: np.ndarray | None = None

    # --- training -------------------------------------------------------------------------
    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        sample_weight: Sequence[float] | None = None,
        groups: Sequence[int] | None = None,
        base_margin: Sequence[float] | None = None,
    ) -> "CostModel":
        """Train on rows ``X`` with normalized-throughput labels ``y``.

        ``groups`` (one id per row) says which rows may be compared: rows of different
        layers are never paired. Default: one group. ``base_margin`` (one score per row,
        e.g. another model's prediction) is where boosting starts: the trees learn only
        the correction, and :meth:`predict` must then be given the same kind of margin.
        """
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float32)
        n = X.shape[0]
        if n == 0:
            raise ValueError("cannot fit a cost model on no data")
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        g = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups)
        m = None if base_margin is None else np.asarray(base_margin, dtype=np.float32)
        self.n_features = X.shape[1]

        ranked = len(np.unique(y)) >= 2
        if ranked:
            order = np.argsort(g, kind="stable")
            X, y, w, g = X[order], y[order], w[order], g[order]
            m = None if m is None else m[order]
            uniq, starts, counts = np.unique(g, return_index=True, return_counts=True)
            group_w = np.add.reduceat(w, starts) / counts
            dtrain = xgb.DMatrix(X, label=y, missing=np.nan)
            dtrain.set_group(counts)
            dtrain.set_weight(group_w)
            params = dict(
                self.params,
                objective="rank:pairwise",
                lambdarank_pair_method="mean",
                lambdarank_num_pair_per_sample=self.pairs_per_sample,
            )
            self.objective = "rank:pairwise"
        else:
            dtrain = xgb.DMatrix(X, label=y, weight=w, missing=np.nan)
            params = dict(self.params, objective="reg:squarederror")
            self.objective = "reg:squarederror"
        if m is not None:
            dtrain.set_base_margin(m)
        # One thread below a few thousand rows: there OpenMP barriers cost more than the
        # work, and on shared cores a spinning 2-thread team can stall 10-50x.
        params["nthread"] = 1 if n < self.single_thread_rows else self.nthread
        self.booster = xgb.train(params, dtrain, num_boost_round=self.n_estimators)
        # Annealing predicts ~100-row batches: single-threaded for the same reason.
        self.booster.set_param({"nthread": 1})
        self.n_fits += 1
        self._update_importance()
        return self

    def predict(self, X: np.ndarray, base_margin: Sequence[float] | None = None) -> np.ndarray:
        """Scores, higher = better; only their order is meaningful under ranking."""
        if self.booster is None:
            raise RuntimeError("predict() before fit()")
        X = np.asarray(X, dtype=np.float32)
        if X.shape[0] == 0:
            return np.zeros(0)
        margin = None if base_margin is None else np.asarray(base_margin, dtype=np.float32)
        return np.asarray(self.booster.inplace_predict(X, missing=np.nan, base_margin=margin), dtype=float)

    @property
    def fitted(self) -> bool:
        return self.booster is not None

    # --- importances ----------------------------------------------------------------------
    def _update_importance(self) -> None:
        assert self.booster is not None and self.n_features is not None
        score = self.booster.get_score(importance_type="weight")
        raw = np.zeros(self.n_features)
        for name, val in score.items():
            i = int(name[1:]) if name.startswith("f") else -1
            if 0 <= i < self.n_features:
                raw[i] = val
        if raw.sum() <= 0:
            # A model with no splits (constant labels) says nothing about importance:
            # keep the running estimate rather than pulling it towards zero.
            self.raw_importance = None
            return
        raw /= raw.sum()
        self.raw_importance = raw
        if self._smoothed is None or self._smoothed.shape != raw.shape:
            self._smoothed = raw.copy()
        else:
            sm = self.ema_decay * self._smoothed + (1.0 - self.ema_decay) * raw
            self._smoothed = sm / sm.sum()

    @property
    def importance(self) -> np.ndarray | None:
        """EMA-smoothed split-count importances, summing to 1 (None before any split)."""
        return None if self._smoothed is None else self._smoothed.copy()

    def importance_slice(self, start: int, stop: int | None = None) -> np.ndarray | None:
        """Importances of columns ``start:stop`` renormalized to sum 1 (None if all zero)."""
        if self._smoothed is None:
            return None
        part = self._smoothed[start:stop]
        total = part.sum()
        return None if total <= 0 else part / total
