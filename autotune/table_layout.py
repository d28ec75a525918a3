"""Fitting the CLI's tables to a narrow terminal.

Drawn at 80 columns with every column kept, ``tune``'s table folded each layer's name
into five-letter pieces over five lines, and ``layers`` its attributes into six-letter
ones over fourteen: rich shares the width out until every column is too narrow to read.
Here the columns a reader can do without go first, each whole, and the table says which
went (the JSON and a wider terminal have them all): short cells (figures, a tuner's
name) are never folded, and long ones (a layer's name, its shapes) keep a width they read
at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

#: What a column costs beyond its cells: a space either side and the border after it.
_COLUMN_FRAME = 3
#: The table's first border.
_TABLE_FRAME = 1


@dataclass(frozen=True)
class Column:
    """A column of a table, as :func:`fit_columns` judges it.

    ``keep``: the lower, the longer the column stays as the width shrinks (0: never left
    out). ``fold_at``: the width a long cell may be folded to and still be read, or None
    for a column whose cells are never folded (figures, short words)."""

    header: str
    justify: str = "left"
    keep: int = 0
    fold_at: int | None = None


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None, *,
                column_frame: int = _COLUMN_FRAME, table_frame: int = _TABLE_FRAME) -> list[int]:
    """The indices of the columns to draw within ``width`` characters, in their order:
    all of them where they fit (or ``width`` is None), else fewer, the highest ``keep``
    first left out, until the rest fit at their least readable widths. ``column_frame``
    and ``table_frame``: what each column and the table cost beyond the cells (a boxed
    table's by default)."""
    kept = list(range(len(columns)))
    if width is None:
        return kept
    least = [_least_width(column, [row[i] for row in rows]) for i, column in enumerate(columns)]
    for i in sorted((i for i, c in enumerate(columns) if c.keep), key=lambda i: (-columns[i].keep, -i)):
        if table_frame + sum(least[k] + column_frame for k in kept) <= width:
            break
        kept.remove(i)
    return kept


#: The gap between a plain table's columns.
_GAP = "  "


def plain_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> list[str]:
    """The lines of a table without borders (``history ls`` and ``runs``): a header and a
    line a row, each column as wide as its widest cell and two spaces from the next. Where
    ``width`` (a terminal's) is narrower, the columns read least are left out, whole, and a
    last line names them: the lines were 141 columns wide, each wrapped in two at 80."""
    kept = fit_columns(columns, rows, width, column_frame=len(_GAP), table_frame=-len(_GAP))
    widths = {i: max([len(columns[i].header), *(len(row[i]) for row in rows)]) for i in kept}

    def line(cells: Sequence[str]) -> str:
        return _GAP.join(cells[i].rjust(widths[i]) if columns[i].justify == "right" else cells[i].ljust(widths[i])
                         for i in kept).rstrip()

    lines = [line([c.header for c in columns]), *(line(row) for row in rows)]
    note = left_out_note(columns, kept)
    return lines + ([note] if note else [])


def _least_width(column: Column, cells: Sequence[str]) -> int:
    """The narrowest the column reads at: its widest cell (or header word) unfolded, or
    ``fold_at`` where its cells may fold and one is wider."""
    widest = max([len(column.header), *(len(line) for cell in cells for line in cell.splitlines() or [""])])
    return widest if column.fold_at is None else min(widest, max(column.fold_at, len(column.header)))


def left_out_note(columns: Sequence[Column], kept: Sequence[int]) -> str:
    """A line naming the columns :func:`fit_columns` left out, or "" where none were."""
    gone = [c.header for i, c in enumerate(columns) if i not in kept]
    if not gone:
        return ""
    return f"(left out at this terminal's width: {', '.join(gone)}; --json has every column)"


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None, **table_args):
    """A rich ``Table`` of the columns that fit ``width`` (:func:`fit_columns`) and their
    cells, with the note of those left out, or "". Each column's width is set here: rich
    wrapped a latency of "567.1 us" in two to make room, and would fold no cell narrower
    than its longest word (a layer's name is one), cropping the table's right side."""
    from rich.table import Table

    kept = fit_columns(columns, rows, width)
    widths = _widths([columns[i] for i in kept], [[row[i] for i in kept] for row in rows], width)
    table = Table(**table_args)
    for i, w in zip(kept, widths):
        column = columns[i]
        table.add_column(column.header, justify=column.justify, width=w,
                         no_wrap=column.fold_at is None, overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    return table, left_out_note(columns, kept)


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> list[int | None]:
    """Each column's width: its widest cell where all fit (or ``width`` is None: a file's
    table, as wide as it is); else the folding ones share what the others leave, each at
    least at its ``fold_at``, the rest given whole to the one kept longest first (a
    layer's name before its shapes)."""
    widest = [_least_width(Column(c.header), [row[i] for row in rows]) for i, c in enumerate(columns)]
    frame = _TABLE_FRAME + _COLUMN_FRAME * len(columns)
    if width is None or frame + sum(widest) <= width:
        return [None] * len(columns)
    out = [_least_width(c, [row[i] for row in rows]) for i, c in enumerate(columns)]
    spare = width - frame - sum(out)
    for i in sorted((i for i, c in enumerate(columns) if c.fold_at is not None), key=lambda i: (columns[i].keep, i)):
        grow = min(spare, widest[i] - out[i])
        out[i] += grow
        spare -= grow
    return out
