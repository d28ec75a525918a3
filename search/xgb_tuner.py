"""Model-guided search: an XGBoost ranker scores configs, simulated annealing picks them.

``XGBTuner`` ("xgb") is the cold AutoTVM-style tuner: random until it has ``min_train``
results, then each batch retrains on its own measurements and anneals over the space
with the model as fitness. ``TransferXGBTuner`` ("tl_xgb") learns from history as well:
priors of similar layers, filtered by :func:`autotune.search.similarity.filter_priors`, one
ranking group per workload weighted by similarity. With usable priors it needs no random
warm-up: the first batch holds the best prior configs mapped onto this space plus the
prior-only model's picks. How its own results meet the priors is ``transfer``:

* ``"margin"`` (default): a prior-only model's score is the base margin of a model
  trained on the layer's own results, as AutoTVM's transfer learning did. Own data only
  *corrects* the priors' ranking where it has evidence; elsewhere the priors still rank.
* ``"joint"``: one model on priors and own results together, own results weighted to
  match the priors' total pull. Kept for comparison: where history ranks this layer
  wrongly, its rows keep competing with the layer's own evidence.

Which source workloads the priors come from is re-judged as results arrive: the
similarity filter first, then (``rank_sources``, default on) each kept source is weighted
by its chance of ranking the layer's own results best, from a ranker fitted on that
source alone (:mod:`autotune.search.source_weights`). Similarity picks the history that should
transfer; this keeps the history that does. With ``rank_own`` as well (off by default:
it measured worse in run 12) the layer's own model competes with the sources, and
history's margin counts only by the share the sources win.

Once the warm start is over, a share ``history_share`` (a quarter) of every model batch
goes to history's first 32 configs, fixed before any result and measured best first as a
ranker of history alone orders them: the guided GA's first population, in its order. The
filter that feeds the model is re-judged as results arrive, and on ResNet-18's conv2d3 it
drops the one source whose config transfers (151.2 us, against 175.5 us where transfer
XGBoost ended without it; run 29 in ``benchmarks/HISTORY_GUIDED.md``).

A fraction ``epsilon`` of every model batch is random, because a ranker trained on a
narrow region is confidently wrong elsewhere and only exploration can show it. Picking
the model's batch for knob-value coverage instead (AutoTVM's diversity filter, run 28 in
``benchmarks/HISTORY_GUIDED.md``) moved no layer's finals by a rank test, helped on one
layer and leaned higher on four: not kept. Nor a share of each batch from the model's
best children of the layer's best measured configs, the locality the guided GA's
screening has (run 30, a replay screen: conv2d7 no sooner, MobileNetV2 later).
``local_share`` (off by default) opens each model batch with that share of configs one
knob away from the best measured one, in random order. On a `znver5` history only 32
trials deep it took conv2d7 off a 300 us plateau history's winners sit on (235.9 us
against 298.0 in the median of ten seeds) and ended MobileNetV2 lower, at some cost on
conv2d4 (run 45b); on a deep one it needs the same trials but ends conv2d7 10% higher in
the median (run 45c); on a `znver4` history 32 deep it ended the first conv lower and
three layers higher (run 46b). Where the guided GA hands a shallow history's layer over
(:mod:`autotune.search.ga_tuner`), its successor makes these moves: that is what was measured.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, ClassVar, Iterator, Sequence

import numpy as np

from autotune.search.cost_model import MAX_PRIOR_ROWS, CostModel, capped_rows
from autotune.search.features import FeatureEncoder, encoder_for
from autotune.search.repair import judge_mapped_priors
from autotune.search.similarity import SIMILARITY_FLOOR, filter_priors, importance_weights, leaves_out_unrunnable, only_runnable
from autotune.search.source_weights import OWN, SourceRankers
from autotune.search.tuner import PriorRecord, Tuner, prior_groups
from autotune.search.warm_start import history_seed_order, ranked_history_keys
from autotune.templates.space import Config, KnobSpace, config_to_json

__all__ = ["TransferXGBTuner", "XGBTuner", "observing_fits"]


class XGBTuner(Tuner):
    """Cold model-based tuner (ignores priors)."""

    name = "xgb"
    uses_priors = False
    #: Called with the tuner after each fit it makes while proposing, in any instance of
    #: this class or a subclass: how offline analyses watch a model learn inside tuners a
    #: benchmark makes (:func:`observing_fits`). Empty in normal use.
    fit_observers: ClassVar[list[Callable[["XGBTuner"], None]]] = []

    def __init__(
        self,
        space: KnobSpace,
        *,
        seed: int = 0,
        priors: Sequence[PriorRecord] = (),
        layer_features: Sequence[float] = (),
        min_train: int = 8,
        epsilon: float = 0.15,
        sa_points: int = 128,
        sa_iters: int = 40,
        n_estimators: int = 50,
        max_depth: int = 6,
        nthread: int = 2,
        similarity_threshold: float = SIMILARITY_FLOOR,
        max_prior_rows: int = MAX_PRIOR_ROWS,
        prior_seed_frac: float = 0.5,
        transfer: str = "margin",
        rank_sources: bool = True,
        rank_own: bool = False,
        history_share: float = 0.25,
        history_list: int = 32,
        local_share: float = 0.0,
        plausible_priors: bool | None = None,
        repair_history: bool = False,
    ) -> None:
        super().__init__(space, seed=seed, priors=priors, layer_features=layer_features)
        # History's configs that, mapped onto this layer, could not run on the device
        # (:meth:`KnobSpace.fits_device_rows`) are left out of training and warm start;
        # by default (None) where history matches the layer weakly. Or, for what the
        # tuner measures of history's, moved to the nearest config the layer can run
        # (:mod:`autotune.search.repair`); the model still learns from the sources.
        self.repair_history = bool(repair_history)
        self.plausible_priors = leaves_out_unrunnable(plausible_priors, self.priors, repair=self.repair_history)
        if not 0.0 <= float(local_share) <= 1.0:
            raise ValueError(f"local_share must be a fraction of the batch in [0, 1], not {local_share!r}")
        self.local_share = float(local_share)
        self.min_train = min_train
        self.epsilon = epsilon
        self.sa_points = sa_points
        self.sa_iters = sa_iters
        self.similarity_threshold = similarity_threshold
        self.max_prior_rows = max_prior_rows
        self.prior_seed_frac = prior_seed_frac
        if transfer not in ("margin", "joint"):
            raise ValueError(f"transfer must be 'margin' or 'joint', not {transfer!r}")
        self.transfer = transfer
        self.rank_sources = rank_sources
        if rank_own and not rank_sources:
            raise ValueError("rank_own competes with the source rankers: it needs rank_sources")
        self.rank_own = rank_own
        if not 0.0 <= float(history_share) <= 1.0:
            raise ValueError(f"history_share must be a fraction of the batch in [0, 1], not {history_share!r}")
        self.history_share = float(history_share)
        self.history_list = int(history_list)
        self._history_keys: list[tuple[int, ...]] | None = None
        # How far history's margin counts under margin transfer: 1 minus the share the
        # layer's own model wins against the sources (rank_own), else 1.
        self.prior_scale = 1.0
        self.encoder: FeatureEncoder = encoder_for(space, len(self.layer_features))
        self.model = CostModel(
            n_estimators=n_estimators, max_depth=max_depth, nthread=nthread, seed=seed
        )
        # "margin" transfer: the model of history alone, refit only when the kept priors
        # change; self.model then learns the layer's own correction on top of it.
        self.prior_model: CostModel | None = None
        self._prior_fit_key: bytes | None = None
        self._own_fitted = False
        self._sizes = np.array([len(k) for k in space.knobs], dtype=np.int64)
        # Only spaces that override the static check pay for it during annealing.
        self._checks_plausible = type(space).is_plausible is not KnobSpace.is_plausible
        self._mutable = np.flatnonzero(self._sizes > 1)
        self._fitted_on = -1
        self._prior_seeds: list[tuple[int, ...]] = []
        self._n_prior_kept = 0
        self.source_weights: dict[str, float] = {}
        if self.uses_priors and self.priors:
            self._prepare_priors()
            self._rankers = SourceRankers(
                self._prior_X, self._prior_y, self._prior_group, self._prior_workloads,
                n_estimators=n_estimators, max_depth=max_depth, seed=seed,
            )
            if self.transfer == "margin":
                self.prior_model = CostModel(
                    n_estimators=n_estimators, max_depth=max_depth, nthread=nthread, seed=seed
                )

    # --- priors ---------------------------------------------------------------------------
    def _prepare_priors(self) -> None:
        """Featurize and map the priors once: they never change during a run."""
        enc = self.encoder
        recs = self.priors
        self._prior_mapped: list[tuple[int, ...] | None] = []
        n_layer = len(self.layer_features)
        lf = np.full((len(recs), n_layer), np.nan)
        for i, r in enumerate(recs):
            vals = [float(v) for v in r.layer_features][:n_layer]
            lf[i, : len(vals)] = vals
        self._prior_X = enc.encode_configs([r.config for r in recs], lf, mapped=self._prior_mapped)
        self._prior_group, self._prior_workloads, self._prior_y = prior_groups(recs)
        # ``plausible_priors``: on the H100 every one of ResNet-18's first conv's warm-start
        # configs (from 3x3 layers) was rejected, while a model trained on them steered
        # the search (2026-11-26)
        # knob by knob, unmoved: what the contradiction check pairs with this layer's own
        # results (a moved config's latency here says nothing of its source's original)
        self._prior_as_mapped = self._prior_mapped
        self._prior_fits, self._prior_mapped = judge_mapped_priors(
            self.space, self._prior_mapped, plausible=self.plausible_priors, repair=self.repair_history
        )

    def _filtered_priors(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions of usable priors, their similarity weights), re-judged on each fit."""
        if not (self.uses_priors and self.priors):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        weights = importance_weights(self.importance, len(self.layer_features))
        kept, idx = filter_priors(
            self.priors,
            self.layer_features,
            weights if len(self.layer_features) else None,
            self.similarity_threshold,
            measured=self.state.results,
            space=self.space,
            mapped=self._prior_as_mapped,
            return_indices=True,
        )
        return only_runnable(self._prior_fits, idx, kept.weights)

    def _credible(self, idx: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Weights times each source's chance of ranking the layer's own results best
        (:mod:`autotune.search.source_weights`); sources that never do are dropped.

        Waits for ``min_train`` successful own results. With ``rank_own`` the layer's own
        model competes with the sources (RGPE's target model): history's margin then
        counts by the share the sources win (:attr:`prior_scale`), and once the layer's
        own results rank themselves better than any source does, history leaves and the
        tuner goes on as cold XGBoost would.
        """
        self.source_weights = {}
        self.prior_scale = 1.0
        if not (self.rank_sources and len(idx)):
            return idx, w
        own_idx, own_y = self._own_rows()
        row_p, by_workload = self._rankers.row_weights(
            self._prior_group[idx], w, lambda: self.encoder.encode_indices(own_idx, self.layer_features),
            own_y, self.seed, min_results=self.min_train, own=self.rank_own,
        )
        self.source_weights = {k: round(v, 3) for k, v in by_workload.items()}
        self.prior_scale = 1.0 - by_workload.get(OWN, 0.0)
        keep = row_p > 0
        return idx[keep], (w * row_p)[keep]

    def _subsample(self, idx: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cap prior rows (:func:`autotune.search.cost_model.capped_rows`, scored by similarity x
        performance)."""
        if len(idx) <= self.max_prior_rows:
            return idx, w
        sel = capped_rows(w * self._prior_y[idx], self.max_prior_rows, self.rng)
        return idx[sel], w[sel]

    # --- training -------------------------------------------------------------------------
    def _own_rows(self) -> tuple[np.ndarray, np.ndarray]:
        rows, lats = [], []
        for res in self.state.results:
            idx = self.encoder.map_indices(res.config)
            if idx is None:
                continue
            rows.append(idx)
            lats.append(res.latency if res.ok and res.latency > 0 else np.nan)
        if not rows:
            return np.zeros((0, len(self._sizes)), dtype=np.int64), np.zeros(0)
        lat = np.array(lats, dtype=float)
        y = np.zeros(len(lat))
        if np.isfinite(lat).any():
            with np.errstate(invalid="ignore"):
                y = np.where(np.isfinite(lat), np.nanmin(lat) / lat, 0.0)
        return np.array(rows, dtype=np.int64), y

    @property
    def importance(self) -> np.ndarray | None:
        """Smoothed split-count importances of the model that sees other layers: the
        prior-only model under margin transfer (a model of one layer's own rows never
        splits on layer features, which are constant there)."""
        model = self.prior_model if self.prior_model is not None else self.model
        return model.importance

    def _fit(self) -> bool:
        """Retrain on priors + own results; False when there is nothing to learn from."""
        own_idx, own_y = self._own_rows()
        p_idx, p_w = self._filtered_priors()
        p_idx, p_w = self._credible(p_idx, p_w)
        p_idx, p_w = self._subsample(p_idx, p_w)
        self._n_prior_kept = len(p_idx)
        self._prior_seeds = self._seeds_from(p_idx, p_w)
        if self.prior_model is not None:
            return self._fit_margin(own_idx, own_y, p_idx, p_w)
        parts_X, parts_y, parts_w, parts_g = [], [], [], []
        if len(p_idx):
            parts_X.append(self._prior_X[p_idx])
            parts_y.append(self._prior_y[p_idx])
            parts_w.append(p_w)
            parts_g.append(self._prior_group[p_idx])
        if len(own_idx):
            n_own = len(own_idx)
            prior_mass = float(p_w.sum()) if len(p_idx) else 0.0
            # Pairs are sampled per row, so a group's pull is rows x weight: give our own
            # measurements as much total pull as all priors together, growing in from a
            # third while there are fewer than min_train of them.
            ramp = min(1.0, (1 + n_own) / (1 + self.min_train))
            own_w = max(1.0, prior_mass / n_own * max(ramp, 1 / 3))
            parts_X.append(self.encoder.encode_indices(own_idx, self.layer_features))
            parts_y.append(own_y)
            parts_w.append(np.full(n_own, own_w))
            parts_g.append(np.full(n_own, -1))
        if not parts_X:
            return False
        X = np.vstack(parts_X)
        y = np.concatenate(parts_y)
        self.model.fit(X, y, np.concatenate(parts_w), np.concatenate(parts_g))
        return True

    def _fit_margin(self, own_idx: np.ndarray, own_y: np.ndarray, p_idx: np.ndarray, p_w: np.ndarray) -> bool:
        """Margin transfer: history's model, then the layer's own correction on top."""
        assert self.prior_model is not None
        key = p_idx.tobytes() + np.round(p_w, 3).tobytes()
        if len(p_idx) and key != self._prior_fit_key:
            self.prior_model.fit(self._prior_X[p_idx], self._prior_y[p_idx], p_w, self._prior_group[p_idx])
            self._prior_fit_key = key
        elif not len(p_idx):
            self._prior_fit_key = None  # every prior dropped: own results alone
        self._own_fitted = False
        # Fewer than two distinct labels (e.g. all failed) rank nothing; a regression
        # on them would flatten the priors' ranking instead of correcting it.
        if len(own_idx) and len(np.unique(own_y)) >= 2:
            X = self.encoder.encode_indices(own_idx, self.layer_features)
            self.model.fit(X, own_y, base_margin=self._prior_margin(X))
            self._own_fitted = True
        return self._has_scorer

    def _prior_margin(self, X: np.ndarray) -> np.ndarray | None:
        """History's score of rows ``X``; None while no prior is kept (margin transfer)."""
        if self.prior_model is None or self._prior_fit_key is None:
            return None
        return self.prior_scale * self.prior_model.predict(X)

    @property
    def _has_scorer(self) -> bool:
        if self.prior_model is None:
            return self.model.fitted
        return self._own_fitted or self._prior_fit_key is not None

    def _seeds_from(self, p_idx: np.ndarray, p_w: np.ndarray, limit: int | None = None) -> list[tuple[int, ...]]:
        """Distinct mapped prior configs in warm-start order (by turns across source
        workloads, :func:`autotune.search.warm_start.history_seed_order`), at most ``limit``
        (default ``sa_points``)."""
        limit = self.sa_points if limit is None else limit
        if not len(p_idx):
            return []
        mapped = [self._prior_mapped[i] for i in p_idx]
        return history_seed_order(mapped, self._prior_group[p_idx], self._prior_y[p_idx], p_w, limit)

    def history_configs(self, n: int) -> list[Config]:
        """The first ``n`` configs history offers this layer, in the order the warm start
        measures them (by turns across source workloads, mapped onto this space,
        distinct): what a tuner gets from history alone, before any search."""
        if not (self.uses_priors and self.priors):
            return []
        p_idx, p_w = self._filtered_priors()
        ranked = self._seeds_from(p_idx, p_w, limit=n)
        return [self.space.from_indices(idx) for idx in ranked]

    def _ranked_history(self) -> list[tuple[int, ...]]:
        """History's first ``history_list`` configs, fixed before any result and best
        first by a ranker of history alone (:func:`autotune.search.warm_start.ranked_history_keys`,
        the guided GA's first population in its measuring order). Judged once: the
        filter that feeds the model is re-judged as results arrive and may drop the
        source that holds the config that transfers."""
        if self._history_keys is None:
            self._history_keys = []
            if self.uses_priors and self.priors and self.history_list > 0:
                kept, idx = filter_priors(
                    self.priors, self.layer_features, None, self.similarity_threshold,
                    space=self.space, mapped=self._prior_as_mapped, return_indices=True,
                )
                idx, weights = only_runnable(self._prior_fits, idx, kept.weights)
                self._history_keys = ranked_history_keys(
                    self.priors, self._prior_mapped, idx, weights, self._prior_y, self._prior_group,
                    self.encoder, self.layer_features, self.history_list, seed=self.seed,
                )
        return self._history_keys

    def _incumbent_moves(self) -> list[tuple[int, ...]]:
        """Every config one knob away from the best measured one, shuffled."""
        incumbent = self.best
        best = None if incumbent is None else self.encoder.map_indices(incumbent.config)
        if best is None:
            return []
        moves = [best[:k] + (v,) + best[k + 1:] for k in self._mutable.tolist() for v in range(int(self._sizes[k])) if v != best[k]]
        order = self.rng.permutation(len(moves))
        return [moves[i] for i in order]

    # --- inspection -----------------------------------------------------------------------
    # For offline analyses of what history teaches the model (benchmarks/bench_transfer_ranking.py,
    # benchmarks/trace_prior_rank.py), so they need none of the tuner's internals.
    def fit_now(self) -> bool:
        """Fit the model on what the tuner knows now (history and the layer's results so
        far), as its next proposal would; False while there is nothing to learn from."""
        return self._fit()

    @property
    def priors_kept(self) -> int:
        """History's records the last fit trained on, after the similarity filter, the
        sources' credibility and the row cap."""
        return int(self._n_prior_kept)

    def scores(self, configs: Sequence[Config]) -> tuple[list[int], np.ndarray] | None:
        """The fitted model's score of each of ``configs`` this space can map (higher:
        predicted faster), as (their positions in ``configs``, scores); None while there
        is no model."""
        return self._scored(configs, self._score) if self._has_scorer else None

    def history_scores(self, configs: Sequence[Config]) -> tuple[list[int], np.ndarray] | None:
        """As :meth:`scores`, by the model of history alone (margin transfer, with a
        prior kept), which the layer's own results only correct."""
        if self.prior_model is None or self._prior_fit_key is None:
            return None
        return self._scored(configs, lambda idx: self.prior_model.predict(self.encoder.encode_indices(idx, self.layer_features)))

    def _scored(self, configs: Sequence[Config], score) -> tuple[list[int], np.ndarray]:
        rows = [self.encoder.map_indices(c) for c in configs]
        at = [i for i, r in enumerate(rows) if r is not None]
        if not at:
            return at, np.zeros(0)
        return at, np.asarray(score(np.array([rows[i] for i in at], dtype=np.int64)))

    def first_from_history(self, n: int) -> list[Config]:
        """History's first configs as the tuner takes them after its last fit: the first
        ``n`` of its warm start, then the first ``n`` of its ranked list, distinct."""
        keys = dict.fromkeys([*self._prior_seeds[:n], *self._ranked_history()[:n]])
        return [self.space.from_indices(k) for k in keys]

    # --- search ---------------------------------------------------------------------------
    def _score(self, idx: np.ndarray) -> np.ndarray:
        X = self.encoder.encode_indices(idx, self.layer_features)
        if self.prior_model is None:
            return self.model.predict(X)
        margin = self._prior_margin(X)
        return self.model.predict(X, base_margin=margin) if self._own_fitted else margin

    def _random_indices(self, n: int) -> np.ndarray:
        return np.stack([self.rng.integers(self._sizes) for _ in range(n)]) if n else np.zeros((0, len(self._sizes)), dtype=np.int64)

    def _plausible_mask(self, rows: list[tuple[int, ...]]) -> np.ndarray:
        """Static validity of index rows: annealing must not drift into
        regions the space rejects, which the model never sees measured and so can't
        learn to avoid."""
        if not self._checks_plausible:
            return np.ones(len(rows), dtype=bool)
        return self.space.plausible_rows(rows)

    def _anneal(self) -> list[tuple[tuple[int, ...], float]]:
        """Simulated annealing on model scores; every visited point with its score."""
        P = self.sa_points
        starts: list[tuple[int, ...]] = []
        ok = sorted((r for r in self.state.results if r.ok), key=lambda r: r.latency)
        for r in ok[: P // 4]:
            idx = self.encoder.map_indices(r.config)
            if idx is not None:
                starts.append(idx)
        starts += self._prior_seeds[: P // 4]
        cur = np.vstack(
            [np.array(starts, dtype=np.int64).reshape(-1, len(self._sizes)), self._random_indices(P - len(starts))]
        )
        cur_s = self._score(cur)
        cur_rows = list(map(tuple, cur.tolist()))
        # Implausible starts (random draws) score -inf so the first valid move replaces them.
        cur_s[~self._plausible_mask(cur_rows)] = -np.inf
        visited: dict[tuple[int, ...], float] = {}
        for row, s in zip(cur_rows, cur_s.tolist()):
            if s > -np.inf:
                visited[row] = s
        if not len(self._mutable):
            return sorted(visited.items(), key=lambda kv: -kv[1])
        finite = cur_s[np.isfinite(cur_s)]
        scale = (float(np.std(finite)) if len(finite) else 0.0) + 1e-9
        ar = np.arange(P)
        for it in range(self.sa_iters):
            temp = max(1.0 - it / self.sa_iters, 1e-3)
            new = cur.copy()
            knob = self._mutable[self.rng.integers(len(self._mutable), size=P)]
            new[ar, knob] = self.rng.integers(self._sizes[knob])
            s = self._score(new)
            rows = list(map(tuple, new.tolist()))
            valid = self._plausible_mask(rows)
            with np.errstate(over="ignore", invalid="ignore"):
                accept = (s >= cur_s) | (self.rng.random(P) < np.exp((s - cur_s) / (temp * scale)))
            accept &= valid
            cur[accept] = new[accept]
            cur_s[accept] = s[accept]
            for row, v, ok in zip(rows, s.tolist(), valid.tolist()):
                if ok:
                    visited[row] = v
        return sorted(visited.items(), key=lambda kv: -kv[1])

    def _random_configs(self, n: int, taken: set[str] | None = None) -> list[Config]:
        out: list[Config] = []
        taken = set() if taken is None else taken
        for _ in range(n * 8):
            if len(out) >= n:
                break
            cfg = self.space.random_config(self.rng)
            key = config_to_json(cfg)
            if key in taken or self.is_seen(cfg):
                continue
            taken.add(key)
            out.append(cfg)
        return out

    def propose(self, n: int) -> list[Config]:
        if n <= 0:
            return []
        n_results = len(self.state.results)
        if n_results != self._fitted_on:
            have_priors = bool(self.uses_priors and self.priors)
            if n_results >= self.min_train or have_priors:
                self._fit()
                for observe in self.fit_observers:
                    observe(self)
            self._fitted_on = n_results
        use_model = self._has_scorer and (n_results >= self.min_train or self._n_prior_kept > 0)
        if not use_model:
            return self._random_configs(n)

        n_rand = int(math.floor(self.epsilon * n + self.rng.random()))
        n_model = n - n_rand
        out: list[Config] = []
        taken: set[str] = set()

        def take(idx: tuple[int, ...]) -> bool:
            cfg = self.space.from_indices(idx)
            key = config_to_json(cfg)
            if key in taken or key in self.state.seen or not self.space.is_plausible(cfg):
                return False
            taken.add(key)
            out.append(cfg)
            return True

        if self.history_share > 0 and n_results >= self.min_train:
            # Once the warm start is over, a share of every model batch: the next of
            # history's ranked configs, until the list is measured.
            share = int(round(self.history_share * n_model))
            for idx in self._ranked_history():
                if len(out) >= share:
                    break
                take(idx)
        if self.local_share > 0 and n_results >= self.min_train:
            # A share of every model batch: one-knob moves of the best config measured, in
            # random order, which the model would not rank first (run 44's plateau).
            share = len(out) + int(round(self.local_share * n_model))
            for idx in self._incumbent_moves():
                if len(out) >= share:
                    break
                take(idx)
        if n_results < self.min_train and self._prior_seeds:
            # Transfer warm start: the best history configs, mapped, measured first.
            quota = int(math.ceil(self.prior_seed_frac * n_model))
            for idx in self._prior_seeds:
                if len(out) >= quota:
                    break
                take(idx)
        for idx, _ in self._anneal():
            if len(out) >= n_model:
                break
            take(idx)
        out += self._random_configs(n - len(out), taken)
        return out


class TransferXGBTuner(XGBTuner):
    """XGB tuner trained on filtered, similarity-weighted priors plus its own results."""

    name = "tl_xgb"
    uses_priors = True


@contextlib.contextmanager
def observing_fits(observe: Callable[[XGBTuner], None]) -> Iterator[None]:
    """While in the block, ``observe(tuner)`` runs after every fit any XGBoost tuner
    makes while proposing (see :attr:`XGBTuner.fit_observers`)."""
    XGBTuner.fit_observers.append(observe)
    try:
        yield
    finally:
        XGBTuner.fit_observers.remove(observe)
