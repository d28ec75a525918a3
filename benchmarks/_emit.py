"""How every benchmark reports: one JSON object on stdout, and in ``--out`` if given."""

from __future__ import annotations

import json
from typing import Any


def emit(result: dict[str, Any], out: str | None, *, indent: int = 1) -> None:
    text = json.dumps(result, indent=indent, default=str)
    print(text)
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
