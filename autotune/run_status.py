"""Which runs of a history are measuring on this host now, and which were left marked
running by a process that is gone: timings taken beside another tune run slower, and a
killed tune's run stays 'running' until someone says otherwise."""

from __future__ import annotations

import os
import socket
from typing import Any

from autotune.history.processes import pid_alive


def _other_local_pid(run: dict[str, Any]) -> int | None:
    """The process of a run marked running by another process of this host, else None."""
    params = run.get("params") or {}
    pid = params.get("pid")
    if run["status"] != "running" or params.get("host") != socket.gethostname() or not isinstance(pid, int):
        return None
    return pid if pid != os.getpid() else None


def stale_run(run: dict[str, Any]) -> bool:
    """A run left 'running' whose process on this host is gone (SIGKILL, power loss)."""
    pid = _other_local_pid(run)
    return pid is not None and not pid_alive(pid)


def concurrent_runs(store) -> list[dict[str, Any]]:
    """Other runs of this history measuring on this host now: their timings and ours,
    taken together, run slower (a config timed by two tunes at once read 0.377 and
    0.624 ms), and history keeps a winner for good."""
    return [run for run in store.runs() if (pid := _other_local_pid(run)) is not None and pid_alive(pid)]


def runs_in_progress(store) -> list[dict[str, Any]]:
    """Runs marked running whose process is not known to be gone (one on another host
    cannot be asked): a module compiled now has their winners so far, not their last."""
    return [run for run in store.runs() if run["status"] == "running" and not stale_run(run)]


def overlapping_runs(store, run_id: str) -> list[str]:
    """Other runs of this history on this host whose time overlapped ``run_id``'s so far:
    a run started while this one measured is not among :func:`concurrent_runs` at this
    one's start, and its report presented timings taken beside another tune as clean."""
    runs = store.runs()
    ours = next((r for r in runs if r["run_id"] == run_id), None)
    if ours is None or ours["started_at"] is None:
        return []
    host = socket.gethostname()
    return [
        r["run_id"] for r in runs
        if r["run_id"] != run_id and (r.get("params") or {}).get("host") == host and r["started_at"] is not None
        and r["started_at"] >= ours["started_at"] and (r["status"] == "running" or r["finished_at"] is None
                                                       or r["finished_at"] >= ours["started_at"])
    ]


def close_stale_runs(store) -> list[str]:
    """Mark :func:`stale_run` runs as killed: their measurements are kept, only the
    run's status was left at 'running'."""
    closed = []
    for run in store.runs():
        if stale_run(run):
            store.finish_run(run["run_id"], "killed", {"reason": f"process {run['params']['pid']} on {socket.gethostname()} is gone"})
            closed.append(run["run_id"])
    return closed
