"""Match score and dispatch: what history knows about a layer decides its tuner."""

from __future__ import annotations

import pytest

from autotune.dispatch import choose
from autotune.history import TargetInfo, WorkloadInfo, open_history
from autotune.history.match import OTHER_TARGET_DISCOUNT, SAME_LAYER_OTHER_BATCH, match, similarity

CPU = TargetInfo("llvm", "znver3", "cpu-a")
GPU = TargetInfo("cuda", "sm_90", "gpu-b")


def _wl(key: str, inv: str, feats, op="conv2d") -> WorkloadInfo:
    return WorkloadInfo(key, inv, op, {"name": key}, 1e6, tuple(feats))


@pytest.fixture()
def store(tmp_path):
    with open_history(str(tmp_path / "h.db")) as s:
        s.register_target(CPU)
        s.register_target(GPU)
        yield s


def _ok(store, key, target, latency=1e-3):
    store.add_record(workload_key=key, target_key=target.key, space_id="s", config={"k": 1}, samples=[latency], status="ok")


def test_exact_hit_scores_one(store):
    w = _wl("a", "ia", [1.0, 2.0])
    store.register_workload(w)
    assert match(store, w, CPU.key).score == 0.0
    _ok(store, "a", CPU)
    m = match(store, w, CPU.key)
    assert m.exact and m.score == 1.0 and m.best is not None


def test_a_winner_of_too_few_trials_is_not_exact(store):
    """A layer started (a probe, a killed run) but measured fewer than ``min_trials``
    times is matched like any other, its own records its closest neighbour."""
    w = _wl("a", "ia", [1.0, 2.0])
    store.register_workload(w)
    store.add_record(workload_key="a", target_key=CPU.key, space_id="s", config={"k": 1}, samples=[1e-3], status="ok")
    store.add_record(workload_key="a", target_key=CPU.key, space_id="s", config={"k": 2}, samples=[], status="invalid")
    store.add_record(workload_key="a", target_key=CPU.key, space_id="s", config={"k": 3}, samples=[], status="build_error")
    m = match(store, w, CPU.key, space_id="s", min_trials=3)  # an invalid config was never measured
    assert not m.exact and m.score == 0.99 and [n.workload.key for n in m.neighbours] == ["a"]
    assert choose(m.score, m.exact).tuner == "gga"
    m = match(store, w, CPU.key, space_id="s", min_trials=2)  # a build error was a trial
    assert m.exact and m.best.config == {"k": 1}


def test_default_schedule_timings_are_no_evidence(store):
    """``tune`` times every layer's default schedule before tuning any: those baseline
    records (config ``{}``) must not make a layer, or its neighbours, look like history
    knows good configs for them (a 0.99 match and the guided GA, seeded from nothing)."""
    from autotune.history import BASELINE_SPACE_PREFIX

    w, near = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0])
    store.register_workload(w)
    store.register_workload(near)
    for key in ("a", "n"):
        store.add_record(workload_key=key, target_key=CPU.key, space_id=BASELINE_SPACE_PREFIX + "llvm", config={}, samples=[5e-3], status="ok")
    m = match(store, w, CPU.key, space_id="s")
    assert (m.score, m.neighbours) == (0.0, ())
    assert choose(m.score, m.exact).tuner == "xgb"
    _ok(store, "n", CPU)  # a searched config of the neighbour is evidence
    assert [nb.workload.key for nb in match(store, w, CPU.key, space_id="s").neighbours] == ["n"]


def test_excluded_workloads_are_absent_from_history(store):
    """An experiment's target layers must not match themselves in history (ResNet-50
    holds ResNet-18's 3x3 64->64 conv): excluded, the layer is scored on its neighbours."""
    w, near = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0])
    store.register_workload(w)
    store.register_workload(near)
    _ok(store, "a", CPU)
    _ok(store, "n", CPU)
    assert match(store, w, CPU.key).exact
    m = match(store, w, CPU.key, exclude={"a"})
    assert not m.exact and 0 < m.score < 1
    assert [nb.workload.key for nb in m.neighbours] == ["n"]
    assert match(store, w, CPU.key, exclude={"a", "n"}).score == 0.0


def test_other_target_is_discounted_and_never_exact(store):
    w = _wl("a", "ia", [1.0, 2.0])
    store.register_workload(w)
    _ok(store, "a", GPU)
    m = match(store, w, CPU.key)
    assert not m.exact
    assert m.score == pytest.approx(OTHER_TARGET_DISCOUNT)


def test_priors_from_other_hardware_are_their_own_group_and_count_less(store):
    """A source layer measured only on another target: its latencies compare only within
    that target, so its records form their own group and carry the discount into the
    tuners' weights (search.similarity.filter_priors)."""
    from autotune.priors import priors_from_match

    w, near, far = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0]), _wl("f", "if", [1.0, 9.0])
    for wl in (w, near, far):
        store.register_workload(wl)
    _ok(store, "f", CPU, 1e-3)
    _ok(store, "n", GPU, 1e-5)
    m = match(store, w, CPU.key)
    assert sorted((nb.workload.key, nb.same_target) for nb in m.neighbours) == [("f", True), ("n", False)]
    priors = priors_from_match(store, m)
    assert sorted((p.workload_key, p.target_weight) for p in priors) == [
        ("f", 1.0), (f"n@{GPU.key}", OTHER_TARGET_DISCOUNT)]
    other = next(nb for nb in m.neighbours if not nb.same_target)
    assert other.similarity == pytest.approx(OTHER_TARGET_DISCOUNT * similarity(w.features, near.features))


def test_a_layer_this_target_measured_is_not_taken_from_another(store):
    """Another target's records of a layer this target has measured only displace this
    target's records of other layers (run 34: the first conv later at cold XGBoost's
    final, 41 trials against 21.5): the layer comes from this target alone, and the
    other target's records stand in only for layers this target lacks."""
    from autotune.priors import priors_from_match

    w, near, far = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0]), _wl("f", "if", [1.0, 9.0])
    for wl in (w, near, far):
        store.register_workload(wl)
    _ok(store, "n", CPU, 1e-3)
    _ok(store, "n", GPU, 1e-5)
    _ok(store, "f", GPU, 1e-5)
    m = match(store, w, CPU.key)
    assert [(nb.workload.key, nb.target_key) for nb in m.neighbours] == [("n", CPU.key), ("f", GPU.key)]
    assert m.score == pytest.approx(similarity(w.features, near.features))
    assert sorted(p.workload_key for p in priors_from_match(store, m)) == sorted(["n", f"f@{GPU.key}"])
    # with max_neighbours=1 the slot goes to this target's own record of the layer
    assert [nb.target_key for nb in match(store, w, CPU.key, max_neighbours=1).neighbours] == [CPU.key]


def test_a_layer_measured_more_fully_elsewhere_comes_along(store):
    """This target's one probe of a layer does not shut out another target's fuller run
    of it (three times the records): both copies are neighbours, this target's first,
    and both feed the priors."""
    from autotune.priors import priors_from_match

    w, near = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0])
    for wl in (w, near):
        store.register_workload(wl)
    _ok(store, "n", CPU, 1e-3)
    for lat in (1e-5, 2e-5, 3e-5):
        _ok(store, "n", GPU, lat)
    m = match(store, w, CPU.key)
    assert [(nb.workload.key, nb.target_key) for nb in m.neighbours] == [("n", CPU.key), ("n", GPU.key)]
    assert m.score == pytest.approx(similarity(w.features, near.features))
    groups = [p.workload_key for p in priors_from_match(store, m)]
    assert sorted(groups) == sorted(["n"] + [f"n@{GPU.key}"] * 3)
    # once this target has at least half the other's records of it, its copy alone is taken
    _ok(store, "n", CPU, 2e-3)
    assert [nb.target_key for nb in match(store, w, CPU.key).neighbours] == [CPU.key]


def test_history_depth_counts_each_source_layers_records(store):
    """The report says how deep a layer's history goes, which the match score does not:
    two source layers holding 1 and 3 measured configs give a median of 2, fewest 1, and
    a median under SHALLOW_SOURCE_RECORDS is what the progress calls shallow (run 43b)."""
    from autotune.priors import priors_from_match
    from autotune.search.tuner import SHALLOW_SOURCE_RECORDS, is_shallow, source_depth

    w, near, far = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0]), _wl("f", "if", [1.0, 9.0])
    for wl in (w, near, far):
        store.register_workload(wl)
    _ok(store, "f", CPU, 1e-3)
    for lat in (1e-3, 2e-3, 3e-3):
        _ok(store, "n", CPU, lat)
    depth = source_depth(priors_from_match(store, match(store, w, CPU.key)))
    # the most similar source ("n", features one apart) is the deeper one here
    assert depth == {"sources": 2, "per_source_median": 2.0, "per_source_min": 1,
                     "nearest_similarity": round(match(store, w, CPU.key).neighbours[0].similarity, 3), "nearest_configs": 3}
    assert depth["per_source_median"] < SHALLOW_SOURCE_RECORDS and is_shallow(depth)
    empty = source_depth([])
    assert empty == {"sources": 0, "per_source_median": 0.0, "per_source_min": 0,
                     "nearest_similarity": 0.0, "nearest_configs": 0} and not is_shallow(empty)


def test_priors_leave_out_tvms_default_schedule(store):
    """``tune`` times TVM's default schedule of each layer and keeps it in history with
    an empty config: no knob values, so no evidence of what this layer's configs do.
    Kept as a prior it set its layer's best latency, and a default faster than a short
    search's configs left none of them counted best (performance under 1)."""
    from autotune.priors import priors_from_match
    from autotune.search.tuner import prior_groups

    w, near = _wl("a", "ia", [1.0, 2.0]), _wl("n", "in", [1.0, 3.0])
    for wl in (w, near):
        store.register_workload(wl)
    _ok(store, "n", CPU, 2e-3)
    _ok(store, "n", CPU, 4e-3)
    store.add_record(workload_key="n", target_key=CPU.key, space_id="default", config={}, samples=[1e-3], status="ok", tuner="default")
    priors = priors_from_match(store, match(store, w, CPU.key))
    assert sorted(p.latency for p in priors) == [2e-3, 4e-3] and all(p.config for p in priors)
    assert sorted(prior_groups(priors)[2]) == [0.5, 1.0]


def test_same_layer_other_batch_counts_as_near_exact(store):
    a, b = _wl("a", "inv", [0.0, 5.0]), _wl("b", "inv", [1.0, 5.0])
    store.register_workload(a)
    store.register_workload(b)
    _ok(store, "b", CPU)
    assert match(store, a, CPU.key).score == pytest.approx(SAME_LAYER_OTHER_BATCH)
    # the report says why it is near, and by the name history holds it under (a bare key
    # and 0.95 did not say it was the same layer at another batch size)
    near, other = _wl("n", "in", [0.0, 5.5]), _wl("x", "ix", [0.0, 5.0])
    store.register_workload(near)
    _ok(store, "n", CPU)
    store.register_workload(other)
    _ok(store, "x", GPU)
    neighbours = {n["workload_key"]: n for n in match(store, a, CPU.key).to_dict()["neighbours"]}
    assert (neighbours["b"]["relation"], neighbours["b"]["name"]) == ("other batch", "b")
    assert neighbours["n"]["relation"] == "features"
    assert neighbours["x"]["relation"] == "features" and neighbours["x"]["target_key"] == GPU.key


def test_similarity_weights_and_op_class(store):
    a = _wl("a", "ia", [0.0, 0.0])
    near, far, dense = _wl("n", "in", [0.0, 1.0]), _wl("f", "if", [3.0, 0.0]), _wl("d", "id", [0.0, 0.0], "dense")
    for w in (a, near, far, dense):
        store.register_workload(w)
    for key in ("n", "f", "d"):
        _ok(store, key, CPU)
    m = match(store, a, CPU.key)
    assert [n.workload.key for n in m.neighbours] == ["n", "f"]  # other op classes never match
    assert m.score == pytest.approx(similarity([0, 0], [0, 1]))
    # weighting only the first feature makes the 'near' layer identical to the tuned one
    assert match(store, a, CPU.key, weights=[1.0, 0.0]).score == pytest.approx(0.99)
    assert match(store, a, CPU.key, weights=[0.0, 1.0]).neighbours[0].workload.key == "f"


def test_dispatch_thresholds():
    assert choose(1.0, True).tuner == "reuse"
    assert choose(0.9, False) .tuner == "gga"
    assert choose(0.5, False).tuner == "tl_xgb"
    assert choose(0.0, False).tuner == "xgb"
    assert choose(0.0, False, override="random").dispatch == "override"
    assert choose(0.5, False, high=0.4).tuner == "gga"


def test_settings_persist(store, tmp_path):
    store.set_meta("importance:llvm:conv2d", "[0.5, 0.5]")
    store.set_meta("importance:llvm:conv2d", "[0.25, 0.75]")
    store.close()
    with open_history(str(tmp_path / "h.db"), readonly=True) as again:
        assert again.get_meta("importance:llvm:conv2d") == "[0.25, 0.75]"
        assert again.get_meta("missing") is None
    with pytest.raises(ValueError):
        store.set_meta("schema_version", "9")


def test_only_a_winner_of_the_current_space_is_an_exact_hit(store):
    w = _wl("a", "ia", [1.0])
    store.register_workload(w)
    store.add_record(workload_key="a", target_key=CPU.key, space_id="tvm-default:llvm", config={}, samples=[1e-3], status="ok")
    assert match(store, w, CPU.key).exact  # any space
    assert not match(store, w, CPU.key, space_id="ms-generic-v1:abc").exact  # a baseline is not a tuned winner
    store.add_record(workload_key="a", target_key=CPU.key, space_id="ms-generic-v1:abc", config={"k": 2}, samples=[2e-3], status="ok")
    assert match(store, w, CPU.key, space_id="ms-generic-v1:abc").exact


def test_a_cost_model_split_on_one_feature_leaves_a_stem_unlike_3x3_convs(tmp_path):
    """A first cost model whose splits all sat on log2 FLOPs was stored as the learned
    importance with no prior: ResNet-18's 7x7 stride-2 stem then scored 0.96 against
    its 3x3 convs and went to the guided GA, and later runs blended it away slowly."""
    from types import SimpleNamespace

    import numpy as np

    from autotune import api
    from autotune.target import resolve_target
    from autotune.tune import TuneOptions, TuneSession

    convs = [l for l in api.layers("resnet18", size=32)["layers"] if l.op_class == "conv2d"]
    stem, threes = convs[0], [l for l in convs if l.attrs.get("kernel") == [3, 3]]
    assert stem.attrs["kernel"] == [7, 7] and threes
    target = resolve_target("llvm")
    on_flops = np.zeros(len(stem.features()))
    on_flops[10] = 1.0  # log2 FLOPs, the split counts' last columns being the layer's features
    with open_history(str(tmp_path / "h.db")) as store:
        store.register_target(target.history_info())
        for layer in [stem, *threes]:
            store.register_workload(layer.workload_info())
        for layer in threes:
            _ok(store, layer.workload_key, target)
        session = TuneSession(target, store, TuneOptions(trials=4, verify=False, model_latency=False))
        uniform = match(store, stem.workload_info(), target.key).score
        space = session._space(stem)
        for _ in range(3):  # three runs in a row, each model as lopsided
            session.importance.learn(threes[0], SimpleNamespace(importance=on_flops))
            m, decision = session._match(stem, space)
            assert decision.tuner == "tl_xgb", m.score
        assert uniform < m.score < 0.7
        weights = session.importance.weights(stem)
        assert min(weights) >= 0.5 / len(weights)  # every feature keeps a share
        # what was learned still moves the weights, and a vector of another length counts for nothing
        assert weights[10] == max(weights) and sum(weights) == pytest.approx(1.0)
        store.set_meta(session.importance.key("conv2d"), "[0.5, 0.5]")
        assert session.importance.weights(stem) is None


def test_a_layers_batch_size_does_not_enter_the_comparison():
    """Batch size rarely changes the winner, and the comparison leaves it out: a ResNet-18
    conv at batch 4 scored 0.66 against a ResNet-50 conv it scored 0.94 against at batch
    1 (the batch was a feature, and it scaled FLOPs and bytes), and went from the guided
    GA to transfer XGBoost."""
    from autotune import api

    def convs(model: str, batch: int) -> dict:
        # by the batch-invariant key: TVM's names of a layer can differ from batch to batch
        return {l.batch_invariant_key: l for l in api.layers(model, size=32, batch_size=batch)["layers"] if l.op_class == "conv2d"}

    one, four = convs("resnet18", 1), convs("resnet18", 4)
    assert set(one) == set(four)
    for name, layer in one.items():
        assert four[name].batch == 4 and layer.batch == 1
        assert four[name].features() == pytest.approx(layer.features(), abs=1e-9), name
        assert four[name].flops == 4 * layer.flops  # what the budget and the roofline go by is the batch's
    other = next(iter(convs("resnet50", 1).values()))
    for name, layer in one.items():
        assert similarity(four[name].features(), other.features()) == pytest.approx(similarity(layer.features(), other.features()))


def test_the_same_layer_at_another_batch_ranks_first_and_others_there_count_as_much(tmp_path):
    """With one sample's features a different layer at another batch scored up to 1.0,
    above the same layer there (0.95): a ResNet-18 conv at batch 4 took its residual twin
    at batch 1 as its closest layer, its own batch-1 records third, and the twin's configs
    came without the batch spread over the outermost tiles."""
    import numpy as np

    from autotune import api
    from autotune.compile import batch_in_outer_tiles
    from autotune.priors import priors_from_match
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    def layers(batch: int) -> dict:
        return {l.name: l for l in api.layers("resnet18", size=32, batch_size=batch)["layers"]}

    one, four = layers(1), layers(4)
    plain, twin = one["fused_conv2d7_add5_relu3"], one["fused_conv2d7_add5_add6_relu3"]
    (tuned,) = [l for l in four.values() if l.batch_invariant_key == plain.batch_invariant_key]
    target = resolve_target("llvm")
    space1 = MetaScheduleSpace(plain.func, target.tvm_target, name=plain.name)
    space4 = MetaScheduleSpace(tuned.func, target.tvm_target, name=tuned.name)
    config = space1.random_config(np.random.default_rng(0))
    with open_history(str(tmp_path / "h.db")) as store:
        store.register_target(target.history_info())
        for layer in (plain, twin, tuned):
            store.register_workload(layer.workload_info())
        for layer in (plain, twin):
            store.add_record(workload_key=layer.workload_key, target_key=target.key, space_id=space1.space_id,
                             config=config, samples=[1e-4], status="ok")
        m = match(store, tuned.workload_info(), target.key)
        first, second = m.neighbours
        assert (first.workload.key, first.relation) == (plain.workload_key, "other batch")
        assert second.workload.key == twin.workload_key and second.similarity <= SAME_LAYER_OTHER_BATCH
        assert first.another_batch and second.another_batch
        assert [n["batch"] for n in m.to_dict()["neighbours"]] == [1, 1]
        spread = batch_in_outer_tiles(space4, config)
        assert spread is not None and spread != config
        assert {p.workload_key: p.config for p in priors_from_match(store, m, space=space4)} == \
               {plain.workload_key: spread, twin.workload_key: spread}
        # at one batch nothing is discounted
        same = match(store, plain.workload_info(), target.key, exclude={plain.workload_key})
        assert same.neighbours[0].workload.key == twin.workload_key and not same.neighbours[0].another_batch
        assert same.neighbours[0].similarity > SAME_LAYER_OTHER_BATCH
