"""``autotune info``: what this machine offers autotune, in one place.

The first thing to look at when a tune picks the wrong target, a CUDA export will not
load elsewhere, or history seems empty: which versions are installed, which target
``auto`` resolves to and under which history key, whether a GPU, nvcc and NVRTC are
there, and where history, MLflow runs and reports live. Reads only; opens history
read-only, and only if it exists.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from typing import Any

#: Distributions whose versions decide behaviour (the pins in pyproject.toml).
PACKAGES = ("apache-tvm", "apache-tvm-ffi", "onnx", "onnxsim", "xgboost", "deap", "mlflow", "sqlalchemy", "cuda-bindings")


def environment(history: str | None = None, *, mlflow_uri: str | None = None, measure_roofline: bool = False) -> dict[str, Any]:
    """Everything ``autotune info`` reports, as JSON-ready values. ``measure_roofline``
    measures this CPU's peaks again (they are measured once, by the first tune, and kept:
    measured while other work ran, they stay low)."""
    from autotune import __version__
    from autotune.nvrtc_headers import enable_header_cache, nvrtc_version
    from autotune.target import gpu_present, resolve_target
    from autotune.tracking import resolve_tracking_uri
    from autotune.history.location import autotune_home

    auto = resolve_target("auto")
    nvrtc = nvrtc_version()
    cpu = auto if auto.kind == "llvm" else resolve_target("llvm")
    return {
        "autotune": __version__,
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "target_auto": _target(auto),
        "cpu": _target(cpu),
        "cuda": {
            "gpu": gpu_present(),
            "nvcc": _nvcc(),
            # TVM compiles CUDA C through NVRTC from cuda-bindings; without it (and
            # without nvcc) CUDA modules can be neither built nor loaded from source.
            # Its version, once cuda-bindings has loaded libnvrtc (None: it cannot).
            "nvrtc": f"{nvrtc[0]}.{nvrtc[1]}" if nvrtc else None,
            # whether CUDA build workers keep its headers parsed (autotune.nvrtc_headers)
            "nvrtc_header_cache": enable_header_cache(dict(os.environ), version=nvrtc),
        },
        "home": autotune_home(),
        "cpu_roofline": _cpu_roofline(cpu.device_name, remeasure=measure_roofline),
        "history": _history(history),
        "mlflow_tracking_uri": resolve_tracking_uri(mlflow_uri),
    }


def format_text(info: dict[str, Any]) -> str:
    """The report as aligned lines for a terminal."""
    auto, cpu, cuda, hist = info["target_auto"], info["cpu"], info["cuda"], info["history"]
    rows = [
        ("autotune", f"{info['autotune']} (Python {info['python']})"),
        *((f"  {name}", version or "not installed") for name, version in info["packages"].items()),
        ("target auto", f"{auto['kind']} {auto['device_name']} ({auto['arch']})" + ("" if auto["has_device"] else ", no device to measure on")),
        ("history key", auto["key"]),
        ("cpu key", cpu["key"]),
        ("gpu", "yes" if cuda["gpu"] else "none found"),
        ("nvcc", cuda["nvcc"] or "not found (CUDA exports then carry CUDA C, not a fatbin)"),
        ("nvrtc", f"{cuda['nvrtc']}, build workers' header cache {cuda['nvrtc_header_cache']}" if cuda["nvrtc"]
         else "no (cuda-bindings or libnvrtc missing: TVM cannot compile CUDA C here)"),
        ("home", info["home"]),
        ("cpu roofline", _roofline_text(info["cpu_roofline"])),
        ("history", hist.get("path", hist["url"]) + ("" if hist["exists"] or hist.get("error") else " (not created yet)")),
    ]
    if hist.get("error"):
        rows.append(("", hist["error"] if not hist["exists"] else f"cannot read: {hist['error']}"))
    elif hist["exists"]:
        rows.append(("", f"{hist['workloads']} layers, {hist['records']} records, {hist['runs']} runs, targets: {', '.join(hist['targets']) or '-'}"))
    from autotune.history.location import sqlite_file

    store = sqlite_file(info["mlflow_tracking_uri"])  # the file as named, not percent-encoded as in the URI
    rows.append(("mlflow", str(store) if store is not None else info["mlflow_tracking_uri"]))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _cpu_roofline(device_name: str, *, remeasure: bool) -> dict[str, Any] | None:
    """The CPU peaks roofline figures go by, as cached under the name tunes look them up
    by (the llvm target's device name; measured again first if asked)."""
    from autotune import roofline

    if remeasure:
        roofline.cpu_peaks(device_name, refresh=True)
    return roofline.cached_cpu_entry(device_name)


def _roofline_text(entry: dict[str, Any] | None) -> str:
    from autotune.roofline import BUSY_LOAD

    if not entry:
        return "not measured yet (the first tune measures it)"
    load = entry.get("load_per_core")
    busy = load is not None and load >= BUSY_LOAD
    return (f"{entry['peak_flops'] / 1e9:.0f} GFLOP/s, DRAM {entry['peak_bw'] / 1e9:.1f} GB/s, cache {entry.get('cache_bw', 0) / 1e9:.1f} GB/s"
            f" (measured {entry.get('measured_at', '?')}" + (f", load {load:.2f} a core" if load is not None else "") + ")"
            + ("; measured while busy: `autotune info --measure-roofline` on an idle machine" if busy else ""))


def build_versions() -> dict[str, str | None]:
    """What made a run or a module: an exported module loads only in the TVM that built
    it (its description said nothing of which that was)."""
    import tvm

    from autotune import __version__

    return {"autotune": __version__, "tvm": tvm.__version__, "tvm_ffi": _version("apache-tvm-ffi")}


#: Packages that install under more than one distribution name, by the module they give:
#: its own ``__version__`` says which is imported (an upgrade from ``xgboost`` to
#: ``xgboost-cpu`` leaves both installed, and the first one's version was said).
MODULES = {"xgboost": "xgboost"}


def _version(name: str) -> str | None:
    if name in MODULES:
        try:
            return str(importlib.import_module(MODULES[name]).__version__)
        except Exception:  # not installed, or broken: said as not installed
            return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _target(spec) -> dict[str, Any]:
    return {"kind": spec.kind, "arch": spec.arch, "device_name": spec.device_name, "key": spec.key, "has_device": spec.has_device}


def _nvcc() -> str | None:
    """``nvcc``'s path and release, e.g. ``/usr/local/cuda/bin/nvcc (release 13.0)``."""
    from autotune.device_code import find_nvcc

    path = find_nvcc()
    if path is None:
        return None
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return path
    release = next((part.strip() for line in text.splitlines() for part in line.split(",") if part.strip().startswith("release ")), None)
    return f"{path} ({release})" if release else path


def _history(location: str | None) -> dict[str, Any]:
    """Where history is and, if it exists, how much it holds; never creates it."""
    from autotune.history import HistoryError, mask_url, open_history, resolve_location
    from autotune.history.location import sqlite_file

    url = resolve_location(location)
    out: dict[str, Any] = {"url": mask_url(url)}
    path = sqlite_file(url)
    if path is not None:  # the file as a person names it: the URL percent-encodes it
        out["path"] = str(path)
    if path is not None and not path.exists():
        from autotune.history.sqlite_db import why_not_creatable

        why = why_not_creatable(str(path))
        return {**out, "exists": False, **({"error": f"cannot be created: {why}"} if why else {})}
    out["exists"] = True
    try:
        with open_history(location, create=False, readonly=True) as store:
            rows = store.summary()
            out.update(
                workloads=len({r["workload_key"] for r in rows}),
                records=sum(r["n_records"] for r in rows),
                runs=len(store.runs()),
                targets=sorted({r["target_key"] for r in rows}),
            )
    except HistoryError as err:
        out["error"] = str(err)
    return out
