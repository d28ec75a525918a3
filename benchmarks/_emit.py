"""How every benchmark reports: one JSON object on stdout, and in ``--out`` if given.

Also the argument types the benchmarks share, so that a mistaken argument is one line
from argparse before any work (a count of 0 ended in a ZeroDivisionError, an ``--out``
in a missing folder in a traceback after the whole run)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable


def emit(result: dict[str, Any], out: str | None, *, indent: int = 1) -> None:
    text = json.dumps(result, indent=indent, default=str)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


def description(doc: str | None) -> str:
    """A script's ``--help`` text: its docstring's first paragraph, on one line (its first
    line alone stopped mid-sentence)."""
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ")


def positive_int(text: str) -> int:
    """argparse type: a count of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def out_file(text: str) -> str:
    """argparse type: a file the result can be written to once the run ends (missing
    folders are made then); a folder in its place, or a file in the way of one, is
    refused now rather than after the run."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory")
    ancestor = path.resolve().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"{ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"directory {ancestor} is not writable")
    return text


def run_main(main: Callable[[], int | None]) -> int:
    """A benchmark's ``main``, with a mistake autotune itself refuses (an unknown zoo
    model, a history that is no history) ended as the CLI ends it: its one line on
    stderr, exit 2 (they ended in tracebacks of 20 to 60 lines)."""
    from autotune.errors import AutotuneError
    from autotune.history import HistoryError

    try:
        return main() or 0
    except (AutotuneError, HistoryError) as err:
        print(f"{Path(sys.argv[0]).name}: error: {err}", file=sys.stderr)
        return 2
