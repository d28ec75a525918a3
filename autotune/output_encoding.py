"""Printing on a terminal or pipe whose encoding is not UTF-8 (``PYTHONIOENCODING=ascii``,
a C locale with UTF-8 mode off, a latin-1 console).

The tables are drawn with box characters and paths may hold any letter: printing them
on an ASCII standard output raised UnicodeEncodeError after a whole tune had run, its
run finished and its module written, and the "report:" line was lost. There the box
characters become ``-``, ``|`` and ``+``, and what else the encoding lacks is written as
a backslash escape.
"""

from __future__ import annotations

import codecs
import sys
import unicodedata
from typing import Any, TextIO


def _box_to_ascii() -> dict[int, str]:
    """U+2500..U+257F (box drawing) by what each draws: a line across, a line down, a joint."""
    table = {}
    for code in range(0x2500, 0x2580):
        name = unicodedata.name(chr(code), "")
        across, down = "HORIZONTAL" in name, "VERTICAL" in name
        table[code] = "-" if across and not down else "|" if down and not across else "+"
    return table


_BOX = _box_to_ascii()


def encodes_unicode(stream: Any) -> bool:
    """Whether ``stream`` writes any character (a UTF encoding), as a terminal of today does."""
    encoding = getattr(stream, "encoding", None)
    try:
        return bool(encoding) and codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


class _AsciiTables:
    """``stream`` with box characters drawn in ASCII; every other attribute is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(text.translate(_BOX))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def make_printable() -> None:
    """Standard output and error, where not UTF, made to print whatever is written to them."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or encodes_unicode(stream) or isinstance(stream, _AsciiTables):
            continue
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError):  # not a TextIOWrapper (a test's capture): left as it is
            continue
        setattr(sys, name, _AsciiTables(stream))


def printable(text: str) -> str:
    """``text`` with what a terminal would act on escaped as ``repr`` writes it (``\\x1b``,
    ``\\n``): a model or layer named with an escape sequence in an edited report.json
    recoloured, cleared or retitled the terminal ``report`` printed it to, and a file name
    holding one did so from an error line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
