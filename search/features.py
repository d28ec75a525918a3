"""Config -> feature vectors for the cost model, and mapping foreign configs into a space.

Why features and not raw knob indices: a candidate index means nothing across layers
(candidate 17 of a 64-extent tile is not candidate 17 of a 128-extent one), and trees
learn far faster from quantities that drive performance directly (threads per block,
work per thread, footprints). So each config is described by

* per knob: its candidate index normalized to [0, 1] (all knobs), the log2 of every
  factor (tile knobs), and a sign-preserving log2 of the value (numeric categorical and
  ordinal knobs: unroll steps, vector widths);
* derived quantities (always present, zero when the space has no such structure):
  log2 threads per block, log2 virtual threads, log2 blocks, log2 total parallelism,
  log2 work per thread, log2 register footprint, log2 shared-memory/cache footprint,
  log2 unroll;
* the layer's own features appended (shape dims, FLOPs ...), which lets one model learn
  from several layers (transfer) without confusing them.

The length is fixed per space (and per number of layer features), so a model trained on
one batch scores any other batch of the same space.

Tile roles are read from the number of parts, as the meta-schedule multi-level tiling
rules lay them out: on CUDA spatial loops have 5 parts ``[blockIdx, vthread, threadIdx,
inner, innermost]`` and reduction loops 3 ``[outer, inner, innermost]``; on CPU spatial
loops have 4 parts and reduction loops 2. A space with any 5-part tile is read as CUDA,
else one with any 4-part tile as CPU; other tiles only get their log factors.

Foreign configs (from another layer of the same op class: same knob names, tile
candidates with other products) are featurized from their *raw* values, so a prior's
features describe what actually ran; :class:`ConfigMapper` maps them onto this space's
nearest candidates when a point in this space is needed (seeding, shared-point checks).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Mapping, Sequence

import numpy as np

from autotune.templates.space import Config, Knob, KnobSpace

__all__ = [
    "DERIVED_NAMES",
    "ConfigMapper",
    "FeatureEncoder",
    "batch_config_features",
    "config_features",
    "encoder_for",
    "map_config",
]

#: Names of the derived columns, in order (after the per-knob columns).
DERIVED_NAMES = (
    "log_threads",
    "log_vthreads",
    "log_blocks",
    "log_parallelism",
    "log_work_per_thread",
    "log_registers",
    "log_smem",
    "log_unroll",
)

# Indices into the per-knob contribution vector (all additive across knobs).
_C_BLOCKS, _C_VTHREADS, _C_THREADS, _C_WORK, _C_REGS, _C_RED_INNER, _C_UNROLL, _C_BLOCK_EXT = range(8)
_N_CONTRIB = 8
_MAX_THREADS = 1024


def _key(value: Any) -> Any:
    """Hashable normal form of a knob value (lists -> tuples), same as Knob.index uses.

    Numpy scalars hash and compare equal to Python numbers, so they need no conversion;
    the flat-tuple fast path matters when 100k history configs are featurized.
    """
    if isinstance(value, (list, tuple)):
        flat = tuple(value)
        try:
            hash(flat)
            return flat
        except TypeError:
            return tuple(_key(v) for v in value)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _symlog2(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(float(x))), float(x))


def _tile_parts(value: Any) -> tuple[float, ...] | None:
    """The factors of a tile value as floats, or None if it is not a list of positives."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    parts = []
    for v in value:
        if not _is_number(v) or v <= 0:
            return None
        parts.append(float(v))
    return tuple(parts)


def _space_style(space: KnobSpace) -> str:
    lengths = set()
    for knob in space.knobs:
        if knob.kind == "tile":
            parts = _tile_parts(knob.candidates[0])
            if parts is not None:
                lengths.add(len(parts))
    if 5 in lengths:
        return "cuda"
    if 4 in lengths:
        return "cpu"
    return "generic"


class _KnobCodec:
    """Feature columns and derived contributions of one knob, memoized per value."""

    def __init__(self, knob: Knob, style: str) -> None:
        self.knob = knob
        self.n = len(knob.candidates)
        self.cand_keys = {_key(c): i for i, c in enumerate(knob.candidates)}
        self.is_unroll = "unroll" in knob.name.lower()
        self.n_parts = 0
        self.role = "other"
        self.numeric = False
        if knob.kind == "tile":
            parts = _tile_parts(knob.candidates[0])
            if parts is not None:
                self.n_parts = len(parts)
                if style == "cuda":
                    self.role = {5: "spatial", 3: "reduction"}.get(self.n_parts, "other")
                elif style == "cpu":
                    self.role = {4: "spatial", 2: "reduction"}.get(self.n_parts, "other")
            self._cand_logs = np.array(
                [[math.log2(p) for p in (_tile_parts(c) or ())] for c in knob.candidates]
            ) if self.n_parts else np.zeros((self.n, 0))
        else:
            self.numeric = all(_is_number(c) for c in knob.candidates)
            self._cand_vals = (
                np.array([_symlog2(c) for c in knob.candidates]) if self.numeric else None
            )
        self.style = style
        self.width = 1 + (self.n_parts if knob.kind == "tile" else (1 if self.numeric else 0))
        self._memo: dict[Any, tuple[np.ndarray, np.ndarray, int]] = {}
        # Tables over this knob's own candidates: the fast path for index matrices.
        rows = [self._compute(c, i) for i, c in enumerate(knob.candidates)]
        self.table = np.stack([r[0] for r in rows])
        self.contrib = np.stack([r[1] for r in rows])
        for i, c in enumerate(knob.candidates):
            self._memo[_key(c)] = (self.table[i], self.contrib[i], i)

    # --- mapping -------------------------------------------------------------------------
    def nearest(self, value: Any) -> int:
        """Index of the candidate nearest to ``value``; -1 when nothing is comparable."""
        k = _key(value)
        if k in self.cand_keys:
            return self.cand_keys[k]
        if self.knob.kind == "tile":
            parts = _tile_parts(value)
            if parts is None or len(parts) != self.n_parts or not self.n_parts:
                return -1
            logs = np.log2(np.array(parts))
            # Nearest by log-factor distance summed over parts: keeps each level's share.
            dist = ((self._cand_logs - logs) ** 2).sum(axis=1)
            return int(np.argmin(dist))
        if self.numeric and _is_number(value):
            return int(np.argmin(np.abs(self._cand_vals - _symlog2(value))))
        return -1

    # --- features ------------------------------------------------------------------------
    def _compute(self, value: Any, index: int) -> tuple[np.ndarray, np.ndarray]:
        feats = np.full(self.width, np.nan)
        contrib = np.zeros(_N_CONTRIB)
        if index >= 0:
            feats[0] = index / (self.n - 1) if self.n > 1 else 0.0
        if self.knob.kind == "tile":
            parts = _tile_parts(value)
            if parts is None or len(parts) != self.n_parts:
                return feats, contrib
            logs = [math.log2(p) for p in parts]
            feats[1:] = logs
            if self.role == "spatial" and self.style == "cuda":
                contrib[_C_BLOCKS] = logs[0]
                contrib[_C_VTHREADS] = logs[1]
                contrib[_C_THREADS] = logs[2]
                contrib[_C_WORK] = logs[3] + logs[4]
                contrib[_C_REGS] = logs[1] + logs[3] + logs[4]
                contrib[_C_BLOCK_EXT] = 2.0 ** (logs[1] + logs[2] + logs[3] + logs[4])
            elif self.role == "spatial":  # cpu: [outer, outer2, inner, innermost]
                contrib[_C_BLOCKS] = logs[0]
                contrib[_C_WORK] = logs[2] + logs[3]
                contrib[_C_REGS] = logs[3]
                contrib[_C_BLOCK_EXT] = 2.0 ** (logs[1] + logs[2] + logs[3])
            elif self.role == "reduction":
                contrib[_C_RED_INNER] = sum(logs[1:])
        elif self.numeric:
            if _is_number(value):
                feats[1] = _symlog2(value)
                if self.is_unroll:
                    contrib[_C_UNROLL] = math.log2(1.0 + max(float(value), 0.0))
        return feats, contrib

    def lookup(self, value: Any) -> tuple[np.ndarray, np.ndarray, int]:
        """(feature columns, derived contributions, mapped index or -1) of any value."""
        try:
            k = _key(value)
            hit = self._memo.get(k)
        except TypeError:  # unhashable oddity: compute without memo
            k, hit = None, None
        if hit is not None:
            return hit
        idx = self.nearest(value)
        feats, contrib = self._compute(value, idx)
        out = (feats, contrib, idx)
        if k is not None:
            self._memo[k] = out
        return out


class FeatureEncoder:
    """Featurizes configs of one space; length = config columns + ``n_layer_features``.

    Built once per space (see :func:`encoder_for`) because the per-candidate tables make
    scoring thousands of annealing points a handful of numpy gathers.
    """

    def __init__(self, space: KnobSpace, n_layer_features: int = 0) -> None:
        self.space = space
        self.style = _space_style(space)
        self.codecs = [_KnobCodec(k, self.style) for k in space.knobs]
        self.n_layer_features = int(n_layer_features)
        names: list[str] = []
        for c in self.codecs:
            names.append(f"{c.knob.name}#idx")
            if c.knob.kind == "tile":
                names += [f"{c.knob.name}#log{p}" for p in range(c.n_parts)]
            elif c.numeric:
                names.append(f"{c.knob.name}#log")
        names += list(DERIVED_NAMES)
        self.n_config_features = len(names)
        names += [f"layer#{i}" for i in range(self.n_layer_features)]
        self.feature_names: tuple[str, ...] = tuple(names)

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def with_layer_features(self, n_layer_features: int) -> "FeatureEncoder":
        """An encoder of the same space with another layer-feature count (tables shared)."""
        other = object.__new__(FeatureEncoder)
        other.__dict__.update(self.__dict__)
        other.n_layer_features = int(n_layer_features)
        other.feature_names = self.feature_names[: self.n_config_features] + tuple(
            f"layer#{i}" for i in range(other.n_layer_features)
        )
        return other

    # --- derived --------------------------------------------------------------------------
    @staticmethod
    def _derived(contrib: np.ndarray) -> np.ndarray:
        """Derived columns from summed per-knob contributions (rows x _N_CONTRIB)."""
        out = np.zeros((contrib.shape[0], len(DERIVED_NAMES)))
        out[:, 0] = contrib[:, _C_THREADS]
        out[:, 1] = contrib[:, _C_VTHREADS]
        out[:, 2] = contrib[:, _C_BLOCKS]
        out[:, 3] = contrib[:, _C_BLOCKS] + contrib[:, _C_THREADS]
        out[:, 4] = contrib[:, _C_WORK]
        out[:, 5] = contrib[:, _C_REGS]
        ext = contrib[:, _C_BLOCK_EXT]
        # Shared memory ~ (sum over spatial dims of the block's extent) x reduction tile:
        # exact for matmul/conv input tiles, a usable proxy elsewhere.
        out[:, 6] = np.where(ext > 0, np.log2(np.maximum(ext, 1e-12)), 0.0) + contrib[:, _C_RED_INNER]
        out[:, 7] = contrib[:, _C_UNROLL]
        return out

    def _layer_block(self, rows: int, layer_features: Any) -> np.ndarray:
        """Layer features as (rows x n_layer) — 1-D broadcast or 2-D per row; padded with NaN."""
        out = np.full((rows, self.n_layer_features), np.nan)
        if self.n_layer_features == 0 or layer_features is None:
            return out
        if isinstance(layer_features, np.ndarray) and layer_features.ndim == 2:
            lf = layer_features.astype(float)
            m = min(lf.shape[1], self.n_layer_features)
            out[:, :m] = lf[:, :m]
            return out
        seq = list(layer_features)
        if seq and isinstance(seq[0], (list, tuple, np.ndarray)):
            for r, row in enumerate(seq):
                vals = [float(v) for v in row][: self.n_layer_features]
                out[r, : len(vals)] = vals
            return out
        vals = [float(v) for v in seq][: self.n_layer_features]
        out[:, : len(vals)] = vals
        return out

    # --- encoding -------------------------------------------------------------------------
    def encode_indices(self, indices: np.ndarray, layer_features: Any = None) -> np.ndarray:
        """Features of points given as an (N x knobs) index matrix of this space."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim == 1:
            idx = idx[None, :]
        cols = [c.table[idx[:, k]] for k, c in enumerate(self.codecs)]
        contrib = np.zeros((idx.shape[0], _N_CONTRIB))
        for k, c in enumerate(self.codecs):
            contrib += c.contrib[idx[:, k]]
        return np.hstack(cols + [self._derived(contrib), self._layer_block(idx.shape[0], layer_features)])

    def encode_configs(
        self,
        configs: Sequence[Mapping[str, Any]],
        layer_features: Any = None,
        *,
        mapped: list[tuple[int, ...] | None] | None = None,
    ) -> np.ndarray:
        """Features of configs given by value; foreign values are featurized as they are.

        Pass a list as ``mapped`` to also receive each config's nearest-point index vector
        (as :meth:`map_indices`) in the same pass.
        """
        n = len(configs)
        widths = [c.width for c in self.codecs]
        offs = np.concatenate([[0], np.cumsum(widths)])
        body = np.full((n, int(offs[-1])), np.nan)
        contrib = np.zeros((n, _N_CONTRIB))
        for r, cfg in enumerate(configs):
            idx: list[int] | None = [] if mapped is not None else None
            for k, c in enumerate(self.codecs):
                if c.knob.name not in cfg:
                    idx = None
                    continue
                feats, con, i = c.lookup(cfg[c.knob.name])
                body[r, offs[k] : offs[k + 1]] = feats
                contrib[r] += con
                if idx is not None:
                    if i < 0:
                        idx = None
                    else:
                        idx.append(i)
            if mapped is not None:
                mapped.append(tuple(idx) if idx is not None else None)
        return np.hstack([body, self._derived(contrib), self._layer_block(n, layer_features)])

    def exact_indices(self, config: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Index vector of a config of this space (dict lookups, unlike the linear
        ``KnobSpace.to_indices``), or None if some value is not a candidate."""
        out = []
        for c in self.codecs:
            try:
                i = c.cand_keys.get(_key(config[c.knob.name]))
            except (KeyError, TypeError):
                return None
            if i is None:
                return None
            out.append(i)
        return tuple(out)

    def map_indices(self, config: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Index vector of the nearest point of this space, or None if a knob can't map."""
        out = []
        for c in self.codecs:
            if c.knob.name not in config:
                return None
            _, _, idx = c.lookup(config[c.knob.name])
            if idx < 0:
                return None
            out.append(idx)
        return tuple(out)

    def parallelism_log2(self, config: Mapping[str, Any]) -> float:
        """log2 of the config's parallelism: threads per block on CUDA, outer loops on CPU."""
        contrib = np.zeros(_N_CONTRIB)
        for c in self.codecs:
            if c.knob.name in config:
                contrib += c.lookup(config[c.knob.name])[1]
        return float(contrib[_C_THREADS] if self.style == "cuda" else contrib[_C_BLOCKS])


_ENCODERS: "weakref.WeakKeyDictionary[KnobSpace, FeatureEncoder]" = weakref.WeakKeyDictionary()


def encoder_for(space: KnobSpace, n_layer_features: int = 0) -> FeatureEncoder:
    """The (cached) encoder of ``space`` with ``n_layer_features`` layer columns."""
    try:
        base = _ENCODERS.get(space)
    except TypeError:  # unhashable space: no cache
        base = None
    if base is None:
        base = FeatureEncoder(space, 0)
        try:
            _ENCODERS[space] = base
        except TypeError:
            pass
    return base if n_layer_features == 0 else base.with_layer_features(n_layer_features)


def config_features(
    space: KnobSpace, config: Mapping[str, Any], layer_features: Sequence[float] = ()
) -> np.ndarray:
    """Feature vector of one config (foreign values allowed) with ``layer_features`` appended."""
    enc = encoder_for(space, len(layer_features))
    return enc.encode_configs([config], layer_features)[0]


def batch_config_features(
    space: KnobSpace, configs: Sequence[Mapping[str, Any]], layer_features: Any = ()
) -> np.ndarray:
    """(N x F) features; ``layer_features`` is one vector for all rows or one per row."""
    if isinstance(layer_features, np.ndarray) and layer_features.ndim == 2:
        n_layer = layer_features.shape[1]
    else:
        seq = list(layer_features)
        n_layer = len(seq[0]) if seq and isinstance(seq[0], (list, tuple, np.ndarray)) else len(seq)
    return encoder_for(space, n_layer).encode_configs(configs, layer_features)


class ConfigMapper:
    """Maps configs of a sibling layer (same knob names) onto this space's candidates.

    Tile values go to the candidate nearest by summed squared log2-factor distance per
    part (so a [4, 2, 8, 1] tiling of 64 becomes the closest tiling of 128 at every
    level, keeping the block/thread/inner split); numeric knobs go to the nearest value on
    a log scale; non-numeric values must match exactly. Results are memoized per value,
    which makes mapping 100k history records cheap (values repeat heavily).
    """

    def __init__(self, space: KnobSpace) -> None:
        self.space = space
        self.encoder = encoder_for(space)

    def indices(self, config: Mapping[str, Any]) -> tuple[int, ...] | None:
        return self.encoder.map_indices(config)

    def map(self, config: Mapping[str, Any]) -> Config | None:
        idx = self.indices(config)
        return None if idx is None else self.space.from_indices(idx)


def map_config(space: KnobSpace, config: Mapping[str, Any]) -> Config | None:
    """``config`` mapped onto ``space`` (nearest candidates), or None if it can't be."""
    return ConfigMapper(space).map(config)
