"""History from a CPU of another vector width is restated for this one."""

from __future__ import annotations

import pytest

from autotune.history import TargetInfo, WorkloadInfo, open_history
from autotune.history.match import match
from autotune.templates.space import Knob
from autotune.templates.vector_width import restate_vector_width, vector_axis_knobs

XX = "conv2d_nchw.xx.tile"


def _tile(name: str, parts: int) -> Knob:
    return Knob(name, ([1] * (parts - 1) + [28],), "tile")


@pytest.mark.parametrize(
    ("tile", "from_lanes", "to_lanes", "expected"),
    [
        ([1, 2, 1, 7], 8, 16, [1, 1, 1, 14]),  # AVX2's 7-wide vector, filled on AVX-512
        ([1, 1, 28, 1], 8, 16, [1, 1, 14, 2]),  # the factor comes from the nearest outer level
        ([1, 1, 1, 14], 16, 8, [1, 1, 2, 7]),  # and goes back out on a narrower CPU
        ([1, 1, 1, 7], 8, 16, [1, 1, 1, 7]),  # an axis of 7 fills no more on the wider CPU
        ([3, 1, 1, 5], 8, 16, [3, 1, 1, 5]),  # no factor of 2 to move: kept as measured
        ([1, 2, 1, 7], 8, 8, [1, 2, 1, 7]),  # the same width: nothing to restate
    ],
)
def test_restating_scales_the_innermost_factor_and_keeps_the_tile_whole(tile, from_lanes, to_lanes, expected):
    config = {XX: tile, "conv2d_nchw.ff.tile": [1, 2, 1, 7], "sketch": 1}
    out = restate_vector_width(config, [XX], from_lanes, to_lanes)
    assert out[XX] == expected
    assert out["conv2d_nchw.ff.tile"] == [1, 2, 1, 7] and out["sketch"] == 1  # only the vector axis
    assert config[XX] == tile  # the record itself is left as it was


def test_the_vector_axis_is_each_blocks_last_cpu_spatial_tile():
    knobs = [Knob("sketch", (0, 1)), _tile("conv2d_nchw.ff.tile", 4), _tile("conv2d_nchw.yy.tile", 4),
             _tile(XX, 4), _tile("conv2d_nchw.rc.tile", 2), _tile("T_add.ax1.tile", 4)]
    assert vector_axis_knobs(knobs) == [XX, "T_add.ax1.tile"]
    cuda = [_tile("conv2d_nchw.ff.tile", 5), _tile(XX, 5), _tile("conv2d_nchw.rc.tile", 3)]
    assert vector_axis_knobs(cuda) == []  # GPU tiles have no vector axis to restate


def test_float_lanes_come_from_llvm_cpu_features():
    from autotune.target import float_lanes

    assert (float_lanes("llvm", "znver3"), float_lanes("llvm", "znver4")) == (8, 16)
    assert float_lanes("llvm", "not-a-cpu") is None
    assert float_lanes("cuda", "sm_90") is None


def test_priors_from_another_cpu_are_restated_and_this_cpus_are_not(tmp_path):
    from autotune.priors import priors_from_match

    here, there = TargetInfo("llvm", "znver4", "cpu-a"), TargetInfo("llvm", "znver3", "cpu-b")
    tuned = WorkloadInfo("t", "it", "conv2d", {}, 1e6, (1.0, 2.0))
    source = WorkloadInfo("s", "is", "conv2d", {}, 1e6, (1.0, 3.0))
    other = WorkloadInfo("o", "io", "conv2d", {}, 1e6, (1.0, 4.0))  # measured on the other CPU only
    space = type("Space", (), {"knobs": [_tile(XX, 4)]})()
    with open_history(str(tmp_path / "h.db")) as store:
        for info in (here, there):
            store.register_target(info)
        for w in (tuned, source, other):
            store.register_workload(w)
        for key, target in (("s", here), ("o", there)):
            store.add_record(workload_key=key, target_key=target.key, space_id="s", config={XX: [1, 2, 1, 7]},
                             samples=[1e-3], status="ok")
        m = match(store, tuned, here.key)
        priors = priors_from_match(store, m, space=space, lanes=16)
        as_measured = {p.workload_key: p.config[XX] for p in priors_from_match(store, m)}
    assert {p.workload_key: p.config[XX] for p in priors} == {"s": [1, 2, 1, 7], f"o@{there.key}": [1, 1, 1, 14]}
    assert {p.workload_key: p.restated for p in priors} == {"s": False, f"o@{there.key}": True}
    assert as_measured == {"s": [1, 2, 1, 7], f"o@{there.key}": [1, 2, 1, 7]}
