"""The Python API (``autotune.api``): options refused where they are made, and one real
tune -> compile -> run on LLVM through it, as a Python user would call it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune import api
from autotune.compile import DEFAULT_SPACE_PREFIX
from autotune.errors import AutotuneError, OptionError
from autotune.measure import MeasureOptions
from autotune.target import resolve_target
from autotune.tune import TuneOptions
from autotune.history import open_history
from tests.test_e2e import _small_cnn


@pytest.mark.parametrize(
    "options,words",
    [
        ({"trials": 0}, "trials must be a positive integer, got 0"),
        ({"trials": 2.5}, "trials must be a positive integer, got 2.5"),
        ({"batch": -1}, "batch must be a positive integer"),
        ({"min_trials": -1}, "min_trials must be a positive integer"),
        ({"min_trials": 0}, "min_trials must be a positive integer, got 0"),  # it ran as 1
        ({"max_layers": 0}, "max_layers must be a positive integer"),
        ({"seed": -3}, "seed must be 0 or more"),
        ({"tuner": "bogus"}, "tuner must be one of auto, random, xgb, tl_xgb, ga, gga, got 'bogus'"),
        ({"batch_norm": "inline"}, "batch_norm must be one of separate, epilogue, weights"),
        ({"budget_split": "even"}, "budget_split must be one of adaptive, roofline"),
        ({"low": 0.9, "high": 0.5}, "need 0 <= low <= high <= 1, got low 0.9 high 0.5"),
        ({"high": 2.0}, "got low 0.05 high 2"),
        ({"low": float("nan")}, "are match scores"),
        ({"probe_at": 1.5}, "probe_at is a match score"),
        ({"measure": {"repeat": 5}}, "measure must be a MeasureOptions, got dict"),
        ({"probes": "no"}, "probes must be True or False, got 'no'"),  # was taken as true
        ({"verify": 0}, "verify must be True or False, got 0"),
        ({"rematch": None}, "rematch must be True or False"),
        ({"model_latency": "false"}, "model_latency must be True or False"),
    ],
)
def test_tune_options_refuse_bad_values(options, words):
    with pytest.raises(OptionError) as err:
        TuneOptions(**options)
    assert words in str(err.value)
    # one rule for both front ends: the CLI spells the same message with its flags
    name = next(iter(options))
    assert f"--{name.replace('_', '-')}" in err.value.spelled(lambda n: "--" + n.replace("_", "-"))
    assert isinstance(err.value, ValueError) and isinstance(err.value, AutotuneError)


@pytest.mark.parametrize(
    "options,words",
    [
        ({"repeat": 0}, "repeat must be a positive integer"),
        ({"number": 0}, "number must be a positive integer"),
        ({"run_timeout": 0.0}, "run_timeout must be a positive number"),
        # passed, then failed to be written into history's run row with a traceback
        ({"run_timeout": float("inf")}, "run_timeout must be a positive number, got inf"),
        # every candidate's timing takes repeat x min_repeat_ms at least: all timed out
        ({"run_timeout": 0.05}, "run_timeout of 0.05 s is no longer than a candidate's timing takes at least "
                                "(repeat 5 x min_repeat_ms 20 = 0.1 s)"),
        # TVM's evaluator takes 32-bit counts: every candidate failed with ffi.BigInt
        ({"repeat": 10**20}, "repeat must be at most 2147483647"),
        ({"build_timeout": -1}, "build_timeout must be a positive number"),
        ({"build_workers": -1}, "build_workers must be 0 or more"),
        ({"min_repeat_ms": True}, "min_repeat_ms must be 0 or more"),
        ({"once_per_program": "x"}, "once_per_program must be True or False, got 'x'"),
        ({"rpc": ("127.0.0.1", 9190, "k")}, "rpc must be 'host:port:key', got ('127.0.0.1', 9190, 'k')"),
    ],
)
def test_measure_options_refuse_bad_values(options, words):
    import re

    with pytest.raises(OptionError, match=re.escape(words)):
        MeasureOptions(**options)


def test_reachable_from_the_package():
    import autotune

    assert autotune.api is api and autotune.api.tune is api.tune


def test_a_users_history_py_or_search_py_beside_the_script_stands_in_for_nothing(tmp_path):
    """search/, history/ and templates/ were top-level packages: a script next to its own
    history.py failed in the API with "'history' is not a package", and next to a
    search.py api.tune could not import its tuners."""
    import os
    import subprocess
    import sys

    for name in ("history", "search", "templates"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('the user\'s module was imported')\n")
    (tmp_path / "script.py").write_text(
        # a source checkout as PYTHONPATH gives it (the GPU machine's): no editable install's finder
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in getattr(f, '__name__', type(f).__name__)]\n"
        "from autotune import api\n"
        "from autotune.history import open_history\n"
        "from autotune.search import TUNERS\n"
        "from autotune.templates.space import KnobSpace\n"
        "store = open_history('h.db')\n"
        "print(len(store.records()), 'gga' in TUNERS, KnobSpace.__module__, api.info()['history']['records'])\n"
        "store.close()\n"
        # those three only: every folder beside the package was one (autotune.tests, autotune.autotune)
        "import importlib.util\n"
        "print(*(importlib.util.find_spec('autotune.' + n) is None for n in ('tests', 'autotune', 'benchmarks')))\n"
        "print(any(type(f).__name__ == '_CheckoutSiblings' for f in sys.meta_path))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_HISTORY"} | {"AUTOTUNE_HISTORY": str(tmp_path / "h.db")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True", "autotune.templates.space", "0", "True", "True", "True", "True"]


def test_history_and_argument_type_errors_are_autotune_errors(tmp_path):
    """The module promises AutotuneError for bad input: a missing or unreachable history
    raised the history package's own error, and wrongly typed arguments AttributeError or
    TypeError from deep inside (pathlib, the store's URL parsing)."""
    with pytest.raises(AutotuneError, match=f"no history at {tmp_path / 'missing.db'}"):
        api.compile("resnet18", tmp_path / "m.so", target="llvm", history=str(tmp_path / "missing.db"), size=32)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(AutotuneError, match="cannot create history"):
        api.tune("resnet18", size=32, target="llvm", mlflow=False, history=str(tmp_path / "afile" / "h.db"), trials=1)
    # refused before MLflow's store is made: a directory given as history left mlruns/mlflow.db behind
    (tmp_path / "adir").mkdir()
    store = tmp_path / "mlruns" / "mlflow.db"
    with pytest.raises(AutotuneError, match="it is a directory"):
        api.tune("resnet18", size=32, target="llvm", mlflow_uri=f"sqlite:///{store}", history=str(tmp_path / "adir"), trials=1)
    assert not store.parent.exists()
    for call, words in [
        (lambda: api.tune("resnet18", history=123, mlflow=False), "history must be a path or None, got 123"),
        (lambda: api.tune("resnet18", input_shapes=[(1, 3, 32, 32)], mlflow=False), "input_shapes maps input names to shapes"),
        (lambda: api.tune("resnet18", mlflow="no"), "mlflow must be True or False"),
        (lambda: api.compile("resnet18", None), "out must be a path, got None"),
        (lambda: api.run(42), "module must be a path, got 42"),
        (lambda: api.info(history=3.5), "history must be a path or None, got 3.5"),
        (lambda: api.info(history=" "), "history must be a path or None, got an empty one"),  # read as the working directory
        (lambda: api.compile("resnet18", tmp_path / "m.so", target="llvm", size=32, step=5), "step must be a function"),
        # the CLI refused it; the API tuned on and lost every measurement with the database
        (lambda: api.tune("resnet18", size=32, target="llvm", mlflow=False, history="sqlite://", trials=1),
         "history sqlite://: an in-memory database ends when the tune closes it"),
        (lambda: api.compile("resnet18", tmp_path / "m.so", target="llvm", size=32, history="sqlite://"),
         "history sqlite:// is an in-memory database, new and empty"),
        # said with the API's names, not the command line's flags
        (lambda: api.tune("resnet18", size=32, target="llvm", mlflow=False, rpc="localhost", history=str(tmp_path / "r.db")),
         "^rpc must be HOST:PORT:KEY"),
    ]:
        with pytest.raises(OptionError, match=words):
            call()
    assert not list(tmp_path.glob("*.db")) and not (tmp_path / "m.so").exists()


def test_input_shapes_take_numpy_dimensions_and_are_named_as_the_api_names_them(tmp_path):
    """np.int64 dimensions (a notebook's shape in hand) were refused; an unknown input
    was said as --input-shape's fault to a Python caller."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    model = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    assert api.layers(str(model), input_shapes={"x": tuple(np.array([2, 8]))})["inputs"] == {"x": (2, 8)}
    assert api.layers(str(model), input_shapes={"x": np.array([3, 8])})["batch"]["size"] == 3
    with pytest.raises(OptionError, match=r"^input_shapes names unknown input\(s\) z; model inputs: x$"):
        api.layers(str(model), input_shapes={"z": (2, 8)})
    with pytest.raises(OptionError, match=r"^input 'x' has a dynamic shape \(batchx8\); fix it with input_shapes x=\.\.\.$"):
        api.layers(str(model))


def test_defaults_pass():
    assert TuneOptions().trials == 64 and TuneOptions(high=1.0, low=0.0, max_layers=3).high == 1.0


def test_tune_options_take_measure_fields_flat():
    opts = api.tune_options(trials=8, repeat=2, run_timeout=5.0)
    assert opts.trials == 8 and opts.measure == MeasureOptions(repeat=2, run_timeout=5.0)
    with pytest.raises(TypeError, match="unknown tune option 'trails'"):
        api.tune_options(trails=8)
    # tune()'s own keywords are named too, and the nearest one to a slip
    with pytest.raises(TypeError, match=r"unknown keyword 'histroy' \(did you mean 'history'\?\); it takes .*out_dir"):
        api.tune("resnet18", histroy="h.db")
    with pytest.raises(TypeError, match="not both"):
        api.tune_options(repeat=2, measure=MeasureOptions())


def test_every_function_names_the_keyword_meant_and_refuses_wrong_types(tmp_path):
    """compile, run, layers: a slip was Python's bare TypeError; target=123 an
    AttributeError from the target parser; inputs=[array] a TypeError from open();
    report(None) looked for a run named 'None'."""
    import numpy as np

    for call, words in (
        (lambda: api.compile("dqn", tmp_path / "x.so", trials=8), r"compile\(\) got an unknown keyword 'trials'; it takes batch_norm"),
        (lambda: api.run(tmp_path / "x.so", chek="dqn"), r"run\(\) got an unknown keyword 'chek' \(did you mean 'check'\?\)"),
        (lambda: api.layers("dqn", sise=36), r"layers\(\) got an unknown keyword 'sise' \(did you mean 'size'\?\)"),
    ):
        with pytest.raises(TypeError, match=words):
            call()
    for call, words in (
        (lambda: api.compile("dqn", tmp_path / "x.so", target=123), "target must be a target string"),
        (lambda: api.tune("dqn", target=["llvm"], history=str(tmp_path / "h.db")), "target must be a target string"),
        (lambda: api.report(None), "run must be a run id or a report directory, got None"),
    ):
        with pytest.raises(OptionError, match=words):
            call()
    assert not (tmp_path / "x.so").exists() and not (tmp_path / "h.db").exists()
    module = tmp_path / "dqn.so"
    api.compile("dqn", module, target="llvm", size=36)
    with pytest.raises(OptionError, match=r"inputs must be a dict of arrays by input name \(input\) or an .npz file, got list"):
        api.run(module, inputs=[np.zeros((1, 4, 36, 36), np.float32)])


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"trials": 0}, "trials must be a positive integer"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"input_shapes": {"input": (1, 3, 0, 32)}}, "input_shapes maps input names to positive dimensions"),
        ({"progress": "loud"}, "progress must be one of quiet, rich, json"),
        ({"target": "foo"}, "unknown target 'foo'"),
    ],
)
def test_bad_tune_input_writes_nothing(tmp_path, kwargs, words):
    history = tmp_path / "h.db"
    with pytest.raises(AutotuneError, match=words):
        api.tune("resnet18", history=str(history), out_dir=tmp_path / "run", mlflow=False, size=32, **{"target": "llvm", **kwargs})
    assert not history.exists() and not (tmp_path / "run").exists()


def test_layers_gives_layer_objects():
    found = api.layers("resnet18", size=32)
    assert found["model"] and found["inputs"]
    convs = [l for l in found["layers"] if l.op_class == "conv2d"]
    assert convs and all(l.tunable for l in convs)
    assert json.dumps([l.to_dict() for l in found["layers"]])  # JSON-ready through to_dict
    with pytest.raises(OptionError, match="batch_norm must be one of"):
        api.layers("resnet18", size=32, batch_norm="inline")


def test_a_loaded_model_refuses_loading_keywords(tmp_path):
    """Its layers were cut at load time: a size or batch given to the tune would not
    apply, so it is refused before anything is measured or written."""
    from autotune.tune import TuneSession, load_layers

    loaded = load_layers(str(_small_cnn(tmp_path / "cnn.onnx")))
    history = tmp_path / "h.db"
    store = open_history(str(history))
    session = TuneSession(resolve_target("llvm"), store, TuneOptions(trials=4))
    try:
        for keyword in ({"size": 32}, {"batch_size": 4}, {"input_shapes": {"input": (1, 3, 16, 16)}}):
            with pytest.raises(OptionError, match=f"{next(iter(keyword))} is for loading a model"):
                session.tune_model(loaded, **keyword)
        other = TuneSession(resolve_target("llvm"), store, TuneOptions(trials=4, batch_norm="separate"))
        with pytest.raises(OptionError, match="loaded with batch_norm weights, the tune asks for separate"):
            other.tune_model(loaded)
        assert not store.runs()
    finally:
        session.close()


def test_tune_compile_run_through_the_api(tmp_path):
    """A real tune on LLVM, as a Python user writes it; what comes back is what the CLI
    prints with --json, plus where the report went."""
    model = _small_cnn(tmp_path / "small.onnx")
    history = tmp_path / "history.db"
    report = api.tune(
        model, target="llvm", history=str(history), out_dir=tmp_path / "run", mlflow=False,
        trials=4, batch=4, tuner="random", model_latency=False, repeat=2,
    )
    assert report["report_dir"] == str(tmp_path / "run") and report["mlflow_run_id"] is None
    assert json.loads((tmp_path / "run" / "report.json").read_text())["run_id"] == report["run_id"]
    assert (tmp_path / "run" / "decomposition.json").exists()
    assert api.report(tmp_path / "run")["layers"] == json.loads(json.dumps(report["layers"], default=str))
    tuned = [l for l in report["layers"] if l["trials"] > 0]
    assert sum(l["trials"] for l in tuned) == 4 and all(l["tuner"] == "random" for l in tuned)
    # the keys help(api.tune) names are there (a reader's code is written from it)
    doc = api.tune.__doc__.split("The report")[1]
    top, per_layer = doc.split("``layers``")
    named = lambda text: set(re.findall(r"``([a-z_]+)``", text)) - {"report", "autotune", "history", "runs"}
    assert named(top) <= set(report) | {"report_dir"}
    assert all(named(per_layer) <= set(layer) for layer in tuned)
    # where measuring went, as the table's caption says it too
    assert report["measure_seconds"]["build"] > 0 and report["measure_seconds"]["run"] > 0
    assert "measuring: build" in (tmp_path / "run" / "layers.txt").read_text()
    assert set(report["measure_twins"]) == {"not_built", "not_timed"}  # candidates answered by a twin program
    with open_history(str(history), readonly=True) as store:
        assert len([r for r in store.records() if r.tuner == "random" and r.status != "invalid"]) == 4
        # compile takes history's best: a tuned config where one beat TVM's default (with
        # four random trials a noisy machine may time the default faster)
        target_key = resolve_target("llvm").key
        beaten = {l["name"] for l in tuned if not store.best(l["workload_key"], target_key).space_id.startswith(DEFAULT_SPACE_PREFIX)}

    out = tmp_path / "small.so"
    summary = api.compile(model, out, target="llvm", history=str(history))
    assert Path(summary["out"]) == out and out.exists()
    assert {name for name, s in summary["schedules"].items() if s["schedule"] == "history"} == beaten

    result = api.run(out, check=model, repeat=2)
    assert result["check"]["ok"] is True and result["latency_median_s"] > 0
    assert "output_arrays" not in result
    assert result["inputs_from"] == "seed 0"
    import numpy as np

    image = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype("float32")
    mine = api.run(out, inputs={"input": image}, check=model, repeat=1, return_outputs=True)
    assert mine["inputs_from"] == "given" and mine["check"]["ok"] is True
    (probs,) = mine["output_arrays"]
    assert probs.shape == (1, 10) and np.isclose(probs.sum(), 1.0, atol=1e-5)  # the model ends in a softmax
    with pytest.raises(AutotuneError, match="the module takes input"):
        api.run(out, inputs={"image": image})
    with pytest.raises(OptionError, match="rtol must be 0 or more"):
        api.run(out, rtol=-1.0)


def test_calls_on_two_threads_import_models_one_at_a_time():
    """TVM's Relax BlockBuilder keeps a process-wide stack and the import swaps standard
    output: ``layers`` on two threads failed inside TVM about half the time ("TVM's ONNX
    frontend failed: AssertionError", blamed on the model) and left ``sys.stdout`` a
    buffer in 3 runs of 3, so the process printed nothing more."""
    import sys
    import threading

    stdout = sys.stdout
    results: dict[str, object] = {}

    def layers(model: str, size: int) -> None:
        try:
            results[f"{model}{size}"] = len(api.layers(model, size=size))
        except BaseException as err:  # noqa: BLE001 - what the thread met is the test's answer
            results[f"{model}{size}"] = err

    threads = [threading.Thread(target=layers, args=(m, s)) for m, s in
               (("dqn", 36), ("resnet18", 32), ("dqn", 44), ("mobilenetv2", 32))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sys.stdout is stdout
    assert all(isinstance(v, int) and v > 0 for v in results.values()), results


def test_sigterm_to_an_api_tune_marks_the_run_killed_then_ends_the_process(tmp_path):
    """A job runner's SIGTERM to a Python process tuning through the API ended it on the
    spot: the run left ``running`` in history (MLflow's RUNNING) and a build folder in
    /tmp. Now the tune stops as on Ctrl-C, and the process still ends by SIGTERM."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys

    from tests.running_tune import wait_for_records

    history = tmp_path / "h.db"
    script = ("import sys\nfrom autotune import api\n"
              "api.tune('resnet18', size=32, target='llvm', trials=500, batch=2, max_layers=1, verify=False,"
              " model_latency=False, mlflow=False, history=sys.argv[1], out_dir=sys.argv[2])\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(history), str(tmp_path / "report")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "AUTOTUNE_HOME": str(tmp_path / "home")})
    wait_for_records(proc, history, 4)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err  # ended by the signal, as without autotune
    assert "Traceback" not in err
    with sqlite3.connect(f"file:{history}?mode=ro", uri=True) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        assert [r[0] for r in db.execute("select status from runs")] == ["killed"]


def test_options_that_undo_each_other_are_refused_in_pythons_words(tmp_path):
    """As the CLI refuses them, with the keywords named as Python spells them."""
    cases = [({"mlflow": False, "mlflow_uri": str(tmp_path / "ml")}, "mlflow_uri names where MLflow tracking goes, and "
              "tracking is off (mlflow=False)"),
             ({"tuner": "xgb", "high": 0.5}, "high is a match score that chooses each layer's tuner, and tuner xgb"),
             ({"budget_split": "roofline", "probes": False}, "probes=False turns off the adaptive split's one-trial probes")]
    for given, said in cases:
        with pytest.raises(OptionError, match=re.escape(said)):
            api.tune("dqn", target="llvm", history=str(tmp_path / "h.db"), **{"mlflow": False, **given})
    assert not (tmp_path / "h.db").exists()
