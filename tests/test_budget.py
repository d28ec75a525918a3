"""How a model's trial budget is spread over its layers (autotune.budget), driven by
simulated layers whose best latency follows a known curve."""

from __future__ import annotations

import pytest

from autotune.budget import (
    FIRST_CHUNK_GAIN,
    PRIOR_WEIGHT,
    AdaptiveSchedule,
    LayerProgress,
    RooflineSchedule,
    make_schedule,
    split_budget,
)


def _layer(name: str, *, default: float, roofline: float = 1e-6, calls: int = 1, flops: float = 1e6, op_class: str = "dense") -> LayerProgress:
    return LayerProgress(name, calls, flops, op_class, roofline, default_s=default)


def _run(schedule, layers: dict[str, LayerProgress], improve, *, space: dict[str, int] | None = None) -> list[tuple[str, int]]:
    """Drive a schedule as the tune loop does: each chunk's trials lower the layer's best
    by ``improve(layer, trial)``; a layer with a finite ``space`` runs out of candidates."""
    given = []
    while (chunk := schedule.next_chunk(layers)) is not None:
        name, n = chunk
        p = layers[name]
        p.allotted += n
        measured = min(n, (space or {}).get(name, p.trials + n) - p.trials)
        for _ in range(measured):
            p.curve.append(improve(p, p.trials + 1))
        if measured < n:
            p.exhausted = True
        p.allotted -= schedule.refund(n - measured)
        given.append((name, measured))
    return given


def _halving(p: LayerProgress, trial: int) -> float:
    """A tuned kernel is 4x faster than the default at once, then gains slowly."""
    return p.default_s / 4 / (1 + 0.05 * trial)


def test_split_budget_funds_the_heaviest_when_it_cannot_fund_all():
    assert split_budget([1.0, 8.0, 2.0, 4.0], 8, 4) == [0, 4, 0, 4]
    assert sum(split_budget([3.0, 1.0, 1.0], 64, 4)) == 64
    assert split_budget([], 10, 4) == []


def test_adaptive_gives_every_layer_a_first_chunk_in_model_order_before_any_a_second():
    """In the model's order, each layer finds the one before it (often its like) tuned."""
    layers = {n: _layer(n, default=d) for n, d in [("a", 2e-3), ("b", 9e-3), ("c", 5e-3), ("d", 1e-3)]}
    given = _run(AdaptiveSchedule(list(layers.values()), 40, min_trials=4, batch=8), layers, _halving)
    assert given[:4] == [("a", 4), ("b", 4), ("c", 4), ("d", 4)]
    assert given[4] == ("b", 8)  # then deeper where the measured time is largest
    assert sum(n for _, n in given) == 40


def test_adaptive_first_chunks_go_to_the_heaviest_when_the_budget_cannot_reach_all():
    layers = {n: _layer(n, default=d, calls=c) for n, d, c in [("a", 2e-3, 1), ("b", 9e-3, 1), ("c", 5e-3, 1), ("d", 1e-3, 4)]}
    given = _run(AdaptiveSchedule(list(layers.values()), 8, min_trials=4, batch=8), layers, _halving)
    assert given == [("b", 4), ("c", 4)]  # the two heaviest, in the model's order


def test_adaptive_gives_trials_where_the_measured_time_is_not_where_the_roofline_says():
    """The case that motivated it: a layer the roofline calls light (a batch matmul at 1%
    of the estimate) that measures heavy gets trials; the roofline split gives it none."""
    def fresh():
        return {
            **{f"conv{i}": _layer(f"conv{i}", default=4e-3, roofline=1e-4) for i in range(4)},
            "bmm": _layer("bmm", default=20e-3, roofline=2e-6, op_class="batch_matmul"),
        }

    roofline = fresh()
    _run(RooflineSchedule(list(roofline.values()), 16, min_trials=4, batch=8), roofline, _halving)
    assert roofline["bmm"].trials == 0

    adaptive = fresh()
    _run(AdaptiveSchedule(list(adaptive.values()), 16, min_trials=4, batch=8), adaptive, _halving)
    assert adaptive["bmm"].trials >= 4


def test_adaptive_spends_in_proportion_to_measured_time_after_the_first_visits():
    """Two layers that gain alike per trial: the one that costs five times more (five
    calls) ends with most of the budget; with equal costs they end near even."""
    heavy = {"x": _layer("x", default=4e-3, calls=5), "y": _layer("y", default=4e-3)}
    _run(AdaptiveSchedule(list(heavy.values()), 96, min_trials=4, batch=8), heavy, _halving)
    assert heavy["x"].trials > 2 * heavy["y"].trials

    even = {"x": _layer("x", default=4e-3), "y": _layer("y", default=4e-3)}
    _run(AdaptiveSchedule(list(even.values()), 96, min_trials=4, batch=8), even, _halving)
    assert abs(even["x"].trials - even["y"].trials) <= 8


def test_the_first_drop_from_the_default_does_not_pull_the_budget_back():
    """Going from an unscheduled default to a first tuned config is a 10-50x drop on a
    CPU; counted as the layer's recent gain it would send the next trials back to it
    rather than to a layer not yet tried."""
    big = _layer("big", default=100e-3)
    big.curve, big.starts, big.allotted = [2e-3] * 4, [0], 4  # one chunk: 100 ms -> 2 ms
    layers = {"big": big, "small": _layer("small", default=0.3e-3)}
    assert AdaptiveSchedule(list(layers.values()), 8, min_trials=4, batch=8).next_chunk(layers) == ("small", 4)


def test_a_heavy_layer_that_stopped_gaining_does_not_keep_the_budget():
    """ConvNeXt-Tiny's case: one matmul of nine calls stops gaining after a dozen trials,
    the others go on gaining a little per trial. Its own recent chunks, not its last one
    alone, say what its next is worth, and its many chunks count once run-wide: with its
    last chunk alone beside a run-wide figure made of its own plateau, it took 88 of
    these 160 trials and two other layers went deeper than a first chunk."""
    import math

    def curve(p: LayerProgress, trial: int) -> float:
        if p.name == "heavy":  # 50x at once, a little more over a dozen trials, then flat
            return p.default_s / 50 * (1 + 0.2 * math.exp(-trial / 6))
        return p.default_s / 40 / (1 + 0.03 * trial)

    layers = {"heavy": _layer("heavy", default=275e-3, calls=9)}
    for i, default in enumerate([300e-3, 400e-3, 100e-3, 250e-3, 400e-3, 60e-3]):
        layers[f"l{i}"] = _layer(f"l{i}", default=default, calls=3)
    _run(AdaptiveSchedule(list(layers.values()), 160, min_trials=4, batch=8), layers, curve)
    assert sum(p.trials for p in layers.values()) == 160
    assert layers["heavy"].trials < 80
    assert sum(p.trials > 4 for n, p in layers.items() if n != "heavy") >= 3


def test_an_exhausted_layer_passes_its_trials_on_and_is_not_asked_again():
    layers = {"tiny": _layer("tiny", default=50e-3), "other": _layer("other", default=1e-3)}
    given = _run(AdaptiveSchedule(list(layers.values()), 30, min_trials=4, batch=8), layers, _halving, space={"tiny": 6})
    assert layers["tiny"].trials == 6 and layers["tiny"].exhausted
    assert layers["other"].trials == 24  # the whole budget is spent: 30 in all
    assert [name for name, n in given].count("tiny") == 2


def test_a_layer_history_covers_closely_is_probed_with_one_trial():
    """A match at the guided threshold makes the first chunk one trial (a probe), so the
    trials a 4-trial first chunk would have taken reach another layer."""
    def fresh(match_b: float):
        layers = {n: _layer(n, default=4e-3) for n in "abc"}
        layers["b"].match = match_b
        return layers

    layers = fresh(0.99)
    given = _run(AdaptiveSchedule(list(layers.values()), 9, min_trials=4, batch=8, probe_at=0.8), layers, _halving)
    assert given == [("a", 4), ("b", 1), ("c", 4)]
    assert layers["b"].probed and not layers["a"].probed

    below = fresh(0.79)  # under the threshold: a first chunk like any other
    given = _run(AdaptiveSchedule(list(below.values()), 9, min_trials=4, batch=8, probe_at=0.8), below, _halving)
    assert given == [("a", 4), ("b", 4), ("c", 1)]
    off = fresh(0.99)  # probing off (probe_at None): the match does not matter
    assert _run(AdaptiveSchedule(list(off.values()), 9, min_trials=4, batch=8), off, _halving) == given


def test_a_match_raised_by_tuning_its_twin_turns_the_next_visit_into_a_probe():
    """Matches are kept current by the tune loop: once a layer's twin is tuned its match
    jumps, and a probe (four times the value per trial of a first chunk) goes first."""
    layers = {n: _layer(n, default=d) for n, d in [("conv", 4e-3), ("conv_add", 4e-3), ("dense", 6e-3)]}
    schedule = AdaptiveSchedule(list(layers.values()), 9, min_trials=4, batch=8, probe_at=0.8)
    given = []
    while (chunk := schedule.next_chunk(layers)) is not None:
        name, n = chunk
        p = layers[name]
        p.allotted += n
        p.curve += [_halving(p, p.trials + 1 + i) for i in range(n)]
        if name == "conv":  # tuning it makes its twin a close match
            layers["conv_add"].match = 0.99
        given.append(chunk)
    assert given == [("conv", 4), ("conv_add", 1), ("dense", 4)]
    # a probe's gain calibrates later probes, not the first chunks of its op class
    cal = schedule._calibration(layers)
    first_gain, probe_gain = 1 - 1 / (4 * 1.2), 1 - 1 / (4 * 1.05)  # _halving after 4 trials, after 1
    first = (FIRST_CHUNK_GAIN * PRIOR_WEIGHT + 2 * first_gain) / (PRIOR_WEIGHT + 2)
    assert cal.first == pytest.approx(first)
    assert cal.probe == pytest.approx((first * PRIOR_WEIGHT + probe_gain) / (PRIOR_WEIGHT + 1))


def test_probes_are_only_for_a_budget_that_cannot_reach_every_layer():
    """One trial is a stopgap, not a first chunk: on ResNet-18 at 64 trials (four each
    for 16 of its 18 layers), probes whose saved trials went deeper left the tuned model
    slower (without over with 0.95, 0.86, 0.92 by the tuned sums, 3 seeds). So a close match is probed only while the trials left cannot
    give every layer not yet visited a full first chunk, and a probed layer gets the rest
    of its first chunk once trials remain, before any layer goes deeper (here the heavy
    ``a``, worth more per trial)."""
    def run(budget: int):
        layers = {n: _layer(n, default=d) for n, d in [("a", 40e-3), ("b", 4e-3), ("c", 4e-3)]}
        layers["b"].match = 0.99
        return _run(AdaptiveSchedule(list(layers.values()), budget, min_trials=4, batch=8, probe_at=0.8), layers, _halving)

    assert run(12)[:3] == [("a", 4), ("b", 4), ("c", 4)]  # 12 trials reach all three
    # 11 do not: b is probed, c gets its first chunk, and what is left completes b's
    assert run(11) == [("a", 4), ("b", 1), ("c", 4), ("b", 2)]


def test_roofline_schedule_tunes_layers_in_order_to_their_fixed_shares():
    layers = {n: _layer(n, default=1e-3, roofline=r) for n, r in [("a", 1e-4), ("b", 3e-4)]}
    schedule = RooflineSchedule(list(layers.values()), 40, min_trials=4, batch=8)
    given = _run(schedule, layers, _halving)
    assert [name for name, _ in given] == ["a", "a", "b", "b", "b", "b"]
    assert (layers["a"].trials, layers["b"].trials) == (12, 28) == (schedule.planned["a"], schedule.planned["b"])


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="adaptive, roofline"):
        make_schedule("greedy", [], 8, min_trials=4, batch=8)


def test_a_layer_whose_configs_all_ran_slower_than_its_default_weighs_its_default():
    """An embedding model: the 22 ns mean's first four configs all ran near 6 us, and it
    was weighed at 6 us, 280x what the model runs (TVM's default, kept where no config
    beats it): it took all 16 trials, and the 60 ns dense layer none."""
    layers = {"mean": _layer("mean", default=22e-9, op_class="reduction"), "dense": _layer("dense", default=60e-9)}
    assert layers["mean"].latency() == 22e-9

    def worse_than_default(p: LayerProgress, trial: int) -> float:
        return 6e-6 if p.name == "mean" else p.default_s / 2

    given = _run(AdaptiveSchedule(list(layers.values()), 16, min_trials=4, batch=8), layers, worse_than_default)
    assert layers["mean"].best == 6e-6 and layers["mean"].latency() == 22e-9
    assert given[:2] == [("mean", 4), ("dense", 4)]
    assert sum(n for name, n in given if name == "dense") == 12

