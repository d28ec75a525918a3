"""Waiting on a tune that runs in another process, by what it has written to history."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path


def records_in(history: Path) -> int:
    """Records the history file holds now (0 before it or its tables exist), read-only."""
    if not history.exists():
        return 0
    with sqlite3.connect(f"file:{history}?mode=ro", uri=True) as db:
        try:
            return db.execute("select count(*) from records").fetchone()[0]
        except sqlite3.OperationalError:  # tables not there yet
            return 0


def wait_for_records(proc: subprocess.Popen, history: Path, at_least: int, timeout_s: float = 300) -> int:
    """Wait until ``proc``'s tune has written ``at_least`` records (it must still run
    then: a stop is sent mid-measuring); the count seen."""
    deadline = time.monotonic() + timeout_s
    while records_in(history) < at_least and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    return records_in(history)
