"""Search strategies behind one ask/tell interface (see :mod:`autotune.search.tuner`).

Registered tuners (all take ``space`` plus keywords ``seed``, ``priors``,
``layer_features`` and their own options):

* ``random``: uniform random search, the baseline.
* ``xgb``: cold XGBoost ranker + simulated annealing (ignores priors).
* ``tl_xgb``: the same trained on filtered, similarity-weighted priors plus own results.
* ``ga``: plain DEAP genetic algorithm (ignores priors).
* ``gga``: GA seeded from priors and steered by an elite-gene dictionary.
"""

from __future__ import annotations

from autotune.search.tuner import PriorRecord, Tuner, TrialResult

__all__ = ["PriorRecord", "Tuner", "TrialResult", "make_tuner", "TUNERS", "USES_PRIORS"]


def _registry() -> dict[str, type[Tuner]]:
    from autotune.search.ga_tuner import GATuner, GuidedGATuner
    from autotune.search.random_search import RandomTuner
    from autotune.search.xgb_tuner import TransferXGBTuner, XGBTuner

    return {
        cls.name: cls for cls in (RandomTuner, XGBTuner, TransferXGBTuner, GATuner, GuidedGATuner)
    }


TUNERS = ("random", "xgb", "tl_xgb", "ga", "gga")

#: Tuners that make use of ``priors`` (the others accept and ignore them).
USES_PRIORS = frozenset({"tl_xgb", "gga"})


def make_tuner(name: str, space, **kwargs) -> Tuner:
    """Build the tuner registered under ``name`` (see :data:`TUNERS`)."""
    registry = _registry()
    if name not in registry:
        raise KeyError(f"unknown tuner {name!r}; choose from {', '.join(sorted(registry))}")
    return registry[name](space, **kwargs)
