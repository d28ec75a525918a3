"""Whether a process that left something behind (a run marked running, a build folder, a
half-written export) is still there to own it. In history, the lowest layer, because its
exports clear what killed ones left."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """True while a process ``pid`` runs on this host (one we may not signal counts). A
    zombie does not: a killed tune whose parent shell has not reaped it yet kept its run
    "running", and ``history rm`` refused it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Linux's word on ``pid`` (state Z: exited, not yet waited for); False where /proc says nothing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"  # the name may hold spaces and parentheses
