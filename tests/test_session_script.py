"""``benchmarks/gpu/session.sh plan``: the GPU plan's items in order within one call's
budget, call after call with the same command. Only its bookkeeping runs here (no item
gets the 90 s it needs to start); the items themselves need the GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "session.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _plan(tmp_path: Path, **env: str) -> list[str]:
    out = tmp_path / "out"
    run = subprocess.run(
        ["bash", str(SCRIPT), "plan"], cwd=SCRIPT.parents[2], capture_output=True, text=True, timeout=60,
        env={**os.environ, "OUT": str(out), "HISTORY_KEEP": str(tmp_path / "keep" / "h.db"),
             "WORK_DIR": str(tmp_path / "work"), **env},
    )
    assert run.returncode == 0, run.stderr
    assert (out / "gpu-plan.tgz").exists()
    return (out / "steps-plan.txt").read_text().splitlines()


WAITS = r"plan item {}: (39|40)s left, for the next call"  # 60 s less 20 in hand, less a second's tick


def test_items_that_would_not_get_their_time_wait_for_the_next_call(tmp_path):
    lines = _plan(tmp_path, BUDGET="60")  # the open items: 12's check and two re-timings, then 9's first step, then 11
    assert len(lines) == 5 and all(re.fullmatch(WAITS.format(n), line) for n, line in zip(("12a", "12", "12b", "9a", "11"), lines))
    lines = _plan(tmp_path, BUDGET="60", ITEMS="1 2 3")  # done items run again when picked
    assert len(lines) == 3 and all(re.fullmatch(WAITS.format(n), line) for n, line in zip((1, 2, 3), lines))


def test_a_finished_item_is_skipped_and_items_can_be_picked(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "done_plan12a").touch()  # what `queued` with TAG=_plan12a leaves beside the database
    (keep / "done_plan12").touch()  # and `retime` with TAG=_plan12
    lines = _plan(tmp_path, BUDGET="60")
    assert lines[:2] == ["plan item 12a: finished in an earlier call", "plan item 12: finished in an earlier call"]
    assert re.fullmatch(WAITS.format("12b"), lines[2])
    (keep / "done_plan2").touch()  # what a `history` run with TAG=_plan2 leaves when it finishes
    lines = _plan(tmp_path, BUDGET="60", ITEMS="8 2")
    assert re.fullmatch(WAITS.format(8), lines[0]) and lines[1:] == ["plan item 2: finished in an earlier call"]
    # item 9 keeps its own history database, and its second step waits for its first
    (keep / "siblings").mkdir()
    lines = _plan(tmp_path, BUDGET="60", ITEMS="9")
    assert len(lines) == 1 and re.fullmatch(WAITS.format("9a"), lines[0])
    (keep / "siblings" / "done_plan9a").touch()
    lines = _plan(tmp_path, BUDGET="60", ITEMS="9")
    assert lines[0] == "plan item 9a: finished in an earlier call" and re.fullmatch(WAITS.format(9), lines[1])
    assert len(lines) == 2  # 9c (and 13, asked for) wait for the siblings' history
    (keep / "siblings" / "done_plan9").touch()
    lines = _plan(tmp_path, BUDGET="60", ITEMS="9 13")
    assert lines[:2] == ["plan item 9a: finished in an earlier call", "plan item 9: finished in an earlier call"]
    assert re.fullmatch(WAITS.format("9c"), lines[2]) and re.fullmatch(WAITS.format(13), lines[3])
    # items 7 and 11 share item 7's database, and their markers there
    (keep / "at112").mkdir()
    (keep / "at112" / "done_plan7").touch()
    (keep / "at112" / "done_plan11").touch()
    assert _plan(tmp_path, BUDGET="60", ITEMS="11 7") == ["plan item 11: finished in an earlier call",
                                                           "plan item 7: finished in an earlier call"]
