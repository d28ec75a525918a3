"""``benchmarks/gpu/travel.sh``: it rewrites git's index for the GPU calls, so it must put
it back exactly and refuse what it cannot undo (run in a scratch repository)."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "travel.sh"
# What a `session.sh history` call reads, carried beside the kit rather than in the tree.
CARRIED = ("benchmarks/results/gpu_h100/history_guided_cuda_history.json",
           "benchmarks/results/gpu_h100/history_guided_cuda_measurements.jsonl")

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _travel(repo: Path, verb: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), verb], cwd=repo, capture_output=True, text=True)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for rel in ("README.md", "benchmarks/results/llvm_run.json", "benchmarks/results/gpu_h100/cuda_run.json",
                *CARRIED, "benchmarks/bench.py"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(rel)
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return repo


def _travelling(repo: Path) -> set[str]:
    """What the device tool would send: tracked plus untracked files git does not ignore."""
    out = _git(repo, "ls-files") + _git(repo, "ls-files", "--others", "--exclude-standard")
    return set(out.split())


def test_slim_sends_no_results_but_sets_aside_what_the_gpu_reads_and_restore_puts_it_back(repo):
    before = _travelling(repo)
    done = _travel(repo, "slim")
    assert done.returncode == 0, done.stderr
    results = {p for p in before if p.startswith("benchmarks/results/")}
    assert len(results) == 4 and _travelling(repo) == before - results
    assert (repo / "benchmarks/results/llvm_run.json").exists()  # the files themselves are untouched
    for rel in CARRIED:  # copied gzipped, ignored, for the call to carry
        assert gzip.decompress((repo / ".gpucarry" / f"{Path(rel).name}.gz").read_bytes()).decode() == rel
    done = _travel(repo, "restore")
    assert done.returncode == 0, done.stderr
    assert _travelling(repo) == before
    assert not (repo / ".gpucarry").exists()
    assert _git(repo, "status", "--porcelain") == ""  # index and exclude file as they were


def test_it_refuses_what_it_could_not_undo(repo):
    assert "not slim" in _travel(repo, "restore").stderr
    (repo / "README.md").write_text("changed")
    _git(repo, "add", "README.md")
    refused = _travel(repo, "slim")  # restore resets the index: staged work would be lost
    assert refused.returncode == 2 and "staged changes" in refused.stderr
    _git(repo, "reset", "-q")
    assert _travel(repo, "slim").returncode == 0
    again = _travel(repo, "slim")
    assert again.returncode == 2 and "already slim" in again.stderr
