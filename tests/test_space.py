"""Tests for the knob-space interface and the meta-schedule-derived space.

The first MetaScheduleSpace in a process costs ~20 s (TVM imports its tensor
intrinsics), so every space here is built once per module. Oracles: brute-force
enumeration for perfect tilings, TVM itself for "the scheduled module compiles and
computes the same thing as the unscheduled one", and the CUDA limits for plausibility.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from autotune.templates import InvalidConfig, Knob, config_from_json, config_to_json
from autotune.templates.meta_schedule_space import MAX_VTHREAD, MetaScheduleSpace, perfect_tilings


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AUTOTUNE_HOME", str(tmp_path / "home" / ".autotune"))
    monkeypatch.setenv("AUTOTUNE_HISTORY", str(tmp_path / "home" / "history.db"))


# --- perfect_tilings -----------------------------------------------------------------------
def _brute_tilings(extent, parts, max_innermost):
    divs = [d for d in range(1, extent + 1) if extent % d == 0]
    return {t for t in itertools.product(divs, repeat=parts) if math.prod(t) == extent and t[-1] <= max_innermost}


@pytest.mark.parametrize(
    "extent,parts,max_inner",
    [(1, 3, 1), (12, 3, 64), (16, 4, 64), (16, 4, 4), (64, 4, 64), (64, 5, 16), (30, 2, 5), (7, 3, 1), (7, 1, 7), (7, 1, 6)],
)
def test_perfect_tilings_match_brute_force(extent, parts, max_inner):
    got = perfect_tilings(extent, parts, max_inner)
    assert len(got) == len(set(got)), "no duplicates"
    assert set(got) == _brute_tilings(extent, parts, max_inner)
    for t in got:
        assert len(t) == parts and math.prod(t) == extent and t[-1] <= max_inner


def test_perfect_tilings_counts():
    # ordered factorisations of 2^6 into 4 parts: C(6+3, 3) = 84; of 2^4: C(4+3, 3) = 35
    assert len(perfect_tilings(64, 4, 64)) == 84
    assert len(perfect_tilings(16, 4, 16)) == 35
    # 12 = 2^2 * 3 into 3 parts: C(4,2) * C(3,2) = 18
    assert len(perfect_tilings(12, 3, 12)) == 18
    # innermost 1 only: the other parts tile freely (2^4 into 3 parts: C(6,2) = 15)
    assert len(perfect_tilings(16, 4, 1)) == 15
    assert perfect_tilings(7, 1, 6) == ()
    assert perfect_tilings(1, 2, 1) == ((1, 1),)


# --- a MetaScheduleSpace for ResNet-18 convs ------------------------------------------------------
@pytest.fixture(scope="module")
def resnet_layers():
    from autotune.decompose import decompose
    from autotune.frontend import load_and_fuse

    _, mod = load_and_fuse("resnet18", size=64)
    return decompose(mod, batch_size=1)


@pytest.fixture(scope="module")
def convs(resnet_layers):
    layers = [l for l in resnet_layers if l.op_class == "conv2d"]
    # conv 1: 3x3 64->64 on 16x16; conv 4: 3x3 64->128 stride 2; each adds the bias batch
    # norm was folded into (the default layering), then applies a ReLU
    assert layers[1].weights[0] == [64, 64, 3, 3] and layers[4].weights[0] == [128, 64, 3, 3]
    assert layers[1].epilogue == layers[4].epilogue == ["add", "compute"]
    return layers


@pytest.fixture(scope="module")
def llvm_target():
    from autotune.target import resolve_target

    return resolve_target("llvm").tvm_target


@pytest.fixture(scope="module")
def cuda_target():
    from autotune.target import resolve_target

    return resolve_target("cuda:sm_80").tvm_target


@pytest.fixture(scope="module")
def llvm_space(convs, llvm_target):
    return MetaScheduleSpace(convs[1].func, llvm_target, name=convs[1].name)


@pytest.fixture(scope="module")
def llvm_space_other(convs, llvm_target):
    return MetaScheduleSpace(convs[4].func, llvm_target, name=convs[4].name)


@pytest.fixture(scope="module")
def cuda_space(convs, cuda_target):
    return MetaScheduleSpace(convs[1].func, cuda_target, name=convs[1].name)


def _schedule_rules(func) -> list[str]:
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return [str(b.annotations["schedule_rule"]) for b in blocks if "schedule_rule" in b.annotations]


def test_pooling_space_drops_unregistered_rules_without_a_warning(resnet_layers, llvm_target, capfd):
    """TOPI marks max pooling for a hand-written rule no one registers; meta-schedule
    warned about it on stderr in every tune. The mark goes first (the space is the one
    meta-schedule builds once it has dropped the mark itself); a registered rule stays."""
    import tvm_ffi

    from autotune.templates.meta_schedule_space import without_unknown_rules

    pool = next(l for l in resnet_layers if l.op_class == "pool")
    assert _schedule_rules(pool.func) == ["meta_schedule.pool_max"]
    capfd.readouterr()
    space = MetaScheduleSpace(pool.func, llvm_target, name=pool.name)
    assert "Unknown schedule rule" not in capfd.readouterr().err
    assert _schedule_rules(space.mod["main"]) == [] and "pool_max.rv0_rv1.tile" in [k.name for k in space.knobs]

    name = "s_tir.meta_schedule.cpu.meta_schedule.pool_max"
    tvm_ffi.register_global_func(name, lambda sch, block: [sch])
    try:
        assert _schedule_rules(without_unknown_rules(pool.func, llvm_target)) == ["meta_schedule.pool_max"]
    finally:
        tvm_ffi.remove_global_func(name)


def _tile_knobs(space):
    return [k for k in space.knobs if k.kind == "tile"]


def test_knob_names_are_readable(llvm_space):
    names = llvm_space.knob_names
    tiles = _tile_knobs(llvm_space)
    # 4 spatial (nn, ff, yy, xx) + 3 reduction (rc, ry, rx) loops of conv2d_nchw
    assert len(tiles) == 7
    for k in tiles:
        assert k.name.startswith("conv2d_nchw.") and k.name.endswith(".tile"), k.name
    assert {"conv2d_nchw.ff.tile", "conv2d_nchw.rc.tile"} <= set(names)
    for n in names:
        assert "categorical" not in n and "loop" not in n and "#" not in n, n
    assert len(names) == len(set(names))


def test_two_conv_layers_share_knob_names(llvm_space, llvm_space_other, convs, cuda_target):
    assert llvm_space.knob_names == llvm_space_other.knob_names
    # ... while their candidates (loop extents) differ, and so does the space id
    assert llvm_space.space_id != llvm_space_other.space_id
    cuda_other = MetaScheduleSpace(convs[4].func, cuda_target, name=convs[4].name)
    cuda_one = MetaScheduleSpace(convs[1].func, cuda_target, name=convs[1].name)
    assert cuda_one.knob_names == cuda_other.knob_names
    assert cuda_one.space_id != llvm_space.space_id


def test_tile_candidates_multiply_to_the_loop_extent(llvm_space, convs):
    # conv 1: N=1, K=64, OH=OW=16, C=64, R=S=3
    extents = {"nn": 1, "ff": 64, "yy": 16, "xx": 16, "rc": 64, "ry": 3, "rx": 3}
    for axis, extent in extents.items():
        knob = llvm_space.knob(f"conv2d_nchw.{axis}.tile")
        assert all(math.prod(c) == extent for c in knob.candidates), axis
        assert len({tuple(c) for c in knob.candidates}) == len(knob)


def test_size_is_product_of_candidate_counts(llvm_space, cuda_space):
    for space in (llvm_space, cuda_space):
        assert space.size == math.prod(len(k) for k in space.knobs)
        assert space.size > 1000


def test_space_id_is_stable(llvm_space, convs, llvm_target):
    again = MetaScheduleSpace(convs[1].func, llvm_target, name="another_name")
    assert again.space_id == llvm_space.space_id
    assert again.knob_names == llvm_space.knob_names


def test_config_json_and_index_round_trip(llvm_space, cuda_space):
    rng = np.random.default_rng(7)
    for space in (llvm_space, cuda_space):
        configs = [space.default_config()] + [space.random_config(rng) for _ in range(10)]
        for cfg in configs:
            assert space.contains(cfg)
            text = config_to_json(cfg)
            assert config_from_json(text) == cfg
            # canonical: key order does not matter
            assert config_to_json(dict(reversed(list(cfg.items())))) == text
            idx = space.to_indices(cfg)
            assert len(idx) == len(space.knobs)
            assert all(0 <= i < len(k) for i, k in zip(idx, space.knobs))
            assert space.from_indices(idx) == cfg
            assert space.from_indices(space.to_indices(config_from_json(text))) == cfg


def test_configs_from_indices_are_plain_json_and_share_no_list(cuda_space):
    """Candidates are made JSON-plain once per space; each config still gets lists of its
    own, so changing one config cannot change another or the space."""
    idx = cuda_space.to_indices(cuda_space.default_config())
    a, b = cuda_space.from_indices(idx), cuda_space.from_indices(np.array(idx, dtype=np.int64))
    assert a == b and config_from_json(config_to_json(a)) == a
    tiles = [name for name, value in a.items() if isinstance(value, list)]
    assert tiles and all(type(v) is int for name in tiles for v in a[name])
    for name in tiles:
        a[name].append(-1)
    assert cuda_space.from_indices(idx) == b and all(-1 not in b[name] for name in tiles)


@pytest.mark.parametrize("config", [
    {"b": [1, 2], "a": 3, "c": "x"},
    {"t": (np.int64(4), [np.int32(1), 2]), "u": np.float32(0.5), "v": np.float64(0.25)},
    {"flag": True, "none": None, "nested": [[1, [2, (3,)]]]},
    {1: 2, "k": 3},
])
def test_config_json_is_the_same_text_however_plain_the_config_is(config):
    """The fast path for JSON-plain configs writes what making them plain first writes."""
    import json
    from collections import OrderedDict

    from autotune.templates.space import _jsonable

    slow = json.dumps(_jsonable(dict(config)), sort_keys=True, separators=(",", ":"))
    assert config_to_json(config) == slow
    assert config_to_json(OrderedDict(reversed(list(config.items())))) == slow


def test_config_from_json_rejects_non_objects():
    with pytest.raises(ValueError):
        config_from_json("[1, 2]")


def test_config_to_json_handles_numpy_values():
    cfg = {"b": [np.int64(2), np.int32(3)], "a": np.int64(4), "c": np.float32(0.5)}
    assert config_to_json(cfg) == '{"a":4,"b":[2,3],"c":0.5}'


def test_knob_index_and_validation():
    knob = Knob("k", ([1, 2], [2, 1]), "tile")
    assert knob.index((2, 1)) == 1 and knob.index([1, 2]) == 0
    with pytest.raises(KeyError):
        knob.index([4])
    with pytest.raises(ValueError):
        Knob("empty", ())


def _run(lib, target_func_args):
    import tvm

    dev = tvm.cpu(0)
    arrays = [tvm.runtime.tensor(a, dev) for a in target_func_args]
    lib["main"](*arrays)
    return arrays[-1].numpy()


def test_default_config_applies_compiles_and_computes(llvm_space, llvm_target):
    import tvm
    import tvm_ffi

    cfg = llvm_space.default_config()
    mod = llvm_space.apply(cfg)
    assert isinstance(mod, tvm.IRModule)
    assert not tvm_ffi.structural_equal(mod, llvm_space.mod), "the schedule changed the module"
    lib = tvm.compile(mod, target=llvm_target)
    ref = tvm.compile(llvm_space.mod, target=llvm_target)
    rng = np.random.default_rng(0)
    params = llvm_space.mod["main"].params
    shapes = [[int(d) for d in p.ty.shape] for p in params]
    args = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    got = _run(lib, args + [np.zeros(shapes[-1], "float32")])
    want = _run(ref, args + [np.zeros(shapes[-1], "float32")])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_random_llvm_configs_apply(llvm_space):
    rng = np.random.default_rng(3)
    sketches = set()
    for _ in range(12):
        cfg = llvm_space.random_config(rng)
        llvm_space.apply(cfg)  # every point of the CPU space is buildable
        sketches.add(cfg.get("sketch", 0))
    assert len(sketches) > 1


def test_every_decision_is_a_knob_so_a_config_names_one_program(llvm_space, convs, llvm_target):
    """The padding's compute location is a knob: left to the sketch, it was a random draw
    that differed between processes, so one config named different programs in
    different runs (a reused winner was not the measured one)."""
    import tvm
    import tvm_ffi

    where = [k for k in llvm_space.knobs if k.name.endswith(".compute_at")]
    assert [k.name for k in where] == ["pad_temp.compute_at"]
    cands = where[0].candidates
    assert {-2, -1} <= set(cands) and max(cands) >= 10  # root, inline, every loop position
    again = MetaScheduleSpace(convs[1].func, llvm_target, name=convs[1].name)
    assert again.default_config() == llvm_space.default_config()
    rng = np.random.default_rng(11)
    for _ in range(4):
        cfg = llvm_space.random_config(rng)
        assert tvm_ffi.structural_equal(llvm_space.apply(cfg), again.apply(cfg))
    # the knob changes the program, and every location computes the same convolution
    base = llvm_space.default_config()
    params = llvm_space.mod["main"].params
    shapes = [[int(d) for d in p.ty.shape] for p in params]
    args = [rng.standard_normal(sh).astype("float32") for sh in shapes[:-1]]
    want = _run(tvm.compile(llvm_space.mod, target=llvm_target), args + [np.zeros(shapes[-1], "float32")])
    mods = [llvm_space.apply(dict(base, **{"pad_temp.compute_at": loc})) for loc in (-2, -1, max(cands))]
    assert not tvm_ffi.structural_equal(mods[0], mods[1])
    for mod in mods:
        got = _run(tvm.compile(mod, target=llvm_target), args + [np.zeros(shapes[-1], "float32")])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_value_not_in_candidates_is_invalid(llvm_space):
    cfg = llvm_space.default_config()
    bad_tile = dict(cfg, **{"conv2d_nchw.ff.tile": [1, 1, 1, 63]})
    assert not llvm_space.contains(bad_tile)
    with pytest.raises(InvalidConfig):
        llvm_space.apply(bad_tile)
    bad_unroll = dict(cfg, **{"root.unroll_explicit": 7})
    with pytest.raises(InvalidConfig):
        llvm_space.apply(bad_unroll)
    missing = {k: v for k, v in cfg.items() if k != "conv2d_nchw.rc.tile"}
    with pytest.raises(InvalidConfig):
        llvm_space.apply(missing)
    with pytest.raises(KeyError):
        llvm_space.to_indices(bad_tile)


# --- CUDA (code generation only: no GPU needed) ----------------------------------------------------
def _with(space, base, **tiles):
    cfg = dict(base)
    for axis, value in tiles.items():
        cfg[f"conv2d_nchw.{axis}.tile"] = value
    assert space.contains(cfg), tiles
    return cfg


def test_cuda_space_limits(cuda_space):
    assert cuda_space.max_threads == 1024
    spatial = [k for k in _tile_knobs(cuda_space) if len(k.candidates[0]) == 5]
    assert len(spatial) == 4  # [blockIdx, vthread, threadIdx, inner, innermost] per spatial loop


@pytest.mark.parametrize("estimate_shared", [True, False])
def test_plausible_rows_decide_as_is_plausible_does(convs, llvm_space, estimate_shared):
    """Search checks index rows in bulk (per-knob tables of threads and registers); each
    verdict must be the one the config-by-config check gives, on CUDA with and without
    the shared-memory estimate, and on LLVM (no limits). A GPU with few registers per
    block makes every limit decide some rows (at sm_80's they never bind on this layer)."""
    from autotune.target import resolve_target

    small = resolve_target('{"kind": "cuda", "arch": "sm_80", "registers_per_block": 4096}').tvm_target
    cuda = MetaScheduleSpace(convs[1].func, small, name=convs[1].name, estimate_shared=estimate_shared)
    rng = np.random.default_rng(11)
    for space in (cuda, llvm_space):
        rows = np.stack([[int(rng.integers(len(k))) for k in space.knobs] for _ in range(3000)])
        one_by_one = np.array([space.is_plausible(space.from_indices(row)) for row in rows])
        assert (space.plausible_rows(rows) == one_by_one).all()
        assert (space.plausible_rows([tuple(r) for r in rows[:5]]) == one_by_one[:5]).all()
        if space is cuda:  # every check put to the test
            why = [space.implausibility(space.from_indices(row)) or "" for row in rows]
            assert one_by_one.any() and any("threads" in w for w in why) and any("registers" in w for w in why)
            assert any("shared" in w for w in why) == estimate_shared
        else:
            assert one_by_one.all()


def test_cuda_is_plausible_rejects_too_many_threads(cuda_space):
    base = cuda_space.default_config()
    nn = [1, 1, 1, 1, 1]
    # 64 * 16 * 1 = 1024 threads: the limit itself is fine
    at_limit = _with(cuda_space, base, nn=nn, ff=[1, 1, 64, 1, 1], yy=[1, 1, 16, 1, 1], xx=[1, 1, 1, 2, 8])
    assert cuda_space.thread_counts(at_limit) == (1024, 1)
    assert cuda_space.is_plausible(at_limit)
    # 64 * 16 * 2 = 2048 threads
    over = _with(cuda_space, base, nn=nn, ff=[1, 1, 64, 1, 1], yy=[1, 1, 16, 1, 1], xx=[1, 1, 2, 1, 8])
    assert cuda_space.thread_counts(over) == (2048, 1)
    assert not cuda_space.is_plausible(over)
    with pytest.raises(InvalidConfig, match="2048 threads"):
        cuda_space.apply(over)


def test_cuda_is_plausible_rejects_too_many_vthreads(cuda_space):
    base = cuda_space.default_config()
    common = dict(nn=[1, 1, 1, 1, 1], yy=[1, 1, 16, 1, 1], xx=[1, 1, 4, 1, 4])
    ok = _with(cuda_space, base, ff=[1, MAX_VTHREAD, 1, 1, 8], **common)
    assert cuda_space.thread_counts(ok) == (64, 8)
    assert cuda_space.is_plausible(ok)
    over = _with(cuda_space, base, ff=[1, 16, 1, 1, 4], **common)
    assert cuda_space.thread_counts(over) == (64, 16)
    assert not cuda_space.is_plausible(over)
    with pytest.raises(InvalidConfig):
        cuda_space.apply(over)


def test_llvm_space_has_no_thread_limits(llvm_space):
    rng = np.random.default_rng(0)
    cfg = llvm_space.from_indices([len(k) - 1 for k in llvm_space.knobs])
    assert llvm_space.is_plausible(cfg) and llvm_space.shared_bytes(cfg) is None
    assert llvm_space.random_config(rng) is not None


def test_cuda_random_configs_are_plausible_and_some_apply(cuda_space):
    import tvm

    rng = np.random.default_rng(11)
    draws = 32
    valid = 0
    reasons: dict[str, int] = {}
    for _ in range(draws):
        cfg = cuda_space.random_config(rng)
        assert cuda_space.is_plausible(cfg)
        threads, vthreads = cuda_space.thread_counts(cfg)
        assert threads <= 1024 and vthreads <= MAX_VTHREAD
        try:
            mod = cuda_space.apply(cfg)  # includes the VerifyGPUCode postprocessor
        except InvalidConfig as err:
            reasons[str(err)] = reasons.get(str(err), 0) + 1
            continue
        assert isinstance(mod, tvm.IRModule)
        valid += 1
    print(f"\nCUDA conv2d space: {valid}/{draws} random plausible configs pass apply(); rejections: {reasons}")
    assert valid >= 1
    # the default point is valid by construction
    cuda_space.apply(cuda_space.default_config())


def _cuda_target_with(**attrs):
    import tvm

    from autotune.target import resolve_target

    return tvm.target.Target({**dict(resolve_target("cuda:sm_80").tvm_target.export()), **attrs})


@pytest.mark.parametrize("which", ["conv2d", "dense"])
def test_cuda_shared_memory_estimate_decides_as_verify_gpu_code_does(resnet_layers, cuda_target, which):
    """A config whose estimated shared memory exceeds the limit is one VerifyGPUCode
    rejects, and under the limit shared memory is never what it rejects for. Configs are
    drawn where shared memory is unbounded, then judged at the real limit by a space
    that leaves the judging to VerifyGPUCode alone."""
    layer = [l for l in resnet_layers if l.op_class == which][1 if which == "conv2d" else 0]
    space = MetaScheduleSpace(layer.func, cuda_target, name=layer.name)
    unbounded = MetaScheduleSpace(layer.func, _cuda_target_with(max_shared_memory_per_block=1 << 30), name=layer.name)
    verifier_only = MetaScheduleSpace(layer.func, cuda_target, name=layer.name, estimate_shared=False)
    assert verifier_only.shared_bytes(space.default_config()) is None  # VerifyGPUCode's own verdict

    rng = np.random.default_rng(5)
    over = under = 0
    sketches_over = set()
    for _ in range(24):
        cfg = unbounded.random_config(rng)
        estimate = space.shared_bytes(cfg)
        assert estimate is not None and estimate > 0
        if estimate > space.max_shared_bytes:
            over += 1
            sketches_over.add(cfg.get("sketch", 0))
            assert not space.is_plausible(cfg) and not verifier_only.applies(cfg), (estimate, cfg)
            with pytest.raises(InvalidConfig, match="shared memory"):
                space.apply(cfg)
        else:
            under += 1
            assert verifier_only.applies(cfg) == unbounded.applies(cfg), (estimate, cfg)
    assert over and under, (over, under)
    if which == "conv2d":  # software-pipelined sketches keep a copy per stage in flight
        assert len(sketches_over) > 1, sketches_over


def test_history_configs_are_judged_with_the_shared_memory_estimate_where_the_search_leaves_it_out(resnet_layers, cuda_target):
    """A space that leaves shared memory to VerifyGPUCode (to replay old measurements)
    still draws as before, but says which of history's configs, mapped onto the layer,
    could run: as the space with the estimate does. Transfer XGBoost's
    ``plausible_priors`` then leaves the others out of what it learns from."""
    from autotune.search import make_tuner
    from autotune.search.tuner import PriorRecord

    layer = [l for l in resnet_layers if l.op_class == "conv2d"][1]
    space = MetaScheduleSpace(layer.func, cuda_target, name=layer.name)
    unbounded = MetaScheduleSpace(layer.func, _cuda_target_with(max_shared_memory_per_block=1 << 30), name=layer.name)
    verifier_only = MetaScheduleSpace(layer.func, cuda_target, name=layer.name, estimate_shared=False)
    rng = np.random.default_rng(11)
    configs = [unbounded.random_config(rng) for _ in range(40)]
    rows = [verifier_only.to_indices(c) for c in configs]
    fits = verifier_only.fits_device_rows(rows)
    assert fits.tolist() == space.plausible_rows(rows).tolist()
    assert verifier_only.plausible_rows(rows).all() and not fits.all() and fits.any()  # the search's own check is as it was

    priors = [PriorRecord(c, 1e-5 * (1 + i), 0.9, layer.features(), "source") for i, c in enumerate(configs)]
    kept = {}
    for on in (False, True):
        tuner = make_tuner("tl_xgb", verifier_only, seed=0, priors=priors, layer_features=layer.features(), plausible_priors=on)
        idx, _ = tuner._filtered_priors()
        kept[on] = set(idx.tolist())
    assert kept[False] == set(range(len(configs)))
    assert kept[True] == set(np.flatnonzero(fits).tolist())
    # by default, as on where history matches the layer weakly (below 0.5), else off
    for similarity, on in ((0.9, False), (0.49, True)):
        weak = [dataclasses.replace(p, similarity=similarity) for p in priors]
        for name in ("tl_xgb", "gga"):
            tuner = make_tuner(name, verifier_only, seed=0, priors=weak, layer_features=layer.features())
            assert tuner.plausible_priors is on, (name, similarity)
        idx, _ = make_tuner("tl_xgb", verifier_only, seed=0, priors=weak, layer_features=layer.features())._filtered_priors()
        assert set(idx.tolist()) == kept[on]
        # asked to move them instead, none is left out unless that is asked too
        for name in ("tl_xgb", "gga"):
            assert not make_tuner(name, verifier_only, seed=0, priors=weak, layer_features=layer.features(),
                                  repair_history=True).plausible_priors
    # the guided GA's option: its seeds, dictionary and ranker draw on the same records
    fitting = {tuple(r) for r, ok in zip(rows, fits) if ok}
    for on in (False, True):
        ga = make_tuner("gga", verifier_only, seed=0, priors=priors, layer_features=layer.features(), plausible_priors=on,
                        pop_size=8, model_seeds=0)
        idx, _ = ga._kept_priors(())
        assert set(idx.tolist()) == (set(np.flatnonzero(fits).tolist()) if on else set(range(len(configs))))
        seeds = set(ga._seed_keys())
        assert seeds <= fitting if on else not seeds <= fitting


def _configs_drawn_past_the_limits(resnet_layers, cuda_target):
    """A conv's CUDA space (its shared memory judged by TVM's verifier alone, as the H100
    run had it) and 40 configs drawn with the shared-memory limit lifted: some overrun."""
    layer = [l for l in resnet_layers if l.op_class == "conv2d"][1]
    unbounded = MetaScheduleSpace(layer.func, _cuda_target_with(max_shared_memory_per_block=1 << 30), name=layer.name)
    space = MetaScheduleSpace(layer.func, cuda_target, name=layer.name, estimate_shared=False)
    rng = np.random.default_rng(11)
    configs = [unbounded.random_config(rng) for _ in range(40)]
    return layer, space, configs, [tuple(space.to_indices(c)) for c in configs]


def test_history_configs_the_layer_cannot_run_move_to_the_nearest_it_can(resnet_layers, cuda_target):
    """``repair_history``: a mapped config that overruns the layer's limits goes to the
    one-knob move from it that fits and lies nearest in feature space (checked against
    every such move); configs that fit stay; the guided tuners then offer only configs
    the layer can run where they offered some it could not."""
    from autotune.search import make_tuner
    from autotune.search.features import encoder_for
    from autotune.search.repair import nearest_runnable, runnable_mapping
    from autotune.search.tuner import PriorRecord

    layer, verifier_only, configs, rows = _configs_drawn_past_the_limits(resnet_layers, cuda_target)
    fits = verifier_only.fits_device_rows(rows)
    assert not fits.all() and fits.any()

    moved = nearest_runnable(verifier_only, rows)
    encoder, sizes = encoder_for(verifier_only), [len(k) for k in verifier_only.knobs]
    for row, ok in zip(rows, fits):
        if ok:
            assert moved[row] == row
            continue
        new = moved[row]
        assert new is not None and verifier_only.fits_device_rows([new]).all()
        assert sum(a != b for a, b in zip(row, new)) == 1
        moves = [row[:i] + (v,) + row[i + 1:] for i, n in enumerate(sizes) for v in range(n) if v != row[i]]
        moves = [m for m, f in zip(moves, verifier_only.fits_device_rows(moves)) if f]
        here = encoder.encode_indices(np.array([row]))[0]
        dist = np.nansum((encoder.encode_indices(np.array(moves)) - here) ** 2, axis=1)
        assert np.nansum((encoder.encode_indices(np.array([new]))[0] - here) ** 2) == dist.min()
    assert runnable_mapping(verifier_only, [None, *rows]) == [None, *[moved[r] for r in rows]]

    priors = [PriorRecord(c, 1e-5 * (1 + i), 0.9, layer.features(), "source") for i, c in enumerate(configs)]
    for name, options in (("tl_xgb", {}), ("gga", {"pop_size": 8, "model_seeds": 0})):
        offered = {}
        for on in (False, True):
            tuner = make_tuner(name, verifier_only, seed=0, priors=priors, layer_features=layer.features(),
                               repair_history=on, **options)
            keys = tuner._ranked_history() if name == "tl_xgb" else tuner._seed_keys()
            offered[on] = verifier_only.fits_device_rows(keys)
        assert not offered[False].all() and offered[True].all(), (name, offered)


def test_a_moved_config_is_not_held_against_its_source(resnet_layers, cuda_target):
    """With ``repair_history``, the contradiction check still pairs this layer's results
    with the source's configs as mapped, not as moved: a moved config's latency here
    says nothing of its source's original. Results on the moved configs that rank
    exactly against the source's drop the source when paired with the moves (as the
    check did before), and keep it now."""
    from autotune.search import make_tuner
    from autotune.search.repair import nearest_runnable
    from autotune.search.similarity import filter_priors
    from autotune.search.tuner import PriorRecord, TrialResult

    layer, space, configs, rows = _configs_drawn_past_the_limits(resnet_layers, cuda_target)
    moved = nearest_runnable(space, rows)
    unfit = [i for i, r in enumerate(rows) if moved[r] != r and moved[r] is not None][:6]
    assert len({moved[rows[i]] for i in unfit}) == 6 and not {moved[rows[i]] for i in unfit} & set(rows)
    priors = [PriorRecord(configs[i], 1e-5 * (1 + k), 0.9, layer.features(), "source") for k, i in enumerate(unfit)]
    # here, the moves of the source's fastest run slowest
    results = [TrialResult(space.from_indices(moved[rows[i]]), 1e-5 * (10 - k)) for k, i in enumerate(unfit)]
    as_moved, _ = filter_priors(priors, layer.features(), measured=results, space=space,
                                mapped=[moved[rows[i]] for i in unfit], return_indices=True)
    assert len(as_moved.records) == 0
    xgb = make_tuner("tl_xgb", space, seed=0, priors=priors, layer_features=layer.features(), repair_history=True)
    xgb.tell(results)
    ga = make_tuner("gga", space, seed=0, priors=priors, layer_features=layer.features(), repair_history=True)
    for kept, _ in (xgb._filtered_priors(), ga._kept_priors(results)):
        assert list(kept) == list(range(len(priors)))


def test_a_config_no_one_knob_move_fixes_moves_two(resnet_layers, cuda_target):
    """Where no one-knob move from a mapped config fits (on the H100, conv2d7's blocks of
    16 threads), it goes to the nearest two-knob move that does, checked against every
    two-knob move; one that fits or has a one-knob fix moves as before."""
    from itertools import combinations, product

    from autotune.search.features import encoder_for
    from autotune.search.repair import nearest_runnable

    layer = [l for l in resnet_layers if l.op_class == "conv2d"][1]
    space = MetaScheduleSpace(layer.func, cuda_target, name=layer.name, estimate_shared=False)
    sizes = [len(k) for k in space.knobs]
    rng = np.random.default_rng(0)
    rows = [tuple(int(v) for v in r) for r in rng.integers(0, sizes, size=(400, len(sizes)))]

    def moves(row, knobs):
        out = []
        for which in combinations(range(len(sizes)), knobs):
            for values in product(*[[v for v in range(sizes[i]) if v != row[i]] for i in which]):
                new = list(row)
                for i, v in zip(which, values):
                    new[i] = v
                out.append(tuple(new))
        return [m for m, ok in zip(out, space.fits_device_rows(out)) if ok]

    stuck = [r for r in rows if not space.fits_device_rows([r]).any() and not moves(r, 1)][:2]
    assert stuck, "no config without a one-knob fix among 400 drawn: draw more"
    moved = nearest_runnable(space, stuck)
    encoder = encoder_for(space)
    for row in stuck:
        new = moved[row]
        assert new is not None and space.fits_device_rows([new]).all()
        assert sum(a != b for a, b in zip(row, new)) == 2
        here = encoder.encode_indices(np.array([row]))[0]
        dist = np.nansum((encoder.encode_indices(np.array(moves(row, 2))) - here) ** 2, axis=1)
        assert np.nansum((encoder.encode_indices(np.array([new]))[0] - here) ** 2) == dist.min()


def test_nothing_moves_where_nothing_overruns(llvm_space):
    """On LLVM no config overruns a device limit: the mapping stays as it is."""
    from autotune.search.repair import runnable_mapping

    rng = np.random.default_rng(3)
    rows = [tuple(llvm_space.to_indices(llvm_space.random_config(rng))) for _ in range(12)]
    assert runnable_mapping(llvm_space, rows) == rows


_SPACES_WITHOUT_AND_WITH_INTRINSICS = """
import importlib
import json
import sys

from autotune.decompose import decompose
from autotune.frontend import load_and_fuse
from autotune.target import resolve_target
from autotune.templates.meta_schedule_space import MetaScheduleSpace

_, mod = load_and_fuse("resnet18", size=32)
convs = [l for l in decompose(mod) if l.op_class == "conv2d"][:3]

def sketches(target):
    spaces = [MetaScheduleSpace(l.func, resolve_target(target).tvm_target, name=l.name) for l in convs]
    return [[str(s.trace) for s in space.sketches] for space in spaces]

targets = ("llvm", "cuda:sm_80")
without = {t: sketches(t) for t in targets}
registered = sorted(m for m in sys.modules if m.startswith("tvm.s_tir.tensor_intrin."))
for sub in ("cuda", "x86", "arm_cpu"):
    importlib.import_module("tvm.s_tir.tensor_intrin." + sub)
print(json.dumps({"registered": registered, "without": without, "with": {t: sketches(t) for t in targets}}))
"""


def test_spaces_need_no_tensor_intrinsics():
    """Registering TVM's tensor intrinsics costs ~18 s (CUDA) and ~3 s (x86, ARM) a
    process; the spaces skip it. They must be the very spaces built with every
    intrinsic registered, on both kinds of target (a fresh process: this one may have
    registered them already)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _SPACES_WITHOUT_AND_WITH_INTRINSICS], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["registered"] == []
    assert all(result["without"][t] and all(result["without"][t]) for t in result["without"])
    assert result["without"] == result["with"]


def test_a_batch_applied_on_threads_gives_the_serial_programs(cuda_space, llvm_space):
    """The pipeline applies a batch on threads (TVM's C++ runs with the GIL released):
    every module is the one a serial apply gives, in the order asked, and a rejected
    config comes back as its InvalidConfig in its place, across two spaces at once."""
    import tvm_ffi

    from autotune.templates.apply_many import apply_many

    rng = np.random.default_rng(3)
    items = [(space, space.random_config(rng)) for _ in range(12) for space in (cuda_space, llvm_space)]
    too_many = dict(items[0][1])
    for knob in cuda_space.knobs:  # every spatial tile's threadIdx part as large as it goes
        if knob.kind == "tile" and len(knob.candidates[0]) == 5:
            too_many[knob.name] = max(knob.candidates, key=lambda c: c[2])
    items.insert(5, (cuda_space, too_many))

    serial = apply_many(items, threads=1)
    threaded = apply_many(items, threads=4)
    assert isinstance(serial[5], InvalidConfig) and isinstance(threaded[5], InvalidConfig)
    assert str(threaded[5]) == str(serial[5])
    valid = [i for i, mod in enumerate(serial) if not isinstance(mod, InvalidConfig)]
    assert len(valid) >= 20, len(valid)
    for i in range(len(items)):
        if i in valid:
            assert tvm_ffi.structural_equal(threaded[i], serial[i]), i
            assert tvm_ffi.structural_equal(serial[i], items[i][0].apply(items[i][1])), i
        else:
            assert isinstance(threaded[i], InvalidConfig), i


@pytest.fixture(scope="module")
def half_conv(tmp_path_factory):
    """ResNet-18's 3x3 64->64 conv as a float16 model has it: float16 operands, summed in
    float32 (autotune.rewrites), rounded to float16 with the bias and ReLU after."""
    from autotune import zoo
    from autotune.decompose import decompose
    from autotune.frontend import load_and_fuse

    path = tmp_path_factory.mktemp("half") / "resnet18_fp16.onnx"
    zoo.export_model("resnet18", path, size=32, dtype="float16")
    _, mod = load_and_fuse(str(path))
    layer = [l for l in decompose(mod, batch_size=1) if l.op_class == "conv2d"][1]
    assert layer.weights[0] == [64, 64, 3, 3] and "cast" in layer.name
    return layer


def test_half_precision_layers_get_tensor_core_sketches_beside_the_plain_ones(half_conv, convs, cuda_target):
    """On a GPU with tensor cores a float16 conv's space holds meta-schedule's tensor-core
    sketches (wmma, float32 accumulators) as more values of its ``sketch`` knob, beside
    the plain ones; float32 layers, and GPUs before Volta, keep the plain space. A
    tensor-core config compiles to CUDA that calls the tensor cores; the thread and
    register checks, which read plain tilings, leave such configs to VerifyGPUCode, and
    the bulk check agrees with the one-by-one check on every row."""
    from autotune.device_code import generated_cuda_source
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import TENSOR_CORE_RULES, rule_sets

    assert rule_sets(convs[1].func, cuda_target) == ("cuda",)
    assert rule_sets(half_conv.func, resolve_target("cuda:sm_60").tvm_target) == ("cuda",)
    assert rule_sets(half_conv.func, resolve_target("llvm").tvm_target) == ("llvm",)
    space = MetaScheduleSpace(half_conv.func, cuda_target, name=half_conv.name)
    assert space.rule_sets == ("cuda", TENSOR_CORE_RULES)
    assert space.tensor_core_sketches and len(space.tensor_core_sketches) < len(space.sketches)
    assert not space.shared_estimated[min(space.tensor_core_sketches)]

    rng = np.random.default_rng(0)
    rows = np.stack([[int(rng.integers(len(k))) for k in space.knobs] for _ in range(2000)])
    one_by_one = np.array([space.is_plausible(space.from_indices(row)) for row in rows])
    assert (space.plausible_rows(rows) == one_by_one).all()

    # the tensor-core checks (threads, operand tiles in shared memory) are lower bounds:
    # they reject no config VerifyGPUCode accepts, and most it rejects
    from autotune.templates.space import InvalidConfig

    applied, verdicts = {True: None, False: None}, []
    for row in rows[:250]:
        config = space.from_indices(row)
        on_tensor_cores = int(config["sketch"]) in space.tensor_core_sketches
        try:  # what the postprocessors (VerifyGPUCode last) say, the space's own checks aside
            mod = space.apply(config, screen=False)
        except InvalidConfig:
            mod = None
        if on_tensor_cores:
            verdicts.append((mod is not None, space.is_plausible(config)))
        if applied[on_tensor_cores] is None and mod is not None:
            applied[on_tensor_cores] = mod
    assert all(plausible for valid, plausible in verdicts if valid)
    rejected = [plausible for valid, plausible in verdicts if not valid]
    assert rejected and rejected.count(False) > len(rejected) / 2
    tensor_cores, plain = (generated_cuda_source(applied[k], cuda_target) for k in (True, False))
    assert "wmma::mma_sync" in tensor_cores and "wmma::" not in plain
