"""How a target given as a JSON dict is named in history."""

from __future__ import annotations

import json

from autotune.target import resolve_target


def test_json_llvm_target_is_filed_under_the_cpu_it_compiles_for():
    """A CPU target for another ``mcpu`` (cross-compiling, or replaying another machine's
    measurements) must not be filed under the host's CPU: its spaces and winners differ."""
    host = resolve_target("llvm")
    other = "skylake" if host.arch != "skylake" else "znver3"
    spec = resolve_target(json.dumps({"kind": "llvm", "mcpu": other}))
    assert spec.arch == other and spec.config["mcpu"] == other
    assert spec.key == f"llvm:{other}:{host.device_name}"
    assert str(spec.tvm_target.attrs["mcpu"]) == other
    # Its code may run here, but the timings would be the host's: not measurable.
    assert host.has_device and not spec.has_device
    # Without an mcpu it is the host's CPU, as plain ``llvm`` is.
    same = resolve_target(json.dumps({"kind": "llvm", "num-cores": 1}))
    assert same.arch == host.arch and same.has_device


def test_json_cuda_target_is_filed_under_its_arch():
    spec = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_80"}))
    assert spec.arch == "sm_80" and spec.key.startswith("cuda:sm_80:")
