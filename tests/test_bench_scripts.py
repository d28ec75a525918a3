"""The benchmark scripts refuse a mistaken argument in one line, exit 2, before any
work: a count of 0 ended in a ZeroDivisionError, an unknown model in a 23-line
traceback, an ``--out`` in a missing folder in a traceback after the whole run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

CASES = {
    "count-zero": (["bench_tuner_overhead.py", "--rounds", "0"], "argument --rounds: 0 is below 1"),
    "unknown-tuner": (["bench_tuner_overhead.py", "--tuners", "tl_xgb,bogus"], "unknown tuner 'bogus'"),
    "not-a-count": (["bench_tuner_overhead.py", "--priors", "abc"], "'abc' is not a whole number"),
    "unknown-zoo-model": (["check_half_precision.py", "--models", "nosuch"], "unknown zoo model 'nosuch'"),
    "unknown-model-file": (["profile_tune.py", "--model", "nosuch"], "model file not found: nosuch"),
    "missing-result": (["bench_history_guided.py", "--from-json", "nope.json"], "--from-json: cannot read nope.json"),
    "models-without-trials": (["bench_revisions.py", "--base", "HEAD", "--models", "dqn"], "expected MODEL:TRIALS"),
    "out-under-a-file": (["bench_vs_tvm.py", "--skip-tvm", "--out", "afile/x.json"], "afile is not a directory"),
    "unknown-model-to-retime": (["retime_layer_speedups.py", "nosuch", "--workdir", "w"], "no zoo model named 'nosuch'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistaken_argument_is_one_line(case: str, tmp_path: Path) -> None:
    argv, message = CASES[case]
    (tmp_path / "afile").write_text("")
    done = subprocess.run([sys.executable, str(BENCHMARKS / argv[0]), *argv[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith(f"{argv[0]}: error: ") and message in lines[-1], lines[-1]
    assert done.stdout == ""


def test_results_go_into_folders_made_for_them(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from _emit import emit
    finally:
        sys.path.remove(str(BENCHMARKS))
    emit({"a": 1}, str(tmp_path / "new" / "dir" / "r.json"))
    assert (tmp_path / "new" / "dir" / "r.json").read_text() == '{\n "a": 1\n}\n'
