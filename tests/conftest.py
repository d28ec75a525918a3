"""Shared fixtures: every test writes under tmp, never to the user's ~/.autotune."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_session_home(tmp_path_factory):
    """For module-scoped fixtures, which run before any test's own home is set: the e2e
    module's shared tune left its report's address in the user's ~/.autotune/runs."""
    home = tmp_path_factory.mktemp("autotune-session-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOTUNE_HOME", str(home))
        patch.setenv("AUTOTUNE_HISTORY", str(home / "history.db"))
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        yield home


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("autotune-home")
    monkeypatch.setenv("AUTOTUNE_HOME", str(home))
    monkeypatch.setenv("AUTOTUNE_HISTORY", str(home / "history.db"))
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    yield home


def has_nvcc() -> bool:
    return shutil.which("nvcc") is not None


def has_gpu() -> bool:
    try:
        from autotune.target import gpu_present

        return gpu_present()
    except Exception:
        return False


@pytest.fixture(scope="module")
def cuda_mod():
    """Two elementwise kernels, scheduled for CUDA (threads bound)."""
    import tvm
    from tvm import te

    a = te.placeholder((4096,), name="A")
    b = te.compute((4096,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((4096,), lambda i: b[i] + 1.0, name="C")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, c]))
    for name in ("B", "C"):
        (loop,) = sch.get_loops(sch.get_sblock(name))
        outer, inner = sch.split(loop, [None, 128])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")
    return sch.mod
