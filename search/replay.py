"""Replay recorded measurements to compare tuners without hardware.

A :class:`ReplayBench` answers ``measure(configs)`` from a table of exported history
records, so any tuner can be driven through the ask/tell loop exactly as the pipeline
would drive it, and trajectories are reproducible (same tuner seed, same results).

Configs missing from the table come back as status ``"invalid"`` by default. That is the
conservative choice: inventing a latency (nearest neighbour) rewards tuners for
exploiting the interpolation rather than the landscape, and the table's own optimum
stays the true target. For sparse tables, where most proposals would otherwise be
wasted, two approximations answer ok:

- ``missing="nearest"``: the latency of the recorded config nearest in feature space
  (:mod:`autotune.search.features`);
- ``missing="model"``: a regression of log latency on the same features, fitted on the
  table's ok records (:class:`Surrogate`), as surrogate benchmarks of hyperparameter
  search do. On the H100 file's six layers (2,108 to 3,829 configs each, five-fold) it
  ranked held-out configs better than the nearest one (Spearman 0.68 to 0.98 against
  0.61 to 0.93) and called far fewer of them within 5% of the best when they were not
  (``benchmarks/bench_replay_approximation.py``): the false finds that decide a
  trials-to-target ratio.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from autotune.search.features import encoder_for
from autotune.search.tuner import OK, TrialResult, Tuner
from autotune.templates.space import Config, KnobSpace, config_to_json

__all__ = ["APPROXIMATIONS", "MISSING", "ReplayBench", "Surrogate", "run_tuner", "trials_to_within"]

#: How a :class:`ReplayBench` may answer a config its table lacks with a latency.
APPROXIMATIONS = ("nearest", "model")
#: How a :class:`ReplayBench` answers a config its table lacks.
MISSING = ("invalid", *APPROXIMATIONS)


class ReplayBench:
    """A lookup-table "device": recorded latency per config of one space."""

    def __init__(
        self,
        space: KnobSpace,
        records: Iterable[Mapping[str, Any]],
        *,
        missing: str = "invalid",
        workload_key: str | None = None,
        space_id: str | None = None,
    ) -> None:
        if missing not in MISSING:
            raise ValueError(f"missing must be one of {', '.join(map(repr, MISSING))}, not {missing!r}")
        self.space = space
        self.missing = missing
        lat: dict[str, list[float]] = {}
        status: dict[str, str] = {}
        configs: dict[str, Config] = {}
        self.skipped = 0
        enc = encoder_for(space)
        for rec in records:
            if workload_key is not None and rec.get("workload_key") not in (None, workload_key):
                continue
            if space_id is not None and rec.get("space_id") not in (None, space_id):
                continue
            cfg = rec.get("config")
            if not isinstance(cfg, Mapping) or enc.exact_indices(cfg) is None:
                self.skipped += 1
                continue
            key = config_to_json(cfg)
            configs[key] = dict(cfg)
            value = _latency_of(rec)
            st = rec.get("status", OK)
            if st == OK and value is not None:
                lat.setdefault(key, []).append(float(value))
            elif key not in status:
                status[key] = st if st != OK else "run_error"
        # Repeated records of one config: median of the ok ones; ok wins over failures.
        self.table: dict[str, TrialResult] = {}
        for key, cfg in configs.items():
            if key in lat:
                self.table[key] = TrialResult(cfg, statistics.median(lat[key]), OK)
            else:
                self.table[key] = TrialResult(cfg, None, status.get(key, "invalid"))
        self.n_measured = 0
        self._nn: tuple[np.ndarray, list[TrialResult]] | None = None
        self._surrogate: Surrogate | None = None
        # what the table lacks is approximated only from something that ran
        self._approximates = missing != "invalid" and any(r.ok for r in self.table.values())

    @classmethod
    def from_json(cls, space: KnobSpace, source: str | os.PathLike[str] | Mapping[str, Any], **kwargs: Any) -> "ReplayBench":
        """From an exported dataset ``{"records": [...]}`` (path or loaded dict)."""
        if isinstance(source, Mapping):
            doc = source
        else:
            with open(source, encoding="utf-8") as fh:
                doc = json.load(fh)
        records = doc.get("records") if isinstance(doc, Mapping) else doc
        if not isinstance(records, list):
            raise ValueError("a replay dataset needs a 'records' list")
        return cls(space, records, **kwargs)

    # --- queries --------------------------------------------------------------------------
    @property
    def best_known(self) -> float | None:
        """The table's lowest ok latency: the target a tuner should reach."""
        lats = [r.latency for r in self.table.values() if r.ok]
        return min(lats) if lats else None

    def __len__(self) -> int:
        return len(self.table)

    def measure(self, configs: Sequence[Mapping[str, Any]]) -> list[TrialResult]:
        out = []
        for cfg in configs:
            self.n_measured += 1
            hit = self.table.get(config_to_json(cfg))
            if hit is not None:
                out.append(TrialResult(dict(cfg), hit.latency, hit.status))
            elif self._approximates:
                out.append(TrialResult(dict(cfg), self.approximate(cfg), OK))
            else:
                out.append(TrialResult(dict(cfg), None, "invalid"))
        return out

    def approximate(self, cfg: Mapping[str, Any]) -> float:
        """The latency ``missing`` gives a config the table lacks. Asked of any config,
        held in the table or not: a held-out check asks it of configs left out of the
        table (``benchmarks/bench_replay_approximation.py``)."""
        if self.missing == "invalid":
            raise ValueError("this replay answers what its table lacks as invalid (missing='invalid'): nothing to approximate")
        if self.missing == "model":
            if self._surrogate is None:
                rows = [r for r in self.table.values() if r.ok]
                self._surrogate = Surrogate(self.space, [r.config for r in rows], [float(r.latency) for r in rows])
            return self._surrogate.latency(cfg)
        return float(self._nearest(cfg).latency)

    def _nearest(self, cfg: Mapping[str, Any]) -> TrialResult:
        enc = encoder_for(self.space)
        if self._nn is None:
            rows = [r for r in self.table.values() if r.ok]
            X = enc.encode_configs([r.config for r in rows])
            self._nn = (np.nan_to_num(X), rows)
        X, rows = self._nn
        x = np.nan_to_num(enc.encode_configs([cfg]))[0]
        return rows[int(np.argmin(((X - x) ** 2).sum(axis=1)))]


class Surrogate:
    """Log latency regressed on config features (XGBoost), fitted once on one layer's
    measured configs: the answer a replay gives a config nobody measured.

    A regression, not the tuners' ranker: an answer must be a latency, comparable with
    the table's. Deterministic for a table (fixed seed, fixed threads), and memoized per
    config so a config asked twice gets one answer.
    """

    #: Held-out accuracy barely moved past these on the H100 file's layers.
    PARAMS = {"n_estimators": 400, "max_depth": 8, "learning_rate": 0.05, "subsample": 0.8,
              "colsample_bytree": 0.8, "random_state": 0, "n_jobs": 2}

    def __init__(self, space: KnobSpace, configs: Sequence[Mapping[str, Any]], latencies: Sequence[float]) -> None:
        import xgboost as xgb

        if not configs:
            raise ValueError("a surrogate needs at least one measured config")
        self._enc = encoder_for(space)
        self._model = xgb.XGBRegressor(**self.PARAMS)
        self._model.fit(np.nan_to_num(self._enc.encode_configs(list(configs))), np.log(np.asarray(latencies, dtype=float)))
        self._memo: dict[str, float] = {}

    def latency(self, cfg: Mapping[str, Any]) -> float:
        key = config_to_json(cfg)
        if key not in self._memo:
            x = np.nan_to_num(self._enc.encode_configs([cfg]))
            self._memo[key] = float(np.exp(self._model.predict(x)[0]))
        return self._memo[key]


def _latency_of(rec: Mapping[str, Any]) -> float | None:
    value = rec.get("latency_median", rec.get("latency"))
    if value is None and rec.get("samples"):
        value = statistics.median(rec["samples"])
    return None if value is None else float(value)


def run_tuner(
    tuner: Tuner,
    bench: Any,
    trials: int,
    batch: int = 8,
    *,
    stop_at: float | None = None,
) -> list[TrialResult]:
    """Drive ``tuner`` against ``bench`` (anything with ``measure(configs)``) for ``trials``.

    Deterministic for a given tuner seed. ``stop_at``: stop early once a latency at or
    below it is seen (saves time when only trials-to-target is wanted).
    """
    results: list[TrialResult] = []
    while len(results) < trials:
        configs = tuner.ask(min(batch, trials - len(results)))
        if not configs:
            break
        got = bench.measure(configs)
        tuner.tell(got)
        results.extend(got)
        if stop_at is not None and any(r.ok and r.latency <= stop_at for r in got):
            break
    return results


def trials_to_within(results: Sequence[TrialResult], best_known: float, tol: float = 0.05) -> int | None:
    """1-based number of trials until a latency within ``tol`` of ``best_known``; None if never."""
    limit = best_known * (1.0 + tol)
    for i, res in enumerate(results):
        if res.ok and res.latency <= limit:
            return i + 1
    return None
