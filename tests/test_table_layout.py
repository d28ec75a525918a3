"""Tests for autotune.table_layout: the CLI's tables on a narrow terminal."""

from __future__ import annotations

import pytest

from autotune.table_layout import Column, fit_columns, left_out_note

COLUMNS = [Column("layer", fold_at=8), Column("op"), Column("figure", keep=1), Column("extra", keep=2, fold_at=6)]
ROWS = [["fused_conv2d_add_relu", "conv2d", "123.4 us", "a long note on the layer"]]


def test_every_column_is_kept_where_all_fit_or_no_width_is_set():
    assert fit_columns(COLUMNS, ROWS, None) == [0, 1, 2, 3]
    assert fit_columns(COLUMNS, ROWS, 200) == [0, 1, 2, 3]


def test_the_columns_kept_shortest_go_first_and_are_named():
    # least widths: layer 8, op 6, figure 8, extra 6 (+3 each, +1): 41 with all four
    assert fit_columns(COLUMNS, ROWS, 41) == [0, 1, 2, 3]
    assert fit_columns(COLUMNS, ROWS, 40) == [0, 1, 2]
    assert fit_columns(COLUMNS, ROWS, 31) == [0, 1]
    assert fit_columns(COLUMNS, ROWS, 10) == [0, 1]  # keep=0 columns are never left out
    assert left_out_note(COLUMNS, [0, 1]) == "(left out at this terminal's width: figure, extra; --json has every column)"
    assert left_out_note(COLUMNS, [0, 1, 2, 3]) == ""


@pytest.fixture(scope="module")
def dqn_layers():
    from autotune import api

    return api.layers("dqn")["layers"]


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_layers_table_fits_the_terminal_with_names_and_figures_whole(dqn_layers, width):
    """At 80 columns rich folded each layer's name into five-letter pieces, and its
    attributes over fourteen lines."""
    from autotune.decompose import format_table

    text = format_table(dqn_layers, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    for layer in dqn_layers:
        assert layer.name in text and f"{layer.flops / 1e6:.1f}" in text
    assert "left out at this terminal's width: " in text or width >= 100


def test_a_file_gets_every_column(dqn_layers):
    from autotune.decompose import LAYER_COLUMNS, format_table

    header = next(line for line in format_table(dqn_layers).splitlines() if "layer" in line)
    assert all(column.header in header for column in LAYER_COLUMNS)
    assert "left out" not in format_table(dqn_layers)


def test_a_plain_table_keeps_to_the_terminal_and_names_what_it_left_out():
    """`history ls` drew 141 columns whatever the terminal: each line wrapped in two at 80."""
    from autotune.table_layout import plain_table

    columns = [Column("workload"), Column("target", keep=2), Column("records", justify="right", keep=1), Column("best", justify="right")]
    rows = [["307245511d4d41871c1c7dfe", "llvm:znver4:AMD-EPYC", "1", "2.740 ms"],
            ["bc9f64cb34cf60a89afdd075", "llvm:znver4:AMD-EPYC", "15", "567.1 us"]]
    whole = plain_table(columns, rows, None)
    assert whole[0] == "workload                  target                records      best"
    assert whole[2] == "bc9f64cb34cf60a89afdd075  llvm:znver4:AMD-EPYC       15  567.1 us"
    narrow = plain_table(columns, rows, 50)
    assert narrow[:3] == ["workload                  records      best",
                          "307245511d4d41871c1c7dfe        1  2.740 ms",
                          "bc9f64cb34cf60a89afdd075       15  567.1 us"]
    assert narrow[3] == "(left out at this terminal's width: target; --json has every column)"
    assert all(len(line) <= 50 for line in narrow[:3])
