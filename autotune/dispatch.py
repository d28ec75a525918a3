"""Which tuner a layer gets, from how well history covers it (the match score)."""

from __future__ import annotations

from dataclasses import dataclass

#: Default thresholds: at or above ``high`` the guided GA, above ``low`` transfer XGBoost.
HIGH = 0.8
LOW = 0.05


@dataclass(frozen=True)
class Decision:
    tuner: str  # registry name, or "reuse"
    dispatch: str  # "exact" | "guided" | "transfer" | "cold" | "override"


def choose(score: float, exact: bool, *, override: str = "auto", high: float = HIGH, low: float = LOW) -> Decision:
    """exact -> reuse; score >= high -> gga; score > low -> tl_xgb; else cold xgb.

    Tuners that are not registered (yet) fall back to random search, so dispatch never
    fails on a partial install."""
    from autotune.search import TUNERS

    if exact:
        return Decision("reuse", "exact")
    if override != "auto":
        return Decision(override, "override")
    if score >= high:
        name, why = "gga", "guided"
    elif score > low:
        name, why = "tl_xgb", "transfer"
    else:
        name, why = "xgb", "cold"
    return Decision(name if name in TUNERS else "random", why)
