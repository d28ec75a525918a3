"""How a target given as a JSON dict is named in history."""

from __future__ import annotations

import json
import shutil

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


def test_a_cpu_target_of_another_architecture_is_not_measured_here_nor_linked_without_its_compiler(tmp_path):
    """``{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}`` took the host's ``-mcpu``
    (invalid there), was measured here (every candidate a link error, filed under the
    host's CPU) and failed to link after a whole compile. The host's triple with another
    vendor is the host."""
    import pytest

    from autotune.compile import compile_model
    from autotune.errors import AutotuneError
    from autotune.target import host_triple

    host = resolve_target("llvm")
    arm = resolve_target(json.dumps({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}))
    assert arm.arch == "aarch64" and "mcpu" not in arm.config and not arm.has_device
    assert "-mcpu" not in str(arm.tvm_target)
    arch = host_triple().partition("-")[0]
    same = resolve_target(json.dumps({"kind": "llvm", "mtriple": f"{arch}-unknown-linux-gnu"}))
    assert same.arch == host.arch and same.has_device
    if not any(shutil.which(f"aarch64-linux-gnu-{cc}") for cc in ("g++", "c++", "clang++")):
        with pytest.raises(AutotuneError, match="no aarch64-linux-gnu-g.. .a cross compiler. on PATH"):
            compile_model("dqn", tmp_path / "arm.so", target=arm, size=36)
        assert not list(tmp_path.iterdir())


def test_a_cuda_arch_that_is_no_sm_number_is_refused():
    import pytest

    from autotune.errors import AutotuneError

    for bad in ("cuda:sm_xx", "cuda:sm_", "cuda:90"):
        with pytest.raises(AutotuneError, match="must look like sm_90"):
            resolve_target(bad)
    assert resolve_target("cuda:sm_90a").arch == "sm_90a"
