"""The knob-space interface every schedule template implements.

A space is a finite set of named knobs, each with an ordered list of candidate values.
Tuners only ever see this interface: they pick one candidate per knob (a *config*) and
hand it back; whether the point is buildable is the space's business. Keeping the
interface this small is what lets the same GA, XGBoost and random tuners run on a
meta-schedule-derived space, a hand-written template, or recorded data with no TVM.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

#: A config maps knob name -> chosen candidate value (JSON-able: ints, strings, lists).
Config = dict[str, Any]


class InvalidConfig(Exception):
    """The config names a point the target cannot run (too many threads, bad tiling...)."""


@dataclass(frozen=True)
class Knob:
    """One tunable decision.

    ``kind`` says how candidates relate, which search operators use: ``"tile"`` values
    are factor lists whose product is fixed, ``"categorical"`` values are unordered
    choices, ``"ordinal"`` values are ordered numbers (unroll steps, vector widths).
    """

    name: str
    candidates: tuple[Any, ...]
    kind: str = "categorical"

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError(f"knob {self.name} has no candidates")

    def __len__(self) -> int:
        return len(self.candidates)

    def index(self, value: Any) -> int:
        """Position of ``value`` among the candidates (lists and tuples compare equal)."""
        norm = _normalize(value)
        for i, cand in enumerate(self.candidates):
            if _normalize(cand) == norm:
                return i
        raise KeyError(f"{value!r} is not a candidate of knob {self.name}")


def _normalize(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_normalize(v) for v in value)
    return value


def config_to_json(config: Mapping[str, Any]) -> str:
    """Canonical JSON text of a config: equal configs give equal strings.

    Search keys every point it considers by this text (68,000 calls in a CUDA replay of
    two layers), and the configs it makes are JSON-plain already (:meth:`KnobSpace.from_indices`):
    those are written as they are; anything JSON cannot write as it is (numpy numbers, a
    mapping that is not a dict) is made plain first, giving the same text."""
    if type(config) is dict and all(type(k) is str for k in config):
        try:
            return json.dumps(config, sort_keys=True, separators=(",", ":"))
        except TypeError:
            pass
    return json.dumps(_jsonable(dict(config)), sort_keys=True, separators=(",", ":"))


def config_from_json(text: str) -> Config:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("a config must be a JSON object")
    return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _fresh(value: Any) -> Any:
    """A copy of a JSON-plain value's lists, so no two configs share one."""
    if isinstance(value, list):
        return [_fresh(v) if isinstance(v, list) else v for v in value]
    return value


class KnobSpace(ABC):
    """A finite space of schedule configs for one layer on one target."""

    #: Stable id of the space's *shape* (template name + knob names + candidates), so a
    #: history record can tell whether a stored config still fits this space.
    space_id: str

    def __init__(self, knobs: Sequence[Knob]) -> None:
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self._by_name = {k.name: k for k in self.knobs}
        if len(self._by_name) != len(self.knobs):
            raise ValueError("knob names must be unique")

    # --- structure -------------------------------------------------------------------
    @property
    def knob_names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def knob(self, name: str) -> Knob:
        return self._by_name[name]

    @property
    def size(self) -> int:
        """Number of points (valid or not): the product of the knobs' candidate counts."""
        return math.prod(len(k) for k in self.knobs)

    def shape_id(self, template: str) -> str:
        """Hash of template name, knob names and candidates: the basis of ``space_id``."""
        payload = json.dumps(
            [template, [[k.name, k.kind, _jsonable(list(k.candidates))] for k in self.knobs]],
            sort_keys=True,
        )
        return f"{template}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"

    # --- encoding ----------------------------------------------------------------------
    def to_indices(self, config: Mapping[str, Any]) -> list[int]:
        """Index vector of a config (one gene per knob); raises KeyError if it doesn't fit."""
        return [k.index(config[k.name]) for k in self.knobs]

    def from_indices(self, indices: Sequence[int]) -> Config:
        # Search calls this for every point it looks at (a transfer XGBoost run anneals
        # through about a million on CUDA), so candidates are made JSON-plain once per
        # space and each call only copies their lists.
        table = self.__dict__.get("_plain_candidates")
        if table is None:
            table = self.__dict__["_plain_candidates"] = [
                (k.name, [_jsonable(c) for c in k.candidates]) for k in self.knobs
            ]
        return {name: _fresh(plain[int(i)]) for (name, plain), i in zip(table, indices)}

    def plausible_rows(self, rows: Any) -> np.ndarray:
        """:meth:`is_plausible` of each index row of ``rows`` (one gene per knob)."""
        return np.array([self.is_plausible(self.from_indices(row)) for row in rows], dtype=bool)

    def fits_device_rows(self, rows: Any) -> np.ndarray:
        """Which index rows run on the device at all, as far as it can be told without TVM
        work: :meth:`plausible_rows`, and spaces that leave an estimate out of their
        search for the sake of old measurements (``estimate_shared=False``) apply it here.
        For judging history's configs mapped onto a layer, not for drawing new ones."""
        return self.plausible_rows(rows)

    def contains(self, config: Mapping[str, Any]) -> bool:
        try:
            self.to_indices(config)
        except KeyError:
            return False
        return True

    def random_config(self, rng: np.random.Generator) -> Config:
        """A uniformly drawn point that passes the space's cheap static checks."""
        for _ in range(1000):
            cfg = self.from_indices([rng.integers(len(k)) for k in self.knobs])
            if self.is_plausible(cfg):
                return cfg
        return cfg

    def is_plausible(self, config: Mapping[str, Any]) -> bool:
        """Cheap static validity check (no TVM work); spaces override with their limits."""
        return True

    # --- realization ----------------------------------------------------------------------
    @abstractmethod
    def apply(self, config: Mapping[str, Any]) -> Any:
        """The scheduled module for ``config``; raises :class:`InvalidConfig` if it is invalid."""

    @abstractmethod
    def default_config(self) -> Config:
        """A valid reference point (the design space's own sampled decisions)."""
