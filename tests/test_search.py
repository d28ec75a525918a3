"""Search strategies on a synthetic CUDA matmul space with a roofline-ish latency model.

The synthetic problem is what makes these tests able to fail: a 64x64x64 dense layer with
5-part spatial tiles, a 3-part reduction tile and an unroll knob (4.9M points, 28 of
them within 5% of the optimum), latencies from a deterministic model with structure
(parallelism, ILP, register spills, memory traffic, warp waste, unroll) plus per-candidate
"hardware quirks" and per-config noise. A similar layer (64x128x64) provides history.
"""

from __future__ import annotations

import dataclasses

import json
import math
import random
from functools import lru_cache

import numpy as np
import pytest

from autotune.search import TUNERS, PriorRecord, make_tuner
from autotune.search.cost_model import CostModel
from autotune.search.features import (
    DERIVED_NAMES,
    ConfigMapper,
    batch_config_features,
    config_features,
    encoder_for,
    map_config,
)
from autotune.search.ga_tuner import GATuner, GuidedGATuner, per_source_first
from autotune.search.replay import ReplayBench, run_tuner, trials_to_within
from autotune.search.similarity import (
    contradicting_workloads,
    filter_priors,
    importance_weights,
    layer_similarity,
)
from autotune.search.tuner import TrialResult
from autotune.templates.space import InvalidConfig, Knob, KnobSpace, config_to_json

# --------------------------------------------------------------------------------------
# synthetic problem
# --------------------------------------------------------------------------------------

UNROLL = (0, 16, 64, 512)


def factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(d,) + r for d in range(1, n + 1) if n % d == 0 for r in factorizations(n // d, parts - 1)]


class MatmulSpace(KnobSpace):
    """Dense MxNxK on a CUDA-like target, meta-schedule-style multi-level tiling."""

    def __init__(self, M: int = 64, N: int = 64, K: int = 64, hw_seed: int = 7, noise_seed: int = 0):
        self.M, self.N, self.K = M, N, K
        self.hw_seed, self.noise_seed = hw_seed, noise_seed
        super().__init__(
            [
                Knob("dense.i.tile", tuple(factorizations(M, 5)), "tile"),
                Knob("dense.j.tile", tuple(factorizations(N, 5)), "tile"),
                Knob("dense.k.tile", tuple(factorizations(K, 3)), "tile"),
                Knob("root.unroll_explicit", UNROLL, "categorical"),
            ]
        )
        self.space_id = self.shape_id("synthetic_matmul")

    @property
    def layer_features(self) -> list[float]:
        """log2 scale, as autotune.decompose.Layer.features gives them."""
        return [math.log2(v) for v in (self.M, self.N, self.K, 2.0 * self.M * self.N * self.K)]

    def apply(self, config):
        if config["dense.i.tile"][2] * config["dense.j.tile"][2] > 1024:
            raise InvalidConfig("more than 1024 threads per block")
        return config

    def default_config(self):
        return self.from_indices([0] * len(self.knobs))

    def quirks(self, knob_id: int) -> np.ndarray:
        """Per-candidate hardware quirk (+-8%), the same for every layer on this 'GPU'."""
        return np.array(
            [
                1.0 + 0.04 * np.clip(np.random.default_rng([self.hw_seed, knob_id, *c]).normal(), -2, 2)
                for c in self.knobs[knob_id].candidates
            ]
        )

    def grid(self) -> np.ndarray:
        return _grid(self.M, self.N, self.K, self.hw_seed, self.noise_seed)

    def latency(self, config) -> float | None:
        v = self.grid()[tuple(encoder_for(self).exact_indices(config))]
        return float(v) if np.isfinite(v) else None

    @property
    def best(self) -> float:
        return float(self.grid().min())


@lru_cache(maxsize=8)
def _grid(M: int, N: int, K: int, hw_seed: int, noise_seed: int) -> np.ndarray:
    """Latency (s) of every point, vectorized over the 4 knobs; inf where invalid."""
    sp = MatmulSpace.__new__(MatmulSpace)
    MatmulSpace.__init__(sp, M, N, K, hw_seed, noise_seed)
    I = np.array(sp.knobs[0].candidates, float)
    J = np.array(sp.knobs[1].candidates, float)
    Kt = np.array(sp.knobs[2].candidates, float)
    U = np.array(UNROLL, float)

    def e(a, ax):
        return a.reshape([-1 if d == ax else 1 for d in range(4)])

    bi, vi, ti, ii, iii = (e(I[:, p], 0) for p in range(5))
    bj, vj, tj, ij, ijj = (e(J[:, p], 1) for p in range(5))
    ko, km, ki = (e(Kt[:, p], 2) for p in range(3))
    u = e(U, 3)
    threads, blocks = ti * tj, bi * bj
    ai, aj = vi * ii * iii, vj * ij * ijj
    acc = ai * aj
    sat = 1024.0
    util = np.minimum(blocks * threads, sat) / sat
    ilp = (np.minimum(acc, 8.0) / 8.0) ** 0.6
    spill = np.maximum(1.0, acc / 32.0) ** 1.5
    warp = threads / (32.0 * np.ceil(threads / 32.0))
    c = 4e-9
    fma = M * N * K
    t_comp = fma / (sat * util) / ilp / warp * c * spill
    t_smem = fma / (sat * util) * c * 0.5 * (ai + aj) / acc
    bm, bn = M / bi, N / bj
    coalesce = np.where(tj * ijj < 16, 1.5, 1.0)
    t_glob = blocks * (bm + bn) * K * 4.0 / 2e11 * coalesce
    occ = np.where((bm + bn) * km * ki * 4.0 > 16384, 1.3, 1.0)
    t_sync = ko * 3e-8
    fu = np.select([u == 0, u == 16, u == 64], [1.0, 0.9, 0.86], 0.97)
    fu = 1.0 - (1.0 - fu) * np.minimum(ki, 4.0) / 4.0
    vt = np.where(vi * vj > 4, 1.1, np.where(vi * vj > 1, 0.96, 1.0))
    lat = (np.maximum(t_comp, t_glob) + 0.3 * np.minimum(t_comp, t_glob) + t_smem + t_sync + 5e-7)
    lat = lat * occ * fu * vt * e(sp.quirks(0), 0) * e(sp.quirks(1), 1) * e(sp.quirks(2), 2)
    n = [np.arange(s, dtype=float) for s in lat.shape]
    h = np.sin(e(n[0], 0) * 12.9898 + e(n[1], 1) * 78.233 + e(n[2], 2) * 37.719 + e(n[3], 3) * 4.581
               + noise_seed * 1.618) * 43758.5453
    lat = lat * (1.0 + 0.04 * (h - np.floor(h) - 0.5))
    return np.where(threads > 1024, np.inf, lat)


class SynthBench:
    """Measures configs of a MatmulSpace (apply first, as the pipeline would)."""

    def __init__(self, space: MatmulSpace):
        self.space = space
        self.calls: list[str] = []

    def measure(self, configs):
        out = []
        for cfg in configs:
            self.calls.append(config_to_json(cfg))
            try:
                self.space.apply(cfg)
            except InvalidConfig:
                out.append(TrialResult(cfg, None, "invalid"))
                continue
            out.append(TrialResult(cfg, self.space.latency(cfg)))
        return out


def history_of(space: MatmulSpace, workload_key: str, *, seed: int = 1, similarity: float = 0.9,
               invert: bool = False, n_top: int = 30, n_good: int = 70, n_random: int = 200) -> list[PriorRecord]:
    """Records like a past tuning run of ``space`` left: its best, many good, many random."""
    rng = np.random.default_rng(seed)
    flat = space.grid().ravel()
    order = np.argsort(flat, kind="stable")
    picks = list(order[:n_top]) + list(rng.choice(order[: len(order) // 100], n_good, replace=False))
    picks += list(rng.choice(len(flat), n_random, replace=False))
    recs = []
    for p in picks:
        cfg = space.from_indices(np.unravel_index(p, space.grid().shape))
        lat = flat[p]
        if not np.isfinite(lat):
            recs.append(PriorRecord(cfg, None, similarity, space.layer_features, workload_key, "invalid"))
            continue
        recs.append(PriorRecord(cfg, float(1e-5 / lat if invert else lat), similarity,
                                space.layer_features, workload_key))
    return recs


@pytest.fixture(scope="module")
def target() -> MatmulSpace:
    return MatmulSpace(64, 64, 64)


@pytest.fixture(scope="module")
def similar_priors() -> list[PriorRecord]:
    return history_of(MatmulSpace(64, 128, 64), "dense_64_128_64")


class TinySpace(KnobSpace):
    """30 points, a few invalid: for exhaustion and no-repeat checks."""

    def __init__(self):
        super().__init__([
            Knob("op.i.tile", tuple(factorizations(8, 2)), "tile"),   # 4
            Knob("op.k.tile", tuple(factorizations(4, 2)), "tile"),   # 3
            Knob("root.unroll_explicit", (0, 16), "categorical"),     # 2 -> 24 points
        ])
        self.space_id = self.shape_id("tiny")

    def apply(self, config):
        if config["op.i.tile"][0] == 8 and config["root.unroll_explicit"] == 16:
            raise InvalidConfig("synthetic invalid point")
        return config

    def default_config(self):
        return self.from_indices([0, 0, 0])

    def latency(self, config) -> float:
        i, k = config["op.i.tile"], config["op.k.tile"]
        return 1e-3 * (1 + abs(i[1] - 4)) * (1 + 0.1 * k[0]) * (0.9 if config["root.unroll_explicit"] else 1)


class TinyBench:
    def __init__(self, space):
        self.space = space

    def measure(self, configs):
        out = []
        for c in configs:
            try:
                self.space.apply(c)
                out.append(TrialResult(c, self.space.latency(c)))
            except InvalidConfig:
                out.append(TrialResult(c, None, "invalid"))
        return out


# --------------------------------------------------------------------------------------
# features and mapping
# --------------------------------------------------------------------------------------


def test_features_stable_length_and_derived(target):
    rng = np.random.default_rng(0)
    lf = target.layer_features
    configs = [target.random_config(rng) for _ in range(20)]
    single = [config_features(target, c, lf) for c in configs]
    assert len({len(v) for v in single}) == 1
    batch = batch_config_features(target, configs, lf)
    assert batch.shape == (20, len(single[0]))
    np.testing.assert_allclose(batch, np.vstack(single))
    enc = encoder_for(target, len(lf))
    assert enc.n_features == batch.shape[1]
    # table path (index matrix) == value path
    idx = np.array([enc.exact_indices(c) for c in configs])
    np.testing.assert_allclose(enc.encode_indices(idx, lf), batch)
    # derived: threads = product of part 2 of the 5-part spatial tiles
    names = enc.feature_names
    col = {n: i for i, n in enumerate(names)}
    for c, row in zip(configs, batch):
        threads = c["dense.i.tile"][2] * c["dense.j.tile"][2]
        assert row[col["log_threads"]] == pytest.approx(np.log2(threads))
        assert row[col["log_vthreads"]] == pytest.approx(np.log2(c["dense.i.tile"][1] * c["dense.j.tile"][1]))
        assert row[col["log_unroll"]] == pytest.approx(np.log2(1 + c["root.unroll_explicit"]))
    assert list(row[-4:]) == lf  # layer features appended last
    assert set(DERIVED_NAMES) <= set(names)
    # a foreign config (other layer) featurizes to the same length, raw factors kept
    other = MatmulSpace(64, 128, 64)
    fc = other.random_config(rng)
    fv = config_features(target, fc, lf)
    assert len(fv) == len(single[0])
    assert fv[col["dense.j.tile#log2"]] == pytest.approx(np.log2(fc["dense.j.tile"][2]))


def test_map_config_nearest_log_factors(target):
    cfg = target.default_config()
    assert map_config(target, cfg) == cfg  # own configs map to themselves
    foreign = dict(cfg, **{"dense.j.tile": [2, 1, 32, 2, 1]})  # product 128: not a candidate
    mapped = map_config(target, foreign)
    assert target.contains(mapped)
    # nearest by log-factor distance: one factor halved
    j = mapped["dense.j.tile"]
    d = sum((np.log2(a) - np.log2(b)) ** 2 for a, b in zip(j, [2, 1, 32, 2, 1]))
    assert d == pytest.approx(1.0)
    # unroll 32 (not a candidate) goes to the nearest numeric candidate on a log scale
    assert map_config(target, dict(cfg, **{"root.unroll_explicit": 40}))["root.unroll_explicit"] == 64
    # wrong part count or a missing knob: not mappable
    assert map_config(target, dict(cfg, **{"dense.k.tile": [64, 1]})) is None
    assert ConfigMapper(target).map({"dense.i.tile": [64, 1, 1, 1, 1]}) is None


class CpuSpace(KnobSpace):
    """LLVM-style tiling: 4-part spatial, 2-part reduction, a non-numeric knob."""

    def __init__(self, n: int = 32):
        super().__init__([
            Knob("matmul.i.tile", tuple(factorizations(n, 4)), "tile"),
            Knob("matmul.k.tile", tuple(factorizations(n, 2)), "tile"),
            Knob("root.vectorize", (1, 4, 8), "ordinal"),
            Knob("root.compute_at", ("inline", "root", "inner"), "categorical"),
        ])
        self.space_id = self.shape_id("cpu")

    def apply(self, config):
        return config

    def default_config(self):
        return self.from_indices([0, 0, 0, 0])


def test_features_cpu_style_space():
    space = CpuSpace()
    enc = encoder_for(space)
    assert enc.style == "cpu"
    cfg = {"matmul.i.tile": [4, 2, 2, 2], "matmul.k.tile": [8, 4], "root.vectorize": 8,
           "root.compute_at": "root"}
    row = config_features(space, cfg)
    col = {n: i for i, n in enumerate(enc.feature_names)}
    assert row[col["log_blocks"]] == pytest.approx(2.0)  # outer parallel part
    assert row[col["log_threads"]] == 0.0  # no GPU threads on CPU
    assert row[col["log_work_per_thread"]] == pytest.approx(2.0)
    assert row[col["root.compute_at#idx"]] == pytest.approx(0.5)
    assert enc.parallelism_log2(cfg) == pytest.approx(2.0)
    # from a 64-extent sibling layer: tiles map to nearest, strings must match exactly
    assert map_config(space, dict(cfg, **{"matmul.i.tile": [8, 2, 2, 2]}))["matmul.i.tile"] in (
        [4, 2, 2, 2], [8, 1, 2, 2], [8, 2, 1, 2], [8, 2, 2, 1])
    assert map_config(space, dict(cfg, **{"root.compute_at": "nowhere"})) is None
    assert np.isnan(config_features(space, dict(cfg, **{"root.compute_at": "nowhere"}))[col["root.compute_at#idx"]])


# --------------------------------------------------------------------------------------
# cost model
# --------------------------------------------------------------------------------------


def test_cost_model_ranks_and_smooths_importance(target):
    rng = np.random.default_rng(3)
    enc = encoder_for(target)
    sizes = [len(k) for k in target.knobs]
    idx = np.stack([rng.integers(sizes) for _ in range(300)])
    lat = target.grid()[tuple(idx.T)]
    ok = np.isfinite(lat)
    idx, lat = idx[ok], lat[ok]
    X = enc.encode_indices(idx)
    y = lat.min() / lat
    model = CostModel(seed=0)
    model.fit(X[:200], y[:200])
    assert model.objective == "rank:pairwise"
    from scipy.stats import kendalltau

    tau = kendalltau(model.predict(X[200:]), y[200:]).statistic
    assert tau > 0.4, tau  # generalizes to unseen configs
    imp1 = model.importance
    assert imp1.sum() == pytest.approx(1.0) and (imp1 >= 0).all()
    model.fit(X[100:], y[100:])
    imp2, raw2 = model.importance, model.raw_importance
    assert imp2.sum() == pytest.approx(1.0)
    assert not np.allclose(imp1, imp2)  # it moved...
    np.testing.assert_allclose(imp2, model.ema_decay * imp1 + (1 - model.ema_decay) * raw2)  # ...as an EMA
    assert not np.allclose(imp2, raw2)  # and is smoothed, not the last fit's raw counts


def test_cost_model_constant_labels_fall_back():
    X = np.random.default_rng(0).normal(size=(10, 3))
    model = CostModel().fit(X, np.zeros(10))
    assert model.objective == "reg:squarederror"
    assert model.predict(X).shape == (10,)
    assert model.importance is None  # no splits: no importance signal yet


# --------------------------------------------------------------------------------------
# similarity and prior filtering
# --------------------------------------------------------------------------------------


def log2_features(*dims: float) -> list[float]:
    return [math.log2(d) for d in dims]


def test_layer_similarity_properties():
    a = log2_features(64, 64, 64, 2 * 64**3)
    assert layer_similarity(a, a) == pytest.approx(1.0)
    near = layer_similarity(a, log2_features(64, 128, 64, 2 * 64 * 128 * 64))
    far = layer_similarity(a, log2_features(512, 1024, 64, 2 * 512 * 1024 * 64))
    assert 0.0 <= far < near < 1.0
    # one dimension 2x off among four equally weighted features: exp(-1/4)... twice (dim and FLOPs)
    assert near == pytest.approx(math.exp(-2 / 4))
    # a 4x change must be told from a 2x change (features are already log2: no second log)
    four = layer_similarity(a, log2_features(64, 256, 64, 2 * 64 * 256 * 64))
    assert four == pytest.approx(near**2) and four < 0.5
    # weights decide which differences count
    b = log2_features(64, 64, 1024, 2 * 64**3)
    assert layer_similarity(a, b, [1, 1, 0, 1]) == pytest.approx(1.0)
    assert layer_similarity(a, b, [0, 0, 1, 0]) < 0.1
    # missing features are left out; nothing comparable is 0
    assert layer_similarity(a, [math.nan, *a[1:]]) == pytest.approx(1.0)
    assert layer_similarity(a, [math.nan] * 4) == 0.0
    w = importance_weights(np.array([0.5, 0.2, 0.1, 0.1, 0.1]), 2)
    assert w.sum() == pytest.approx(1.0) and w[0] == pytest.approx(0.5)
    np.testing.assert_allclose(importance_weights(None, 4), 0.25)


def test_filter_priors_drops_dissimilar_and_contradicting(target):
    lf = target.layer_features
    good = history_of(target, "consistent", seed=5, n_random=60)
    bad = history_of(target, "inverted", seed=6, invert=True, n_random=60)
    far_space_features = log2_features(1024, 1024, 4096, 2.0 * 1024 * 1024 * 4096)
    far = [PriorRecord(r.config, r.latency, 0.9, far_space_features, "far") for r in good[:20]]
    priors = good + bad + far
    kept, w = filter_priors(priors, lf, None, 0.5)
    assert {r.workload_key for r in kept} == {"consistent", "inverted"}  # dissimilar gone
    assert len(w) == len(kept) and np.all((w >= 0.5) & (w <= 1.0))
    # measured: the same points as some priors, true ordering
    shared = [r.config for r in good[:6] if r.latency is not None]
    measured = [TrialResult(c, target.latency(c)) for c in shared]
    bad_wk = contradicting_workloads(priors, measured, target)
    assert set(bad_wk) == {"inverted"} and bad_wk["inverted"] < 0
    kept, w = filter_priors(priors, lf, None, 0.5, measured=measured, space=target)
    assert {r.workload_key for r in kept} == {"consistent"}
    # fewer than 3 shared points: no verdict yet
    kept, _ = filter_priors(priors, lf, None, 0.5, measured=measured[:2], space=target)
    assert "inverted" in {r.workload_key for r in kept}


def test_filter_priors_weighs_other_hardware_less_than_the_targets_own(target):
    """Records from other hardware are filtered by similarity like the target's own, and
    weigh less by their ``target_weight``, relative to the heaviest kept record."""
    lf = target.layer_features
    own = history_of(target, "own", seed=5, n_random=20)
    other = [dataclasses.replace(r, workload_key="own@other-cpu", target_weight=0.5) for r in own]
    kept, w = filter_priors(own + other, lf, None, 0.5)
    by_key = {k: w[[r.workload_key == k for r in kept]] for k in ("own", "own@other-cpu")}
    assert len(by_key["own"]) == len(by_key["own@other-cpu"]) == len(own)
    np.testing.assert_allclose(by_key["own@other-cpu"], 0.5 * by_key["own"])
    # All from one other machine: weighted as the target's own would be.
    alone, w_alone = filter_priors(other, lf, None, 0.5)
    _, w_own = filter_priors(own, lf, None, 0.5)
    assert len(alone) == len(other)
    np.testing.assert_allclose(w_alone, w_own)
    # Weight 0: other hardware does not count at all.
    zero = [dataclasses.replace(r, target_weight=0.0) for r in other]
    kept, _ = filter_priors(own + zero, lf, None, 0.5)
    assert {r.workload_key for r in kept} == {"own"}


def test_contradiction_needs_significance(target):
    """Four shared points with one pair swapped (tau -1/3, one-sided p 0.38) is what
    timing noise among near-equal configs looks like: not grounds to drop a workload.
    Fully reversed, the same four points are (tau -1, p 0.04)."""
    cfgs = [target.random_config(np.random.default_rng(s)) for s in range(40)]
    cfgs = sorted(cfgs, key=target.latency)[:4]
    mine = [TrialResult(c, target.latency(c)) for c in cfgs]
    noisy = [PriorRecord(c, lat, 0.9, target.layer_features, "noisy") for c, lat in zip(cfgs, [3.0, 4.0, 1.0, 2.0])]
    reversed_ = [PriorRecord(c, lat, 0.9, target.layer_features, "reversed") for c, lat in zip(cfgs, [4.0, 3.0, 2.0, 1.0])]
    bad = contradicting_workloads(noisy + reversed_, mine, target)
    assert set(bad) == {"reversed"}
    assert bad["reversed"] == pytest.approx(-1.0)
    # the bare sign rule, as before, would have dropped both
    assert set(contradicting_workloads(noisy + reversed_, mine, target, p_max=1.0)) == {"noisy", "reversed"}


def test_filter_priors_keeps_layers_close_to_the_best_neighbour():
    """History may hold only loosely similar layers (the first conv of a network has no
    close relative): the absolute floor keeps them, while a close neighbour, when there
    is one, pushes out layers less than ``relative`` times as similar."""
    me = log2_features(64, 64, 64, 2 * 64**3)
    twin = log2_features(64, 64, 128, 2 * 64 * 64 * 128)  # one dim 2x off
    loose = log2_features(256, 512, 64, 2 * 256 * 512 * 64)  # two dims 4x and 8x off
    cfg = {"k": 1}
    rec = lambda wk, lf: PriorRecord(cfg, 1e-3, 0.0, lf, wk)  # noqa: E731
    s_twin, s_loose = layer_similarity(me, twin), layer_similarity(me, loose)
    assert s_loose < 0.6 * s_twin and s_loose > 0.05
    kept, _ = filter_priors([rec("twin", twin), rec("loose", loose)], me, None, 0.05, relative=0.6)
    assert {r.workload_key for r in kept} == {"twin"}
    kept, w = filter_priors([rec("loose", loose)], me, None, 0.05, relative=0.6)
    assert [r.workload_key for r in kept] == ["loose"] and w[0] == pytest.approx(s_loose)
    kept, _ = filter_priors([rec("twin", twin), rec("loose", loose)], me, None, 0.05, relative=0.0)
    assert len(kept) == 2


# --------------------------------------------------------------------------------------
# the ask/tell contract
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TUNERS)
def test_never_asks_twice_and_survives_failures(name, target, similar_priors):
    tuner = make_tuner(name, target, seed=1, priors=similar_priors, layer_features=target.layer_features)
    bench = SynthBench(target)
    for rnd in range(12):
        configs = tuner.ask(8)
        assert configs, f"round {rnd}: no configs"
        results = bench.measure(configs)
        if rnd % 3 == 1:  # the runner also fails now and then
            results = [TrialResult(r.config, None, "run_error") for r in results]
        tuner.tell(results)
    assert len(bench.calls) == len(set(bench.calls)) == 96
    assert tuner.best is not None and tuner.best.ok


class StrictMatmulSpace(MatmulSpace):
    """Same space with a static check (as MetaScheduleSpace has): <= 256 threads, >= 32."""

    def is_plausible(self, config) -> bool:
        threads = config["dense.i.tile"][2] * config["dense.j.tile"][2]
        return 32 <= threads <= 256


@pytest.mark.parametrize("name", TUNERS)
def test_proposals_respect_is_plausible(name, similar_priors):
    space = StrictMatmulSpace()
    tuner = make_tuner(name, space, seed=4, priors=similar_priors, layer_features=space.layer_features)
    bench = SynthBench(space)
    for _ in range(6):
        configs = tuner.ask(16)
        assert len(configs) == 16
        assert all(space.is_plausible(c) for c in configs)
        tuner.tell(bench.measure(configs))


@pytest.mark.parametrize("name", TUNERS)
def test_exhausts_small_space_without_repeats(name):
    space = TinySpace()
    tuner = make_tuner(name, space, seed=0)
    tuner.mark_seen([space.default_config()])
    asked: list[str] = []
    for _ in range(40):
        configs = tuner.ask(5)
        if not configs:
            break
        asked += [config_to_json(c) for c in configs]
        tuner.tell(TinyBench(space).measure(configs))
    assert len(asked) == len(set(asked))
    assert config_to_json(space.default_config()) not in asked
    assert len(asked) >= 12  # found a good part of the 23 unseen points


def test_registry():
    assert set(TUNERS) == {"random", "xgb", "tl_xgb", "ga", "gga"}
    with pytest.raises(KeyError):
        make_tuner("nope", TinySpace())


def test_deap_global_random_untouched(target):
    random.seed(123)
    before = random.getstate()
    tuner = GATuner(target, seed=0)
    for _ in range(3):
        tuner.tell(SynthBench(target).measure(tuner.ask(32)))
    assert random.getstate() == before


def test_gga_elite_dictionary_normalized_and_prior_informed(target, similar_priors):
    tuner = GuidedGATuner(target, seed=0, priors=similar_priors, layer_features=target.layer_features)
    first = tuner.ask(tuner.pop_size)
    mapped_best = {config_to_json(c) for c in (map_config(target, r.config) for r in similar_priors[:5])}
    assert mapped_best & {config_to_json(c) for c in first}  # seeded from priors
    tuner.tell(SynthBench(target).measure(first))
    tuner.ask(1)  # breeds generation 1
    for dist in tuner.elite_dist:
        assert dist.sum() == pytest.approx(1.0) and (dist > 0).all()
    # the best prior's thread tile is favored over the uniform share
    best_prior = map_config(target, similar_priors[0].config)
    k = target.knob_names.index("dense.i.tile")
    j = target.knob("dense.i.tile").index(best_prior["dense.i.tile"])
    assert tuner.elite_dist[k][j] > 2.0 / len(target.knob("dense.i.tile"))


def test_gga_first_population_is_history_in_warm_start_order(target, similar_priors):
    """By default the whole first population comes from history, in warm-start order (and
    is asked in that order with ``measure_order="turns"``): a good config deep in
    history's list is measured in the first generation, not left to later immigrants."""
    tuner = GuidedGATuner(target, seed=0, priors=similar_priors, layer_features=target.layer_features,
                          measure_order="turns")
    seeds = tuner._seed_keys()
    assert len(seeds) == tuner.pop_size  # the fixture's history holds more distinct configs
    first = tuner.ask(tuner.pop_size)
    assert [tuple(target.to_indices(c)) for c in first] == list(seeds)
    half = GuidedGATuner(target, seed=0, priors=similar_priors, layer_features=target.layer_features, seed_frac=0.5)
    assert half._seed_keys() == seeds[: tuner.pop_size // 2]


def _two_source_history() -> tuple[MatmulSpace, list[PriorRecord]]:
    """A target layer and the history of two layers of other shapes."""
    return MatmulSpace(64, 64, 64), (history_of(MatmulSpace(64, 128, 64), "dense_64_128_64", seed=1)
                                     + history_of(MatmulSpace(128, 64, 64), "dense_128_64_64", seed=2))


def test_gga_measures_its_first_population_best_first_by_a_history_ranker():
    """A source's ranking of its own configs says little about this layer; a ranker
    trained on every kept source, layer features included, says more. The first batch,
    model-ordered, holds a config closer to the best than the first batch by turns."""
    space, priors = _two_source_history()
    first_batch = {}
    for order in ("turns", "model"):
        tuner = GuidedGATuner(space, seed=0, priors=priors, layer_features=space.layer_features, measure_order=order)
        first_batch[order] = min(space.latency(c) for c in tuner.ask(8))
    assert first_batch["model"] < first_batch["turns"], first_batch


def test_gga_measure_order_changes_only_the_order():
    """The ranker reorders the first population; the population, and so each later
    generation, is the one warm-start order gives."""
    space, priors = _two_source_history()
    bench = SynthBench(space)
    asked = {}
    for order in ("turns", "model", "hedged"):
        tuner = GuidedGATuner(space, seed=3, priors=priors, layer_features=space.layer_features, measure_order=order)
        gens = []
        for _ in range(3):
            cfgs = tuner.ask(tuner.pop_size)
            tuner.tell(bench.measure(cfgs))
            gens.append([config_to_json(c) for c in cfgs])
        asked[order] = gens
    assert asked["model"][0] != asked["turns"][0]
    assert sorted(asked["model"][0]) == sorted(asked["turns"][0]) == sorted(asked["hedged"][0])
    assert asked["model"][1:] == asked["turns"][1:] == asked["hedged"][1:]
    with pytest.raises(ValueError, match="measure_order"):
        GuidedGATuner(space, priors=priors, measure_order="best")
    with pytest.raises(ValueError, match="hedge_cap"):
        GuidedGATuner(space, priors=priors, hedge_cap=0)


def test_each_sources_best_first_keeps_the_order_within_and_after():
    #        positions 0..5 best first; sources a a b a c b
    order, sources = [0, 1, 2, 3, 4, 5], ["a", "a", "b", "a", "c", "b"]
    assert per_source_first(order, sources) == [0, 2, 4, 1, 3, 5]
    assert per_source_first(order, sources, cap=2) == [0, 1, 2, 4, 5, 3]
    assert per_source_first([3, 0, 2], ["a", "a", "b", "a"]) == [3, 2, 0]


def test_gga_hedged_order_takes_one_config_of_each_source_first():
    """A source the ranker overrates (a layer's counterpart at another resolution, run
    38b) cannot fill the first trials: the first measured configs come one per source."""
    space, priors = _two_source_history()
    tuner = GuidedGATuner(space, seed=0, priors=priors, layer_features=space.layer_features, measure_order="hedged")
    first = [tuple(space.to_indices(c)) for c in tuner.ask(tuner.pop_size)]
    sources = tuner._sources_of(first)
    seeded = [s for s in sources if s >= 0]  # -1: dictionary and uniform draws
    assert len(set(seeded)) == 2 and seeded[0] != seeded[1]  # both sources before either repeats
    model = GuidedGATuner(space, seed=0, priors=priors, layer_features=space.layer_features)
    assert sorted(first) == sorted(tuple(space.to_indices(c)) for c in model.ask(model.pop_size))


def _batches(tuner, bench, n: int) -> list[list[float]]:
    """Latencies of ``n`` batches of a population's size, batch by batch: the first is
    the first population, the rest bred."""
    out = []
    for _ in range(n):
        cfgs = tuner.ask(tuner.pop_size)
        results = bench.measure(cfgs)
        tuner.tell(results)
        out.append([r.latency if r.ok else np.inf for r in results])
    return out


def test_gga_screen_measures_the_children_a_surrogate_ranks_best():
    """Breeding four children per place and measuring the quarter that history's ranker,
    corrected by the layer's own results, scores best leaves the same first population
    and better later generations."""
    space, priors = _two_source_history()
    bench = SynthBench(space)
    gens = {}
    for screen in (1, 4):
        gens[screen] = [
            _batches(GuidedGATuner(space, seed=s, priors=priors, layer_features=space.layer_features, screen=screen), bench, 3)
            for s in range(3)
        ]
    for s in range(3):
        assert gens[1][s][0] == gens[4][s][0]  # the first population is not bred
    later = {k: float(np.median([lat for run in v for gen in run[1:] for lat in gen])) for k, v in gens.items()}
    assert later[4] < later[1], later
    with pytest.raises(ValueError, match="screen"):
        GuidedGATuner(space, priors=priors, screen=0)


def test_gga_screen_never_measures_a_config_twice():
    """Screened children are new ones, as bred children are: no config measured twice."""
    space, priors = _two_source_history()
    bench = SynthBench(space)
    tuner = GuidedGATuner(space, seed=5, priors=priors, layer_features=space.layer_features, screen=8)
    _batches(tuner, bench, 4)
    assert len(bench.calls) > 3 * tuner.pop_size  # three generations bred and screened
    assert len(bench.calls) == len(set(bench.calls))


def test_gga_first_generation_drawn_from_prior_dictionary(target, similar_priors):
    """Where history fills only part of the first generation, the rest favours the genes
    history's elites carry."""
    best = target.knob("dense.i.tile").index(map_config(target, similar_priors[0].config)["dense.i.tile"])

    def share(tuner) -> float:
        seeds = {tuple(k) for k in tuner._seed_keys()}
        first = [c for c in tuner.ask(tuner.pop_size) if tuple(target.to_indices(c)) not in seeds]
        assert first  # room is left beyond the seeds
        return float(np.mean([target.knob("dense.i.tile").index(c["dense.i.tile"]) == best for c in first]))

    guided = np.mean([share(GuidedGATuner(target, seed=s, priors=similar_priors, layer_features=target.layer_features,
                                          seed_frac=0.5)) for s in range(3)])
    uniform = 1.0 / len(target.knob("dense.i.tile"))
    assert guided > 5 * uniform


def test_cost_model_base_margin_keeps_what_own_rows_do_not_contradict():
    """Margin transfer: trees fit on a layer's own rows correct a prior's score; where
    those rows say nothing (here: feature 0), the prior's order survives."""
    rng = np.random.default_rng(0)
    X_own = np.column_stack([np.full(24, 0.5), rng.uniform(size=24)])  # feature 0 never varies
    y_own = X_own[:, 1]  # own evidence: larger feature 1 is better
    prior = lambda X: -3.0 * X[:, 0]  # history: smaller feature 0 is better  # noqa: E731
    probe = rng.uniform(size=(200, 2))
    twin = probe.copy()
    twin[:, 0] = np.clip(probe[:, 0] + 0.3, 0, 1)  # same feature 1, worse by history
    with_margin = CostModel(seed=0).fit(X_own, y_own, base_margin=prior(X_own))
    kept = np.mean(with_margin.predict(probe, prior(probe)) > with_margin.predict(twin, prior(twin)))
    plain = CostModel(seed=0).fit(X_own, y_own)
    assert kept > 0.9, kept
    assert np.mean(plain.predict(probe) > plain.predict(twin)) < 0.5  # own rows alone can't tell
    # and the own evidence is learned on top: feature 1 orders points history calls equal
    hi, lo = probe.copy(), probe.copy()
    hi[:, 1], lo[:, 1] = 0.9, 0.1
    assert np.mean(with_margin.predict(hi, prior(hi)) > with_margin.predict(lo, prior(lo))) > 0.9


def test_tl_xgb_margin_transfer_trains_history_once_and_corrects_it(target, similar_priors):
    tuner = make_tuner("tl_xgb", target, seed=0, priors=similar_priors, layer_features=target.layer_features)
    assert tuner.transfer == "margin"
    bench = SynthBench(target)
    tuner.tell(bench.measure(tuner.ask(16)))
    tuner.ask(16)
    assert tuner.priors_kept > 0 and tuner._own_fitted
    fits = tuner.prior_model.n_fits
    tuner.ask(1)  # nothing new told: neither model retrains
    assert tuner.prior_model.n_fits == fits
    # the layer-feature importances come from the model that sees other layers
    np.testing.assert_allclose(tuner.importance, tuner.prior_model.importance)
    with pytest.raises(ValueError, match="transfer"):
        make_tuner("tl_xgb", target, priors=similar_priors, transfer="stacked")


def test_history_configs_are_the_warm_start_in_its_order(target, similar_priors):
    """What history alone offers (the ceiling benchmark measures it) is exactly what the
    warm start measures first, best mapped prior first."""
    tuner = make_tuner("tl_xgb", target, seed=0, priors=similar_priors, layer_features=target.layer_features,
                       prior_seed_frac=1.0, epsilon=0.0)
    offered = tuner.history_configs(6)
    assert len(offered) == 6 and len({config_to_json(c) for c in offered}) == 6
    assert [config_to_json(c) for c in tuner.ask(6)] == [config_to_json(c) for c in offered]
    ok = [p for p in similar_priors if p.status == "ok"]
    winners = {config_to_json(map_config(target, min((q for q in ok if q.workload_key == wk), key=lambda q: q.latency).config))
               for wk in {p.workload_key for p in ok}}
    assert config_to_json(offered[0]) in winners  # some similar layer's best comes first
    assert make_tuner("xgb", target, seed=0).history_configs(6) == []


def test_tl_xgb_history_share_measures_the_guided_gas_first_population_in_its_order(target, similar_priors):
    """With ``history_share`` (a quarter by default), once the warm start is over, a share of every model batch
    goes to history's configs as the guided GA's first population ranks them (fixed
    before any result), next unmeasured first; the rest of the batch is the model's. The
    warm start's first batch is left as it was."""
    gga = GuidedGATuner(target, seed=0, priors=similar_priors, layer_features=target.layer_features)
    ranked = [config_to_json(c) for c in gga.ask(gga.pop_size)]
    bench = SynthBench(target)
    opts = dict(seed=0, priors=similar_priors, layer_features=target.layer_features, epsilon=0.0)
    tuner = make_tuner("tl_xgb", target, **opts)  # history_share=0.25 by default
    plain = make_tuner("tl_xgb", target, history_share=0.0, **opts)
    first = tuner.ask(8)
    assert [config_to_json(c) for c in first] == [config_to_json(c) for c in plain.ask(8)]
    tuner.tell(bench.measure(first))
    asked = [config_to_json(c) for c in first]
    for _ in range(4):
        cfgs = tuner.ask(8)
        tuner.tell(bench.measure(cfgs))
        batch = [config_to_json(c) for c in cfgs]
        # the batch opens with the next two ranked configs not measured before it
        assert batch[:2] == [k for k in ranked if k not in asked][:2]
        asked += batch
    assert set(ranked[:8]) <= set(asked)
    with pytest.raises(ValueError, match="history_share"):
        make_tuner("tl_xgb", target, priors=similar_priors, history_share=1.5)


def test_tl_xgb_local_share_moves_one_knob_off_the_best_measured(target, similar_priors):
    """With ``local_share`` (off by default where history is deep; run 45), after the warm
    start each model batch opens with configs one knob away from the best measured so
    far, never measured before; without it the tuner is unchanged."""
    bench = SynthBench(target)
    opts = dict(seed=0, priors=similar_priors, layer_features=target.layer_features, epsilon=0.0, history_share=0.0)
    tuner = make_tuner("tl_xgb", target, local_share=0.5, **opts)
    plain = make_tuner("tl_xgb", target, **opts)
    first = tuner.ask(8)
    assert [config_to_json(c) for c in first] == [config_to_json(c) for c in plain.ask(8)]
    results = bench.measure(first)
    tuner.tell(results)
    seen = {config_to_json(c) for c in first}
    for _ in range(3):
        ok = [r for r in tuner.state.results if r.ok]
        best = target.to_indices(min(ok, key=lambda r: r.latency).config)
        cfgs = tuner.ask(8)
        for cfg in cfgs[:4]:  # half of the batch
            idx = target.to_indices(cfg)
            assert sum(a != b for a, b in zip(idx, best)) == 1 and config_to_json(cfg) not in seen
        seen |= {config_to_json(c) for c in cfgs}
        tuner.tell(bench.measure(cfgs))
    with pytest.raises(ValueError, match="local_share"):
        make_tuner("tl_xgb", target, priors=similar_priors, local_share=-0.1)


def shallow_priors(space: MatmulSpace, workload_key: str = "dense_64_128_64") -> list[PriorRecord]:
    """One source of 40 records: under SHALLOW_SOURCE_RECORDS, as a short tune leaves it."""
    return history_of(space, workload_key, n_top=10, n_good=10, n_random=20)


def test_gga_hands_a_shallow_historys_layer_to_transfer_xgb_after_its_first_population(target, similar_priors):
    """Where history is shallow the guided GA measures its first population (history's
    configs), then transfer XGBoost proposes, told every result: exactly what a transfer
    XGBoost tuner told the same results would ask, one with one-knob moves (run 46b
    measured the hand-over so; transfer XGBoost itself makes none unless asked). Deep
    history, or ``handover=0``: the GA keeps the layer."""
    from autotune.search.ga_tuner import HANDOVER_LOCAL_SHARE
    from autotune.search.tuner import SHALLOW_SOURCE_RECORDS, shallow_history

    source = MatmulSpace(64, 128, 64)
    shallow = shallow_priors(source) + shallow_priors(source, "dense_64_128_64_again")
    assert shallow_history(shallow) and not shallow_history(similar_priors)
    assert len(similar_priors) >= SHALLOW_SOURCE_RECORDS > len(shallow)
    opts = dict(seed=3, layer_features=target.layer_features)
    gga = make_tuner("gga", target, priors=shallow, **opts)
    assert gga.handover == gga.pop_size == 32
    bench = SynthBench(target)
    asked: list[str] = []
    while len(gga.state.results) < gga.pop_size:
        cfgs = gga.ask(8)
        asked += [config_to_json(c) for c in cfgs]
        gga.tell(bench.measure(cfgs))
    assert gga.successor is None and gga.importance is None
    assert make_tuner("tl_xgb", target, priors=shallow, **opts).local_share == 0.0
    twin = make_tuner("tl_xgb", target, priors=shallow, local_share=HANDOVER_LOCAL_SHARE, **opts)
    twin.tell(gga.state.results)
    for _ in range(3):
        cfgs = gga.ask(8)
        assert [config_to_json(c) for c in cfgs] == [config_to_json(c) for c in twin.ask(8)]
        asked += [config_to_json(c) for c in cfgs]
        results = bench.measure(cfgs)
        gga.tell(results)
        twin.tell(results)
    assert gga.handed_over_at == 32 and gga.successor.local_share == HANDOVER_LOCAL_SHARE > 0
    assert gga.importance is not None  # what tune learns feature weights from
    assert gga.source_weights == gga.successor.source_weights and gga.source_weights  # what the report says it believed
    assert len(asked) == len(set(asked)) == 56 and len(gga.state.results) == 56
    for priors, kw in ((similar_priors, {}), (shallow, {"handover": 0})):
        kept = make_tuner("gga", target, priors=priors, **opts, **kw)
        for _ in range(6):
            kept.tell(bench.measure(kept.ask(8)))
        assert kept.handover == 0 and kept.successor is None and kept.handed_over_at is None
    with pytest.raises(ValueError, match="handover"):
        make_tuner("gga", target, priors=shallow, handover=-1)
    with pytest.raises(ValueError, match="handover_local_share"):
        make_tuner("gga", target, priors=shallow, handover_local_share=1.5)


def test_gga_can_give_part_of_its_first_population_to_transfer_xgbs_first_batch(target):
    """``model_seeds=k``: k places of the first population go to transfer XGBoost's first
    batch (as that tuner, same seed, would ask it), the rest to history's mapped configs
    by turns, measured by turns with them."""
    source = MatmulSpace(64, 128, 64)
    shallow = shallow_priors(source) + shallow_priors(source, "dense_64_128_64_again")
    opts = dict(seed=4, layer_features=target.layer_features, pop_size=16)
    plain = make_tuner("gga", target, priors=shallow, model_seeds=0, **opts)
    mixed = make_tuner("gga", target, priors=shallow, model_seeds=6, **opts)
    first = [config_to_json(c) for c in mixed.ask(16)]
    by_turns = [config_to_json(target.from_indices(k)) for k in plain._mapped_seed_keys(10)]
    assert set(by_turns) <= {config_to_json(c) for c in plain.ask(16)}  # history's first ten by turns
    model_batch = [config_to_json(c) for c in make_tuner("tl_xgb", target, priors=shallow, seed=4,
                                                         layer_features=target.layer_features).ask(16)]
    from_model = [c for c in first if c not in by_turns]
    assert len(first) == len(set(first)) == 16 and set(first) >= set(by_turns)
    assert len(from_model) == 6 and set(from_model) <= set(model_batch)
    assert [c for c in model_batch if c in from_model] == from_model  # in the model's order
    assert first[1::2][:6] == from_model  # by turns with history's configs
    with pytest.raises(ValueError, match="model_seeds"):
        make_tuner("gga", target, priors=shallow, model_seeds=17, **opts)
    # by default a quarter where history is shallow (run 52), none where it is deep
    assert make_tuner("gga", target, priors=shallow, **opts).model_seeds == 4
    assert make_tuner("gga", target, priors=history_of(source, "dense_64_128_64"), **opts).model_seeds == 0
    without = make_tuner("gga", target, priors=[], model_seeds=6, **opts)  # no history: no model to ask
    assert len(without.ask(16)) == 16 and without.model_seeds == 6


def test_gga_can_rank_transfer_xgbs_picks_with_historys_configs(target):
    """``picks_order="ranked"``: the same first population, measured in the history
    ranker's order with each pick a source of its own (a screen of 2026-11-26; by turns
    stays the default). Only the order of the first population changes."""
    source = MatmulSpace(64, 128, 64)
    shallow = shallow_priors(source) + shallow_priors(source, "dense_64_128_64_again")
    opts = dict(seed=4, layer_features=target.layer_features, pop_size=16, model_seeds=6)
    by_turns = make_tuner("gga", target, priors=shallow, **opts)
    ranked = make_tuner("gga", target, priors=shallow, picks_order="ranked", **opts)
    first = [target.to_indices(c) for c in ranked.ask(16)]
    assert sorted(map(tuple, first)) == sorted(tuple(target.to_indices(c)) for c in by_turns.ask(16))
    keys = [tuple(k) for k in first]
    scores = ranked._history_ranker().score(np.array(keys, dtype=np.int64))
    picks = set(ranked._model_keys)
    sources = [-2 - i if k in picks else s for i, (k, s) in enumerate(zip(keys, ranked._sources_of(keys)))]
    expected = per_source_first(np.argsort(-scores, kind="stable"), sources, ranked.hedge_cap)
    assert list(expected) == sorted(expected)  # asked in exactly that order
    with pytest.raises(ValueError, match="picks_order"):
        make_tuner("gga", target, priors=shallow, picks_order="model")


def test_the_hand_over_can_go_to_transfer_xgb_without_its_one_knob_moves(target):
    """``handover_local_share=0``: the successor is transfer XGBoost as it is (which
    part of the hand-over's gain is the moves, run 50)."""
    source = MatmulSpace(64, 128, 64)
    shallow = shallow_priors(source) + shallow_priors(source, "dense_64_128_64_again")
    opts = dict(seed=5, layer_features=target.layer_features)
    gga = make_tuner("gga", target, priors=shallow, handover_local_share=0.0, **opts)
    bench = SynthBench(target)
    while len(gga.state.results) < gga.handover:
        gga.tell(bench.measure(gga.ask(8)))
    twin = make_tuner("tl_xgb", target, priors=shallow, **opts)
    twin.tell(gga.state.results)
    for _ in range(2):
        cfgs = gga.ask(8)
        assert [config_to_json(c) for c in cfgs] == [config_to_json(c) for c in twin.ask(8)]
        results = bench.measure(cfgs)
        gga.tell(results)
        twin.tell(results)
    assert gga.successor.local_share == 0.0


# --------------------------------------------------------------------------------------
# search quality on the synthetic problem (median trials-to-5% over 5 seeds)
# --------------------------------------------------------------------------------------


def trials_to_5pct(name: str, space: MatmulSpace, priors, budget: int, batch: int = 16) -> list[int]:
    out = []
    for seed in range(5):
        tuner = make_tuner(name, space, seed=seed, priors=priors, layer_features=space.layer_features)
        res = run_tuner(tuner, SynthBench(space), budget, batch, stop_at=space.best * 1.05)
        hit = trials_to_within(res, space.best, 0.05)
        out.append(hit if hit is not None else budget + 1)
    return out


def test_guided_ga_beats_plain_ga_with_similar_priors(target, similar_priors):
    ga = trials_to_5pct("ga", target, (), budget=600)
    gga = trials_to_5pct("gga", target, similar_priors, budget=600)
    print(f"\ntrials-to-5%: ga {ga} median {np.median(ga)}; gga {gga} median {np.median(gga)}")
    assert sum(t <= 600 for t in gga) >= 4
    assert np.median(gga) <= 0.5 * np.median(ga)


def test_transfer_xgb_beats_cold_xgb(target, similar_priors):
    xgb_t = trials_to_5pct("xgb", target, (), budget=400)
    tl = trials_to_5pct("tl_xgb", target, similar_priors, budget=400)
    print(f"\ntrials-to-5%: xgb {xgb_t} median {np.median(xgb_t)}; tl_xgb {tl} median {np.median(tl)}")
    assert sum(t <= 400 for t in tl) >= 4
    assert np.median(tl) <= 0.6 * np.median(xgb_t)
    assert np.median(xgb_t) < 400  # the cold model-based tuner itself works


def test_transfer_xgb_drops_contradicting_history(target):
    inverted = history_of(target, "liar", seed=9, similarity=0.95, invert=True)
    tuner = make_tuner("tl_xgb", target, seed=0, priors=inverted, layer_features=target.layer_features)
    bench = SynthBench(target)
    first = tuner.ask(8)
    assert tuner.priors_kept > 0  # trusted at first...
    tuner.tell(bench.measure(first))
    tuner.tell(bench.measure(tuner.ask(8)))
    assert tuner.priors_kept == 0  # ...dropped once measurements contradict it


# --------------------------------------------------------------------------------------
# replay
# --------------------------------------------------------------------------------------


def _tiny_records(space: TinySpace) -> list[dict]:
    recs = []
    for idx in np.ndindex(*[len(k) for k in space.knobs]):
        cfg = space.from_indices(idx)
        try:
            space.apply(cfg)
            recs.append({"config": cfg, "latency_median": space.latency(cfg), "status": "ok"})
        except InvalidConfig:
            recs.append({"config": cfg, "latency_median": None, "status": "build_error"})
    return recs


def test_replay_bench_table_and_missing():
    space = TinySpace()
    recs = _tiny_records(space)
    dup = dict(recs[0], latency_median=recs[0]["latency_median"] * 3)
    missing = recs[5]["config"]
    bench = ReplayBench.from_json(space, {"records": [r for r in recs if r["config"] != missing] + [dup, dup]})
    assert bench.best_known == pytest.approx(min(r["latency_median"] for r in recs if r["latency_median"]))
    r0 = bench.measure([recs[0]["config"]])[0]
    assert r0.latency == pytest.approx(recs[0]["latency_median"] * 3)  # median of 1x, 3x, 3x
    assert bench.measure([missing])[0].status == "invalid"
    failed = next(r for r in recs if r["status"] == "build_error")
    assert bench.measure([failed["config"]])[0].status == "build_error"
    near = ReplayBench(space, [r for r in recs if r["config"] != missing], missing="nearest")
    assert near.measure([missing])[0].ok


def test_replay_surrogate_answers_unmeasured_configs_by_a_model_of_the_measured(target):
    """``missing="model"``: a config the table lacks gets the surrogate's latency, which
    must follow the layer's landscape (ranked against the true latencies of held-out
    configs), be the same for the same table, and never stand in for a recorded one."""
    from scipy.stats import spearmanr

    bench = SynthBench(target)
    rng = np.random.default_rng(0)
    cfgs = [target.random_config(rng) for _ in range(700)]
    measured = [r for r in bench.measure(cfgs) if r.ok]
    seen, held = measured[:500], measured[500:]
    recs = [{"config": r.config, "latency_median": r.latency, "status": "ok"} for r in seen]
    model, again = (ReplayBench(target, recs, missing="model") for _ in range(2))
    answers = model.measure([r.config for r in held])
    assert all(a.ok and a.latency > 0 for a in answers)
    assert [a.latency for a in answers] == [a.latency for a in again.measure([r.config for r in held])]
    rho = spearmanr([a.latency for a in answers], [r.latency for r in held]).statistic
    assert rho > 0.6, rho
    assert model.measure([seen[0].config])[0].latency == seen[0].latency  # recorded: as measured
    with pytest.raises(ValueError, match="missing must be one of"):
        ReplayBench(target, recs, missing="guess")


def test_replay_determinism_and_trials_to_within(target, similar_priors, tmp_path):
    space = TinySpace()
    path = tmp_path / "hist.json"
    path.write_text(json.dumps({"records": _tiny_records(space)}))
    bench = ReplayBench.from_json(space, str(path))
    for name in TUNERS:
        runs = [run_tuner(make_tuner(name, space, seed=s), ReplayBench.from_json(space, str(path)), 20, 4)
                for s in (3, 3, 4)]
        keys = [[config_to_json(r.config) for r in run] for run in runs]
        assert keys[0] == keys[1], name
        assert keys[0] != keys[2], name
        t = trials_to_within(runs[0], bench.best_known)
        assert t is None or 1 <= t <= 20
    # on the big synthetic space too, for the model-based and guided tuners
    for name in ("tl_xgb", "gga"):
        a, b = (run_tuner(make_tuner(name, target, seed=2, priors=similar_priors,
                                     layer_features=target.layer_features), SynthBench(target), 48, 16)
                for _ in range(2))
        assert [config_to_json(r.config) for r in a] == [config_to_json(r.config) for r in b]
    res = [TrialResult({}, None, "invalid"), TrialResult({}, 1.2), TrialResult({}, 1.04)]
    assert trials_to_within(res, 1.0) == 3
    assert trials_to_within(res, 1.0, tol=0.25) == 2
    assert trials_to_within(res[:1], 1.0) is None


def test_history_seeds_take_turns_across_source_workloads():
    """Every source layer's winner comes before any layer's runner-up, most similar
    layer first; a config two layers share, a failure or an unmapped row takes no turn."""
    from autotune.search.warm_start import history_seed_order

    mapped = ["a1", "a2", "a3", "b1", "b2", "shared", "shared", "c_fail", None]
    groups = np.array([0, 0, 0, 1, 1, 0, 2, 2, 2])
    perf = np.array([1.0, 0.95, 0.9, 1.0, 0.5, 0.8, 1.0, 0.0, 0.9])
    sims = np.array([0.9, 0.9, 0.9, 0.6, 0.6, 0.9, 0.5, 0.5, 0.5])
    order = history_seed_order(mapped, groups, perf, sims, limit=10)
    assert order == ["a1", "b1", "shared", "a2", "b2", "a3"]
    assert history_seed_order(mapped, groups, perf, sims, limit=2) == ["a1", "b1"]


def test_best_ranker_probability_follows_ranking_not_order_of_sources():
    """The source that orders the measured points right takes the weight, whatever its
    position; identical sources share it; a failure (inf) is slower than any success."""
    from autotune.search.source_weights import best_ranker_probability, misranked_pair_matrix

    rng = np.random.default_rng(0)
    latency = np.array([3.0, 1.0, 2.0, 5.0, 4.0, np.inf, 6.0, 0.5, 7.0, 2.5])
    right = -np.where(np.isfinite(latency), latency, 100.0)  # higher = better
    wrong = -right
    noisy = right + rng.normal(0, 3.0, len(latency))
    p = best_ranker_probability(np.vstack([wrong, noisy, right]), latency, np.random.default_rng(1))
    assert p.sum() == pytest.approx(1.0)
    assert p[2] > 0.9 and p[0] == 0.0
    assert best_ranker_probability(np.vstack([right, right]), latency, np.random.default_rng(1)) == pytest.approx([0.5, 0.5])
    # ranking a failure first misranks it against every success
    fail_first = right.copy()
    fail_first[5] = 10.0
    assert misranked_pair_matrix(fail_first, latency)[0].sum() == int(np.isfinite(latency).sum())
    assert misranked_pair_matrix(right, latency)[0].sum() == 0
    # a tie is half wrong: a ranker that scores everything alike never beats one that ranks
    flat = np.zeros(len(latency))
    pairs = int((latency[:, None] < latency[None, :]).sum())
    assert misranked_pair_matrix(flat, latency)[0].sum() == 0.5 * pairs
    assert best_ranker_probability(np.vstack([flat, noisy]), latency, np.random.default_rng(1))[1] > 0.9


def test_cross_validated_scores_judge_points_the_model_did_not_see():
    """Out-of-fold scores follow a real trend, and do not follow noise, which a model
    scoring its own training points would fit."""
    from autotune.search.source_weights import cross_validated_scores

    rng = np.random.default_rng(0)
    X = rng.random((48, 3))
    args = dict(n_estimators=20, max_depth=3, seed=0)

    def spearman(a, b):
        return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])

    trend = X[:, 0] + 0.05 * rng.random(48)
    assert spearman(cross_validated_scores(X, trend, 0, **args), trend) > 0.7
    noise = rng.random(48)
    assert spearman(CostModel(**args).fit(X, noise).predict(X), noise) > 0.9
    assert abs(spearman(cross_validated_scores(X, noise, 0, **args), noise)) < 0.4
    assert not cross_validated_scores(X, np.ones(48), 0, **args).any()  # nothing to rank


@pytest.mark.parametrize("name", ["tl_xgb", "gga"])
def test_guided_tuners_weight_sources_by_how_they_rank_own_results(target, similar_priors, name):
    """Two equally similar source layers, one measured on hardware with other quirks:
    once the layer has results, the one that ranks them right carries the history."""
    other = history_of(MatmulSpace(64, 128, 64, hw_seed=99), "other_hw", seed=5)
    honest = similar_priors[0].workload_key
    weights = []
    for seed in (0, 1, 2):
        tuner = make_tuner(name, target, seed=seed, priors=list(similar_priors) + other,
                           layer_features=target.layer_features, rank_sources=True)
        bench = SynthBench(target)
        for _ in range(5):
            tuner.tell(bench.measure(tuner.ask(8)))
        tuner.ask(8)
        assert set(tuner.source_weights) == {honest, "other_hw"}
        weights.append(tuner.source_weights[honest])
        assert tuner.source_weights[honest] > tuner.source_weights["other_hw"]
    assert np.median(weights) >= 0.9
    if name == "tl_xgb":  # a source that never ranks best leaves the prior model
        off = make_tuner(name, target, seed=0, priors=list(similar_priors) + other,
                         layer_features=target.layer_features, rank_sources=False)
        bench = SynthBench(target)
        for _ in range(5):
            off.tell(bench.measure(off.ask(8)))
        off.ask(8)
        assert off.source_weights == {} and off.priors_kept == len(similar_priors) + len(other)


def test_tl_xgb_own_model_competes_with_history_and_takes_what_it_wins(target, similar_priors):
    """rank_own (RGPE's target model): history measured on other hardware ranks this
    layer worse than the layer's own results do, so the own model wins most of the
    weight, history's margin shrinks by that share, and where it wins everything the
    history leaves the model entirely."""
    from autotune.search.source_weights import OWN

    misleading = history_of(MatmulSpace(64, 128, 64, hw_seed=99), "other_hw", seed=5)
    own_share = []
    for seed in range(3):
        tuner = make_tuner("tl_xgb", target, seed=seed, priors=misleading,
                           layer_features=target.layer_features, rank_own=True)
        bench = SynthBench(target)
        for _ in range(8):
            tuner.tell(bench.measure(tuner.ask(8)))
        tuner.ask(8)
        assert set(tuner.source_weights) == {"other_hw", OWN}
        share = tuner.source_weights[OWN]
        assert tuner.prior_scale == pytest.approx(1.0 - share, abs=1e-3)
        assert (tuner.priors_kept == 0) == (tuner.source_weights["other_hw"] == 0.0)
        if tuner.priors_kept:  # history's margin counts by the share the sources won
            X = tuner.encoder.encode_indices(np.array([tuner.encoder.map_indices(r.config) for r in tuner.state.results]),
                                             tuner.layer_features)
            assert np.allclose(tuner._prior_margin(X), tuner.prior_scale * tuner.prior_model.predict(X))
        own_share.append(share)
    assert np.median(own_share) > 0.5
    honest = make_tuner("tl_xgb", target, seed=0, priors=list(similar_priors),
                        layer_features=target.layer_features, rank_own=True)
    bench = SynthBench(target)
    honest.tell(bench.measure(honest.ask(8)))
    honest.ask(8)  # one source is enough to compete with
    assert set(honest.source_weights) == {similar_priors[0].workload_key, OWN}
    with pytest.raises(ValueError, match="needs rank_sources"):
        make_tuner("tl_xgb", target, priors=list(similar_priors), rank_own=True, rank_sources=False)


def _gga_immigrants(target, priors, **opts) -> tuple[object, list[tuple[int, ...]]]:
    """A guided GA run to its second generation, and the immigrants that generation took."""
    tuner = make_tuner("gga", target, seed=0, priors=priors, layer_features=target.layer_features, **opts)
    bench = SynthBench(target)
    bred: list[list] = []
    immigrants_of = tuner._immigrants

    def spy(taken):
        out = immigrants_of(taken)
        bred.append([tuple(ind) for ind in out])
        return out

    tuner._immigrants = spy
    while tuner.generation < 1:
        tuner.tell(bench.measure(tuner.ask(8)))
    assert set(bred[0]) <= set(map(tuple, tuner._gen))  # they joined the generation
    assert len(bred[0]) == int(round(tuner.immigrant_frac * tuner.pop_size))
    return tuner, bred[0]


def test_gga_immigrants_come_by_turns_from_every_source_by_default(target, similar_priors):
    """Run 10: weighting the immigrants by source credibility measured worse, so by
    default they come from every kept source, not only the one that ranks best."""
    other = history_of(MatmulSpace(64, 128, 64, hw_seed=99), "other_hw", seed=5)
    tuner, immigrants = _gga_immigrants(target, list(similar_priors) + other)
    assert tuner.source_weights == {}
    sources = {k: {r.workload_key for i, r in enumerate(tuner.priors) if tuner._prior_mapped[i] == k} for k in immigrants}
    assert set().union(*sources.values()) == {similar_priors[0].workload_key, "other_hw"}


def test_gga_immigrants_come_from_the_credible_source_when_sources_are_ranked(target, similar_priors):
    other = history_of(MatmulSpace(64, 128, 64, hw_seed=99), "other_hw", seed=5)
    tuner, immigrants = _gga_immigrants(target, list(similar_priors) + other, rank_sources=True)
    assert tuner.source_weights["other_hw"] == 0.0
    honest_keys = {tuner._prior_mapped[i] for i, r in enumerate(tuner.priors) if r.workload_key != "other_hw"}
    assert all(k in honest_keys for k in immigrants)


def test_source_rankers_rank_only_the_most_similar_sources():
    """Past MAX_RANKED_SOURCES workloads, the least similar ones are not ranked (weight 0)
    and every ranked workload's records fit a ranker of their own."""
    from autotune.search.source_weights import MAX_RANKED_SOURCES, SourceRankers

    rng = np.random.default_rng(0)
    n_src, per = MAX_RANKED_SOURCES + 4, 12
    X = rng.random((n_src * per, 3))
    y = np.tile(np.linspace(0.1, 1.0, per), n_src)
    groups = np.repeat(np.arange(n_src), per)
    sims = np.repeat(np.linspace(0.3, 0.9, n_src), per)  # workload 0 least similar
    names = [f"w{g}" for g in range(n_src)]
    rankers = SourceRankers(X, y, groups, names, n_estimators=5, max_depth=2, seed=0)
    X_own, perf = rng.random((10, 3)), rng.random(10) + 0.5
    row, by_workload = rankers.row_weights(groups, sims, lambda: X_own, perf, seed=0)
    assert sorted(by_workload) == sorted(names[4:])
    assert np.all(row[groups < 4] == 0.0)
    assert sum(by_workload.values()) == pytest.approx(1.0)
    assert np.allclose(row[groups >= 4], [by_workload[names[g]] for g in groups[groups >= 4]])


def test_prior_groups_number_workloads_and_normalize_within_each():
    from autotune.search.tuner import prior_groups

    recs = [PriorRecord({}, 2.0, 0.9, (), "a"), PriorRecord({}, 4.0, 0.9, (), "b"), PriorRecord({}, 1.0, 0.9, (), "a"),
            PriorRecord({}, None, 0.9, (), "b", "build_error"), PriorRecord({}, 8.0, 0.9, (), "b")]
    group, names, perf = prior_groups(recs)
    assert group.tolist() == [0, 1, 0, 1, 1] and names == ["a", "b"]
    assert perf.tolist() == [0.5, 1.0, 1.0, 0.0, 0.5]


def test_transfer_xgb_inspection_matches_what_it_proposes(target, similar_priors):
    """The public surface offline analyses read (bench_transfer_ranking.py,
    trace_prior_rank.py): the fitted model ranks the layer's configs as a layer like it
    ranks them, history's own model is there under margin transfer, and history's first
    configs are the ones the first batch opens with."""
    from scipy.stats import spearmanr

    tuner = make_tuner("tl_xgb", target, seed=0, priors=similar_priors, layer_features=target.layer_features)
    assert tuner.scores([]) is None and tuner.history_scores([]) is None  # nothing fitted yet
    assert tuner.fit_now() and tuner.priors_kept > 0
    rng = np.random.default_rng(5)
    configs = [target.random_config(rng) for _ in range(200)]
    lat = np.array([target.latency(c) for c in configs])
    runs = np.isfinite(lat)
    for scored in (tuner.scores(configs), tuner.history_scores(configs)):
        at, scores = scored
        assert at == list(range(len(configs)))  # every config of the layer's own space maps
        assert spearmanr(scores[runs], -lat[runs]).statistic > 0.3
    first = tuner.first_from_history(8)
    assert 8 <= len(first) <= 16 and len({config_to_json(c) for c in first}) == len(first)
    opening = {config_to_json(c) for c in tuner.ask(8)}
    assert opening & {config_to_json(c) for c in first}


def test_gga_names_the_closest_sources_winner_for_a_probe():
    """A one-trial probe (``autotune tune``) stands for what history's closest layer says
    this one costs. The first population's order is a ranker's across sources, and its
    first config is not the twin's winner here; :meth:`closest_winner` is, until measured."""
    space, priors = _two_source_history()
    twin = history_of(MatmulSpace(64, 64, 64), "twin", seed=5, n_top=1, n_good=2, n_random=5)
    winner = min((r for r in twin if r.latency is not None), key=lambda r: r.latency)
    tuner = GuidedGATuner(space, seed=0, priors=priors + twin, layer_features=space.layer_features)
    lead = tuner.closest_winner()
    assert config_to_json(lead) == config_to_json(winner.config)
    assert config_to_json(tuner.ask(1)[0]) != config_to_json(lead)  # why a probe asks for it by name
    tuner.tell(SynthBench(space).measure([lead]))
    # never measured twice: the next most similar source's winner (a source's winner, never its runner-up)
    nxt = tuner.closest_winner()
    assert nxt is not None and config_to_json(nxt) != config_to_json(lead)
    winners = {k: min((r for r in priors if r.workload_key == k and r.latency), key=lambda r: r.latency) for k in ("dense_64_128_64", "dense_128_64_64")}
    assert config_to_json(nxt) in {config_to_json(space.from_indices(tuner.encoder.map_indices(w.config))) for w in winners.values()}
    assert GuidedGATuner(space, seed=0, layer_features=space.layer_features).closest_winner() is None  # no history
    alone = GuidedGATuner(space, seed=0, priors=twin, layer_features=space.layer_features)
    alone.tell(SynthBench(space).measure([lead]))
    assert alone.closest_winner() is None  # its one source's winner measured
