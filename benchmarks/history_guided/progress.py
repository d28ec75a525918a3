"""Progress lines of the history-guided benchmark."""

from __future__ import annotations

import sys
import time


_T0 = time.perf_counter()


def log(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since start (the lent GPU's
    calls are time-boxed, so the rate of progress is what plans the next call)."""
    print(f"[{time.perf_counter() - _T0:6.0f} s] {message}", file=sys.stderr, flush=True)
