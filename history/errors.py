"""The one error type of the history package.

Its message is a single line naming the history location and the cause, so the CLI can
print it as-is; anything else escaping the package is a programming error.
"""

from __future__ import annotations


class HistoryError(Exception):
    """A problem opening, reading or writing tuning history, phrased for the user."""

    def __init__(self, message: str) -> None:
        # Collapse driver messages that span lines: the CLI prints exactly one line.
        super().__init__(" ".join(str(message).split()))
