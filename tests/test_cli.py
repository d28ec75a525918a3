"""Tests for the ``autotune`` command line (autotune.cli).

Contract checked here: every user mistake ends with exit code 2 and exactly one
stderr line ``autotune: error: ...`` (no traceback, nothing half-written); the happy
paths print parseable JSON / loadable files; ``import autotune.cli`` stays light.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.cli import main

SUBCOMMANDS = ["tune", "layers", "compile", "run", "info", "zoo", "history", "report"]


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    """HOME, AUTOTUNE_HOME and the default history all live in tmp; cwd too."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AUTOTUNE_HOME", str(home / ".autotune"))
    monkeypatch.setenv("AUTOTUNE_HISTORY", str(home / "default-history.db"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def dyn_model(tmp_path_factory):
    """A tiny MatMul+Relu model whose batch dimension is symbolic ("N")."""
    path = tmp_path_factory.mktemp("models") / "dyn.onnx"
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _user_error(capsys, argv, *, contains=()):
    """Run main(argv); assert it is a clean user error; return the message line."""
    rc = main(argv)  # a traceback would surface here as an exception
    out, err = capsys.readouterr()
    assert rc == 2, (argv, rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("autotune: error: "), err
    assert "Traceback" not in err
    for word in contains:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# --- user errors --------------------------------------------------------------------------------
def test_missing_model_file(capsys, env):
    _user_error(capsys, ["layers", "missing.onnx"], contains=("model file not found", "missing.onnx"))


def test_not_onnx_file(capsys, env):
    (env / "notes.onnx").write_text("definitely not a protobuf\n")
    _user_error(capsys, ["layers", "notes.onnx"], contains=("not an ONNX model",))


def test_model_without_its_external_data(capsys, env):
    import shutil

    data = Path(__file__).parent / "data"  # the dynamo exporter's weights live in .onnx.data beside it
    shutil.copy(data / "torchvision_regnet_dynamo.onnx", env / "regnet.onnx")
    _user_error(capsys, ["layers", "regnet.onnx"], contains=("torchvision_regnet_dynamo.onnx.data", "external data"))
    # the weights file there but cut short: it said "not an ONNX model"
    shutil.copy(data / "torchvision_convnext_dynamo.onnx", env / "convnext.onnx")
    weights = (data / "torchvision_convnext_dynamo.onnx.data").read_bytes()
    (env / "torchvision_convnext_dynamo.onnx.data").write_bytes(weights[:1000])
    _user_error(capsys, ["layers", "convnext.onnx"], contains=("weights file torchvision_convnext_dynamo.onnx.data (1,000 bytes",
                                                               "is cut short"))


def test_unknown_zoo_name(capsys):
    _user_error(capsys, ["layers", "nosuchmodel"], contains=("nosuchmodel", "zoo"))


def test_dynamic_shape_without_input_shape(capsys, dyn_model):
    _user_error(capsys, ["layers", dyn_model], contains=("dynamic shape (Nx8)", "--input-shape x="))


def test_dynamic_shape_with_input_shape_works(capsys, dyn_model):
    assert main(["layers", dyn_model, "--input-shape", "x=3x8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["inputs"] == {"x": [3, 8]}
    dense = [l for l in data["layers"] if l["op_class"] == "dense"]
    assert len(dense) == 1 and dense[0]["output"] == [3, 4]
    # the table's last line counts a model this small in FLOP, not as "0.00 GFLOP" or "0.00 MFLOP"
    assert main(["layers", dyn_model, "--input-shape", "x=3x8"]) == 0
    flops = sum(l["flops"] * l["occurrences"] for l in data["layers"])
    assert f", {flops:,.0f} FLOP; batch 3 " in capsys.readouterr().out.strip().splitlines()[-1]


def test_layers_by_batch_norm_layering(capsys):
    """``--batch-norm`` is the layering tune and compile share: each choice its own kernels."""
    launches = {}
    for choice in ("separate", "weights", None):
        flag = ["--batch-norm", choice] if choice else []
        assert main(["layers", "resnet18", "--size", "32", *flag, "--json"]) == 0
        layers = json.loads(capsys.readouterr().out)["layers"]
        launches[choice] = sum(l["occurrences"] for l in layers)
        assert any("batch_norm" in l["name"] for l in layers) == (choice == "separate")
    assert launches == {"separate": 41, "weights": 24, None: 24}  # folded unless told otherwise
    with pytest.raises(SystemExit) as exc:
        main(["layers", "resnet18", "--batch-norm", "fold"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("autotune layers: error: argument --batch-norm: invalid choice: 'fold'")
    assert line.endswith("(see 'autotune layers --help')")


@pytest.mark.parametrize(
    "argv,words",
    [
        (["tune", "resnet18", "--trials", "1.5"], "argument --trials: invalid int value: '1.5'"),
        (["compile", "resnet18"], "the following arguments are required: --out/-o"),
        (["history", "ls", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_argparse_mistakes_in_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    lines = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(lines) == 1 and words in lines[0] and "--help" in lines[0], lines


@pytest.mark.parametrize(
    "argv,command",
    [(["history", "ls", "--bogus"], "autotune history ls"), (["tune", "resnet18", "--no-progress"], "autotune tune"), (["--bogus"], "autotune")],
)
def test_an_unknown_flag_points_to_its_own_commands_help(capsys, argv, command):
    """argparse reports leftovers from the top-level parser; the user needs the subcommand's help."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    (line,) = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2
    assert line.startswith(f"{command}: error: unrecognized arguments: {argv[-1]}")
    assert line.endswith(f"(see '{command} --help')")


@pytest.mark.parametrize("bad", ["x=3y8", "x", "x=0x8", "=3x8"])
def test_bad_input_shape_syntax(capsys, dyn_model, bad):
    _user_error(capsys, ["layers", dyn_model, "--input-shape", bad], contains=("--input-shape", repr(bad)))


def test_input_shape_for_unknown_input(capsys, dyn_model):
    _user_error(capsys, ["layers", dyn_model, "--input-shape", "y=3x8"], contains=("unknown input",))


@pytest.mark.parametrize("command", ["layers", "tune", "compile"])
@pytest.mark.parametrize("flag", ["--size", "--batch-size"])
def test_a_zoo_models_size_flag_given_with_a_file_is_refused(capsys, tmp_path, dyn_model, command, flag):
    """They were ignored: a file tuned at its own shapes while the user asked for others."""
    argv = [command, dyn_model, "--input-shape", "x=3x8", flag, "4"]
    argv += {"tune": ["--target", "llvm", "--history", str(tmp_path / "h.db"), "--no-mlflow"],
             "compile": ["--target", "llvm", "-o", str(tmp_path / "m.so")]}.get(command, [])
    line = _user_error(capsys, argv, contains=(f"{flag} is for zoo models", "(change them with --input-shape)"))
    assert dyn_model in line and not (tmp_path / "h.db").exists() and not (tmp_path / "m.so").exists()


@pytest.mark.parametrize("flag", ["--size", "--batch-size"])
def test_a_zoo_models_size_flag_for_a_file_with_an_open_batch_says_how_to_fix_it(capsys, tmp_path, dyn_model, flag):
    """A file whose batch is symbolic was said to have "its own input shapes"."""
    line = _user_error(capsys, ["tune", dyn_model, flag, "4", "--target", "llvm", "--history", str(tmp_path / "h.db"), "--no-mlflow"],
                       contains=(f"{flag} is for zoo models; {dyn_model} is an ONNX file: give its dynamic dimensions with "
                                 "--input-shape NAME=DxD.. (x is Nx8)",))
    assert "its own input shapes" not in line and not (tmp_path / "h.db").exists()


@pytest.mark.parametrize("command", ["layers", "tune", "compile"])
def test_an_input_shape_for_a_zoo_model_is_refused_with_its_own_flags(capsys, tmp_path, command):
    """A zoo model is built for its size and batch: another batch failed inside TVM's
    frontend (at a Reshape), and a size the zoo refuses (autoencoder at 30) got through."""
    argv = [command, "autoencoder", "--input-shape", "input=1x3x30x30"]
    argv += {"tune": ["--target", "llvm", "--history", str(tmp_path / "h.db"), "--no-mlflow"],
             "compile": ["--target", "llvm", "-o", str(tmp_path / "m.so")]}.get(command, [])
    _user_error(capsys, argv, contains=("--input-shape is for ONNX files; autoencoder is a zoo model: give it --size and --batch-size",))
    assert not (tmp_path / "h.db").exists() and not (tmp_path / "m.so").exists()


def _tune(*extra):
    return ["tune", "resnet18", "--size", "32", "--no-mlflow", "--quiet", "--history", "tune.db", *extra]


@pytest.mark.parametrize(
    "target,expected",
    [("foo", "unknown target 'foo'"), ("cuda:80", "sm_"), ('{"kind": "rocm"}', "'rocm'"), ("{bad json", "not valid JSON")],
)
def test_unknown_target(capsys, env, target, expected):
    _user_error(capsys, _tune("--target", target), contains=(expected,))
    assert not (env / "tune.db").exists()


def test_unknown_tuner(capsys, env):
    _user_error(capsys, _tune("--target", "llvm", "--tuner", "bogus"), contains=("--tuner must be one of auto, random", "'bogus'"))
    assert not (env / "tune.db").exists()


@pytest.mark.parametrize("flag", ["--trials", "--batch", "--repeat", "--max-layers"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_counts(capsys, env, flag, value):
    _user_error(capsys, _tune("--target", "llvm", flag, value), contains=(f"{flag} must be a positive",))
    assert not (env / "tune.db").exists()


@pytest.mark.parametrize(
    "argv,expected",
    [
        (("--seed", "-1"), "--seed must be 0 or more (an integer), got -1"),
        (("--batch-size", "0"), "--batch-size must be a positive integer, got 0"),
        (("--size", "-32"), "--size must be a positive integer, got -32"),
        (("--run-timeout", "0"), "--run-timeout must be a positive number, got 0.0"),
        (("--run-timeout", "inf"), "--run-timeout must be a positive number, got inf"),
        (("--run-timeout", "0.01", "--repeat", "2"), "--run-timeout of 0.01 s is no longer than a candidate's timing "
                                                     "takes at least (--repeat 2 x --min-repeat-ms 20 = 0.04 s)"),
        (("--seed", str(10**23)), "--seed must be at most 9223372036854775807"),  # XGBoost's traceback, a failed run
        (("--timing", "ncu"), "--timing must be one of launches, queued, got 'ncu'"),
        # a CPU's figures recorded as queued would read as GPU time alone
        (("--timing", "queued"), "--timing queued times CUDA kernels, behind a spin kernel on the GPU; on llvm "
                                 "TVM's evaluator is not paced by kernel launches: leave --timing out"),
    ],
)
def test_tune_options_refused_in_the_flags_words(capsys, env, argv, expected):
    """The API's rule (``OptionError``) comes out spelled with the CLI's flags."""
    _user_error(capsys, ["tune", "resnet18", "--no-mlflow", "--quiet", "--history", "tune.db", "--target", "llvm", *argv], contains=(expected,))
    assert not (env / "tune.db").exists()


def test_compile_refuses_a_bad_size(capsys, env, tmp_path):
    _user_error(capsys, ["compile", "resnet18", "--size", "0", "-o", str(tmp_path / "m.so")], contains=("--size must be a positive integer",))
    assert not (tmp_path / "m.so").exists()


def test_negative_min_trials(capsys, env):
    for value in ("-1", "0"):  # 0 ran as 1
        _user_error(capsys, _tune("--target", "llvm", "--min-trials", value), contains=("--min-trials must be a positive integer",))
    assert not (env / "tune.db").exists()


@pytest.mark.parametrize("low,high", [("0.05", "2"), ("0.9", "0.5"), ("-0.1", "0.8")])
def test_match_thresholds_out_of_order_or_range(capsys, env, low, high):
    """Scores lie in [0, 1], and --low above --high would leave transfer XGBoost no layer."""
    line = _user_error(capsys, _tune("--target", "llvm", "--low", low, "--high", high))
    assert "0 <= --low <= --high <= 1" in line and f"--high {float(high):g}" in line
    assert not (env / "tune.db").exists()


@pytest.mark.parametrize("value", ["0", "-2"])
def test_run_needs_a_positive_repeat(capsys, env, tmp_path, value):
    _user_error(capsys, ["run", str(tmp_path / "model.so"), "--repeat", value], contains=("--repeat must be a positive",))


@pytest.mark.parametrize("flag", ["--rtol", "--atol"])
def test_run_refuses_a_negative_tolerance(capsys, env, tmp_path, flag):
    """A negative tolerance fails every check: a mistake, not a mismatch."""
    _user_error(capsys, ["run", str(tmp_path / "model.so"), flag, "-0.001"], contains=(f"{flag} must be 0 or more",))


@pytest.mark.parametrize("model", ["notes.onnx", "nosuchmodel"])
def test_tune_of_a_model_that_will_not_load_leaves_nothing(capsys, env, model):
    """The model is read before history or MLflow is opened: a typo'd or broken model
    left a new, empty history (and a failed MLflow run) behind."""
    (env / "notes.onnx").write_text("not a model")
    before = _listing(env)
    argv = ["tune", model, "--target", "llvm", "--quiet", "--history", "new.db", "--mlflow-uri", str(env / "mlruns")]
    _user_error(capsys, argv, contains=(model,))
    assert _listing(env) == before


def test_tune_cuda_without_gpu(capsys, env):
    from autotune.target import gpu_present

    if gpu_present():
        pytest.skip("a GPU is present: CUDA can be measured here")
    line = _user_error(capsys, _tune("--target", "cuda:sm_80", "--trials", "4"))
    assert "cannot measure on cuda" in line and "--target llvm" in line


def test_tune_for_another_cpu_refuses_to_measure(capsys, env):
    """Timings taken here would be filed under the other CPU's name."""
    from autotune.target import resolve_target

    other = "skylake" if resolve_target("llvm").arch != "skylake" else "znver3"
    line = _user_error(capsys, _tune("--target", json.dumps({"kind": "llvm", "mcpu": other}), "--trials", "4"))
    assert f"cannot measure on llvm ({other})" in line
    assert not (env / "tune.db").exists()


def test_history_url_unreachable(capsys):
    _user_error(capsys, ["history", "ls", "--history", "postgresql://u@127.0.0.1:1/x"],
                contains=("postgresql://u@127.0.0.1:1/x",))


def test_history_parent_is_a_file(capsys, env):
    (env / "afile").write_text("x")
    # a valid export (an invalid one is refused before any history is opened)
    (env / "in.json").write_text('{"format": "autotune-history", "version": 1, "targets": [], "workloads": [], "records": []}')
    # reading commands: no such history
    _user_error(capsys, ["history", "ls", "--history", "afile/h.db"], contains=("afile",))
    # a writing command must not create anything either
    _user_error(capsys, ["history", "import", "in.json", "--history", "afile/h.db"], contains=("afile",))
    assert (env / "afile").read_text() == "x"


def _import_bad_json(capsys, env):
    from autotune.history import open_history

    db = env / "h.db"
    open_history(str(db)).close()
    before = db.read_bytes()
    files_before = _listing(env) | {"bad.json"}
    (env / "bad.json").write_text("this is not json {")
    _user_error(capsys, ["history", "import", "bad.json", "--history", str(db)],
                contains=("bad.json", "not valid JSON"))
    return db, before, files_before


def test_history_import_non_json_leaves_history_intact(capsys, env):
    db, _, files_before = _import_bad_json(capsys, env)
    assert _listing(env) == files_before  # no -wal / -shm / -journal left behind
    assert main(["history", "ls", "--history", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["history", "list", "--history", str(db), "--json"]) == 0  # as `zoo list` says it
    assert json.loads(capsys.readouterr().out) == []


def test_history_import_non_json_leaves_db_bytes_unchanged(capsys, env):
    db, before, _ = _import_bad_json(capsys, env)
    assert db.read_bytes() == before


def test_refused_mlflow_store_leaves_no_history_behind(capsys, env, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    _user_error(capsys, ["tune", "resnet18", "--target", "llvm", "--history", "new.db", "--mlflow-uri", (env / "mlruns").as_uri()],
                contains=("MLFLOW_ALLOW_FILE_STORE=true",))
    assert not (env / "new.db").exists()


def test_history_import_missing_file(capsys, env):
    _user_error(capsys, ["history", "import", "nothere.json", "--history", "h.db"], contains=("nothere.json",))
    assert not (env / "h.db").exists()


@pytest.fixture
def populated_history(env):
    from autotune.history import TargetInfo, WorkloadInfo, open_history

    path = str(env / "pop.db")
    key = "ab" * 12
    with open_history(path) as store:
        store.register_target(TargetInfo("llvm", "znver3", "cpu"))
        store.register_workload(WorkloadInfo(key, "inv", "conv2d", {"name": "conv2d1"}, 1e6))
        for i in range(3):
            store.add_record(workload_key=key, target_key="llvm:znver3:cpu", space_id="s", config={"i": i},
                             samples=[1e-3 * (i + 1)] * 3, status="ok", tuner="random")
    return path, key


def test_a_history_path_names_its_file_exactly(capsys, env, populated_history, monkeypatch):
    """A path was made a URL unencoded: ``a%41.db`` opened ``aA.db``, ``n?x=1.db`` created
    ``n``; and a percent-encoded ``$AUTOTUNE_HISTORY`` named no file to the checks that
    look at one, so ``compile -o`` wrote the module over the database."""
    import shutil

    from autotune.history.location import sqlite_url

    path, key = populated_history
    folder = env / "odd dir #1"
    folder.mkdir()
    for name in ("a%41.db", "n?x=1.db", "ü 家 $x 'q.db"):
        shutil.copy(path, folder / name)
        assert main(["history", "show", key, "--history", str(folder / name), "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)["records"]) == 3
    assert main(["history", "export", "--history", path, "~/e.json"]) == 0  # it wrote ./~/e.json
    assert (Path(os.environ["HOME"]) / "e.json").exists() and not (env / "~").exists()
    _user_error(capsys, ["history", "export", "--history", path, "newe/"], contains=("ends in '/', a folder's",))
    _user_error(capsys, ["history", "import", "--history", "newh/", "~/e.json"], contains=("ends in '/', a folder's",))
    assert not (env / "newe").exists() and not (env / "newh").exists()
    assert main(["history", "export", "--history", path, str(env / "e.json")]) == 0
    assert main(["history", "import", "--history", str(folder / "new?x=1.db"), str(env / "e.json")]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in folder.iterdir()) == sorted(["a%41.db", "n?x=1.db", "ü 家 $x 'q.db", "new?x=1.db"])
    url = sqlite_url(folder / "ü 家 $x 'q.db")
    assert "%" in url and " " not in url
    monkeypatch.setenv("AUTOTUNE_HISTORY", url)
    assert main(["history", "show", key, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["records"]) == 3
    kept = (folder / "ü 家 $x 'q.db").read_bytes()
    _user_error(capsys, ["compile", "dqn", "--size", "36", "--target", "llvm", "-o", str(folder / "ü 家 $x 'q.db")],
                contains=("is the history database",))
    assert (folder / "ü 家 $x 'q.db").read_bytes() == kept
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["history"]["path"] == str(folder / "ü 家 $x 'q.db")


def test_outputs_land_where_named_however_they_are_named(capsys, env, dyn_model, monkeypatch):
    """A user's awkward names: ``-o newdir/`` wrote a file named newdir; ``--out=~/m.so``
    (the shell leaves it) wrote ./~/m.so; a 235-byte name failed in the linker after the
    build (the temporary name added 45 bytes), a 263-byte one with a traceback; an output
    that is a symlink into another file system failed after the build (the temporary file
    was made in the link target's folder); a symlinked module had no description; a
    dangling --out-dir failed with a traceback after the tune."""
    import shutil
    import tempfile

    monkeypatch.setenv("HOME", str(env / "home"))
    (env / "elsewhere").mkdir()
    shape = ["--input-shape", "x=2x8", "--target", "llvm"]
    _user_error(capsys, ["compile", dyn_model, *shape, "-o", "newdir/"], contains=("ends in '/', a folder's",))
    _user_error(capsys, ["zoo", "export", "dqn", "--size", "36", "-o", "newdir2/"], contains=("ends in '/', a folder's",))
    assert not (env / "newdir").exists() and not (env / "newdir2").exists()
    assert main(["compile", dyn_model, *shape, "--out=~/m.so"]) == 0
    assert (env / "home" / "m.so").exists() and not (env / "~").exists()
    assert main(["run", "~/m.so", "--repeat", "1"]) == 0
    long = "x" * 235
    assert main(["compile", dyn_model, *shape, "-o", f"long/{long}.so"]) == 0
    assert (env / "long" / f"{long}.so").exists()
    _user_error(capsys, ["compile", dyn_model, *shape, "-o", f"long/{'é' * 130}.so"], contains=("the name is 263 bytes",))
    elsewhere = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else env / "elsewhere"
    target = Path(tempfile.mkdtemp(dir=elsewhere)) / "old.so"
    try:
        target.write_bytes(b"old")
        (env / "links").mkdir()
        (env / "links" / "out.so").symlink_to(target)
        assert main(["compile", dyn_model, *shape, "-o", "links/out.so"]) == 0  # the link is replaced, its target kept
        assert not (env / "links" / "out.so").is_symlink() and target.read_bytes() == b"old"
    finally:  # /dev/shm outlives the test's tmp folder
        shutil.rmtree(target.parent)
    (env / "latest.so").symlink_to("links/out.so")
    capsys.readouterr()
    assert main(["run", "latest.so", "--repeat", "1"]) == 0  # its description is the target's
    # a file name that is not UTF-8: the run's start failed writing the model's name to history
    odd = os.fsdecode(b"r\xe9snet.onnx")
    shutil.copy(dyn_model, env / odd)
    assert main(["tune", odd, *shape, "--trials", "2", "--no-mlflow", "--quiet", "--history", "odd.db"]) == 0
    capsys.readouterr()
    assert main(["history", "runs", "--history", "odd.db", "--json"]) == 0
    assert [r["model"] for r in json.loads(capsys.readouterr().out)] == ["r\ufffdsnet"]
    _user_error(capsys, ["layers", "no\nsuch.onnx"], contains=("no\\nsuch.onnx",))  # one line still
    # and no escape sequence reaches the terminal from a name (it recoloured the error line)
    line = _user_error(capsys, ["layers", "red\x1b[31m.onnx"], contains=("red\\x1b[31m.onnx",))
    assert "\x1b" not in line
    (env / "dangling").symlink_to("gone/reports")
    _user_error(capsys, ["tune", dyn_model, *shape, "--trials", "2", "--no-mlflow", "--out-dir", "dangling"],
                contains=("is a symlink to gone/reports, which does not exist",))


def test_history_show_unknown_key(capsys, populated_history):
    path, key = populated_history
    _user_error(capsys, ["history", "show", "zzzz", "--history", path], contains=("'zzzz'",))
    _user_error(capsys, ["history", "best", "zzzz", "--history", path], contains=("'zzzz'",))
    # a mistyped --target read as "no records", exit 0
    _user_error(capsys, ["history", "show", key, "--history", path, "--target", "nosuch", "--json"],
                contains=("no target 'nosuch'; it holds llvm:znver3:cpu",))


def test_history_show_and_best_say_which_records_were_timed_queued(capsys, populated_history):
    """A queued timing of a few-microsecond CUDA kernel reads lower than TVM's evaluator's:
    the listing and the best say so beside the figure."""
    from autotune.history import open_history

    path, key = populated_history
    with open_history(path) as store:
        store.add_record(workload_key=key, target_key="llvm:znver3:cpu", space_id="s", config={"i": 9},
                         samples=[5e-4] * 3, status="ok", tuner="xgb", timing="queued")
    capsys.readouterr()
    assert main(["history", "show", key, "--history", path]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    assert [" queued " in row for row in rows] == [False, False, False, True]
    assert main(["history", "best", key, "--history", path]) == 0
    assert "(record #4, xgb, run -, s, timed queued)" in capsys.readouterr().out
    assert main(["history", "best", key, "--history", path, "--json"]) == 0
    assert [b["timing"] for b in json.loads(capsys.readouterr().out)] == ["queued"]


def test_history_export_says_what_it_wrote_in_json(capsys, env, populated_history):
    path, _ = populated_history
    assert main(["history", "export", "--history", path, "e.json", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"records": 3, "out": str(env / "e.json")}
    _user_error(capsys, ["history", "export", "--history", path, "-", "--json"], contains=("the export itself is the JSON",))


def test_a_layer_name_two_workloads_share_lists_their_shapes(capsys, populated_history):
    """The refusal listed each key with the name they share, which told none apart."""
    from autotune.history import WorkloadInfo, open_history

    path, key = populated_history
    other = "cd" * 12
    with open_history(path) as store:
        store.register_workload(WorkloadInfo(key.replace("ab", "ef"), "inv", "conv2d", {
            "name": "conv2d9", "inputs": [[1, 64, 56, 56]], "weights": [[64, 64, 3, 3]], "output": [1, 64, 56, 56]}, 1e6))
        store.register_workload(WorkloadInfo(other, "inv", "conv2d", {
            "name": "conv2d9", "inputs": [[4, 64, 56, 56]], "weights": [[64, 64, 3, 3]], "output": [4, 64, 56, 56]}, 4e6))
    line = _user_error(capsys, ["history", "show", "conv2d9", "--history", path])
    assert f"{other} (4x64x56x56 64x64x3x3 -> 4x64x56x56)" in line and line.endswith("; give the key")
    assert f"{'ef' * 12} (1x64x56x56 64x64x3x3 -> 1x64x56x56)" in line


def test_a_layer_name_given_in_part_says_which_layers_start_so(capsys, populated_history):
    """"no workload in history starts with 'conv2d'" where a layer name did: only keys
    are taken by prefix."""
    path, _ = populated_history
    line = _user_error(capsys, ["history", "show", "conv2d", "--history", path])
    assert line.endswith("no workload key starts with 'conv2d' and no layer is named so; layers named conv2d1 start so: "
                         f"give one whole (see `autotune history ls --history {path}`)")
    line = _user_error(capsys, ["history", "show", "zzz", "--history", path])
    # with the history given: the command alone reads the default one
    assert line.endswith(f"no workload key starts with 'zzz' and no layer is named so (see `autotune history ls --history {path}`)")


def test_a_layer_is_found_by_the_name_a_later_models_run_gave_it(capsys, populated_history):
    """History keeps the name a kernel had in the first model tuned with it; the same
    kernel in ResNet-50, by the name its tune printed, was "no layer is named so"."""
    from autotune.history import WorkloadInfo, open_history

    path, key = populated_history
    with open_history(path) as store:
        store.start_run("r50", model="resnet50", target_key="llvm:znver3:cpu", tuner="auto", params={})
        store.finish_run("r50", "finished", {"layers": [{"name": "fused_conv2d10_add5_relu4", "workload_key": key}]})
        store.start_run("odd", model="m", target_key="llvm:znver3:cpu", tuner="auto", params={})
        store.finish_run("odd", "finished", {"layers": 1})  # a summary is free-form: not read as layers
    assert main(["history", "show", "fused_conv2d10_add5_relu4", "--history", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["key"] == key
    assert main(["history", "best", "fused_conv2d10_add5_relu4", "--history", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["config"] == {"i": 0}
    # and `history ls` says which models' tunes met each workload
    assert main(["history", "ls", "--history", path, "--json"]) == 0
    assert [r["models"] for r in json.loads(capsys.readouterr().out) if r["workload_key"] == key] == [["resnet50"]]
    assert main(["history", "ls", "--history", path]) == 0
    header, *rows = capsys.readouterr().out.strip().splitlines()
    assert header.endswith("  models") and rows[0].endswith("  resnet50")
    # and lists one model's, class's or target's layers alone
    with open_history(path) as store:
        store.register_workload(WorkloadInfo("dd" * 12, "inv-dense", "dense", {"name": "dense3"}, 1e3))
        store.add_record(workload_key="dd" * 12, target_key="llvm:znver3:cpu", space_id="s", config={"i": 1},
                         samples=[2e-3], status="ok")
    for given, expected in (([], {key, "dd" * 12}), (["--model", "resnet50"], {key}), (["--class", "dense"], {"dd" * 12}),
                            (["--target", "llvm:znver3:cpu", "--class", "dense"], {"dd" * 12}), (["--model", "vgg11"], set())):
        assert main(["history", "ls", "--history", path, "--json", *given]) == 0
        assert {r["workload_key"] for r in json.loads(capsys.readouterr().out)} == expected, given
    assert main(["history", "ls", "--history", path, "--model", "vgg11"]) == 0
    assert capsys.readouterr().out == "no layers in history match (its classes: conv2d, dense; the models tuned: resnet50)\n"
    _user_error(capsys, ["history", "ls", "--history", path, "--target", "cuda:x"], contains=("history holds no target 'cuda:x'",))


def test_run_given_a_modules_description_asks_for_the_module(capsys, env, dyn_model):
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "m.so"]) == 0
    capsys.readouterr()
    _user_error(capsys, ["run", "m.so.json"], contains=("m.so.json is the description of the module m.so: give the module itself",))


def test_history_show_and_best(capsys, populated_history):
    path, key = populated_history
    assert main(["history", "show", key[:6], "--history", path, "--json", "--limit", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["key"] == key
    assert [r["config"] for r in data["records"]] == [{"i": 1}, {"i": 2}]  # the two most recent, as its help says
    for bad in ("0", "-1"):  # printed the header alone, exit 0
        _user_error(capsys, ["history", "show", key[:6], "--history", path, "--limit", bad], contains=("--limit must be a positive integer",))
    # the table has its columns named and says when --limit cut it; no record is said
    assert main(["history", "show", key[:6], "--history", path, "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["record", "status", "latency"] and lines[1].endswith("(the last 2 of 3; --limit shows more)")
    assert len(lines) == 4
    assert main(["history", "show", key[:6], "--history", path, "--status", "timeout"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["no records of --status timeout"]
    # a target history does not hold at all is a mistyped one, said as such
    _user_error(capsys, ["history", "show", key[:6], "--history", path, "--target", "cuda:x"], contains=("no target 'cuda:x'",))
    assert main(["history", "best", key[:6], "--history", path, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert len(best) == 1 and best[0]["config"] == {"i": 0}
    assert best[0]["latency_median"] == pytest.approx(1e-3)


def test_history_listing_names_layers_and_whole_targets(capsys, populated_history):
    """From a user's trial: `ls` cut a long target key, its JSON had no layer name, `show`
    and `best` took only a key (not the layer name `ls` prints), an ambiguous prefix gave
    only a count, and `show` had no filter but --limit."""
    from autotune.history import TargetInfo, WorkloadInfo, open_history
    from autotune.history.models import RECORD_STATUSES

    path, key = populated_history
    long_target = TargetInfo("cuda", "sm_90", "NVIDIA-H100-80GB-HBM3")
    with open_history(path) as store:
        store.register_target(long_target)
        store.register_workload(WorkloadInfo("ab" + "c" * 22, "inv2", "dense", {"name": "dense7"}, 1e3))
        store.add_record(workload_key=key, target_key=long_target.key, space_id="s", config={"i": 5},
                         samples=[], status="timeout", error="killed")
    assert main(["history", "ls", "--history", path]) == 0
    assert long_target.key in capsys.readouterr().out
    assert main(["history", "ls", "--history", path, "--json"]) == 0
    assert {r["layer"] for r in json.loads(capsys.readouterr().out)} == {"conv2d1"}
    assert main(["history", "show", "conv2d1", "--history", path, "--json"]) == 0  # by layer name
    assert len(json.loads(capsys.readouterr().out)["records"]) == 4
    assert main(["history", "show", "conv2d1", "--history", path, "--json", "--status", "timeout"]) == 0
    assert [r["config"] for r in json.loads(capsys.readouterr().out)["records"]] == [{"i": 5}]
    assert main(["history", "show", key, "--history", path, "--json", "--target", "llvm:znver3:cpu"]) == 0
    assert len(json.loads(capsys.readouterr().out)["records"]) == 3
    assert main(["history", "best", "conv2d1", "--history", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["config"] == {"i": 0}
    _user_error(capsys, ["history", "show", "ab", "--history", path],
                contains=(f"'ab' matches 2 workloads: {key} (conv2d1), {'ab' + 'c' * 22} (dense7); give more characters",))
    # the CLI writes history's statuses out (importing history would load SQLAlchemy for every command)
    for status in RECORD_STATUSES:
        assert main(["history", "show", key, "--history", path, "--json", "--status", status]) == 0
    capsys.readouterr()


def test_history_runs_lists_each_run_with_its_layering(capsys, populated_history):
    from autotune.history import open_history

    path, key = populated_history
    assert main(["history", "runs", "--history", path]) == 0
    assert capsys.readouterr().out.strip() == "history holds no runs"
    with open_history(path) as store:
        store.start_run("0ld", model="resnet18", target_key="llvm:znver3:cpu", tuner="auto", params={"trials": 8})
        store.finish_run("0ld", "finished", {})
        store.start_run("n3w", model="resnet18", target_key="llvm:znver3:cpu", tuner="gga",
                        params={"batch_norm": "weights", "inputs": {"x": {"dtype": "float32", "shape": [2, 3, 32, 32]}}})
        store.add_record(workload_key=key, target_key="llvm:znver3:cpu", space_id="s", config={"i": 9},
                         samples=[1e-3], status="ok", tuner="gga", run_id="n3w")
    assert main(["history", "runs", "--history", path, "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    # a run from before the flag ran with batch norm separate, the only layering then
    assert runs["0ld"]["batch_norm"] == "separate" and runs["n3w"]["batch_norm"] == "weights"
    assert (runs["0ld"]["status"], runs["n3w"]["status"]) == ("finished", "running")
    assert (runs["0ld"]["n_records"], runs["n3w"]["n_records"]) == (0, 1)
    assert main(["history", "runs", "--history", path]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    assert "batch norm" in header and len(lines) == 2
    assert lines[1].split()[0] == "n3w" and " weights " in lines[1] and " running " in lines[1]
    # which batch and size a run tuned: one model at two batches read as one model twice
    assert "inputs" in header and lines[1].split()[4] == "2x3x32x32" and lines[0].split()[4] == "-"
    # a model name past 16 characters is kept whole (squeezenet1_1_ts_dyn read as squeezenet1_1_ts)
    with open_history(path) as store:
        for run_id, model in (("ts", "squeezenet1_1_ts"), ("dyn", "squeezenet1_1_ts_dyn"), ("long", "m" * 30 + "_dynamo_batch4_final")):
            store.start_run(run_id, model=model, target_key="llvm:znver3:cpu", tuner="auto", params={})
    assert main(["history", "runs", "--history", path]) == 0
    models = {line.split()[0]: line.split()[3] for line in capsys.readouterr().out.strip().splitlines()[1:]}
    assert models["ts"] == "squeezenet1_1_ts" and models["dyn"] == "squeezenet1_1_ts_dyn"
    assert len(models["long"]) == 40 and models["long"].endswith("_dynamo_batch4_final") and "~" in models["long"]


def test_history_rm_removes_a_run_and_only_its_records(capsys, populated_history):
    """A run and its records go in one step; other records stay; a dry run, an unknown
    or ambiguous id and a run whose process is alive change nothing."""
    import socket

    from autotune.history import open_history

    path, key = populated_history
    with open_history(path) as store:
        for run_id, config in (("bad1", 7), ("bad2", 8), ("live", 9)):
            params = {"pid": os.getpid(), "host": socket.gethostname()} if run_id == "live" else {}
            store.start_run(run_id, model="resnet18", target_key="llvm:znver3:cpu", tuner="auto", params=params)
            store.add_record(workload_key=key, target_key="llvm:znver3:cpu", space_id="s", config={"i": config},
                             samples=[1e-4], status="ok", tuner="gga", run_id=run_id)
        store.finish_run("bad1", "finished", {})
        store.finish_run("bad2", "finished", {})
        # imported from another machine: records naming a run this history never held
        store.add_record(workload_key=key, target_key="llvm:znver3:cpu", space_id="s", config={"i": 10},
                         samples=[1e-4], status="ok", tuner="xgb", run_id="elsewhere")

    def state() -> tuple[list, list]:
        with open_history(path, readonly=True) as store:
            return sorted(r.config["i"] for r in store.records()), [r["run_id"] for r in store.runs()]

    before = state()
    assert before == ([0, 1, 2, 7, 8, 9, 10], ["bad1", "bad2", "live"])
    assert main(["history", "rm", "bad1", "--dry-run", "--history", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == [{"run_id": "bad1", "records": 1, "run_row": True, "status": "finished"}]
    assert state() == before
    _user_error(capsys, ["history", "rm", "bad", "--history", path], contains=("at least 4 characters",))
    _user_error(capsys, ["history", "rm", "b", "--history", path], contains=("at least 4 characters",))
    _user_error(capsys, ["history", "rm", "nope", "--history", path], contains=("'nope'",))
    # all or nothing: a live run beside a removable one removes neither
    _user_error(capsys, ["history", "rm", "bad1", "live", "--history", path], contains=("still running", str(os.getpid())))
    assert state() == before

    assert main(["history", "rm", "bad1", "elsew", "--history", path]) == 0
    out = capsys.readouterr().out
    assert "removed run bad1 (finished) and its 1 record" in out and "elsewhere (imported records only)" in out
    assert state() == ([0, 1, 2, 8, 9], ["bad2", "live"])
    # a run another host left running (that host gone for good): refused, then removed by
    # --force, which still refuses a live process here
    with open_history(path) as store:
        store.start_run("far1", model="resnet18", target_key="llvm:znver3:cpu", tuner="auto",
                        params={"pid": 4242, "host": "alice-laptop"})
    _user_error(capsys, ["history", "rm", "far1", "--history", path], contains=("still running (pid 4242 on alice-laptop)",))
    _user_error(capsys, ["history", "rm", "live", "--force", "--history", path], contains=("still running",))
    assert main(["history", "rm", "far1", "--force", "--history", path]) == 0
    assert "removed run far1 (killed) and its 0 records" in capsys.readouterr().out
    assert state() == ([0, 1, 2, 8, 9], ["bad2", "live"])
    with open_history(path, readonly=True) as store:
        assert store.best(key, "llvm:znver3:cpu").config == {"i": 8}  # what reuse would take now


def test_a_run_whose_process_was_killed_is_shown_killed_and_can_be_removed(capsys, populated_history):
    """Killed, its process is gone even where its parent has not reaped it yet (a zombie,
    which signal 0 still reaches): ``history runs`` says killed, ``history rm`` removes it."""
    import signal
    import socket
    import subprocess
    import time

    from autotune.history import open_history

    path, _ = populated_history
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open_history(path) as store:
            store.start_run("dead", model="m", target_key="llvm:znver3:cpu", tuner="auto",
                            params={"pid": child.pid, "host": socket.gethostname()})
        assert main(["history", "runs", "--history", path, "--json"]) == 0
        assert [r["status"] for r in json.loads(capsys.readouterr().out) if r["run_id"] == "dead"] == ["running"]
        os.kill(child.pid, signal.SIGKILL)
        time.sleep(0.3)  # dead, not yet waited for
        assert main(["history", "runs", "--history", path, "--json"]) == 0
        assert [r["status"] for r in json.loads(capsys.readouterr().out) if r["run_id"] == "dead"] == ["killed"]
        # a dry run only reads, and knew no better than "still running"
        assert main(["history", "rm", "dead", "--dry-run", "--history", path]) == 0
        assert "would remove run dead (killed)" in capsys.readouterr().out
        assert main(["history", "rm", "dead", "--history", path]) == 0
        assert "removed run dead (killed)" in capsys.readouterr().out
    finally:
        child.kill()
        child.wait()


def test_history_export_to_stdout_imports_from_stdin(capsys, populated_history, env, monkeypatch):
    """``history export - | history import -``, twice: the second adds nothing; bad JSON
    on standard input is refused before the database is created."""
    import io

    path, key = populated_history
    assert main(["history", "export", "-", "--history", path]) == 0
    exported = capsys.readouterr().out
    copy = str(env / "copy.db")
    for added, skipped in ((3, 0), (0, 3)):
        monkeypatch.setattr(sys, "stdin", io.StringIO(exported))
        assert main(["history", "import", "-", "--history", copy, "--json"]) == 0
        counts = json.loads(capsys.readouterr().out)
        assert (counts["added"], counts["skipped"]) == (added, skipped)
    assert main(["history", "best", key, "--history", copy, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["config"] == {"i": 0}
    monkeypatch.setattr(sys, "stdin", io.StringIO("{not json"))
    _user_error(capsys, ["history", "import", "-", "--history", str(env / "new.db")], contains=("standard input", "not valid JSON"))
    assert not (env / "new.db").exists()


@pytest.mark.parametrize("how", [["-o"], ["--out"], []])
def test_history_export_takes_its_file_as_compile_takes_its_output(capsys, populated_history, env, how):
    """``-o FILE`` as ``compile`` and ``zoo export`` take it, or the file alone; the
    export then imports into an empty database with every record."""
    path, _ = populated_history
    out = env / "export.json"
    assert main(["history", "export", *how, str(out), "--history", path]) == 0
    assert capsys.readouterr().out.strip() == f"exported 3 records to {out}"
    assert main(["history", "import", str(out), "--history", str(env / "copy.db"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 3


@pytest.mark.parametrize("argv, says", [([], "one of the arguments"), (["a.json", "-o", "b.json"], "not allowed with")])
def test_history_export_wants_one_output(capsys, populated_history, env, argv, says):
    path, _ = populated_history
    with pytest.raises(SystemExit) as exc:
        main(["history", "export", *argv, "--history", path])
    assert exc.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in line and line.endswith("(see 'autotune history export --help')")
    assert not (env / "a.json").exists() and not (env / "b.json").exists()


def test_run_missing_module(capsys, env):
    _user_error(capsys, ["run", "nothere.so"], contains=("module not found", "nothere.so"))


def test_run_module_without_sidecar(capsys, env):
    (env / "fake.so").write_bytes(b"\x7fELF")
    _user_error(capsys, ["run", "fake.so"], contains=("fake.so.json",))


def test_run_given_a_directory_or_an_onnx_model_says_what_it_was_given(capsys, env, dyn_model):
    """Both had said their description (``X.json``) was missing."""
    (env / "plaindir").mkdir()
    _user_error(capsys, ["run", "plaindir"], contains=("plaindir is a directory, not a module",))
    _user_error(capsys, ["run", dyn_model], contains=("dyn.onnx is an ONNX model, not a compiled module: 'autotune compile",
                                                     "-o dyn.so' makes one to run"))


def test_compile_into_missing_directory_makes_it(capsys, env, dyn_model):
    """As zoo export does; a compile that fails first leaves no empty directory."""
    before = _listing(env)
    _user_error(capsys, ["compile", dyn_model, "--target", "llvm", "-o", "nodir/model.so"], contains=("--input-shape",))
    assert not (env / "nodir").exists() and _listing(env) == before
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "nodir/sub/model.so", "--json"]) == 0
    assert (env / "nodir" / "sub" / "model.so").exists() and (env / "nodir" / "sub" / "model.so.json").exists()


def test_tune_out_under_a_regular_file_refused_before_tuning(capsys, env):
    (env / "afile").write_text("x")
    _user_error(capsys, _tune("--target", "llvm", "-o", "afile/deeper/m.so"), contains=("afile is not a directory",))
    assert not (env / "tune.db").exists()


def test_tune_report_folder_that_is_a_file_refused_before_tuning(capsys, env):
    """It was found only once the whole tune had run, its export never made."""
    (env / "afile").write_text("x")
    _user_error(capsys, _tune("--target", "llvm", "--out-dir", "afile"), contains=("afile", "is a file, not a directory"))
    _user_error(capsys, _tune("--target", "llvm", "--out-dir", "afile/run"), contains=("afile is not a directory",))
    assert not (env / "tune.db").exists() and (env / "afile").read_text() == "x"


@pytest.mark.skipif(not Path("/proc/self").is_dir() or os.geteuid() != 0, reason="the bits deceive root, on Linux")
def test_a_folder_that_takes_no_file_whatever_its_permission_bits_is_refused_before_tuning(capsys, env):
    """/proc (or a read-only mount, or root-squashed NFS) looks writable to root by its
    bits: a report folder there failed with a traceback once a whole tune had run, an
    export with an error line."""
    _user_error(capsys, _tune("--target", "llvm", "--out-dir", "/proc/autotune-report"), contains=("/proc takes no new file",))
    _user_error(capsys, _tune("--target", "llvm", "-o", "/proc/m.so"), contains=("cannot write /proc/m.so: /proc takes no new file",))
    assert not (env / "tune.db").exists()
    assert not [p for p in env.iterdir() if p.name.startswith(".autotune-probe-")]


def test_an_input_shape_the_model_cannot_take_is_one_line_and_nothing_else(capfd, env, dyn_model):
    """TVM's frontend printed which operator failed on standard output, and its C++ side
    warned of a half-built module on standard error, around the one line."""
    assert main(["layers", dyn_model, "--input-shape", "x=2x7"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert err.startswith("autotune: error: ") and "TVM's ONNX frontend failed at MatMul" in err


def test_a_check_whose_reference_runs_out_of_memory_is_one_line(capsys, env, monkeypatch):
    """ONNX's reference evaluator is unbounded numpy: a 3x3 conv on an 8192x8192 image
    took it past 23 GB and the kernel's OOM killer ended `run --check` without a word.
    It now may grow by what the machine has available and no more: here, as if 150 MB
    were, a 1024x1024 conv (about 600 MB to the evaluator) ends in one line, and the
    process's memory limit is as it was."""
    import resource

    from autotune import run as run_module

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])], "c",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1024, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1024, 1024])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "conv.onnx")
    assert main(["compile", "conv.onnx", "--target", "llvm", "-o", "conv.so"]) == 0
    capsys.readouterr()
    before = resource.getrlimit(resource.RLIMIT_AS)
    with monkeypatch.context() as m:
        m.setattr(run_module, "_meminfo_bytes", lambda field: 150 * 2**20)
        _user_error(capsys, ["run", "conv.so", "--check", "conv.onnx", "--repeat", "1"],
                    contains=("the ONNX reference evaluator ran out of memory computing this model's outputs (0.1 GB "
                              "was available to it): check it on smaller inputs, or run it without --check",))
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert main(["run", "conv.so", "--check", "conv.onnx", "--repeat", "1", "--json"]) == 0  # with what is there: checked
    assert json.loads(capsys.readouterr().out)["check"]["ok"]


def test_run_checked_against_the_model_in_another_precision_is_one_line(capsys, env, dyn_model):
    """A float16 module checked against the float32 model said MISMATCH, as if wrong."""
    import onnx

    from autotune.half_precision import half_model

    onnx.save(half_model(onnx.load(dyn_model)), env / "dyn16.onnx")
    assert main(["compile", "dyn16.onnx", "--input-shape", "x=2x8", "--target", "llvm", "-o", "dyn16.so"]) == 0
    capsys.readouterr()
    _user_error(capsys, ["run", "dyn16.so", "--check", dyn_model, "--repeat", "1"],
                contains=("takes x as float32, this module as float16: check it against the model in float16 it was compiled from",))
    # a zoo name says how to write the zoo's model in that precision (it asked whether the
    # module was compiled from dqn, which it was, in float16)
    assert main(["zoo", "export", "dqn", "--size", "36", "--dtype", "float16", "-o", "dqn16.onnx"]) == 0
    assert main(["compile", "dqn16.onnx", "--target", "llvm", "-o", "dqn16.so"]) == 0
    capsys.readouterr()
    _user_error(capsys, ["run", "dqn16.so", "--check", "dqn", "--repeat", "1"],
                contains=("(`autotune zoo export dqn --size 36 --dtype float16` writes the zoo's)",))
    # in float32, the zoo's dqn at the module's size is the reference (at its default, 84,
    # the evaluator failed with a reshape error that asked whether the module was dqn's)
    assert main(["zoo", "export", "dqn", "--size", "36", "-o", "dqn36.onnx"]) == 0
    assert main(["compile", "dqn36.onnx", "--target", "llvm", "-o", "dqn36.so"]) == 0
    capsys.readouterr()
    assert main(["run", "dqn36.so", "--check", "dqn", "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"]
    _user_error(capsys, ["run", "dqn36.so", "--check", "mobilenetv2", "--repeat", "1"],
                contains=("no size of it takes this module's input 1x4x36x36: is the module compiled from mobilenetv2?",))
    # a check that cannot run leaves the outputs asked for written, and says so (they were lost)
    assert main(["run", "dqn36.so", "--check", "mobilenetv2", "--repeat", "1", "--save-outputs", "y36.npz"]) == 2
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1] == "outputs written to y36.npz" and len(err.strip().splitlines()) == 1
    assert (env / "y36.npz").is_file()
    # a transformer's size is its sequence length, the input's second dimension (refused at 16)
    assert main(["zoo", "export", "transformer", "--size", "16", "-o", "tr16.onnx"]) == 0
    assert main(["compile", "tr16.onnx", "--target", "llvm", "-o", "tr16.so"]) == 0
    capsys.readouterr()
    assert main(["run", "tr16.so", "--check", "transformer", "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"]


def test_a_history_that_ends_with_the_command_is_refused_where_it_would_be_written(capsys, env):
    """``--history sqlite://`` tuned a whole model and exited 0, every measurement lost."""
    for url in ("sqlite://", "sqlite:///", "sqlite:///:memory:"):
        _user_error(capsys, _tune("--target", "llvm", "--history", url), contains=("in-memory database ends with the command",))
        _user_error(capsys, ["history", "import", "x.json", "--history", url], contains=("import writes",))


def test_run_a_module_cut_short_is_one_line(capsys, env, dyn_model):
    """A copy interrupted: the loader maps what the headers promise, and reading past the
    end killed the process with a bus error and no word."""
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "whole.so"]) == 0
    data = (env / "whole.so").read_bytes()
    for cut in (5000, len(data) - 100):
        (env / "cut.so").write_bytes(data[:cut])
        (env / "cut.so.json").write_bytes((env / "whole.so.json").read_bytes())
        _user_error(capsys, ["run", "cut.so"], contains=("cannot load cut.so: it is cut short", f"{cut} bytes"))
    capsys.readouterr()
    assert main(["run", "whole.so", "--repeat", "1"]) == 0
    # another model's description, copied beside it, of the same shapes: it ran (and
    # `--check` failed as a MISMATCH) where it is refused by content before any work
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "twin.so"]) == 0
    (env / "other.so").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    (env / "other.so.json").write_bytes((env / "whole.so.json").read_bytes())
    capsys.readouterr()
    _user_error(capsys, ["run", "other.so"], contains=("other.so.json describes another module than other.so",))
    assert main(["run", "twin.so", "--repeat", "1"]) == 0  # the same build again: its own description


def test_a_shared_library_that_is_no_module_is_one_line_naming_the_tvm_that_built_it(capsys, env, dyn_model):
    """A description beside a plain shared library: it loaded, and the VM ended in a
    traceback. The description names the TVM that built the module (it did not), and a
    load that fails says so where this TVM is another."""
    import hashlib

    import tvm
    from tvm.support import cc

    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "whole.so"]) == 0
    meta = json.loads((env / "whole.so.json").read_text())
    assert meta["versions"]["tvm"] == tvm.__version__ and meta["versions"]["autotune"]
    (env / "plain.c").write_text("int answer(void) { return 42; }\n")
    cc.create_shared(str(env / "plain.so"), [str(env / "plain.c")])
    meta.update(module_sha256=hashlib.sha256((env / "plain.so").read_bytes()).hexdigest(), versions={"tvm": "0.26.0"})
    (env / "plain.so.json").write_text(json.dumps(meta))
    capsys.readouterr()
    _user_error(capsys, ["run", "plain.so"], contains=("cannot load plain.so: Module has no function",
                                                       f"(built with TVM 0.26.0, this is TVM {tvm.__version__})"))


def test_compile_onto_a_directory(capsys, env, dyn_model):
    (env / "outdir").mkdir()
    _user_error(capsys, ["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "outdir"],
                contains=("is a directory",))
    assert list((env / "outdir").iterdir()) == []


def test_outputs_never_replace_the_inputs_and_a_module_is_named_as_one(capsys, env, dyn_model):
    """``compile m.onnx -o m.onnx`` replaced the user's model with the module, and
    ``run m.so --save-outputs m.so`` the module with the outputs; ``-o m.tar`` wrote a
    shared library that ``run`` then failed to read as a tar archive."""
    import shutil

    model = env / "m.onnx"
    shutil.copy(dyn_model, model)
    kept = model.read_bytes()
    shape = ["--input-shape", "x=2x8", "--target", "llvm"]
    for command in (["compile", str(model), *shape], ["tune", str(model), *shape, "--trials", "2", "--no-mlflow"]):
        _user_error(capsys, [*command, "-o", str(model)], contains=("m.onnx", "not a shared library", "m.so"))
    plain = env / "model"  # no suffix: refused as the input itself
    shutil.copy(dyn_model, plain)
    _user_error(capsys, ["compile", str(plain), *shape, "-o", str(plain)], contains=("is the input",))
    _user_error(capsys, ["compile", str(model), *shape, "-o", "m.tar"], contains=(".tar name", "m.so"))
    assert model.read_bytes() == kept and plain.read_bytes() == Path(dyn_model).read_bytes()
    assert not (env / "m.tar").exists()

    assert main(["compile", str(model), *shape, "-o", "m.so"]) == 0
    module = (env / "m.so").read_bytes()
    for target in ("m.so", "m.so.json", str(model)):
        _user_error(capsys, ["run", "m.so", "--repeat", "1", "--check", str(model), "--save-outputs", target],
                    contains=("is the input",))
    assert (env / "m.so").read_bytes() == module and model.read_bytes() == kept


def test_a_module_never_replaces_the_history(capsys, env, dyn_model):
    """``compile -o h.db --history h.db`` replaced the history with the module (exit 0);
    ``tune --out h.db`` did too, then went on writing through its open connection into
    the module's bytes: a malformed database. Refused before any work, the default
    history and SQLite's side files too."""
    shape = ["--input-shape", "x=2x8", "--target", "llvm"]
    assert main(["tune", dyn_model, *shape, "--trials", "2", "--no-mlflow", "--quiet", "--history", "h.db"]) == 0
    capsys.readouterr()
    kept = (env / "h.db").read_bytes()
    for command in (["compile", dyn_model, *shape], ["tune", dyn_model, *shape, "--trials", "2", "--no-mlflow"]):
        for out, history in (("h.db", "h.db"), (str(env / "h.db"), "sqlite:///h.db"), ("h.db-wal", "h.db")):
            _user_error(capsys, [*command, "--history", history, "-o", out], contains=("is the history database",))
    default = os.environ["AUTOTUNE_HISTORY"]
    _user_error(capsys, ["tune", dyn_model, *shape, "--trials", "2", "--no-mlflow", "-o", default],
                contains=("is the history database",))
    (env / "hl").mkdir()  # SQLite keeps the side files beside what a symlink names
    (env / "hl" / "link.db").symlink_to(env / "h.db")
    _user_error(capsys, ["compile", dyn_model, *shape, "--history", "hl/link.db", "-o", "h.db-wal"],
                contains=("is the history database", "(its wal file)"))
    assert (env / "h.db").read_bytes() == kept and not Path(default).exists()
    assert main(["compile", dyn_model, *shape, "--history", "h.db", "-o", "h.so"]) == 0


def test_the_batch_is_the_dimension_the_model_names_so(capsys, env):
    """A (time, batch, features) model, as ``nn.Transformer`` takes by default, exported
    with ``dynamic_axes={"x": {0: "seq", 1: "batch"}}``: its batch was read from the first
    dimension (the sequence), so its layers matched none of the same model's at another
    batch; and no command said which batch it had read."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", "batch", 4])],
        [numpy_helper.from_array(np.ones((8, 4), np.float32), "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(env / "seq.onnx"))
    keys = []
    for batch in (2, 5):
        assert main(["layers", "seq.onnx", "--input-shape", f"x=16x{batch}x8", "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["batch"] == {"size": batch, "input": "x", "axis": 1}
        keys.append({l["batch_invariant_key"] for l in found["layers"] if l["tunable"]})
    assert keys[0] and keys[0] == keys[1]
    assert main(["layers", "seq.onnx", "--input-shape", "x=16x2x8"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("; batch 2 (dimension 1 of input 'x')")


def test_a_check_whose_reference_lies_within_atol_of_zero_says_it_proves_nothing(capsys, env):
    """Random weights that vanish through a deep net (torchvision's MNASNet: outputs of
    1e-7) passed `run --check` against a model with other weights as a plain OK: with
    every reference value within atol of zero, any output passes."""
    def model(path, scale):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
            [numpy_helper.from_array(np.full((8, 4), scale, np.float32), "W")],
        )
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return str(path)

    faint, other = model(env / "faint.onnx", 1e-9), model(env / "other.onnx", -3e-9)
    assert main(["compile", faint, "--target", "llvm", "-o", "faint.so"]) == 0
    capsys.readouterr()
    assert main(["run", "faint.so", "--repeat", "1", "--check", other, "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["ok"] and not check["conclusive"]
    assert [o["name"] for o in check["within_atol_of_zero"]] == ["y"] and check["within_atol_of_zero"][0]["reference_max_abs"] < 1e-7
    assert main(["run", "faint.so", "--repeat", "1", "--check", other]) == 0
    out = capsys.readouterr().out
    assert "check vs ONNX reference: OK, inconclusive" in out and "give --atol below that" in out
    # an atol below the reference's values makes it a check again, which the other weights fail
    assert main(["run", "faint.so", "--repeat", "1", "--check", other, "--atol", "1e-12", "--json"]) == 1
    check = json.loads(capsys.readouterr().out)["check"]
    assert not check["ok"] and check["conclusive"]


def test_a_shape_the_model_cannot_take_is_said_to_be_the_given_one(capsys, env):
    """A model that declares its sequence dynamic but fixed it in a Reshape (as torch's
    TorchScript export does): at another length TVM's frontend failed with a message
    that read as TVM's own trouble, not the shape given."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("MatMul", ["r", "W"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(np.array([-1, 16 * 8], np.int64), "shape"),
         numpy_helper.from_array(np.ones((128, 4), np.float32), "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(env / "baked.onnx"))
    assert main(["layers", "baked.onnx", "--input-shape", "x=2x16x8"]) == 0
    capsys.readouterr()
    _user_error(capsys, ["layers", "baked.onnx", "--input-shape", "x=2x20x8"],
                contains=("Reshape", "(at --input-shape x=2x20x8; the model declares x as batchxseqx8",
                          "do these shapes suit it?)"))
    # the API says it with its own option's name
    from autotune import api
    from autotune.errors import OptionError

    with pytest.raises(OptionError, match=r"\(at input_shapes x=2x20x8; the model declares x as batchxseqx8"):
        api.layers(str(env / "baked.onnx"), input_shapes={"x": (2, 20, 8)})


def test_compile_under_a_regular_file(capsys, env, dyn_model):
    (env / "afile").write_text("x")
    _user_error(capsys, ["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm",
                         "-o", "afile/model.so"], contains=("afile",))


def test_zoo_export_under_a_regular_file(capsys, env):
    (env / "afile").write_text("x")
    _user_error(capsys, ["zoo", "export", "resnet18", "--size", "32", "-o", "afile/r.onnx"], contains=("afile",))


def test_history_export_under_a_regular_file(capsys, env, populated_history):
    """It said "File exists", of the folder that was a file."""
    path, _ = populated_history
    (env / "afile").write_text("x")
    _user_error(capsys, ["history", "export", "--history", path, "-o", "afile/e.json"], contains=("afile is not a directory",))


def test_zoo_export_onto_a_directory(capsys, env):
    (env / "outdir").mkdir()
    _user_error(capsys, ["zoo", "export", "resnet18", "--size", "32", "-o", "outdir"], contains=("outdir",))
    assert list((env / "outdir").iterdir()) == []


def test_zoo_export_unknown_model(capsys, env):
    _user_error(capsys, ["zoo", "export", "nosuch", "-o", "x.onnx"], contains=("unknown zoo model 'nosuch'",))
    assert not (env / "x.onnx").exists()


def test_zoo_size_too_small(capsys):
    _user_error(capsys, ["layers", "resnet18", "--size", "8"], contains=("at least 32",))


# --- help, listings, happy paths ---------------------------------------------------------------
def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in SUBCOMMANDS:
        assert f"    {cmd} " in out, cmd


def test_no_command_prints_help_and_exits_2(capsys):
    """On standard error: exiting 2, the help was a script's captured data on stdout."""
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert "usage: autotune" in err and out == ""


@pytest.mark.parametrize("command, actions", [("zoo", ["list", "export"]), ("history", ["ls", "show", "best", "export", "import"])])
def test_command_without_action_prints_its_own_help(capsys, command, actions):
    assert main([command]) == 2
    stdout, out = capsys.readouterr()
    assert stdout == "" and out.startswith(f"usage: autotune {command} ")
    for action in actions:
        assert f"    {action} " in out, action


def test_python_m_autotune_help(env):
    proc = subprocess.run([sys.executable, "-m", "autotune", "--help"], capture_output=True, text=True,
                          timeout=120, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    for cmd in SUBCOMMANDS:
        assert cmd in proc.stdout


def test_an_export_to_a_full_standard_output_is_one_line(env, populated_history):
    """``history export - > /dev/full`` ended in an OSError traceback."""
    path, _ = populated_history
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "autotune", "history", "export", "-", "--history", path], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == ["autotune: error: cannot write the export to standard output: No space left on device"]


def test_a_reader_that_leaves_early_is_no_error(env):
    """``autotune zoo list | head -0``: the pipe closes before we write; no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "zoo", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=os.environ.copy())
    proc.stdout.close()  # before the interpreter has even started autotune
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err  # 128 + SIGPIPE, as the shell reports a writer the pipe ended
    assert err == b""


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_mid_tune_keeps_what_was_measured(env, stop):
    """SIGINT while measuring: exit 130 with one line, the records so far stay in a
    sound database, and the run is marked killed there. SIGTERM (``timeout``, systemd,
    ``docker stop``) the same, as 143: it ended the tune silently, its MLflow runs left
    RUNNING."""
    import signal
    import sqlite3

    from tests.running_tune import wait_for_records

    history = env / "h.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "tune", "resnet18", "--size", "32", "--max-layers", "1", "--trials", "500",
         "--batch", "2", "--target", "llvm", "--history", str(history), "--no-mlflow", "--no-verify",
         "--no-model-latency", "--quiet", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        # A shell starts background jobs with SIGINT ignored, and the ignore is inherited:
        # Python then never raises KeyboardInterrupt. Ctrl-C reaches a foreground tune.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = wait_for_records(proc, history, 4)
    proc.send_signal(getattr(signal, stop))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == {"SIGINT": 130, "SIGTERM": 143}[stop], err
    said = {"SIGINT": "interrupted", "SIGTERM": "terminated (SIGTERM)"}[stop]
    assert err.strip().splitlines()[-1] == f"autotune: {said}; measurements so far are kept in history"
    assert "Traceback" not in err
    with sqlite3.connect(f"file:{history}?mode=ro", uri=True) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        assert db.execute("select count(*) from records").fetchone()[0] >= seen >= 4
        assert [r[0] for r in db.execute("select status from runs")] == ["killed"]
        # --json's stream ends in a word of it, not in silence as a crash does
        (run_id,) = db.execute("select id from runs").fetchone()
    assert json.loads(out.splitlines()[-1]) == {"event": {"SIGINT": "interrupted", "SIGTERM": "terminated"}[stop],
                                                "run_id": run_id}


def test_a_history_that_stops_taking_writes_is_said_by_the_first_write_that_failed(env):
    """A full disk mid-tune said "cannot finish run in history": the closing's failure
    replaced the write that stopped the tune. Another process holding the database
    locked refuses writes as a full disk does (busy timeout shortened to 1 s)."""
    import sqlite3

    from tests.running_tune import wait_for_records

    history = env / "h.db"
    script = ("import sys\nimport autotune.history.sqlite_db as db\ndb.BUSY_TIMEOUT_S = 1.0\n"
              "from autotune.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "tune", "resnet18", "--size", "32", "--max-layers", "1", "--trials", "500",
         "--batch", "2", "--target", "llvm", "--history", str(history), "--no-mlflow", "--no-verify",
         "--no-model-latency", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    wait_for_records(proc, history, 4)
    holder = sqlite3.connect(history, timeout=30)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        holder.rollback()
        holder.close()
    assert proc.returncode == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("autotune: error: cannot add record in history at ") and "locked" in line, line


def test_a_terminals_ctrl_c_while_the_build_workers_start_prints_one_line(env):
    """A terminal sends Ctrl-C to its whole process group, build workers included: pressed
    while they imported TVM, each printed a KeyboardInterrupt traceback under tune's line,
    and the pools left behind printed 'cannot join current thread' twice."""
    import signal
    import time

    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "tune", "resnet18", "--size", "32", "--trials", "8", "--target", "llvm",
         "--history", str(env / "h.db"), "--no-mlflow", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        start_new_session=True,  # its own process group, as a terminal's foreground job has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    workers: list = []
    while not workers and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        workers = [c for c in psutil.Process(proc.pid).children() if "popen_worker" in " ".join(c.cmdline())]
    assert workers, proc.communicate()
    time.sleep(0.3)  # into their imports of TVM (a second or more here)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # hung: leave nothing running behind the failure
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 130, err
    # the workers start before the run does: nothing was measured, so nothing is said kept
    assert err.strip().splitlines() == ["autotune: interrupted"], err
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


_INTERRUPT_INSIDE_TVM = """
import importlib
import os
import signal
import sys

import tvm
from tvm import relax

import autotune.compile
from autotune.cli import main

@tvm.transform.module_pass(opt_level=0)
def interrupt(mod, ctx):  # Python that TVM calls back into, as its passes do
    raise KeyboardInterrupt

phase, *argv = sys.argv[1:]
if phase == "fuse":
    relax.transform.FuseOps = lambda: interrupt
elif phase == "constant folding":  # a real SIGINT while FoldConstant builds the transposed weight
    import autotune.importer_constants  # which otherwise transposes it in numpy: leave it to TVM here

    autotune.importer_constants.fold_importer_constants = lambda: tvm.transform.module_pass(lambda mod, ctx: mod, opt_level=0)
    tirx_build, builds = importlib.import_module("tvm.tirx.build").build, []
    def build_once_interrupted(*args, **kwargs):
        builds.append(args)
        if len(builds) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return tirx_build(*args, **kwargs)
    tvm.register_global_func("tirx.build", build_once_interrupted, override=True)
else:  # timing the model, after tuning: its first build (Ctrl-C is pressed once)
    build, builds = autotune.compile.build, []
    def build_once_interrupted(mod, target):
        builds.append(mod)
        return build(interrupt(mod) if len(builds) == 1 else mod, target)
    autotune.compile.build = build_once_interrupted
sys.exit(main(argv))
"""


@pytest.mark.parametrize("command, phase", [
    ("tune", "fuse"), ("tune", "constant folding"), ("tune", "model timing"), ("compile", "constant folding"),
])
def test_ctrl_c_inside_tvm_stops_the_command(env, command, phase):
    """Ctrl-C lands in whatever Python TVM is calling back into: while the model is
    lowered, or built to time it. tvm-ffi handed that back as an error, so the tune said
    'lowering failed' (exit 2), or noted a failed timing and tuned on; FoldConstant drops
    the error and goes on, so the tune ran to its end. It must stop like any Ctrl-C."""
    import signal
    import sqlite3

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype("float32"), "W"),
             numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "B")]
    graph = helper.make_graph(  # a PyTorch Linear: TVM's FoldConstant compiles the weight's transpose
        [helper.make_node("Gemm", ["x", "W", "B"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits,
    )
    model = env / "linear.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    history, out = env / "h.db", env / "linear.so"
    args = {
        "tune": ["--trials", "2", "--history", str(history), "--no-mlflow", "--quiet"],
        "compile": ["-o", str(out)],
    }[command]
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_INSIDE_TVM, phase, command, str(model), "--target", "llvm", *args],
        capture_output=True, text=True, timeout=300,
        # as in test_ctrl_c_mid_tune: a run started in the background inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.returncode == 130, proc.stdout + proc.stderr
    # a tune stopped while its model loads has begun no run: there is nothing to keep
    kept = command == "tune" and phase == "model timing"
    said = "autotune: interrupted" + ("; measurements so far are kept in history" if kept else "")
    assert proc.stderr.strip().splitlines()[-1] == said
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    if phase == "model timing":  # at the tune's end: the run is marked killed, its trials kept
        with sqlite3.connect(f"file:{history}?mode=ro", uri=True) as db:
            assert [r[0] for r in db.execute("select status from runs")] == ["killed"]
            assert db.execute("select count(*) from records where tuner = 'xgb'").fetchone() == (2,)


_KILLED_WHILE_EXPORTING = """
import os
import signal
import sys

import autotune.compile
from autotune.cli import main

def killed(*args, **kwargs):  # the OOM killer during the link, say: nothing runs after it
    os.kill(os.getpid(), signal.SIGKILL)

autotune.compile.export = killed
sys.exit(main(sys.argv[1:]))
"""


def test_a_tune_killed_while_exporting_is_no_finished_run(capsys, env, dyn_model):
    """The layers closed the run "finished" before the module and the report were
    written: a SIGKILL then left it finished for good, with neither, and its MLflow run
    RUNNING. It stays running until they are written, so the next look finds it killed."""
    history, mlruns = env / "h.db", env / "mlruns"
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WHILE_EXPORTING, "tune", dyn_model, "--input-shape", "x=2x8", "--target", "llvm",
         "--trials", "2", "--history", str(history), "--mlflow-uri", f"sqlite:///{mlruns}.db", "--no-model-latency",
         "--quiet", "--out", str(env / "m.so")],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    assert main(["history", "runs", "--history", str(history), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["status"] == "killed"
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{mlruns}.db")
    assert main(["tune", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "--trials", "1", "--history", str(history),
                 "--mlflow-uri", f"sqlite:///{mlruns}.db", "--no-model-latency", "--quiet"]) == 0
    statuses = {r.info.run_id: r.info.status for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}
    assert "RUNNING" not in statuses.values() and "KILLED" in statuses.values()


def test_run_stopped_in_its_check_says_the_outputs_it_wrote(env, dyn_model):
    """Ctrl-C while the reference evaluator ran: the outputs were written before the
    check, and only "interrupted" was said of them."""
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "m.so"]) == 0
    script = (
        "import sys\n"
        "import onnx.reference\n"
        "from autotune.cli import main\n"
        "def pressed(self, *args, **kwargs):\n"
        "    raise KeyboardInterrupt\n"
        "onnx.reference.ReferenceEvaluator.run = pressed\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, "run", "m.so", "--repeat", "1", "--check", dyn_model,
                           "--save-outputs", "y.npz"], capture_output=True, text=True, timeout=300, cwd=env)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "outputs written to y.npz" and "Traceback" not in proc.stderr
    assert (env / "y.npz").is_file()


def test_import_cli_does_not_import_heavy_modules(env):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import autotune.cli"],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    modules = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "autotune.cli" in modules  # the parse works
    heavy = [m for m in modules if m.split(".")[0] in ("tvm", "tvm_ffi", "mlflow")]
    assert heavy == []


def test_zoo_list_json(capsys):
    assert main(["zoo", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [e["name"] for e in data]
    assert {"resnet18", "mobilenetv2", "transformer"} <= set(names)
    r18 = data[names.index("resnet18")]
    assert r18["input"] == [1, 3, 224, 224] and r18["default_size"] == 224 and r18["input_dtype"] == "float32"
    memnet = data[names.index("memnet")]
    assert memnet["input"] == [1, 100] and memnet["input_dtype"] == "int64"  # token ids


def test_zoo_export_writes_loadable_onnx(capsys, env):
    assert main(["zoo", "export", "resnet18", "-o", "out/r18.onnx", "--size", "32"]) == 0
    assert "out/r18.onnx" in capsys.readouterr().out
    model = onnx.load(str(env / "out" / "r18.onnx"))
    onnx.checker.check_model(model)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 32, 32]
    assert [p.name for p in (env / "out").iterdir()] == ["r18.onnx"]  # no temp file left
    # and the CLI reads it back
    assert main(["layers", "out/r18.onnx", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "r18"
    assert main(["zoo", "export", "mobilenetv2", "-o", "m.onnx", "--size", "64", "--batch-size", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["out"] == "m.onnx" and out["model"] == "mobilenetv2" and list(out["inputs"].values()) == [[2, 3, 64, 64]]
    assert list(out["input_dtypes"].values()) == ["float32"]
    assert main(["zoo", "export", "memnet", "-o", "mem.onnx", "--size", "8", "--dtype", "float16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # the precision asked for, and token ids that stay int64
    assert out["dtype"] == "float16" and list(out["input_dtypes"].values()) == ["int64"]


def test_layers_json(capsys):
    assert main(["layers", "resnet18", "--size", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "resnet18"
    assert data["inputs"] == {"input": [1, 3, 32, 32]}
    tunable = [l for l in data["layers"] if l["tunable"]]
    assert len(tunable) >= 10
    assert {"conv2d", "dense"} <= {l["op_class"] for l in tunable}
    first = data["layers"][0]
    assert first["attrs"]["kernel"] == [7, 7] and first["output"] == [1, 64, 16, 16]


def test_layers_table(capsys):
    assert main(["layers", "resnet18", "--size", "32"]) == 0
    out = capsys.readouterr().out
    assert "conv2d" in out
    assert out.strip().splitlines()[-1].startswith("resnet18: ")


def test_info_reports_this_machine_and_reads_history_without_creating_it(capsys, env):
    import tvm

    from autotune.target import resolve_target
    from autotune.history import TargetInfo, WorkloadInfo, open_history

    history = env / "h.db"
    assert main(["info", "--history", str(history), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["packages"]["apache-tvm"] == tvm.__version__ and info["packages"]["apache-tvm-ffi"] == "0.1.14.post1"
    import xgboost  # installed as xgboost-cpu on Linux: it read "not installed"

    assert info["packages"]["xgboost"] == xgboost.__version__
    assert info["cpu"]["key"] == resolve_target("llvm").key and info["target_auto"]["key"] == resolve_target("auto").key
    assert info["history"] == {"url": f"sqlite:///{history}", "path": str(history), "exists": False} and not history.exists()
    assert info["home"] == str(env / "home" / ".autotune") and info["mlflow_tracking_uri"].startswith("sqlite:///")
    from autotune.nvrtc_headers import nvrtc_version

    version = nvrtc_version()  # what cuda-bindings loads, if anything: said as it is, cache state beside it
    assert info["cuda"]["nvrtc"] == (f"{version[0]}.{version[1]}" if version else None)
    assert info["cuda"]["nvrtc_header_cache"].startswith(("on", "already on") if version and version >= (12, 8) else "off:")
    with open_history(str(history)) as store:
        store.register_target(TargetInfo("llvm", "znver3", "cpu-a"))
        store.register_workload(WorkloadInfo("w1", "i1", "conv2d", {"name": "c"}, 1e6, (1.0,)))
        for i in range(3):
            store.add_record(workload_key="w1", target_key="llvm:znver3:cpu-a", space_id="s", config={"k": i}, samples=[1e-3], status="ok")
    assert main(["info", "--history", str(history)]) == 0
    text = capsys.readouterr().out
    assert "1 layers, 3 records, 0 runs, targets: llvm:znver3:cpu-a" in text and "history key" in text


def test_info_shows_the_cpu_peaks_tunes_go_by_and_measures_them_again(capsys, env):
    """Measured once by the first tune and kept: measured while another tune ran, they
    read about half (67 against 166 GFLOP/s here) and every later roofline figure and
    roofline split went by them, with no way to see or redo it."""
    from autotune.target import resolve_target

    cache = env / "home" / ".autotune" / "roofline.json"
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cpu_roofline"] is None and not cache.exists()
    name = resolve_target("llvm").device_name  # the name tunes look the peaks up by
    cache.parent.mkdir(parents=True)
    busy = {"peak_flops": 6.7e10, "peak_bw": 2.47e10, "cache_bw": 6.18e10, "cache_bytes": 3.2e7, "source": "measured",
            "device_name": name, "method": 2, "measured_at": "2026-11-27T11:04:20", "load_per_core": 1.5}
    cache.write_text(json.dumps({name: busy}))
    assert main(["info"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("cpu roofline"))
    assert "67 GFLOP/s" in line and "load 1.50 a core" in line and "autotune info --measure-roofline" in line
    assert main(["info", "--measure-roofline", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["cpu_roofline"]
    assert again == json.loads(cache.read_text())[name] and again["measured_at"] != busy["measured_at"]
    assert again["peak_flops"] > 0 and "load_per_core" in again
    assert not [p.name for p in cache.parent.iterdir() if p.name.endswith(".tmp")]


def test_info_says_when_history_cannot_be_read(capsys, env):
    (env / "notdb.db").write_text("not a database")
    assert main(["info", "--history", "notdb.db", "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)["history"]
    assert hist["exists"] is True and hist["error"]
    assert (env / "notdb.db").read_text() == "not a database"
    # a path under a file: it said "not created yet", as of a history the next tune makes
    assert main(["info", "--history", "notdb.db/h.db"]) == 0
    text = capsys.readouterr().out
    assert "cannot be created: " in text and "not created yet" not in text
    assert main(["info", "--history", "notdb.db/h.db", "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)["history"]
    assert hist["exists"] is False and hist["error"].endswith("notdb.db is not a directory")


def test_a_mismatch_names_the_outputs_that_are_off(capsys, env):
    """One figure for a five-output model left a user to find the wrong outputs by hand."""
    def model(path, scale):
        w = numpy_helper.from_array(np.full((4, 4), scale, np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["prod"]), helper.make_node("Relu", ["x"], ["rect"])], "two",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4]) for n in ("prod", "rect")], [w])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), env / path)

    model("two.onnx", 1.0)
    model("other.onnx", 2.0)  # its product differs, its relu does not
    assert main(["compile", "two.onnx", "--target", "llvm", "-o", "two.so"]) == 0
    capsys.readouterr()
    assert main(["run", "two.so", "--check", "other.onnx", "--repeat", "1", "--json"]) == 1
    check = json.loads(capsys.readouterr().out)["check"]
    assert [(o["name"], o["matched"]) for o in check["outputs"]] == [("prod", False), ("rect", True)]
    assert check["outputs"][1]["max_abs_error"] == 0.0
    assert main(["run", "two.so", "--check", "other.onnx", "--repeat", "1"]) == 1
    assert "  outputs off: prod (" in capsys.readouterr().out


def test_run_refuses_inputs_past_the_modules_float_range(capsys, env, dyn_model):
    """Values a float16 module cannot hold: numpy warned of an overflow in its cast, then
    the check read NaN and said MISMATCH."""
    from autotune.half_precision import half_model

    onnx.save(half_model(onnx.load(dyn_model)), env / "dyn16.onnx")
    assert main(["compile", "dyn16.onnx", "--input-shape", "x=2x8", "--target", "llvm", "-o", "dyn16.so"]) == 0
    capsys.readouterr()
    np.savez(env / "big.npz", x=np.full((2, 8), 1e6))
    _user_error(capsys, ["run", "dyn16.so", "--inputs", "big.npz", "--check", "dyn16.onnx"],
                contains=("big.npz: input x holds values up to 1e+06, past what float16 holds (65504)",))
    np.savez(env / "fine.npz", x=np.full((2, 8), 1e3))  # float64 data that fits is cast, as before
    assert main(["run", "dyn16.so", "--inputs", "fine.npz", "--check", "dyn16.onnx", "--repeat", "1"]) == 0


def test_run_refuses_token_ids_outside_the_table_they_index(capsys, env):
    """TVM's compiled Gather reads wherever its indices point: an id past the embedding
    table would read stray memory (or crash). The module records the table's length
    and run refuses such inputs in one line; ids in [-n, n) run and match ONNX's
    reference, negative ones counting from the end as ONNX says."""
    table = numpy_helper.from_array(np.arange(30, dtype=np.float32).reshape(10, 3), "E")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0), helper.make_node("Relu", ["emb"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])], [table],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), env / "emb.onnx")
    assert main(["compile", "emb.onnx", "--target", "llvm", "-o", "emb.so", "--json"]) == 0
    capsys.readouterr()
    ids = np.array([[0, 9, -1, -10], [3, 4, 5, 6]])
    np.savez(env / "ok.npz", ids=ids)
    assert main(["run", "emb.so", "--inputs", "ok.npz", "--check", "emb.onnx", "--save-outputs", "y.npz", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["check"]["ok"] is True
    with np.load(env / "y.npz") as saved:
        np.testing.assert_array_equal(saved["y"][0, :, 0], [0, 27, 27, 0])
    for bad, shown in ((10, "10"), (-11, "-11")):
        np.savez(env / "bad.npz", ids=np.where(ids == 5, bad, ids))
        _user_error(capsys, ["run", "emb.so", "--inputs", "bad.npz"],
                    contains=(f"input ids holds {shown}", "table of 10", "[-10, 10)"))
    # seeded ids cover the table (rows 0 and 1 alone were checked), and the check holds
    from autotune.run import load_metadata, seeded_inputs

    seeded = seeded_inputs(load_metadata(env / "emb.so"), seed=3)["ids"]
    assert seeded.min() >= 0 and seeded.max() < 10 and len(np.unique(seeded)) > 2
    assert main(["run", "emb.so", "--check", "emb.onnx", "--seed", "3", "--repeat", "1"]) == 0


def test_an_id_that_reaches_a_gather_through_other_ops_is_clamped_not_read_past_the_table(env):
    """run cannot check ids that pass through an Add before the Gather; the compiled
    Gather itself clamps them into the table (TVM's default mode would read the memory
    after it: a crash, or numbers from nowhere)."""
    from autotune import api

    table = numpy_helper.from_array(np.arange(30, dtype=np.float32).reshape(10, 3), "E")
    zero = numpy_helper.from_array(np.zeros(1, np.int64), "zero")
    graph = helper.make_graph(
        [helper.make_node("Add", ["ids", "zero"], ["shifted"]), helper.make_node("Gather", ["E", "shifted"], ["y"], axis=0)],
        "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], [table, zero],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), env / "shifted.onnx")
    api.compile(str(env / "shifted.onnx"), env / "shifted.so", target="llvm")
    result = api.run(env / "shifted.so", inputs={"ids": np.array([2, 12, 4000, 9])}, repeat=1, return_outputs=True)
    (y,) = result["output_arrays"]
    np.testing.assert_array_equal(y[:, 0], [6, 27, 27, 27])  # past the end: the last row


def test_run_on_the_users_inputs_and_save_outputs(capsys, env, dyn_model):
    """run --inputs FILE.npz feeds the user's arrays (checked by name, shape and dtype;
    never unpickled), --check compares on those same inputs, --save-outputs writes the
    outputs under the model's output names."""
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "m.so", "--json"]) == 0
    x = np.arange(16, dtype=np.float64).reshape(2, 8) - 8.0  # float64: cast to the module's float32
    np.savez(env / "in.npz", x=x)
    capsys.readouterr()
    assert main(["run", "m.so", "--inputs", "in.npz", "--check", dyn_model, "--save-outputs", "out/y.npz", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["inputs_from"] == "in.npz" and result["check"]["ok"] is True and result["saved_outputs"] == "out/y.npz"
    with np.load(env / "out" / "y.npz") as saved:
        assert saved.files == ["y"]
        np.testing.assert_allclose(saved["y"], np.maximum(x @ np.ones((8, 4)), 0), rtol=1e-6)
    assert result["inputs_cast"] == {"x": "float64 -> float32"}
    # int data for a float input ran with no word of the cast: said now (float64's is every numpy user's)
    np.savez(env / "ints.npz", x=np.arange(16, dtype=np.int32).reshape(2, 8))
    assert main(["run", "m.so", "--inputs", "ints.npz", "--repeat", "1"]) == 0
    assert "note: cast to the module's dtypes: x int32 -> float32" in capsys.readouterr().out
    assert main(["run", "m.so", "--inputs", "in.npz", "--repeat", "1"]) == 0
    assert "cast" not in capsys.readouterr().out

    def refused(path, *words):
        before = sorted(p.name for p in env.iterdir())
        _user_error(capsys, ["run", "m.so", "--inputs", path, "--save-outputs", "o2.npz"], contains=words)
        assert sorted(p.name for p in env.iterdir()) == before  # no outputs written

    np.savez(env / "shape.npz", x=np.zeros((3, 8), np.float32))
    refused("shape.npz", "input x has shape [3, 8], the module takes [2, 8]")
    np.savez(env / "names.npz", x=np.zeros((2, 8), np.float32), z=np.zeros(1))
    refused("names.npz", "the module takes x", "unknown z")
    np.savez(env / "kind.npz", x=np.zeros((2, 8), np.complex64))
    refused("kind.npz", "input x is complex64, the module takes float32")
    np.savez(env / "objects.npz", x=np.array([{"a": 1}, None], dtype=object))
    refused("objects.npz", "cannot read inputs from objects.npz", "never done here")
    # a header claiming 10^12 elements: numpy sized the array from it, a MemoryError
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    with zipfile.ZipFile(env / "huge.npz", "w") as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(64))
    refused("huge.npz", "input x has shape [1000000, 1000000], the module takes [2, 8]")
    (env / "text.npz").write_text("not numpy")
    refused("text.npz", "cannot read inputs from text.npz", "no .npz or .npy header")  # numpy called it pickled data
    np.save(env / "single.npy", np.zeros((2, 8), np.float32))  # a bare array: a TypeError's traceback
    refused("single.npy", "cannot read inputs from single.npy", "a single array (.npy)", "numpy.savez(FILE, NAME=array)")
    refused("absent.npz", "inputs file not found: absent.npz")


def test_sqlalchemys_pool_logs_no_traceback_on_the_users_terminal(capsys):
    """A second Ctrl-C in the pool's rollback: SQLAlchemy logged "Exception closing
    connection" with its traceback through logging's last resort, 40 lines above the
    one that said the tune was stopped."""
    import logging

    assert main(["zoo", "list"]) == 0
    capsys.readouterr()
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        logging.getLogger("sqlalchemy.pool.impl.QueuePool").error("Exception closing connection", exc_info=True)
    assert capsys.readouterr().err == ""


def test_a_check_whose_output_shapes_differ_names_both(capsys, env, dyn_model):
    """"MISMATCH (max abs error inf)" named neither shape."""
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "m.so"]) == 0
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(env / "relu.onnx"))
    capsys.readouterr()
    assert main(["run", "m.so", "--check", "relu.onnx", "--repeat", "1"]) == 1
    out, err = capsys.readouterr()
    assert "outputs off: y (shape 2x4, the reference's 2x8)" in out
    # and one line on standard error: a CI log that keeps it alone said nothing of why
    assert err.strip().splitlines() == ["autotune: check failed: outputs differ from the ONNX reference (max abs error inf)"]
    assert main(["run", "m.so", "--check", "relu.onnx", "--repeat", "1", "--json"]) == 1
    (y,) = json.loads(capsys.readouterr().out)["check"]["outputs"]
    assert (y["shape"], y["reference_shape"], y["matched"]) == ([2, 4], [2, 8], False)


def test_a_model_with_nothing_to_tune_says_so(capsys, env):
    """An empty table and "timing noise" said nothing of why."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(env / "relu.onnx"))
    assert main(["tune", "relu.onnx", "--target", "llvm", "--trials", "4", "--no-mlflow", "--json", "--no-model-latency"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    said = [e["text"] for e in events if e.get("event") == "message"]
    assert any(t.startswith("note: relu has no tunable layer (1 kernel, none a convolution") for t in said), said


def test_seeded_8_bit_inputs_span_their_range_and_check_conclusively(capsys, env):
    """An int8 input drawn from 0 and 1 only, under a DequantizeLinear's zero point of 3
    and a Relu: the reference was all zeros, and the check "OK, inconclusive"."""
    nodes = [helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("q", TensorProto.INT8, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                              [numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
                               numpy_helper.from_array(np.array(3, np.int8), "zero")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), env / "dq.onnx")
    assert main(["compile", "dq.onnx", "--target", "llvm", "-o", "dq.so"]) == 0
    from autotune.run import load_metadata, seeded_inputs

    q = seeded_inputs(load_metadata(env / "dq.so"))["q"]
    assert q.dtype == np.int8 and q.min() < -64 and q.max() > 64
    capsys.readouterr()
    assert main(["run", "dq.so", "--check", "dq.onnx", "--repeat", "1", "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["ok"] and check["conclusive"]


def _cli(*argv: str, cwd=None, **env_vars: str) -> subprocess.CompletedProcess:
    """``python -m autotune ARGV`` in a process of its own, with these environment variables set."""
    return subprocess.run([sys.executable, "-m", "autotune", *argv], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **env_vars}, encoding="utf-8", errors="replace", timeout=300)


def test_an_ascii_standard_output_gets_ascii_tables_and_escaped_names(env):
    """On an ASCII standard output the table's box characters raised UnicodeEncodeError
    after a whole tune (its run finished, its module written, the "report:" line lost)."""
    proc = _cli("layers", "dqn", PYTHONIOENCODING="ascii")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.isascii() and proc.stdout.startswith("+---") and "| fused_conv2d_add_relu" in proc.stdout
    folder = env / "dír ü 空"
    proc = _cli("zoo", "export", "dqn", "-o", str(folder / "m.onnx"), PYTHONIOENCODING="ascii")
    assert proc.returncode == 0, proc.stderr
    assert (folder / "m.onnx").exists() and "d\\xedr \\xfc \\u7a7a" in proc.stdout  # the name, escaped
    proc = _cli("layers", "dqn")  # a UTF-8 one keeps its box characters
    assert proc.returncode == 0 and proc.stdout.startswith("┏")


def test_a_removed_working_directory_is_one_line(env, populated_history):
    """Relative paths (and MLflow's import) failed with tracebacks there; what names its
    files in full still runs."""
    gone = env / "gone"
    gone.mkdir()
    path, _ = populated_history
    proc = subprocess.Popen([sys.executable, "-c", "import os, sys; os.chdir(sys.argv[1]); print('in', flush=True); "
                             "sys.stdin.readline(); from autotune.cli import main; "
                             "print(main(['history', 'ls', '--history', sys.argv[2], '--json']), flush=True); "
                             "sys.exit(main(['history', 'ls', '--history', 'h.db']))",
                             str(gone), path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "in\n"
    gone.rmdir()
    out, err = proc.communicate("\n", timeout=120)
    assert out.splitlines()[-1] == "0" and json.loads(out.splitlines()[0])[0]["layer"] == "conv2d1"
    assert proc.returncode == 2 and err.strip().splitlines() == [
        "autotune: error: the current directory no longer exists (removed while this shell was in it): cd to another "
        "and run the command again"], err


def test_a_name_the_locale_cannot_encode_is_one_line(env):
    """A C locale with Python's UTF-8 mode off: a non-ASCII history path failed in urllib."""
    proc = _cli("history", "ls", "--history", str(env / "dír" / "h.db"), LC_ALL="C", PYTHONUTF8="0",
                PYTHONIOENCODING="")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("run in a UTF-8 locale (LANG=C.UTF-8) or with PYTHONUTF8=1")


def test_no_output_replaces_a_database_or_a_file_of_another_kind(capsys, env, populated_history, dyn_model):
    """From a helper's trial: ``zoo export -o`` and ``run --save-outputs`` wrote over the
    history database (exit 0, every record gone), ``compile -o`` over the MLflow store
    and any SQLite file, ``zoo export`` over a compiled module. An output replaces an
    earlier output of its kind, an empty file, or nothing; a symlink is replaced itself."""
    import shutil

    path, _ = populated_history
    copy = env / "copy.db"
    shutil.copy(path, copy)
    kept = {p: Path(p).read_bytes() for p in (path, copy)}
    shape = ["--input-shape", "x=2x8", "--target", "llvm"]
    for argv in (["zoo", "export", "dqn", "--size", "36", "-o", path], ["compile", dyn_model, *shape, "-o", str(copy)]):
        _user_error(capsys, argv, contains=("it is a SQLite database",))
    assert main(["compile", dyn_model, *shape, "-o", "m.so"]) == 0
    module = (env / "m.so").read_bytes()
    for argv in (["run", "m.so", "--repeat", "1", "--save-outputs", path],
                 ["run", "m.so", "--repeat", "1", "--save-outputs", str(copy)]):
        _user_error(capsys, argv, contains=("it is a SQLite database",))
    _user_error(capsys, ["zoo", "export", "dqn", "--size", "36", "-o", "m.so"], contains=("is not an ONNX model",))
    (env / "notes.so").write_text("my notes")
    _user_error(capsys, ["compile", dyn_model, *shape, "-o", "notes.so"], contains=("is not a compiled module",))
    assert main(["run", "m.so", "--repeat", "1", "--save-outputs", "y.npz"]) == 0
    _user_error(capsys, ["zoo", "export", "dqn", "--size", "36", "-o", "y.npz"], contains=("is not an ONNX model",))
    assert {p: Path(p).read_bytes() for p in kept} == kept and (env / "m.so").read_bytes() == module
    assert (env / "notes.so").read_text() == "my notes"
    # its own kind again, an empty file, a link: replaced
    (env / "empty.onnx").touch()
    for argv in (["compile", dyn_model, *shape, "-o", "m.so"], ["run", "m.so", "--repeat", "1", "--save-outputs", "y.npz"],
                 ["zoo", "export", "dqn", "--size", "36", "-o", "empty.onnx"],
                 ["zoo", "export", "dqn", "--size", "36", "-o", "empty.onnx"]):
        assert main(argv) == 0, argv
    (env / "link.onnx").symlink_to(copy)
    assert main(["zoo", "export", "dqn", "--size", "36", "-o", "link.onnx"]) == 0
    assert not (env / "link.onnx").is_symlink() and copy.read_bytes() == kept[copy]


def test_zoo_export_to_standard_output_and_a_closed_pipe(env, populated_history):
    """``zoo export -o -`` wrote a file named "-"; ``history export - | head`` said
    "Broken pipe" in an error line, where every other command leaves quietly."""
    proc = subprocess.run([sys.executable, "-m", "autotune", "zoo", "export", "dqn", "--size", "36", "-o", "-"],
                          capture_output=True, timeout=300, cwd=env)
    assert proc.returncode == 0 and not (env / "-").exists(), proc.stderr
    assert onnx.load_from_string(proc.stdout).graph.input[0].name == "input"
    path, key = populated_history
    from autotune.history import open_history

    with open_history(path) as store:  # more than a pipe holds
        for i in range(600):
            store.add_record(workload_key=key, target_key="llvm:znver3:cpu", space_id="s", config={"i": 100 + i},
                             samples=[1e-3], status="ok")
    reader = subprocess.Popen([sys.executable, "-m", "autotune", "history", "export", "-", "--history", path],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout.read(100)
    reader.stdout.close()
    err = reader.stderr.read().decode()
    assert reader.wait(timeout=120) == 128 + signal.SIGPIPE and err == "", err


def test_before_the_first_tune_history_lists_nothing(capsys, env, monkeypatch):
    """A new user's first `history ls` was an error ("no history at ... (file does not
    exist)"), where `compile` read the same missing history as none. A history named
    outright and missing is still a typo, said so."""
    monkeypatch.delenv("AUTOTUNE_HISTORY")
    assert main(["history", "ls"]) == 0 and capsys.readouterr().out == "history is empty\n"
    assert main(["history", "runs", "--json"]) == 0 and json.loads(capsys.readouterr().out) == []
    assert not (env / "home" / ".autotune").exists()  # and made nothing
    _user_error(capsys, ["history", "ls", "--history", "typo.db"], contains=("no history at", "typo.db"))


_NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search,-fowner",
                "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv drops root's override of file modes")
def test_a_read_only_home_and_mlflow_store(env):
    """From a helper's trial: a read-only MLflow store failed at the run's start, in
    SQLAlchemy's words on autoflush, after a new history was made; under a read-only HOME
    matplotlib warned in two lines on every tune, --quiet or not."""
    import sqlite3

    store = env / "ro" / "ml.db"
    store.parent.mkdir()
    with contextlib.closing(sqlite3.connect(store)) as conn:
        conn.execute("create table t (x)")
        conn.commit()
    store.chmod(0o444)
    home = env / "rohome"
    home.mkdir(mode=0o555)
    run_env = {**os.environ, "HOME": str(home), "AUTOTUNE_HOME": str(env / "state")}
    run_env.pop("MPLCONFIGDIR", None)
    if subprocess.run([*_NO_OVERRIDE, "test", "-w", str(store)], env=run_env).returncode == 0:
        pytest.skip("the file stays writable here")
    common = ["dqn", "--size", "36", "--trials", "1", "--target", "llvm", "--history", str(env / "h.db"), "--quiet",
              "--no-verify", "--no-model-latency"]
    proc = subprocess.run([*_NO_OVERRIDE, sys.executable, "-m", "autotune", "tune", *common, "--mlflow-uri", str(store)],
                          capture_output=True, text=True, env=run_env, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"autotune: error: cannot open MLflow tracking store sqlite:///{store}: the file is read-only, and a tune "
        "writes its run there: name another store, or tune without MLflow tracking"], proc.stderr
    assert not (env / "h.db").exists()
    proc = subprocess.run([*_NO_OVERRIDE, sys.executable, "-m", "autotune", "tune", *common, "--no-mlflow"],
                          capture_output=True, text=True, env=run_env, timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_tables_fit_the_terminal_they_are_drawn_on(env):
    """`layers` drew 200 columns and the tune's table 160 whatever the terminal: on an
    80-column one their box lines wrapped into a garble. A pipe keeps their own widths."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
    run_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "layers", "dqn"], stdout=follower, stderr=subprocess.PIPE,
                            env=run_env, cwd=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed (EIO)
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    lines = b"".join(chunks).decode().splitlines()
    assert lines and max(len(line) for line in lines) <= 80, max(len(line) for line in lines)
    piped = _cli("layers", "dqn", cwd=env)
    assert max(len(line) for line in piped.stdout.splitlines()) > 80


@pytest.mark.parametrize("given, said", [
    (["--no-mlflow", "--mlflow-uri", "ml.db"], "--mlflow-uri names where MLflow tracking goes, and tracking is off (--no-mlflow)"),
    (["--no-mlflow", "--mlflow-experiment", "x"], "--mlflow-experiment names where MLflow tracking goes"),
    (["--tuner", "xgb", "--high", "0.5"], "--high is a match score that chooses each layer's tuner, and --tuner xgb"),
    (["--tuner", "ga", "--low", "0.1"], "--low is a match score"),
    (["--tuner", "random", "--no-probes"], "--no-probes turns off one-trial probes, which only --tuner auto makes"),
    (["--budget-split", "roofline", "--no-probes"], "--no-probes turns off the adaptive split's one-trial probes, and "
     "--budget-split roofline makes none"),
])
def test_options_that_undo_each_other_are_refused(capsys, env, given, said):
    """From a helper's walkthrough: each pair ran with one of them ignored, unsaid."""
    _user_error(capsys, _tune("--target", "llvm", *given), contains=(said, "give one or the other"))
    assert not (env / "tune.db").exists() and not (env / "ml.db").exists()


def test_a_tolerance_without_a_check_is_refused(capsys, env, dyn_model):
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "m.so"]) == 0
    capsys.readouterr()
    for flag in ("--rtol", "--atol"):
        _user_error(capsys, ["run", "m.so", flag, "0.1"], contains=(f"{flag} is the tolerance of --check, which is not given",))


def test_run_given_a_file_that_is_no_module_says_so(capsys, env):
    """`run notes.json` said notes.json.json was missing, as if it were a module."""
    (env / "notes.json").write_text("{}")
    _user_error(capsys, ["run", "notes.json"], contains=("notes.json is not a compiled module",))


def test_ctrl_c_on_a_tune_whose_json_reader_is_gone(env):
    """`tune --json | jq` and Ctrl-C: the reader stops too, and the 'interrupted' event,
    written into the closed pipe, ended the tune in a traceback (exit 1)."""
    import signal

    from tests.running_tune import wait_for_records

    history = env / "h.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "tune", "resnet18", "--size", "32", "--max-layers", "1", "--trials", "500",
         "--batch", "2", "--target", "llvm", "--history", str(history), "--no-mlflow", "--no-verify",
         "--no-model-latency", "--json", "--quiet"],  # quiet: the event is its first line, no other write meets the closed pipe
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for_records(proc, history, 2)
    proc.stdout.close()
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "autotune: interrupted; measurements so far are kept in history"


def test_an_output_is_never_a_pipe_a_device_or_a_database_beside_the_module(capsys, env, dyn_model, populated_history):
    """From a helper's audit: `zoo export -o FIFO` hung on reading the pipe to tell its
    kind; a device at the name became a regular file; and `compile -o side.so` replaced
    a SQLite file at side.so.json, the module's description."""
    import shutil

    os.mkfifo(env / "ff")
    _user_error(capsys, ["zoo", "export", "dqn", "--size", "36", "-o", "ff"], contains=("it is no regular file",))
    shape = ["--input-shape", "x=2x8", "--target", "llvm"]
    _user_error(capsys, ["compile", dyn_model, *shape, "-o", "ff"], contains=("it is no regular file",))
    path, _ = populated_history
    shutil.copy(path, env / "side.so.json")
    kept = (env / "side.so.json").read_bytes()
    _user_error(capsys, ["compile", dyn_model, *shape, "-o", "side.so"], contains=("side.so.json: it is a SQLite database",))
    (env / "other.so.json").write_text("my notes")
    _user_error(capsys, ["compile", dyn_model, *shape, "-o", "other.so"], contains=("is not a module's description",))
    assert (env / "side.so.json").read_bytes() == kept and not (env / "side.so").exists()
    assert (env / "ff").is_fifo()


@pytest.mark.parametrize("entry", [None, {"shape": None, "dtype": "float32"}, {"shape": [2, -8], "dtype": "float32"},
                                   {"shape": [2, 8], "dtype": ">f4"}, {"shape": [10**6, 10**6, 10**6], "dtype": "float32"}])
def test_a_damaged_module_description_is_one_line(capsys, env, dyn_model, entry):
    """Some 55 tracebacks from a helper's fuzzing of descriptions (shapes of null, -8 or
    10**18 elements, dtypes TVM has no name for)."""
    assert main(["compile", dyn_model, "--input-shape", "x=2x8", "--target", "llvm", "-o", "m.so"]) == 0
    meta = json.loads((env / "m.so.json").read_text())
    meta["inputs"]["x"] = entry
    (env / "m.so.json").write_text(json.dumps(meta))
    capsys.readouterr()
    _user_error(capsys, ["run", "m.so", "--repeat", "1"], contains=("m.so.json is not a valid module description: input 'x'",))


def test_seeded_inputs_never_divide_an_integer_by_zero(env):
    """An int64 Div of two inputs: the seeded inputs (0 and 1) divided by zero, a SIGFPE
    that ended `run --check` (exit -8, nothing said) and a tune while it timed the model.
    The description marks a divisor, and its seeded values are never 0."""
    a = helper.make_tensor_value_info("a", TensorProto.INT64, [3, 8])
    b = helper.make_tensor_value_info("b", TensorProto.INT64, [3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [3, 8])
    graph = helper.make_graph([helper.make_node("Div", ["a", "b"], ["y"])], "g", [a, b], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), env / "div.onnx")
    assert main(["compile", "div.onnx", "--target", "llvm", "-o", "div.so"]) == 0
    described = json.loads((env / "div.so.json").read_text())["inputs"]
    assert described["b"].get("nonzero") is True and "nonzero" not in described["a"]
    proc = _cli("run", "div.so", "--check", "div.onnx", "--repeat", "1", cwd=env)
    assert proc.returncode == 0 and "check vs ONNX reference: OK" in proc.stdout, (proc.returncode, proc.stderr)
