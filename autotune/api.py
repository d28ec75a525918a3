"""The Python API under the CLI: :func:`tune`, :func:`compile`, :func:`run`, :func:`layers`, :func:`report`.

Each does what the command of the same name does and returns what that command prints
with ``--json``, taking Python values where the command takes flags: a target name or
:class:`~autotune.target.TargetSpec`, a history file or SQLAlchemy URL, input shapes as
a dict. The CLI is a thin layer over these functions, so both refuse the same inputs
the same way: bad input raises :class:`~autotune.errors.AutotuneError` (a bad option
value its subclass :class:`~autotune.errors.OptionError`, also a ``ValueError``) before
anything is written.

    from autotune import api

    report = api.tune("resnet18", target="llvm", trials=64, history="history.db", out="resnet18.so")
    print(report["model_latency_after"], report["report_dir"])
    result = api.run("resnet18.so", check="resnet18")

Heavy imports (TVM, MLflow, XGBoost) wait until a function is called.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import os
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from autotune.errors import (AutotuneError, OptionError, check_choice, check_count, check_flag, first_line, interrupts_held, quoted,
                             quoted_text)
from autotune.frontend import BATCH_NORM_LAYERINGS, DEFAULT_BATCH_NORM
from autotune.measure import MeasureOptions
from autotune.target import TargetSpec
from autotune.tune import TuneOptions

__all__ = ["tune", "compile", "run", "layers", "report", "info", "tune_options", "AutotuneError", "OptionError"]

Shapes = Mapping[str, Sequence[int]]
Progress = Literal["quiet", "rich", "json"]

_TUNE_FIELDS = frozenset(f.name for f in dataclasses.fields(TuneOptions))
_MEASURE_FIELDS = frozenset(f.name for f in dataclasses.fields(MeasureOptions))


def _user_errors(fn):
    """History's own errors (a missing or unreachable store) raised as the
    :class:`AutotuneError` this module promises; they escaped as ``HistoryError``. A
    keyword the function does not take is named with the nearest it does, as
    :func:`tune`'s are (``compile(..., trials=8)`` was Python's bare TypeError)."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    keywords = sorted(n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        unknown = sorted(set(kwargs) - set(keywords))
        if unknown and not takes_any:
            near = difflib.get_close_matches(unknown[0], keywords, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TypeError(f"{fn.__name__}() got an unknown keyword {unknown[0]!r}{hint}; it takes {', '.join(keywords)}")
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            from autotune.history import HistoryError

            if isinstance(err, HistoryError):
                raise AutotuneError(str(err)) from err
            raise

    return wrapper


def tune_options(**options: Any) -> TuneOptions:
    """``TuneOptions`` from flat keywords: any field of ``TuneOptions`` (``trials``,
    ``tuner``, ``high``, ...) or of ``MeasureOptions`` (``repeat``, ``rpc``,
    ``run_timeout``, ...), as the CLI's flags are flat."""
    unknown, known = _unknown_keywords(options)
    if unknown:
        raise TypeError(
            f"unknown tune option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"expected any of {', '.join(known)}"
        )
    measure = {k: options.pop(k) for k in list(options) if k in _MEASURE_FIELDS}
    if measure and "measure" in options:
        raise TypeError(f"give measure=MeasureOptions(...) or {', '.join(sorted(measure))}, not both")
    if measure:
        options["measure"] = MeasureOptions(**measure)
    return TuneOptions(**options)


@_user_errors
def tune(
    model: str | os.PathLike,
    *,
    target: str | TargetSpec = "auto",
    history: str | None = None,
    out: str | os.PathLike | None = None,
    out_dir: str | os.PathLike | None = None,
    mlflow: bool = True,
    mlflow_uri: str | None = None,
    mlflow_experiment: str | None = None,
    input_shapes: Shapes | None = None,
    size: int | None = None,
    batch_size: int | None = None,
    progress: Progress = "quiet",
    **options: Any,
) -> dict[str, Any]:
    """Tune every layer of ``model`` (a zoo name or an ONNX file) and return the run's report.

    ``options`` are :func:`tune_options`'s keywords (``trials=64``, ``tuner="auto"``,
    ``repeat=5``, ``rpc="host:9190:key"``, ...); among them ``batch`` is how many
    candidates are built and measured per round, not the model's batch, which is
    ``batch_size`` for a zoo model and part of ``input_shapes`` for a file. Every
    measurement goes to ``history``
    (default ``$AUTOTUNE_HISTORY`` or ``~/.autotune/history.db``) as it is made; the
    report is written to ``out_dir`` (default ``~/.autotune/runs/RUN_ID``, given back as
    ``report_dir``) and, with ``mlflow``, logged as an MLflow run (``mlflow_run_id``) in
    ``mlflow_experiment`` (default ``$MLFLOW_EXPERIMENT_NAME`` or ``autotune``). With ``out``, the tuned model is compiled and exported there too (``export``).

    The report (also ``report.json`` in ``report_dir``) holds, among others: ``run_id``
    (what ``report(...)`` and ``autotune history runs`` know it by), ``model``,
    ``inputs`` (the shapes tuned), ``batch``, ``target``, ``budget``, ``options`` (every
    option as given), ``model_latency_before`` / ``model_latency_after`` (seconds, or
    None when not timed), ``measure_seconds`` and ``layers``: one dict per tunable layer
    with ``name``, ``op_class``, ``workload_key``, ``match_score``, ``dispatch`` (exact,
    guided, transfer, cold or override), ``tuner``, ``trials``, ``best_latency`` and
    ``default_latency`` (seconds) and ``curve`` ([trial, best latency so far] pairs).

    A SIGTERM (a job runner stopping the process) stops the tune as Ctrl-C does, the run
    marked killed in history and MLflow, and then ends the process as SIGTERM does; in
    the main thread, where no SIGTERM handler of the caller's is installed.
    """
    from autotune.errors import ending_after_cleanup_on_sigterm

    with ending_after_cleanup_on_sigterm():
        return _tune(model, target=target, history=history, out=out, out_dir=out_dir, mlflow=mlflow,
                     mlflow_uri=mlflow_uri, mlflow_experiment=mlflow_experiment, input_shapes=input_shapes,
                     size=size, batch_size=batch_size, progress=progress, **options)


def _tune(model, *, target, history, out, out_dir, mlflow, mlflow_uri, mlflow_experiment, input_shapes, size,
          batch_size, progress, **options) -> dict[str, Any]:
    """:func:`tune`, its stop by SIGTERM arranged."""
    from autotune.progress import make_reporter
    from autotune.report import run_dir, runs_root
    from autotune.tracking import Tracker, finish_with_report
    from autotune.tune import TuneSession, ensure_measurable, load_layers
    from autotune.history import open_history

    _refuse_unknown(options)
    _check_path(model, "model", required=True)
    for name, value in (("history", history), ("out", out), ("out_dir", out_dir), ("mlflow_uri", mlflow_uri)):
        _check_path(value, name)
    if _in_memory(history):  # the CLI refused it; the API ran the whole tune and lost it all
        raise OptionError(f"{{history}} {history}: an in-memory database ends when the tune closes it, and every "
                          "measurement with it; give a file or a database server", "history")
    opts = tune_options(**options)
    check_flag(mlflow, "mlflow")
    _refuse_conflicts(options, mlflow=mlflow, mlflow_uri=mlflow_uri, mlflow_experiment=mlflow_experiment)
    if mlflow_experiment is not None and (not isinstance(mlflow_experiment, str) or not mlflow_experiment.strip()):
        raise OptionError(f"{{mlflow_experiment}} must be an experiment's name, got {quoted(mlflow_experiment)}", "mlflow_experiment")
    check_choice(progress, "progress", ("quiet", "rich", "json"))
    shapes = _input_shapes(input_shapes)
    _check_model_size(size, batch_size)
    spec = _target(target)
    rpc = opts.measure.rpc
    ensure_measurable(spec, rpc, opts.measure.timing)
    if rpc:  # the server's hardware names the records and shapes the code
        from autotune.remote import remote_target

        spec = remote_target(target if isinstance(target, str) else target.kind, rpc)
    if out is not None:
        from autotune.compile import check_module_path
        from autotune.history.location import resolve_location

        out = check_module_path(out, inputs=[model], history=resolve_location(history))
    from autotune.compile import check_output_dir

    if out_dir is not None:
        out_dir = check_output_dir(out_dir)
    else:  # the default, under AUTOTUNE_HOME, too: a read-only one failed only after the tune
        runs = runs_root()
        try:
            check_output_dir(runs)
        except AutotuneError as err:
            why = str(err).split(": ", 1)[-1]
            raise OptionError(f"cannot write run reports in {runs}: {why} (set AUTOTUNE_HOME to a folder this "
                              "process may write, or give {{out_dir}})", "out_dir") from None
    # The model, then MLflow, then history: a model that will not load, or a store MLflow
    # refuses, must not leave a new, empty history (or a failed MLflow run) behind
    loaded = load_layers(str(model), input_shapes=shapes, size=size, batch_size=batch_size, batch_norm=opts.batch_norm)
    _check_history_creatable(history)  # a history that cannot be opened left a new MLflow store behind
    tracker = Tracker.create(mlflow, mlflow_uri, mlflow_experiment)
    store = open_history(history)
    session = TuneSession(spec, store, opts, tracker=tracker, reporter=make_reporter(progress))
    report = None
    try:
        with tracker:
            report = session.tune_model(loaded, leave_open=True)  # closed below, once its files are written
            # absolute: a dashboard reading it from elsewhere got "runs/x"
            report_dir = Path(os.path.abspath(out_dir)) if out_dir is not None else run_dir(session.run_id)
            report["mlflow_run_id"] = tracker.run_id
            report["report_dir"] = str(report_dir)
            if out_dir is not None:
                from autotune.report import remember_report_dir

                remember_report_dir(session.run_id, report_dir)
                # and in history: where the home's runs folder cannot be written, the
                # pointer above is not, and `report RUN` found no report (a helper's trial)
                summary = dict((store.run(session.run_id) or {}).get("summary") or {})
                store.save_run_summary(session.run_id, {**summary, "report_dir": str(report_dir)})
            for path in _write_decomposition(session.decomposition, report_dir):
                tracker.log_artifact(str(path))
            if out is not None:
                from autotune.compile import compile_model, sidecar

                report["export"] = compile_model(
                    str(model), out, target=spec, store=store, input_shapes=shapes, size=size,
                    batch_size=batch_size, batch_norm=opts.batch_norm, own_run=session.run_id,
                )
                tracker.log_artifact(str(out), "module")
                tracker.log_artifact(str(sidecar(out)), "module")
            finish_with_report(tracker, report, report_dir)
            with interrupts_held():
                store.close_run(session.run_id, "finished")
    except BaseException as err:
        if report is not None:  # the layers closed; its report or module is missing
            with interrupts_held():
                store.close_run(session.run_id, "killed" if isinstance(err, KeyboardInterrupt) else "failed")
        raise
    finally:
        session.close()
        store.close()
    return report


@_user_errors
def compile(
    model: str | os.PathLike,
    out: str | os.PathLike,
    *,
    target: str | TargetSpec = "auto",
    history: str | None = None,
    input_shapes: Shapes | None = None,
    size: int | None = None,
    batch_size: int | None = None,
    batch_norm: str = DEFAULT_BATCH_NORM,
    step=None,
) -> dict[str, Any]:
    """Build ``model`` with the best schedule history holds for each layer (TVM's defaults
    for the others) and export it to ``out`` with its ``.json`` sidecar. History is only
    read; a default history file that does not exist yet means none. ``step`` is called
    with a line of text as each stage starts."""
    from autotune.compile import compile_model
    from autotune.history import open_history

    _check_path(model, "model", required=True)
    _check_path(out, "out", required=True)
    _check_path(history, "history")
    check_choice(batch_norm, "batch_norm", BATCH_NORM_LAYERINGS)
    if step is not None and not callable(step):  # step=5 failed mid-compile: 'int' object is not callable
        raise OptionError(f"{{step}} must be a function of one str, or None, got {quoted(step)}", "step")
    shapes = _input_shapes(input_shapes)
    _check_model_size(size, batch_size)
    spec = _target(target)
    if _in_memory(history):  # "cannot create tables: ... opened read-only" said nothing of why
        raise OptionError(f"{{history}} {history} is an in-memory database, new and empty: it holds no schedule "
                          "to compile with; give the file or server tune wrote to", "history")
    store = open_history(history, create=False, readonly=True) if _history_exists(history) else None
    try:
        summary = compile_model(
            str(model), out, target=spec, store=store, input_shapes=shapes, size=size, batch_size=batch_size,
            batch_norm=batch_norm, step=step,
        )
    finally:
        if store is not None:
            store.close()
    if spec.arch_assumed:  # `--target cuda` with no GPU to ask meant sm_90 unsaid: an A100 would not load it
        summary["target_note"] = (f"no GPU here to ask its arch: built for {spec.arch} and later GPUs "
                                  "(`--target cuda:sm_XX` builds for another)")
    return summary


#: ``run``'s check tolerances when none is given.
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-4


@_user_errors
def run(
    module: str | os.PathLike,
    *,
    inputs: Mapping[str, Any] | str | os.PathLike | None = None,
    seed: int = 0,
    repeat: int = 10,
    check: str | os.PathLike | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    save_outputs: str | os.PathLike | None = None,
    return_outputs: bool = False,
) -> dict[str, Any]:
    """Load an exported module with the TVM runtime and time it on ``inputs`` (arrays by
    input name, or an ``.npz`` file of them; default: seeded random ones, ``seed``).

    With ``check`` (the zoo name or ONNX file it was compiled from) its outputs are
    compared with ONNX's reference evaluator on the same inputs: ``result["check"]["ok"]``.
    Left out, ``rtol`` (1e-3) is widened for half-precision outputs (two units in the
    last place, then the model widened to float32 as judge); given, it is applied as it
    is, as ``atol`` (1e-4) is (a float16 module passed ``atol=0, rtol=0`` 0.002 off).
    ``save_outputs`` writes the outputs to an ``.npz``; ``return_outputs`` puts them, as
    numpy arrays, under ``result["output_arrays"]``.
    """
    from autotune.frontend import InputShapeError, is_zoo_name, load_model
    from autotune.half_precision import HALF_TYPES, is_half
    from autotune.run import check_inputs, load_inputs, load_metadata, onnx_reference, output_names, run_module, seeded_inputs
    from autotune.verify import max_abs_error, outputs_match, widened_rtol

    check_count(seed, "seed", zero_ok=True)
    check_count(repeat, "repeat")
    widen = rtol is None  # an rtol given is applied as given
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None:
            check_count(value, name, zero_ok=True, integer=False)
            if check is None:  # ignored, unsaid
                raise OptionError(f"{{{name}}} is the tolerance of {{check}}, which is not given: give {{check}} MODEL "
                                  "too", name, "check")
    rtol = DEFAULT_RTOL if rtol is None else rtol
    atol = DEFAULT_ATOL if atol is None else atol
    _check_path(module, "module", required=True)
    for name, value in (("check", check), ("save_outputs", save_outputs)):
        _check_path(value, name)
    check_flag(return_outputs, "return_outputs")
    module = os.path.expanduser(os.fspath(module))  # `run '~/m.so'`: found by the description, then not loaded
    meta = load_metadata(module)
    casts: dict[str, str] = {}
    if inputs is None:
        feed, source = seeded_inputs(meta, seed), f"seed {seed}"
    elif isinstance(inputs, Mapping):
        feed, source = check_inputs(inputs, meta, casts=casts), "given"
    elif isinstance(inputs, (str, os.PathLike)):
        feed, source = load_inputs(inputs, meta, casts=casts), str(inputs)
    else:  # a list of arrays failed in open(): "expected str, bytes or os.PathLike object, not list"
        names = quoted_text(", ".join(meta.get("input_order") or meta.get("inputs") or []))
        raise OptionError(f"{{inputs}} must be a dict of arrays by input name ({names}) or an .npz file, got "
                          f"{type(inputs).__name__}", "inputs")
    if save_outputs is not None:
        from autotune.compile import check_not_an_input, check_output_path, check_replaceable

        out = check_output_path(save_outputs, replaceable=False)  # before the run, not after it
        given = [module, f"{module}.json", *([inputs] if isinstance(inputs, (str, os.PathLike)) else []),
                 *([check] if check is not None else [])]
        check_not_an_input(save_outputs, given)
        check_replaceable(out, "npz")
    result = run_module(module, repeat=repeat, inputs=feed, meta=meta)
    result["inputs_from"] = source
    if casts:  # each input given in another dtype than the module takes, as numpy cast it
        result["inputs_cast"] = casts
    outputs = result.pop("output_arrays")
    if save_outputs is not None:  # before the check: one the evaluator cannot run lost them
        from autotune.run import save_outputs as write_outputs

        result["saved_outputs"] = str(write_outputs(save_outputs, outputs, meta))
    try:
        if check is not None:
            check = str(check)
            zoo_info = meta.get("zoo") or {}
            zoo_size = None  # a zoo model's size where it is not its default
            if zoo_info.get("name") == check and is_zoo_name(check):
                # rebuild exactly the zoo model that was compiled (same size, batch and weights)
                model = load_model(check, size=zoo_info.get("size"), batch_size=zoo_info.get("batch_size") or 1)
            elif is_zoo_name(check):  # a module compiled from a file (`zoo export` wrote it), checked by the zoo's name
                model, zoo_size = _zoo_model_for(check, {k: tuple(v["shape"]) for k, v in meta["inputs"].items()})
            else:
                shapes = {k: tuple(v["shape"]) for k, v in meta["inputs"].items()}
                try:
                    model = load_model(check, input_shapes=shapes)
                except InputShapeError:
                    from autotune.decompose import shape_text

                    takes = ", ".join(f"{k} {shape_text(list(v))}" for k, v in shapes.items())
                    raise OptionError("{check} " + quoted_text(f"{check} does not take this module's inputs ({takes}); is the "
                                                              f"module compiled from {check}?"), "check") from None
            # a float16 module against the float32 model (or back) would only say MISMATCH
            for name, info in meta["inputs"].items():
                ours, theirs = info.get("dtype", "float32"), model.input_dtypes.get(name)
                if theirs is not None and ours != theirs:
                    size_flag = f" --size {zoo_size}" if zoo_size is not None else ""
                    how = (f" (`autotune zoo export {check}{size_flag} --dtype {ours}` writes the zoo's)"
                           if is_zoo_name(check) and ours in HALF_TYPES else "")
                    raise OptionError("{check} " + quoted_text(f"{check} takes {name} as {theirs}, this module as {ours}: check "
                                                              f"it against the model in {ours} it was compiled from{how}"), "check")
            try:
                want = onnx_reference(model.proto, feed)
            except Exception as err:  # the evaluator's own errors: a model that does not take these inputs
                raise OptionError(_reference_failure(check, err), "check") from None
            errs = [max_abs_error(g, w) for g, w in zip(outputs, want)]
            matched = [outputs_match(g, w, rtol=rtol, atol=atol, widen=widen) for g, w in zip(outputs, want)]
            names = output_names(meta, len(outputs))
            result["check"] = {"reference": "onnx.reference", "max_abs_error": max(errs) if errs else None,
                               "ok": len(want) == len(outputs) and all(matched),
                               # which output is off (one figure for five outputs left a user to find it)
                               "outputs": [{"name": n, "max_abs_error": e, "matched": m}
                                           # shapes apart: said, where "max abs error inf" named neither
                                           | ({"shape": list(g.shape), "reference_shape": list(w.shape)} if g.shape != w.shape else {})
                                           for n, e, m, g, w in zip(names, errs, matched, outputs, want)],
                               "tolerance": {"rtol": widened_rtol(rtol, *want) if widen else rtol, "atol": atol,
                                             "widened_for_half_precision": widen and any(map(is_half, want))}}
            # a reference whose every value lies within atol of zero (random weights that
            # vanish through a deep net) passes any output, zeros too: said, not a plain OK
            import numpy as np

            floats = [(n, np.asarray(w)) for n, w in zip(names, want)]
            floats = [(n, w.astype(np.float32)) for n, w in floats if w.dtype.kind == "f" or w.dtype.name == "bfloat16"]
            faint = [(n, float(np.max(np.abs(w))) if w.size else 0.0) for n, w in floats]
            faint = [(n, m) for n, m in faint if m <= result["check"]["tolerance"]["atol"]]
            result["check"]["conclusive"] = not faint
            if faint:
                result["check"]["within_atol_of_zero"] = [{"name": n, "reference_max_abs": m} for n, m in faint]
            if len(want) == len(outputs) and not all(matched) and any(map(is_half, want)) and widen:
                judged = _half_precision_check(model.proto, feed, outputs, want, matched, atol=atol)
                # each output's own verdict beside its "matched" (of the evaluator's half-precision
                # outputs): "ok": true over outputs all "matched": false read as a failure per output
                for entry, verdict in zip(result["check"]["outputs"], judged.get("float32", {}).pop("per_output", [])):
                    entry["float32"] = verdict
                result["check"].update(judged)
    except (AutotuneError, KeyboardInterrupt) as err:  # the outputs were written all the same: said where the error is
        if "saved_outputs" in result:
            err.saved_outputs = result["saved_outputs"]  # type: ignore[attr-defined]
        raise
    if return_outputs:
        result["output_arrays"] = outputs
    return result


def _half_precision_check(proto, feed, outputs, want, matched, *, atol: float) -> dict[str, Any]:
    """Half-precision outputs against the model widened to float32, where they differ from
    the reference evaluator's own half-precision ones (:mod:`autotune.half_precision`)."""
    from autotune.half_precision import float32_model, judged_against_float32, widen_inputs
    from autotune.run import onnx_reference

    wide = float32_model(proto)
    if wide is None:
        return {}
    return judged_against_float32(outputs, want, onnx_reference(wide, widen_inputs(feed)), matched, atol=atol)


@_user_errors
def layers(
    model: str | os.PathLike,
    *,
    input_shapes: Shapes | None = None,
    size: int | None = None,
    batch_size: int | None = None,
    batch_norm: str = DEFAULT_BATCH_NORM,
) -> dict[str, Any]:
    """The fused layers TVM will generate for ``model``: ``{"model", "inputs", "layers"}``,
    the layers as :class:`autotune.decompose.Layer` (``to_dict()`` for JSON)."""
    from autotune import decompose, frontend

    check_choice(batch_norm, "batch_norm", BATCH_NORM_LAYERINGS)
    _check_model_size(size, batch_size)
    spec, mod = frontend.load_and_fuse(
        str(model), input_shapes=_input_shapes(input_shapes), size=size, batch_size=batch_size, batch_norm=batch_norm
    )
    layers = decompose.decompose(mod, batch_size=spec.batch_size, sequence_first=spec.sequences_carry_batch_second)
    return {"model": spec.name, "inputs": spec.input_shapes, "batch": spec.batch_description(), "layers": layers}


@_user_errors
def report(run: str | os.PathLike, *, mlflow_uri: str | None = None, history: str | None = None) -> dict[str, Any]:
    """An earlier tune's report: ``run`` is the run id :func:`tune` gave back (``run_id``),
    its report directory, or its MLflow run id. ``history`` is only asked why a run has
    no report (a tune killed before its end, with no MLflow run to look in)."""
    from autotune import report as reporting

    if not isinstance(run, (str, os.PathLike)):  # report(None) looked for a run named 'None'
        raise OptionError(f"{{run}} must be a run id or a report directory, got {quoted(run)}", "run")
    _check_path(history, "history")
    _check_path(mlflow_uri, "mlflow_uri")
    return reporting.load_report(str(run), mlflow_uri, history=history)


@_user_errors
def info(history: str | None = None, *, mlflow_uri: str | None = None, measure_roofline: bool = False) -> dict[str, Any]:
    """What this machine offers: package versions, the target ``auto`` resolves to and
    its history key, GPU, nvcc and NVRTC, the CPU peaks roofline figures go by (measured
    again with ``measure_roofline``), and where history and MLflow runs live."""
    from autotune.info import environment

    _check_path(history, "history")
    _check_path(mlflow_uri, "mlflow_uri")
    check_flag(measure_roofline, "measure_roofline")
    return environment(history, mlflow_uri=mlflow_uri, measure_roofline=measure_roofline)


# --- helpers ----------------------------------------------------------------------------
_TUNE_KEYWORDS = ("target", "history", "out", "out_dir", "mlflow", "mlflow_uri", "mlflow_experiment", "input_shapes", "size",
                  "batch_size", "progress")


def _unknown_keywords(options: Mapping[str, Any], also: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """(keywords that are no tune option, the names a caller takes: the options' and ``also``)."""
    unknown = sorted(set(options) - _TUNE_FIELDS - _MEASURE_FIELDS)
    return unknown, sorted((_TUNE_FIELDS | _MEASURE_FIELDS | set(also)) - {"measure"})


def _refuse_conflicts(options: dict[str, Any], *, mlflow: bool, mlflow_uri: Any, mlflow_experiment: Any) -> None:
    """Options given together where one undoes the other: the tune ran with one of them
    ignored, unsaid (a helper's CLI walkthrough)."""
    if not mlflow and (mlflow_uri is not None or mlflow_experiment is not None):
        name = "mlflow_uri" if mlflow_uri is not None else "mlflow_experiment"
        raise OptionError(f"{{{name}}} names where MLflow tracking goes, and tracking is off ({{mlflow}}): give one or "
                          "the other", name, "mlflow", python={"mlflow": "mlflow=False"})
    tuner = options.get("tuner", "auto")
    given = [name for name in ("high", "low") if name in options]
    if tuner != "auto" and given:
        raise OptionError(f"{{{given[0]}}} is a match score that chooses each layer's tuner, and {{tuner}} {tuner} "
                          "chooses it for every layer: give one or the other", given[0], "tuner")
    if options.get("probes") is False:
        if tuner != "auto":
            raise OptionError(f"{{probes}} turns off one-trial probes, which only {{tuner}} auto makes (not {tuner}): "
                              "give one or the other", "probes", "tuner", python={"probes": "probes=False"})
        if options.get("budget_split") == "roofline":
            raise OptionError("{probes} turns off the adaptive split's one-trial probes, and {budget_split} roofline "
                              "makes none: give one or the other", "probes", "budget_split", python={"probes": "probes=False"})


def _check_history_creatable(history: str | os.PathLike | None) -> None:
    """A history file ``tune`` could not open or create, refused before MLflow's store is
    set up: a directory given as ``history`` raised only after ``mlruns/mlflow.db`` was
    made. (A server's reachability is found when it is opened.)"""
    from autotune.history.location import resolve_location, sqlite_file
    from autotune.history.sqlite_db import check_creatable

    path = sqlite_file(resolve_location(history))
    if path is not None:
        check_creatable(str(path))


def _zoo_model_for(name: str, shapes: dict[str, tuple[int, ...]]):
    """(the zoo model ``name`` at the size and batch that take ``shapes``, its size where
    not the default): a module compiled from ``autotune zoo export dqn --size 36`` was
    checked against dqn at its default 84, and the reference failed with a reshape error
    that asked whether the module was compiled from dqn. Sizes tried: the default, then
    each of the first input's dimensions after its first (the batch), the last first (an
    image's width, a frame's; a transformer's or a speech model's size is its sequence
    length, the second, and its module at size 16 was refused); then, for a model that
    takes its sequence first and the batch second, the first at the second."""
    from autotune.decompose import shape_text
    from autotune.frontend import load_model

    first = [int(d) for d in next(iter(shapes.values()), ())]
    tries: list[tuple[int | None, int | None]] = [(None, None)]
    if len(first) >= 2:
        tries += [(size, first[0]) for size in dict.fromkeys(reversed(first[1:]))]
        tries.append((first[0], first[1]))
    for size, batch in dict.fromkeys(tries):
        try:
            model = load_model(name, size=size, batch_size=batch)
        except AutotuneError:
            continue
        if {k: tuple(v) for k, v in model.input_shapes.items()} == shapes:
            return model, size
    default = load_model(name)
    takes = ", ".join(f"{k} {shape_text(list(v))}" for k, v in default.input_shapes.items())
    mine = ", ".join(f"{k} {shape_text(list(v))}" for k, v in shapes.items())
    raise OptionError("{check} " + quoted_text(
        f"{name}: the zoo model takes {takes} at its default size, and no size of it takes this module's {mine}: "
        f"is the module compiled from {name}? (check it against the ONNX file it was compiled from)"), "check")


def _refuse_unknown(options: Mapping[str, Any]) -> None:
    """A mistyped keyword of :func:`tune`, said with the nearest known one: the list of
    option fields alone pointed someone who wrote ``histroy`` away from ``history``."""
    unknown, known = _unknown_keywords(options, _TUNE_KEYWORDS)
    if unknown:
        near = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise TypeError(
            f"tune() got an unknown keyword {unknown[0]!r}{hint}; it takes {', '.join(known)}"
        )


def _in_memory(history: Any) -> bool:
    """``history`` names SQLite's in-memory database (``sqlite://``), which lives only as
    long as the connection that made it."""
    if not isinstance(history, str) or "://" not in history:
        return False
    from autotune.history.location import in_memory, resolve_location

    return in_memory(resolve_location(history))


def _check_path(value: Any, name: str, *, required: bool = False) -> None:
    """A file name or URL: ``history=123`` or ``out=None`` failed deep in pathlib."""
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise OptionError(f"{{{name}}} must be a path{'' if required else ' or None'}, got {quoted(value)}", name)
    if not os.fspath(value).strip():  # history="" read as the working directory
        raise OptionError(f"{{{name}}} must be a path{'' if required else ' or None'}, got an empty one", name)


def _target(target: str | TargetSpec) -> TargetSpec:
    from autotune.target import resolve_target

    if isinstance(target, TargetSpec):
        return target
    if not isinstance(target, str):  # target=123 failed inside the parser: 'int' object has no attribute 'strip'
        raise OptionError(f"{{target}} must be a target string (auto, llvm, cuda, cuda:sm_90, a JSON dict) or a "
                          f"TargetSpec, got {quoted(target)}", "target")
    return resolve_target(target)


def _input_shapes(shapes: Shapes | None) -> dict[str, tuple[int, ...]]:
    """Fixed shapes for named inputs; each dimension a positive integer."""
    fixed: dict[str, tuple[int, ...]] = {}
    if shapes is not None and not isinstance(shapes, Mapping):
        raise OptionError(f"{{input_shapes}} maps input names to shapes, e.g. {{{{'input': (1, 3, 224, 224)}}}}, got {quoted(shapes)}",
                          "input_shapes")
    import numbers

    for name, dims in (shapes or {}).items():
        # a numpy array or torch.Size of numpy integers is what a notebook has in hand
        dims = tuple(dims) if isinstance(dims, (list, tuple)) or type(dims).__name__ in ("ndarray", "Size") else ()
        if not isinstance(name, str) or not dims or any(
            isinstance(d, bool) or not isinstance(d, numbers.Integral) or d <= 0 for d in dims
        ):
            raise OptionError(
                f"{{input_shapes}} maps input names to positive dimensions, got {quoted(name)}: {quoted(shapes[name])}", "input_shapes"
            )
        fixed[name] = tuple(int(d) for d in dims)
    return fixed


def _reference_failure(check: str, err: Exception) -> str:
    """Why ``run --check`` has no reference, as an :class:`OptionError` template. An error
    ONNX's evaluator pins on one of its operators (its NonMaxSuppression takes no model's
    scalar inputs) is the evaluator's: asking whether the module was compiled from the
    model, as for any other, misled."""
    import re

    line = f"{type(err).__name__}: {first_line(err)}"
    operator = re.search(r"\(operator '([^']+)'\)", line)
    if operator:
        text = (f"{check}: ONNX's reference evaluator failed in the model's {operator.group(1)} operator "
                f"({line}), so this module's outputs cannot be checked against it")
    else:  # the evaluator's own gaps end here too (GlobalLpPool, negative pads, com.microsoft ops)
        text = (f"{check}: ONNX's reference evaluator could not run it on the module's inputs "
                f"({line}): the evaluator may not implement this model, or the module is not compiled from {check}")
    return "{check} " + quoted_text(text)


def _check_model_size(size: int | None, batch_size: int | None) -> None:
    if size is not None:
        check_count(size, "size")
    if batch_size is not None:
        check_count(batch_size, "batch_size")


def _history_exists(location: str | None) -> bool:
    """compile reads history if there is one; a missing default file means 'no history'."""
    from autotune.history.location import no_history_yet

    return not no_history_yet(location)


def _write_decomposition(model_layers, out_dir: Path) -> list[Path]:
    """The model's layer table, as text and JSON, beside the run's report."""
    import json

    from autotune.decompose import format_table
    from autotune.report import DECOMPOSITION_NAMES, write_text_atomically

    return [write_text_atomically(out_dir / DECOMPOSITION_NAMES[0], format_table(model_layers)),
            write_text_atomically(out_dir / DECOMPOSITION_NAMES[1], json.dumps([layer.to_dict() for layer in model_layers], indent=1))]

