"""Every zoo model compiles for LLVM and matches the ONNX reference evaluator; CUDA
modules are generated and exported, kernels compiled to a fatbin, where nvcc exists (no
GPU needed to build)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main
from tests.conftest import has_gpu, has_nvcc

SMALL = {"resnet18": 32, "resnet50": 32, "vgg11": 32, "alexnet": 64, "mobilenetv2": 32, "transformer": 16,
         # the five reference workloads added on 2026-11-25 (size: image side or sequence length)
         "dqn": 36, "autoencoder": 16, "speech": 8, "seq2seq": 4, "memnet": 8}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_zoo_model_compiles_and_matches_reference_on_llvm(name, tmp_path, capsys):
    out = tmp_path / f"{name}.so"
    assert main(["compile", name, "--size", str(SMALL[name]), "--target", "llvm", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check", name, "--json", "--repeat", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["check"]["ok"], result["check"]
    assert result["check"]["max_abs_error"] < 1e-2


def test_run_checked_against_another_model_is_one_line(tmp_path, capsys):
    """``run --check`` with a model the module was not compiled from: one line that asks,
    whether the model rejects the module's input shapes (another rank) or ONNX's
    reference evaluator fails on them (another channel count), never a traceback."""
    out = tmp_path / "dqn.so"
    assert main(["compile", "dqn", "--size", "36", "--target", "llvm", "-o", str(out)]) == 0
    capsys.readouterr()
    for other in ("resnet18", "seq2seq"):
        assert main(["run", str(out), "--check", other, "--repeat", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"autotune: error: --check {other}"), err
        assert f"compiled from {other}" in err[0]


def _two_inputs(path):
    """``(zeta - alpha) @ zeta + s``: inputs named against alphabetical order, one a scalar."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Sub", ["zeta", "alpha"], ["d"]), helper.make_node("MatMul", ["d", "zeta"], ["m"]),
             helper.make_node("Add", ["m", "s"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in (("zeta", [8, 8]), ("alpha", [8, 8]), ("s", []))]
    graph = helper.make_graph(nodes, "order", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_built_for_a_gpu_not_here_it_takes_that_gpus_history(tmp_path, capsys):
    """History names a GPU's records after the device that timed them; a build for
    ``cuda:sm_90`` on a machine with none looked up this machine's name for it, and
    applied none of an H100's records (0 of 43 ResNet-50 layers, 23 with this)."""
    from autotune import decompose, frontend
    from autotune.target import resolve_target
    from autotune.history import TargetInfo, open_history
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    model = _two_inputs(tmp_path / "m.onnx")
    target = resolve_target("cuda:sm_90")
    if target.has_device:
        pytest.skip("a GPU is here: its own records are the ones to apply")
    _, mod = frontend.load_and_fuse(str(model))
    (layer,) = [l for l in decompose.decompose(mod) if l.tunable]
    space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
    history = tmp_path / "h.db"
    with open_history(history) as store:
        for device in ("NVIDIA-H100", "NVIDIA-H100-NVL"):  # the one with records is taken
            store.register_target(TargetInfo("cuda", "sm_90", device))
        store.register_workload(layer.workload_info())
        store.add_record(workload_key=layer.workload_key, target_key="cuda:sm_90:NVIDIA-H100", space_id=space.space_id,
                         config=space.default_config(), samples=[1e-6], status="ok")
        store.register_target(TargetInfo("llvm", "other", "cpu"))
    assert main(["compile", str(model), "--target", "cuda:sm_90", "--history", str(history), "-o", str(tmp_path / "m.so"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["history_target"] == "cuda:sm_90:NVIDIA-H100" and summary["tuned_layers"] == 1
    assert summary["schedules"][layer.name]["schedule"] == "history"
    # one measured config: thin evidence, counted and said (the H100's, imported, gave four such unsaid)
    assert summary["thin_layers"] == 1 and summary["schedules"][layer.name]["measured_configs"] == 1
    assert main(["compile", str(model), "--target", "cuda:sm_90", "--history", str(history), "-o", str(tmp_path / "m.so")]) == 0
    assert "note: 1 of the layers given a winner from history (their own or another batch size's) had fewer than 4 configs measured" in capsys.readouterr().out


def test_cuda_targets_are_refused_in_a_line_before_any_work(tmp_path, capsys):
    """A JSON target with a key TVM does not know ended in its traceback; sm_5 passed the
    first check and failed seconds later inside TVM; an arch this nvcc lacks (sm_70, the
    V100's, left nvcc 13) failed at the end with TVM's empty "Compilation error:"."""
    cases = [('{"kind": "cuda", "arch": "sm_86", "bogus": 1}', "is no target TVM takes: Unknown config option 'bogus'"),
             ('{"kind": "llvm", "bogus": 1}', "is no target TVM takes"),
             ('{"kind": "cuda", "arch": 86}', "CUDA arch must look like sm_90"),
             ("cuda:sm_5", "CUDA arch must look like sm_90")]
    if has_nvcc():
        cases.append(("cuda:sm_70", "this machine's nvcc compiles for sm_"))
    for target, words in cases:
        assert main(["compile", "dqn", "--size", "36", "--target", target, "-o", str(tmp_path / "x.so")]) == 2, target
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (target, err)
    assert not (tmp_path / "x.so").exists()


@pytest.mark.skipif(not has_nvcc() or has_gpu(), reason="needs nvcc and no GPU: the arch `cuda` means is said")
def test_a_bare_cuda_target_with_no_gpu_says_the_arch_it_built_for(tmp_path, capsys):
    for target in ("cuda", '{"kind": "cuda"}'):
        assert main(["compile", "dqn", "--size", "36", "--target", target, "-o", str(tmp_path / "c.so")]) == 0
        assert "note: no GPU here to ask its arch: built for sm_90" in capsys.readouterr().out
    assert main(["compile", "dqn", "--size", "36", "--target", "cuda:sm_80", "-o", str(tmp_path / "c.so")]) == 0
    assert "no GPU here to ask" not in capsys.readouterr().out  # an arch named is the arch meant


def test_a_module_takes_its_inputs_in_the_models_order(tmp_path, capsys):
    """The description lists inputs by name with sorted keys; the module must still get
    them in the model's order (a model with inputs ``zeta, alpha`` was fed ``alpha``
    first, a wrong result and no error), a scalar input as a scalar, from a description
    written before it said the order too. A description that is not the module's: one line."""
    import numpy as np

    model, out = _two_inputs(tmp_path / "order.onnx"), tmp_path / "order.so"
    assert main(["compile", str(model), "--target", "llvm", "-o", str(out)]) == 0
    meta = json.loads((tmp_path / "order.so.json").read_text())
    assert meta["input_order"] == ["zeta", "alpha", "s"] and list(meta["inputs"]) == ["alpha", "s", "zeta"]
    rng = np.random.default_rng(0)
    zeta, alpha = rng.standard_normal((8, 8)).astype("float32"), rng.standard_normal((8, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", zeta=zeta, alpha=alpha, s=np.float32(2.0))
    for description in (meta, {k: v for k, v in meta.items() if k != "input_order"}):  # today's, and an older one
        (tmp_path / "order.so.json").write_text(json.dumps(description, sort_keys=True))
        capsys.readouterr()
        assert main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--save-outputs", str(tmp_path / "y.npz"),
                     "--check", str(model), "--json", "--repeat", "1"]) == 0
        assert json.loads(capsys.readouterr().out)["check"]["ok"]
        np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], (zeta - alpha) @ zeta + 2.0, rtol=1e-5, atol=1e-5)
    other = json.loads(json.dumps(meta))
    other["inputs"]["zeta"]["shape"] = [8, 8, 1]
    (tmp_path / "order.so.json").write_text(json.dumps(other))
    capsys.readouterr()
    assert main(["run", str(out), "--repeat", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is order.so.json the module's own description?" in err[0], err


def test_compile_says_when_a_tune_is_still_running_on_its_history(tmp_path, capsys):
    """A compile during a tune applied the winners found so far and said nothing of the
    tune: it names the runs still marked running (not one whose process here is gone)."""
    import socket

    from autotune.history import TargetInfo, open_history
    from autotune.history.processes import pid_alive

    model, history = _two_inputs(tmp_path / "m.onnx"), str(tmp_path / "h.db")
    args = ["compile", str(model), "--target", "llvm", "--history", history, "-o", str(tmp_path / "m.so")]
    open_history(history).close()
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tuning_runs"] == []
    gone = 2**22 + 17
    while pid_alive(gone):
        gone += 1
    with open_history(history) as store:
        store.register_target(TargetInfo("llvm", "x", "y"))
        store.start_run("far1", model="m", target_key="llvm:x:y", tuner="auto", params={"pid": 4242, "host": "alice-laptop"})
        store.start_run("dead", model="m", target_key="llvm:x:y", tuner="auto", params={"pid": gone, "host": socket.gethostname()})
    assert main(args) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == ["note: run far1 (pid 4242 on alice-laptop) is still tuning on this history: the module has the winners "
                     "found so far; compile again when it ends for the rest"]
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tuning_runs"] == ["far1"]
    # a tune of another model is named only once it has measured one of this model's layers
    from autotune import api

    layer = next(layer for layer in api.layers(str(model))["layers"] if layer.tunable)
    with open_history(history) as store:
        store.start_run("other", model="alexnet", target_key="llvm:x:y", tuner="auto", params={"pid": 4243, "host": "alice-laptop"})
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tuning_runs"] == ["far1"]
    with open_history(history) as store:
        store.register_workload(layer.workload_info())
        store.add_record(workload_key=layer.workload_key, target_key="llvm:x:y", space_id="s", config={}, samples=[1e-4],
                         status="ok", run_id="other")
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tuning_runs"] == ["far1", "other"]


@pytest.mark.slow
@pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")
@pytest.mark.parametrize("name", sorted(SMALL))
def test_cuda_build_and_export_without_gpu(name, tmp_path, capsys):
    out = tmp_path / f"{name}_cuda.so"
    assert main(["compile", name, "--size", str(SMALL[name]), "--target", "cuda:sm_80", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    meta = json.loads((tmp_path / f"{name}_cuda.so.json").read_text())
    assert meta["target_kind"] == "cuda" and meta["target"]["arch"] == "sm_80"
    assert out.stat().st_size > 100_000  # weights travel inside the module
    # the kernels travel as a fatbin for the target arch (SASS, and PTX for later GPUs),
    # not as CUDA C that the loading machine would have to compile
    data = out.read_bytes()
    assert b"__global__" not in data
    assert summary["device_code"]["format"] == "fatbin" == meta["device_code"]["format"]
    assert summary["device_code"]["entries"] == ["compute_80 (PTX)", "sm_80 (SASS)"]
    assert data.count(bytes.fromhex("50ed55ba")) == summary["device_code"]["modules"] == 1


@pytest.mark.parametrize("target", ["llvm", pytest.param("cuda:sm_80", marks=pytest.mark.skipif(not has_nvcc(), reason="nvcc not found"))])
def test_compile_names_each_phase_as_it_starts(target, tmp_path):
    """What the CLI's status line shows while a compile runs (10-20 s with nvcc)."""
    from autotune.compile import compile_model
    from autotune.target import resolve_target

    steps: list[str] = []
    out = tmp_path / "m.so"
    compile_model("resnet18", out, target=resolve_target(target), size=32, step=steps.append)
    expected = ["loading resnet18", "applying history's schedules to 18 layers", f"building for {resolve_target(target).key}"]
    expected += ["compiling the CUDA kernels with nvcc"] if target.startswith("cuda") else []
    assert steps == expected + [f"writing {out}"]
    assert out.exists()


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_cuda_module_runs_on_gpu(tmp_path, capsys):
    out = tmp_path / "resnet18_cuda.so"
    assert main(["compile", "resnet18", "--size", "64", "--target", "cuda", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--check", "resnet18", "--json", "--atol", "1e-3"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"]


def _dense(path):
    """``relu(x @ W + b)`` with a free batch dimension."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((32, 64)).astype("float32"), "w"),
               numpy_helper.from_array(rng.standard_normal(64).astype("float32"), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], initializer=weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_batch_history_has_not_measured_takes_the_nearest_batchs_winner(tmp_path, capsys):
    """Tuned at batch 1, compiled at batch 4: every layer fell back to TVM's default
    (0 of 6 of dqn's). The winner of the same layer at the nearest batch size measured
    (not the first registered, nor the fastest) is mapped onto this shape's candidates
    and applied, said per layer, and the module still matches the reference; where that
    nearest winner is TVM's default, the default it is."""
    import numpy as np

    from autotune import decompose, frontend
    from autotune.compile import OTHER_BATCH, default_space_id
    from autotune.history import open_history
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    model, target, history = _dense(tmp_path / "dense.onnx"), resolve_target("llvm"), tmp_path / "h.db"
    rng = np.random.default_rng(1)
    records = {}

    def record(store, batch: int, latency: float, *, default: bool = False) -> None:
        _, mod = frontend.load_and_fuse(str(model), input_shapes={"x": (batch, 32)})
        (layer,) = [l for l in decompose.decompose(mod, batch_size=batch) if l.tunable]
        space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
        store.register_workload(layer.workload_info())
        records[batch] = store.add_record(
            workload_key=layer.workload_key, target_key=target.key, space_id=default_space_id(target) if default else space.space_id,
            config={} if default else space.random_config(rng), samples=[latency], status="ok")

    def compile_at(batch: int) -> dict:
        out = tmp_path / f"dense{batch}.so"
        assert main(["compile", str(model), "--input-shape", f"x={batch}x32", "--target", "llvm", "--history", str(history),
                     "-o", str(out), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        (entry,) = [s for s in summary["schedules"].values() if s.get("batch_ratio") is not None]
        return summary, entry

    with open_history(history) as store:
        store.register_target(target.history_info())
        record(store, 16, 1e-7)  # first, and the fastest
        record(store, 1, 1e-6)
    summary, entry = compile_at(2)
    assert summary["tuned_layers"] == 0 and summary["other_batch_layers"] == 1 and entry["schedule"] == OTHER_BATCH
    assert entry["record_id"] == records[1] and entry["batch_ratio"] == 0.5  # batch 1 is nearer 2 than 16 is
    assert main(["run", str(tmp_path / "dense2.so"), "--check", str(model), "--json", "--repeat", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"]
    _, entry = compile_at(12)
    assert entry["record_id"] == records[16] and entry["schedule"] == OTHER_BATCH
    with open_history(history) as store:  # a tune whose budget never reached the layer at 12 timed TVM's default alone
        record(store, 12, 1e-6, default=True)
    _, entry = compile_at(12)
    assert entry["record_id"] == records[16] and entry["schedule"] == OTHER_BATCH  # the timing hid it (7x on dqn)
    with open_history(history) as store:  # tuned at 12, and slower than the default: the default won here
        default_at_12 = records[12]
        record(store, 12, 1e-5)
    assert main(["compile", str(model), "--input-shape", "x=12x32", "--target", "llvm", "--history", str(history),
                 "-o", str(tmp_path / "dense12.so"), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["schedules"].values()
    assert entry["schedule"] == "default" and entry["record_id"] == default_at_12
    with open_history(history) as store:
        record(store, 3, 1e-6, default=True)  # nearer 2 than 1 is, and TVM's default timed there alone
    _, entry = compile_at(2)
    # a lone default timing (a tune whose budget missed the layer) says nothing of what wins:
    # it hid batch 1's winner (dqn at batch 2, between a default at 1 and a winner at 4)
    assert entry["schedule"] == OTHER_BATCH and entry["record_id"] == records[1]
    with open_history(history) as store:
        default_at_3 = records[3]
        record(store, 3, 1e-5)  # searched at 3, and slower than the default: TVM's default won there
    summary, entry = compile_at(2)
    assert summary["other_batch_layers"] == 0 and entry["schedule"] == "default" and entry["record_id"] == default_at_3
    assert "nearest batch size is TVM's default" in entry["note"]
    with open_history(history) as store:  # TVM's default timed at 2 itself: that record stands, not batch 3's
        record(store, 2, 2e-6, default=True)
    assert main(["compile", str(model), "--input-shape", "x=2x32", "--target", "llvm", "--history", str(history),
                 "-o", str(tmp_path / "dense2b.so"), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["schedules"].values()
    assert entry["schedule"] == "default" and entry["record_id"] == records[2] and "batch_ratio" not in entry
    assert main(["compile", str(model), "--input-shape", "x=2x32", "--target", "llvm", "-o", str(tmp_path / "none.so")]) == 0
    assert "0 of 1 layers from history, the rest" in capsys.readouterr().out  # no history, nothing borrowed


def test_another_batchs_winner_timed_alone_at_a_batch_does_not_stand_for_it(tmp_path, capsys):
    """A tune whose budget misses a layer at a new batch times another batch's winner
    there once: a copy of that winner, not a search. As the nearest batch it stood for
    its batch in a later compile, one measurement over the search it was copied from."""
    import numpy as np

    from autotune import decompose, frontend
    from autotune.compile import OTHER_BATCH
    from autotune.history import OTHER_BATCH_TUNER, open_history
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    model, target, history = _dense(tmp_path / "dense.onnx"), resolve_target("llvm"), tmp_path / "h.db"
    rng = np.random.default_rng(2)
    ids = {}
    with open_history(history) as store:
        store.register_target(target.history_info())
        for batch, tuner in ((1, "gga"), (4, OTHER_BATCH_TUNER)):
            _, mod = frontend.load_and_fuse(str(model), input_shapes={"x": (batch, 32)})
            (layer,) = [l for l in decompose.decompose(mod, batch_size=batch) if l.tunable]
            space = MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)
            store.register_workload(layer.workload_info())
            ids[batch] = store.add_record(workload_key=layer.workload_key, target_key=target.key, space_id=space.space_id,
                                          config=space.random_config(rng), samples=[1e-6], status="ok", tuner=tuner)
    assert main(["compile", str(model), "--input-shape", "x=8x32", "--target", "llvm", "--history", str(history),
                 "-o", str(tmp_path / "d8.so"), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["schedules"].values()
    assert entry["schedule"] == OTHER_BATCH and entry["record_id"] == ids[1]  # not batch 4's copy, though nearer


def test_another_batchs_winner_spreads_the_batch_over_the_outermost_tiles(tmp_path):
    """The nearest tiling put the extra batch in the threads' and inner tiles: on the H100
    three ResNet-50 convs' batch-1 winners then overran shared memory or registers at
    batch 4. The outermost level takes it, every other decision kept as tuned; back to a
    smaller batch it leaves the outermost level, where that divides."""
    import numpy as np

    from autotune import decompose, frontend
    from autotune.compile import batch_in_outer_tiles
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace

    model, target = _dense(tmp_path / "dense.onnx"), resolve_target("llvm")

    def space(batch: int):
        _, mod = frontend.load_and_fuse(str(model), input_shapes={"x": (batch, 32)})
        (layer,) = [l for l in decompose.decompose(mod, batch_size=batch) if l.tunable]
        return MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)

    one, four = space(1), space(4)
    rng = np.random.default_rng(0)
    config = one.random_config(rng)
    moved = batch_in_outer_tiles(four, config)
    assert moved is not None and four.contains(moved)
    changed = {name for name in config if moved[name] != config[name]}
    (batch_knob,) = changed  # the batch axis's tiling alone
    assert moved[batch_knob] == [4 * config[batch_knob][0], *config[batch_knob][1:]]
    assert batch_in_outer_tiles(one, moved) == config  # and back


def test_a_tune_at_another_batch_starts_from_the_winners_as_compile_applies_them(tmp_path):
    """The guided tuners mapped the same layer's batch-1 records onto batch 2 by nearest
    candidates, which put the batch in the innermost tile: a 16-trial tune of dqn at
    batch 2 ended 1.6x slower (254 against 158 us) than compiling with the batch-1
    winners unmeasured, which spread the batch over the outermost tiles. The priors
    now come spread so, where that fits."""
    import numpy as np

    from autotune import decompose, frontend
    from autotune.compile import batch_in_outer_tiles
    from autotune.history import open_history
    from autotune.history.match import match
    from autotune.target import resolve_target
    from autotune.templates.meta_schedule_space import MetaScheduleSpace
    from autotune.priors import priors_from_match

    model, target = _dense(tmp_path / "dense.onnx"), resolve_target("llvm")

    def layer_and_space(batch: int):
        _, mod = frontend.load_and_fuse(str(model), input_shapes={"x": (batch, 32)})
        (layer,) = [l for l in decompose.decompose(mod, batch_size=batch) if l.tunable]
        return layer, MetaScheduleSpace(layer.func, target.tvm_target, name=layer.name)

    (one, space1), (four, space4) = layer_and_space(1), layer_and_space(4)
    config = space1.random_config(np.random.default_rng(0))
    with open_history(tmp_path / "h.db") as store:
        store.register_target(target.history_info())
        store.register_workload(one.workload_info())
        store.add_record(workload_key=one.workload_key, target_key=target.key, space_id=space1.space_id,
                         config=config, samples=[1e-6], status="ok")
        store.register_workload(four.workload_info())
        m = match(store, four.workload_info(), target.key)
        (neighbour,) = m.neighbours
        assert neighbour.relation == "other batch"
        (prior,) = priors_from_match(store, m, space=space4)
    spread = batch_in_outer_tiles(space4, config)
    assert spread is not None and spread != config and prior.config == spread and not prior.restated


def test_a_model_build_that_fails_inside_tvm_names_the_layer_it_stopped_at():
    """A failure from deep in TVM (an internal check) said nothing of which op it stopped
    at. Here a bfloat16 argmax is fused and built as TVM gives it, without the rewrite
    that widens it (TVM's bfloat16 legalization stops such a kernel); if a TVM release
    builds it, the test says so rather than pass on nothing."""
    from tvm import relax
    from tvm.script import relax as R

    from autotune import compile as compiler
    from autotune.errors import AutotuneError
    from autotune.rewrites import kernel_rewrites
    from autotune.target import resolve_target

    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((2, 300), "bfloat16"))
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.emit_output(relax.op.argmax(relax.op.multiply(x, x), axis=1))
        bb.emit_func_output(gv)
    mod = bb.get()
    for lowering in [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
                     relax.transform.FuseTIR()]:  # the frontend's kernel passes, less ``kernel_rewrites``
        mod = lowering(mod)
    kernels = [g.name_hint for g, f in mod.functions_items() if not isinstance(f, relax.Function)]
    with pytest.raises(AutotuneError) as err:
        compiler.build(mod, resolve_target("llvm"))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("compiling the model for llvm failed in layer argmax (`autotune layers` describes it): ")
    assert "argmax" in kernels
    widened = kernel_rewrites()(bb.get())  # with it, the same model builds
    for lowering in [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
                     relax.transform.FuseTIR()]:
        widened = lowering(widened)
    compiler.build(widened, resolve_target("llvm"))


def test_an_exported_module_is_readable_as_any_new_file_and_a_stopped_export_leaves_nothing(tmp_path, monkeypatch):
    """The module was linked over mkstemp's 0600 file and came out 0711: no other user
    (a service deploying it) could load it. A Ctrl-C while exporting left the
    half-written module beside ``out``, where later exports never removed it."""
    import os
    import stat

    from autotune import compile as compiler

    out = tmp_path / "dqn.so"
    assert main(["compile", "dqn", "--size", "36", "--target", "llvm", "-o", str(out)]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE(compiler.sidecar(out).stat().st_mode) == 0o666 & ~umask

    class Stopped:
        def export_library(self, path, **kwargs):
            Path(path).write_bytes(b"half")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compiler.export(Stopped(), tmp_path / "again.so", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dqn.so", "dqn.so.json"]


def test_a_modules_description_says_each_outputs_shape_and_dtype(tmp_path, capsys):
    """It named the outputs alone: a deployment with no model to ask could not tell an
    int64 index output from a float one, nor their shapes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from autotune import api

    nodes = [helper.make_node("Relu", ["x"], ["act"]), helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=0)]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("act", TensorProto.FLOAT, [2, 8]),
                               helper.make_tensor_value_info("best", TensorProto.INT64, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "two.onnx")
    out = tmp_path / "two.so"
    assert main(["compile", str(tmp_path / "two.onnx"), "--target", "llvm", "-o", str(out)]) == 0
    info = json.loads((tmp_path / "two.so.json").read_text())["output_info"]
    assert info == [{"name": "act", "shape": [2, 8], "dtype": "float32"}, {"name": "best", "shape": [2], "dtype": "int64"}]
    arrays = api.run(out, repeat=1, return_outputs=True)["output_arrays"]  # what the module gives, as said
    assert [(list(a.shape), str(a.dtype)) for a in arrays] == [(i["shape"], i["dtype"]) for i in info]
    assert np.all(arrays[0] >= 0)


def test_a_failed_link_is_said_by_the_linkers_reason_not_its_command() -> None:
    """A full disk read "exporting x.so failed: Command line: /usr/bin/g++ -shared ...":
    TVM's message (tvm/support/cc.py) ends with the command, ld's reason above it."""
    from autotune.compile import failure_line

    tvm_message = ("Compilation error:\n/usr/bin/ld: final link failed: No space left on device\n"
                   "collect2: error: ld returned 1 exit status\n\n"
                   "Command line: /usr/bin/g++ -shared -fPIC -o /tmp/full/.autotune-2ddb.so /tmp/t/lib0.o /tmp/t/devc.o")
    assert failure_line(tvm_message) == "/usr/bin/ld: final link failed: No space left on device"
    assert failure_line("something odd\nin the last line") == "in the last line"
    assert failure_line("[Errno 28] No space left on device") == "[Errno 28] No space left on device"
    assert failure_line("") == ""
    warned = "ld: warning: cannot find entry symbol _start\n/tmp/x.o: undefined reference to `foo'\nCommand line: g++ x.o"
    assert failure_line(warned) == "/tmp/x.o: undefined reference to `foo'"


_KILLED_WHILE_LINKING = """
import os
import signal
import sys

import tvm.support.cc

from autotune.cli import main

def killed(*args, **kwargs):  # the OOM killer during the link: TVM's objects are written, nothing runs after
    os.kill(os.getpid(), signal.SIGKILL)

tvm.support.cc.create_shared = killed
sys.exit(main(sys.argv[1:]))
"""


def test_what_an_export_killed_while_linking_leaves_is_cleared_by_the_next(tmp_path) -> None:
    """Killed during the link, a compile left TVM's objects (46 MB for ResNet-18) in a
    /tmp/tmpXXXX folder for good. They are made in a folder that names the process,
    which the next export clears once that process is gone."""
    import os
    import subprocess
    import sys

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    args = ["compile", "dqn", "--size", "36", "--target", "llvm", "-o", str(tmp_path / "out" / "d.so")]
    killed = subprocess.run([sys.executable, "-c", _KILLED_WHILE_LINKING, *args], env=env, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stderr
    left = [p for p in tmp.iterdir() if any(p.rglob("*.o"))]
    assert [p.name.split("-")[:2] for p in left] == [["autotune", "build"]], sorted(tmp.rglob("*"))
    done = subprocess.run([sys.executable, "-m", "autotune", *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not any(tmp.rglob("*.o")) and (tmp_path / "out" / "d.so").is_file()


def test_a_killed_writers_temporary_file_is_cleared_once_it_is_old(tmp_path) -> None:
    """A tune or compile killed mid-export left its hidden 47 MB module beside the output
    for good. The next write to the folder removes such a file once its process is gone
    and it has not changed for ORPHAN_AGE_S (in a folder other hosts write to, a pid
    alone says nothing)."""
    import os
    import subprocess
    import sys
    import time

    from autotune.compile import make_parent, temporary_beside
    from autotune.history.location import ORPHAN_AGE_S, UNOWNED_AGE_S

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    old = time.time() - ORPHAN_AGE_S - 5
    names = {
        f".autotune-{gone}-0123456789abcdef.so": old,  # its process gone, long unchanged: removed
        f".autotune-{gone}-0123456789abcdef.so.json": old,
        f".autotune-{gone}-fedcba9876543210.so": time.time(),  # just written: another host's, maybe
        ".autotune-1-0123456789abcdef.so": old,  # a live process's (init)
        ".autotune-notes": old,  # not ours
        "model.so": old,
        ".autotune-0123456789abcdef.so": time.time() - UNOWNED_AGE_S - 5,  # an older autotune's, a day old: removed
        ".autotune-fedcba9876543210.json.tmp": old,  # an older autotune's, ten minutes old: kept
    }
    for name, mtime in names.items():
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (mtime, mtime))
    mine = temporary_beside(tmp_path, ".so")
    mine.write_text("x")
    os.utime(mine, (old, old))
    assert mine.name.startswith(f".autotune-{os.getpid()}-")
    make_parent(tmp_path / "next.so")
    kept = [n for n in names if not n.startswith((f".autotune-{gone}-0123", ".autotune-0123"))]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, mine.name])
