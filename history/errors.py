"""The one error type of the history package, and how a driver's failure becomes its text.

Its message is a single line naming the history location and the cause, so the CLI can
print it as-is; anything else escaping the package is a programming error.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError


class HistoryError(Exception):
    """A problem opening, reading or writing tuning history, phrased for the user."""

    def __init__(self, message: str) -> None:
        # Collapse driver messages that span lines: the CLI prints exactly one line.
        super().__init__(" ".join(str(message).split()))


def cause(exc: BaseException) -> str:
    """The driver's own message (e.g. 'database or disk is full'), without SQLAlchemy's SQL dump."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        text = str(exc.orig)
    else:
        text = str(exc)
    text = " ".join(text.split())
    return text or type(exc).__name__

