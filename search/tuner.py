"""The one interface every search strategy implements: ask for configs, tell results.

Tuners never build or measure anything and never touch the database: the pipeline
asks, measures, writes history and tells. So each tuner can be driven by real hardware
or by replayed records alike (see ``search.replay``), which is how tuners are compared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from autotune.templates.space import Config, KnobSpace, config_to_json

#: Result statuses shared with the history database.
OK = "ok"
STATUSES = ("ok", "build_error", "run_error", "timeout", "wrong_result", "invalid")


@dataclass(frozen=True)
class TrialResult:
    """What one measured config gave: median latency in seconds when ``status == "ok"``."""

    config: Config
    latency: float | None
    status: str = OK

    @property
    def ok(self) -> bool:
        return self.status == OK and self.latency is not None


@dataclass(frozen=True)
class PriorRecord:
    """A measured config of a *similar* layer from history, as evidence for transfer.

    ``similarity`` in [0, 1] is the match score of its layer to the one being tuned;
    ``layer_features`` describe its layer (shape dims, FLOPs...), same order as the
    tuned layer's features. ``target_weight`` is how much it counts for having been
    measured on other hardware (1 on the tuned target; see
    :func:`autotune.search.similarity.filter_priors`), and ``workload_key`` names the group its
    latencies compare within: one layer on one target. ``restated``: ``config`` is the
    measured one restated for the tuned CPU's vector width
    (:mod:`autotune.templates.vector_width`), so a report can say how much history was.
    """

    config: Config
    latency: float | None
    similarity: float
    layer_features: Sequence[float] = ()
    workload_key: str = ""
    status: str = OK
    target_weight: float = 1.0
    restated: bool = False


#: Below this median of searched configs per source layer, history is shallow: its
#: sources' winners are unconverged. Measured on the `znver5` (benchmarks/HISTORY_GUIDED.md,
#: run 43b): the same neighbours at 32 configs each instead of 256 left both guided tuners
#: near history's winners, ending higher than cold XGBoost on four of six layers at 100
#: trials; on the H100, with a history 64 deep, their head start was gone by 100 trials
#: (0.8x and 1.5x). Nothing between 64 and 256 has been measured: 128 is a line between
#: what was, not a tuned value. Below it the guided GA hands a layer to transfer XGBoost
#: after its first population (search.ga_tuner, run 46b).
SHALLOW_SOURCE_RECORDS = 128


def source_depth(priors: Sequence[PriorRecord]) -> dict[str, Any]:
    """How deep the history behind a transfer goes: its source layers and the searched
    configs each holds (median, fewest), and those of the most similar source, whose
    depth is the one that counts (run 51: the nearest neighbour alone at 256 configs, the
    rest at 32, gave what every source at 256 gave). The match score weighs how alike
    layers are, not how far their search went. TVM's default schedule, timed for
    reports, is no search (its config is empty) and is not counted."""
    searched = [p for p in priors if p.config]
    by_source = Counter(p.workload_key for p in searched)
    counts = sorted(by_source.values())
    nearest = max(searched, key=lambda p: p.similarity, default=None)  # other targets' already discounted
    return {
        "sources": len(counts),
        "per_source_median": float(np.median(counts)) if counts else 0.0,
        "per_source_min": counts[0] if counts else 0,
        "nearest_similarity": round(nearest.similarity, 3) if nearest else 0.0,
        "nearest_configs": by_source[nearest.workload_key] if nearest else 0,
    }


def is_shallow(depth: Mapping[str, Any]) -> bool:
    """History there is, and its sources hold a median under SHALLOW_SOURCE_RECORDS."""
    return bool(depth["sources"]) and depth["per_source_median"] < SHALLOW_SOURCE_RECORDS


def shallow_history(priors: Sequence[PriorRecord]) -> bool:
    """Whether the history behind ``priors`` is shallow (:func:`is_shallow`): what the
    guided GA's hand-over to transfer XGBoost goes by."""
    return is_shallow(source_depth(priors))


def prior_groups(priors: Sequence[PriorRecord]) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(workload id of each record, workload key of each id, normalized performance of
    each record). Transfer compares configs only within a workload, so performance is
    the workload's best latency / the record's latency, in (0, 1]; 0 for a failure."""
    ids: dict[str, int] = {}
    group = np.array([ids.setdefault(r.workload_key, len(ids)) for r in priors], dtype=np.int64)
    lat = np.array(
        [r.latency if (r.status == OK and r.latency is not None and r.latency > 0) else np.nan for r in priors],
        dtype=float,
    )
    best = np.full(len(ids), np.inf)
    ok = np.isfinite(lat)
    np.minimum.at(best, group[ok], lat[ok])
    perf = np.zeros(len(priors))
    perf[ok] = best[group[ok]] / lat[ok]
    return group, list(ids), perf


@dataclass
class TunerState:
    """Bookkeeping every tuner needs: what was asked, what was measured, the best."""

    seen: set[str] = field(default_factory=set)
    results: list[TrialResult] = field(default_factory=list)
    best: TrialResult | None = None


class Tuner(ABC):
    """Base class: subclasses implement :meth:`propose` (and may extend :meth:`tell`)."""

    name: str = "tuner"

    def __init__(
        self,
        space: KnobSpace,
        *,
        seed: int = 0,
        priors: Sequence[PriorRecord] = (),
        layer_features: Sequence[float] = (),
    ) -> None:
        self.space = space
        self.seed = int(seed)  # the run's seed, as given (rng's state moves on)
        self.rng = np.random.default_rng(seed)
        self.priors = list(priors)
        self.layer_features = list(layer_features)
        self.state = TunerState()

    # --- the interface ------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        """Up to ``n`` configs never asked before (fewer when the space runs out)."""
        out: list[Config] = []
        for cfg in self.propose(n):
            key = config_to_json(cfg)
            if key in self.state.seen:
                continue
            self.state.seen.add(key)
            out.append(cfg)
            if len(out) >= n:
                break
        return out

    def tell(self, results: Sequence[TrialResult]) -> None:
        for res in results:
            self.state.seen.add(config_to_json(res.config))
            self.state.results.append(res)
            if res.ok and (self.state.best is None or res.latency < self.state.best.latency):
                self.state.best = res

    def mark_seen(self, configs: Sequence[Mapping[str, Any]]) -> None:
        """Configs measured in earlier runs: never propose them again."""
        for cfg in configs:
            self.state.seen.add(config_to_json(cfg))

    @property
    def best(self) -> TrialResult | None:
        return self.state.best

    def is_seen(self, config: Mapping[str, Any]) -> bool:
        return config_to_json(config) in self.state.seen

    @abstractmethod
    def propose(self, n: int) -> list[Config]:
        """Candidate configs, best guesses first; :meth:`ask` drops repeats."""
