"""Shared fixtures: every test writes under tmp, never to the user's ~/.autotune."""

from __future__ import annotations

import shutil

import pytest


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
