"""MLflow tracking of tuning runs: one parent run per model, one nested run per tuned layer.

Why a wrapper instead of the fluent ``mlflow.*`` API: the pipeline must not depend on MLflow's global
active-run state, a disabled tracker must cost nothing (mlflow is imported only by an enabled one),
per-trial metrics are buffered and sent in batches (one sqlite transaction per trial would slow long
tunes), and every store failure becomes a one-line ``AutotuneError`` instead of a traceback.

Store: ``uri`` argument, then ``MLFLOW_TRACKING_URI``, then an embedded sqlite store under
``~/.autotune/mlruns`` (MLflow 3.17 refuses the ``file:`` store unless MLFLOW_ALLOW_FILE_STORE=true).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import math
import os
import re
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Literal, Mapping, Sequence

from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

Status = Literal["FINISHED", "FAILED", "KILLED"]

DEFAULT_EXPERIMENT = "autotune"
DB_NAME = "mlflow.db"
PARENT_TAG = "mlflow.parentRunId"
NOTE_TAG = "mlflow.note.content"  # what MLflow's UI shows as a run's Description
#: Params of the parent run also set as ``autotune.<name>`` tags on it and on every layer's
#: run: params are the parent's alone, so a layer's run could not be found by model or target
CONTEXT_KEYS = ("model", "target", "device")
_PARAM_MAX = 6000  # MLflow's limit on a param value's length
_FLUSH_EVERY = 200  # buffered metrics before a batch write
_FLUSH_SECONDS = 5.0
_BATCH_MAX = 1000  # MLflow's limit on metrics per log_batch


def _home() -> Path:
    from autotune.history.location import autotune_home

    return Path(autotune_home())


def default_tracking_uri() -> str:
    """The embedded store used when nothing is configured: sqlite needs no server and is supported."""
    from autotune.history.location import sqlite_url

    return sqlite_url((_home() / "mlruns" / DB_NAME).as_posix())


#: MLflow's tracking URIs without a scheme (Databricks workspaces): not a folder of that
#: name in the working directory, which is what they became
_BARE_URIS = frozenset({"databricks", "databricks-uc", "uc"})


def _has_scheme(uri: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", uri) is not None and not re.match(r"^[A-Za-z]:[\\/]", uri)


def resolve_tracking_uri(uri: str | None = None) -> str:
    """Pick the store URI (argument, MLFLOW_TRACKING_URI, default) and turn plain paths into sqlite.

    MLflow would treat a plain path as the deprecated file store and refuse it, so a path ending in
    .db/.sqlite is used as the sqlite file and any other path as a directory holding mlflow.db.
    """
    chosen = (uri or os.environ.get("MLFLOW_TRACKING_URI") or "").strip() or default_tracking_uri()
    if _has_scheme(chosen) or chosen in _BARE_URIS:
        return chosen
    path = Path(chosen).expanduser().resolve()
    if path.suffix.lower() not in {".db", ".sqlite", ".sqlite3"}:
        path = path / DB_NAME
    from autotune.history.location import sqlite_url

    return sqlite_url(path.as_posix())


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite URI (None for in-memory or other schemes), decoded
    as MLflow's SQLAlchemy opens it: an AUTOTUNE_HOME holding ``%41`` or ``#`` made a
    store MLflow retried for 105 s and could not open."""
    from autotune.history.location import sqlite_file

    return sqlite_file(uri)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """Silence MLflow's table-creation INFO logs and SQLAlchemy deprecation warnings around
    store calls. Its database errors too: a store on a full disk printed 85 lines of
    ERROR log, tracebacks and SQL parameters above the one line autotune says of it."""
    for name in ("mlflow.store.db", "alembic", "alembic.runtime.migration"):
        logger = logging.getLogger(name)
        if logger.level in (logging.NOTSET, logging.DEBUG, logging.INFO):
            logger.setLevel(logging.WARNING)
    utils = logging.getLogger("mlflow.store.db.utils")
    if utils.level < logging.CRITICAL:
        utils.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


@contextlib.contextmanager
def env_defaults(*, force: bool = False, **values: str) -> Iterator[None]:
    """Set environment variables for the duration of the block only: those the user has not
    set, or with ``force`` the user's own too; each put back as it was after."""
    saved = {key: os.environ.get(key) for key in values if force or key not in os.environ}
    os.environ.update({key: values[key] for key in saved})
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _fast_fail_http(uri: str, *, force: bool = False) -> contextlib.AbstractContextManager[None]:
    """For the first request to a remote server, fail in seconds rather than MLflow's minutes
    of retries. ``force``: the user's own setting too, for a store that has just failed a
    write after all its retries (that allowance has been spent; the FAILED end waited it
    out again). A local store is left as it is."""
    if not uri.startswith(("http://", "https://")):
        return contextlib.nullcontext()
    return env_defaults(force=force, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="10")


def open_client(uri: str | None = None, *, writing: bool = False) -> tuple["MlflowClient", str]:
    """An MlflowClient on the resolved store, created if local; AutotuneError if it cannot
    be opened (``writing``: or written, as a tune's tracking does)."""
    resolved = resolve_tracking_uri(uri)
    # A tuner should not phone home; users can still opt in by setting the variable to false.
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    db = _sqlite_path(resolved)
    if db is not None:
        _check_sqlite_store(db, resolved, writing=writing)
    try:
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        with _quiet_mlflow():
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=resolved)
    except Exception as exc:
        if "MLFLOW_ALLOW_FILE_STORE" in str(exc):  # its one long line would be cut before the way out
            raise AutotuneError(
                f"MLflow refuses the file store {resolved} (deprecated): give a directory or .db path instead"
                " (autotune keeps an SQLite store there), or set MLFLOW_ALLOW_FILE_STORE=true to use it anyway"
            ) from None
        raise AutotuneError(f"cannot open MLflow tracking store {resolved}: {_one_line(exc)}") from None
    return client, resolved


def _check_sqlite_store(db: Path, uri: str, *, writing: bool = False) -> None:
    """An SQLite store MLflow cannot open, said in a line at once: MLflow retried one that
    is a directory, or in /proc, for about 105 s before its error. One a tune would write
    and cannot (a read-only file or folder) is refused before the tune, too: it failed at
    the run's start with SQLAlchemy's words on autoflush, a new history made meanwhile."""
    import sqlite3

    from autotune.compile import check_output_path

    try:
        if not db.exists():
            check_output_path(db)
            return
        if not db.is_file():
            raise AutotuneError(f"{db} is not a file")
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            conn.execute("pragma schema_version")
        if writing:
            unwritable = next((p for p in (db, db.parent) if not os.access(p, os.W_OK)), None)
            if unwritable is not None:
                what = "the file" if unwritable == db else f"its folder {unwritable}"
                raise AutotuneError(f"{what} is read-only, and a tune writes its run there: name another store, or "
                                    "tune without MLflow tracking")
    except (AutotuneError, sqlite3.Error) as err:
        raise AutotuneError(f"cannot open MLflow tracking store {uri}: {err}") from None


def _clean_value(value: Any) -> Any:
    from autotune.report import strict_json

    return strict_json(value)


def report_params(report: Mapping[str, Any]) -> dict[str, str]:
    """Run-level params from a (possibly partial) report: model, target, device, budget, history,
    tuner and the versions of autotune/TVM. Usable at start() time with only those fields filled."""
    params: dict[str, Any] = {}
    if report.get("model") is not None:
        params["model"] = report["model"]
    # the file (or zoo:NAME) tuned: two files named model.onnx were both "model"
    params["model_source"] = report.get("model_source")
    target = report.get("target")
    if isinstance(target, Mapping):
        params["target"] = target.get("kind")
        params["target_arch"] = target.get("arch")
        params["device"] = target.get("device_name")
        params["target_config"] = _target_config(target.get("config"))
    elif target is not None:
        params["target"] = target
    for key in ("budget", "budget_split", "probes", "history", "tuner", "batch_norm"):
        if report.get(key) is not None:
            params[key] = report[key]
    inputs = report.get("inputs")
    if isinstance(inputs, Mapping):  # dqn at --size 36 and at 44 read alike without it
        from autotune.decompose import shape_text

        params["input_shapes"] = " ".join(
            f"{name}={shape_text(list(info.get('shape') or []))}" for name, info in inputs.items() if isinstance(info, Mapping)
        )
    batch = report.get("batch")
    if isinstance(batch, Mapping) and batch.get("size") is not None:
        params["batch_size"] = batch["size"]
    # the rest of the options, by their names, so a run can be made again from its params
    options = report.get("options")
    if isinstance(options, Mapping):
        flat = {**{k: v for k, v in options.items() if k != "measure"}, **(options.get("measure") or {})}
        for key, value in flat.items():
            if key not in params and key != "trials":  # trials is the budget
                params[key] = _option_text(value)
    versions = report.get("versions")
    if isinstance(versions, Mapping):
        for name, version in versions.items():
            params[f"{name}_version"] = version
    return {k: str(v) for k, v in params.items() if v is not None}


def _target_config(config: Any) -> str | None:
    """The whole TVM target as compact JSON with sorted keys: the kind and arch params left
    out what else changes every timing (``num-cores``, ``mattr``, a GPU's limits)."""
    if not isinstance(config, Mapping):
        return None
    return json.dumps(_clean_value(config), sort_keys=True, separators=(",", ":"), default=str)


def _option_text(value: Any) -> Any:
    """An option's param value; None (``max_layers``: every layer; ``rpc``: this machine) as
    "None" rather than no key, so every run has every option's column and a frame of runs
    compares (and groups) a left default beside a given value instead of NaN."""
    return "None" if value is None else value


def context_tags(params: Mapping[str, Any]) -> dict[str, str]:
    """``autotune.model``/``target``/``device`` tags from a run's params, for the parent and
    every layer's run: filtering layers of one model across runs needs them on the layer."""
    return {f"autotune.{key}": str(params[key]) for key in CONTEXT_KEYS if params.get(key) is not None}


def _tuned_what(model: Any, source: Any, target: Any, arch: Any, device: Any) -> str:
    """"`dqn` (zoo:dqn) on llvm znver4 (AMD-EPYC)": markdown, as MLflow renders a note,
    names in backticks so a model_name_with_underscores is not read as emphasis."""
    text = f"`{model or '?'}`"
    if source and source != model:
        text += f" (`{source}`)"
    where = " ".join(str(part) for part in (target, arch) if part)
    if where:
        text += f" on {where}"
    if device:
        text += f" ({device})"
    return text


def start_note(params: Mapping[str, Any]) -> str:
    """The run's description from its start: what is tuned, where, with what budget. A run
    stopped before its report keeps it (its status says it stopped)."""
    text = "Tuning " + _tuned_what(params.get("model"), params.get("model_source"), params.get("target"),
                                   params.get("target_arch"), params.get("device"))
    extras = [f"budget {params['budget']} trials" if params.get("budget") is not None else None,
              f"tuner {params['tuner']}" if params.get("tuner") is not None else None]
    extras = [e for e in extras if e]
    return text + (": " + ", ".join(extras) if extras else "") + "."


def trials_used(report: Mapping[str, Any]) -> int:
    """Trials measured in this run, all layers together (the budget is what was allowed)."""
    from autotune.report import _num

    layers = report.get("layers") or []
    return sum(int(_num(layer.get("trials")) or 0) for layer in layers if isinstance(layer, Mapping))


def report_note(report: Mapping[str, Any]) -> str:
    """The finished run's description, the line a user reads in MLflow's run list and run
    page: what was tuned, the model's latency before and after, the trials spent."""
    from autotune.progress import format_latency
    from autotune.report import _num

    target = report.get("target")
    kind, arch, device = ((target.get("kind"), target.get("arch"), target.get("device_name"))
                          if isinstance(target, Mapping) else (target, None, None))
    text = _tuned_what(report.get("model"), report.get("model_source"), kind, arch, device) + ": "
    before, after = _num(report.get("model_latency_before")), _num(report.get("model_latency_after"))
    if before and after:
        text += f"model latency {format_latency(before)} -> {format_latency(after)} ({before / after:.2f}x)"
    else:
        text += "model latency not timed"
    text += f", {trials_used(report)}"
    if report.get("budget") is not None:
        text += f" of {report['budget']}"
    text += " trials"
    if report.get("tuner") is not None:
        text += f", tuner {report['tuner']}"
    changed = _num(report.get("model_layers_changed"))
    if changed is not None:  # of the model's layers: with --max-layers the report lists fewer
        of = _num(report.get("tunable_layers"))
        text += f"; {int(changed)} of {int(of) if of is not None else len(report.get('layers') or [])} layers changed"
    text += "."
    if report.get("run_id"):
        text += f" autotune run `{report['run_id']}`."
    return text


class Tracker:
    """Tracking interface; this base class is the disabled tracker and does nothing at all.

    Use ``Tracker.create(...)`` to get either this no-op or an MLflow-backed ``MlflowTracker``; both
    are context managers that end the run (FAILED on an exception, KILLED on Ctrl-C).
    """

    enabled: bool = False
    uri: str | None = None
    experiment_id: str | None = None

    @classmethod
    def create(cls, enabled: bool, uri: str | None = None, experiment: str | None = None) -> "Tracker":
        """A live tracker on the resolved store, or a no-op when `enabled` is false (mlflow not imported).

        ``experiment``: the argument, then ``MLFLOW_EXPERIMENT_NAME`` (as MLflow itself
        reads it; it was ignored), then :data:`DEFAULT_EXPERIMENT`."""
        if not enabled:
            return Tracker()
        return MlflowTracker(uri, experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT)

    @property
    def run_id(self) -> str | None:
        """The parent run's id once started (None when disabled)."""
        return None

    @property
    def current_run_id(self) -> str | None:
        """Where log_* calls go: the open layer's nested run, else the parent run."""
        return None

    def start(self, run_name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None) -> str | None:
        """Open the parent run for a model; returns its run id."""
        return None

    @contextlib.contextmanager
    def layer(self, name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None) -> Iterator[str | None]:
        """Open a nested run for one layer; log_* calls inside go to it. Yields the nested run id."""
        yield None

    def open_layer(self, name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None) -> str | None:
        """Open a nested run for one layer that stays open across other layers' work (an
        adaptive budget split tunes layers by turns); log to it with ``layer=name``."""
        return None

    def close_layer(self, name: str, status: Status = "FINISHED") -> None:
        """End a run :meth:`open_layer` opened; ending the parent also ends it."""

    def log_params(self, params: Mapping[str, Any], layer: str | None = None) -> None:
        """Params on the current run (or layer ``layer``'s); a key already logged is kept
        (MLflow params are immutable)."""

    def log_metric(self, key: str, value: float | None, step: int | None = None, layer: str | None = None) -> None:
        """One metric value on the current run (or layer ``layer``'s) (buffered; None/NaN values are skipped)."""

    def log_trial(self, step: int, best_latency: float | None, flops: float | None = None, layer: str | None = None) -> None:
        """Per-trial metrics of the current layer (or layer ``layer``): best_latency_ms and
        (with flops) gflops at `step`."""

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tags on the current run (e.g. match_score and dispatch on a layer run)."""

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Copy a local file or directory into the current run's artifacts."""

    def log_dict(self, data: Mapping[str, Any], filename: str) -> None:
        """Store a dict as a JSON (or YAML, by extension) artifact of the current run."""

    def flush(self) -> None:
        """Send buffered metrics now."""

    def end(self, status: Status = "FINISHED") -> None:
        """Close any open layer run and the parent run with this status; safe to call twice."""

    def mark_killed(self, autotune_run_ids: Sequence[str]) -> list[str]:
        """End as KILLED the runs (and their layers' runs) of tunes killed outright, which
        history found gone: in MLflow they stayed RUNNING for good. Returns the MLflow run
        ids ended; only runs in this tracker's store are seen."""
        return []

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            status: Status = "FINISHED"
        elif issubclass(exc_type, KeyboardInterrupt):
            status = "KILLED"
        else:
            status = "FAILED"
        try:
            self.end(status)
        except AutotuneError:
            if exc_type is None:
                raise  # otherwise keep the original error, which is the one the user needs to see


class MlflowTracker(Tracker):
    """Tracker writing to an MLflow store through MlflowClient (no global active-run state)."""

    enabled = True

    def __init__(self, uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT) -> None:
        self._client, self.uri = open_client(uri, writing=True)
        self.experiment = experiment
        self._lock = threading.RLock()
        self._parent: str | None = None
        self._stack: list[str] = []  # nested runs log_* calls go to, innermost last
        self._open: list[str] = []  # nested runs not yet ended
        self._params: dict[str, dict[str, str]] = {}
        self._pending: list[tuple[str, Any]] = []
        self._last_flush = time.monotonic()
        self.layer_runs: dict[str, str] = {}  # layer name -> nested run id
        self.stepped_runs: set[str] = set()  # runs that received per-trial best_latency_ms
        self._ended = False
        self._context: dict[str, str] = {}  # context_tags of the parent, set on every layer's run too
        self._failed = False  # a store call failed: ending the runs is then tried once (see end)
        with self._guard("open experiment " + repr(experiment)), _fast_fail_http(self.uri):
            self.experiment_id = self._experiment_id(experiment)

    # -- plumbing -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        try:
            with _quiet_mlflow():
                yield
        except AutotuneError:
            self._failed = True
            raise
        except Exception as exc:
            self._failed = True
            raise AutotuneError(f"MLflow tracking ({self.uri}) failed to {action}: {_one_line(exc)}") from None

    def _experiment_id(self, name: str) -> str:
        exp = self._client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self._client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        location = None
        db = _sqlite_path(self.uri or "")
        if db is not None:
            # Without this MLflow puts artifacts in ./mlruns of whatever directory the user is in.
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "default"
            location = (db.resolve().parent / "artifacts" / safe).as_uri()
        try:
            return self._client.create_experiment(name, artifact_location=location)
        except Exception:
            exp = self._client.get_experiment_by_name(name)  # lost a race with a concurrent tune
            if exp is None:
                raise
            return exp.experiment_id

    @property
    def run_id(self) -> str | None:
        return self._parent

    @property
    def current_run_id(self) -> str | None:
        return self._stack[-1] if self._stack else self._parent

    def _require_run(self) -> str:
        run = self.current_run_id
        if run is None:
            raise AutotuneError("internal error: MLflow tracker used before start()")
        return run

    def _create_run(self, name: str, tags: Mapping[str, Any]) -> str:
        name = str(name)  # a layer name may be TVM's str subclass, which a file store cannot write
        base = {"mlflow.runName": name, "mlflow.source.name": "autotune", "mlflow.source.type": "LOCAL"}
        with contextlib.suppress(Exception):
            base["mlflow.user"] = getpass.getuser()
        all_tags = {**base, **{k: str(v) for k, v in tags.items() if v is not None}}
        run = self._client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        return run.info.run_id

    # -- API ----------------------------------------------------------------------------------------
    def start(self, run_name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None) -> str:
        if self._parent is not None:
            raise AutotuneError("internal error: MLflow tracker started twice")
        self._context = context_tags(params or {})
        note = {NOTE_TAG: start_note(params)} if params else {}
        with self._guard("start a run"):
            self._parent = self._create_run(run_name, {**self._context, **note, **(tags or {})})
        if params:
            self.log_params(params)
        return self._parent

    @contextlib.contextmanager
    def layer(self, name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None) -> Iterator[str]:
        run_id = self.open_layer(name, params, tags)
        self._stack.append(run_id)
        status: Status = "FINISHED"
        try:
            yield run_id
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except BaseException:
            status = "FAILED"
            raise
        finally:
            try:
                self.close_layer(name, status)
            finally:
                self._stack.remove(run_id)

    def open_layer(self, name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None) -> str:
        if self._parent is None:
            raise AutotuneError("internal error: MLflow tracker layer() before start()")
        self.flush()
        with self._guard(f"start the run of layer {name}"):
            # not the parent's autotune.run_id: `report RUN` finds the parent by it
            run_id = self._create_run(name, {**self._context, **(tags or {}), PARENT_TAG: self._parent, "autotune.layer": name})
        self.layer_runs[name] = run_id
        self._open.append(run_id)
        if params:
            self.log_params(params, layer=name)
        return run_id

    def close_layer(self, name: str, status: Status = "FINISHED") -> None:
        run_id = self.layer_runs.get(name)
        if run_id is None or run_id not in self._open:
            return
        try:
            self.flush()
            with self._guard(f"end the run of layer {name}"):
                self._client.set_terminated(run_id, status)
        finally:
            self._open.remove(run_id)

    def _run_for(self, layer: str | None) -> str:
        if layer is None:
            return self._require_run()
        run = self.layer_runs.get(layer)
        if run is None:
            raise AutotuneError(f"internal error: no MLflow run for layer {layer}")
        return run

    def log_params(self, params: Mapping[str, Any], layer: str | None = None) -> None:
        run = self._run_for(layer)
        seen = self._params.setdefault(run, {})
        fresh = {}
        for key, value in params.items():
            if value is None or key in seen:
                continue
            text = str(value)[:_PARAM_MAX]
            fresh[str(key)] = text
        if not fresh:
            return
        from mlflow.entities import Param

        with self._guard("log params"):
            self._client.log_batch(run, params=[Param(k, v) for k, v in fresh.items()])
        seen.update(fresh)

    def log_metric(self, key: str, value: float | None, step: int | None = None, layer: str | None = None) -> None:
        if value is None:
            return
        try:
            number = float(value)
        except (TypeError, ValueError):
            return
        if math.isnan(number):
            return
        from mlflow.entities import Metric

        metric = Metric(key, number, int(time.time() * 1000), int(step or 0))
        with self._lock:
            run = self._run_for(layer)
            self._pending.append((run, metric))
            if key == "best_latency_ms":
                self.stepped_runs.add(run)
            due = len(self._pending) >= _FLUSH_EVERY or time.monotonic() - self._last_flush > _FLUSH_SECONDS
        if due:
            self.flush()

    def log_trial(self, step: int, best_latency: float | None, flops: float | None = None, layer: str | None = None) -> None:
        if best_latency is None or not math.isfinite(best_latency) or best_latency <= 0:
            return
        self.log_metric("best_latency_ms", best_latency * 1e3, step, layer=layer)
        if flops:
            self.log_metric("gflops", flops / best_latency / 1e9, step, layer=layer)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        run = self._require_run()
        from mlflow.entities import RunTag

        items = [RunTag(str(k), str(v)) for k, v in tags.items() if v is not None]
        if items:
            with self._guard("set tags"):
                self._client.log_batch(run, tags=items)

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        run = self._require_run()
        with self._guard(f"log artifact {path}"):
            if Path(path).is_dir():
                self._client.log_artifacts(run, str(path), artifact_path)
            else:
                self._client.log_artifact(run, str(path), artifact_path)

    def log_dict(self, data: Mapping[str, Any], filename: str) -> None:
        run = self._require_run()
        with self._guard(f"log {filename}"):
            self._client.log_dict(run, _clean_value(data), filename)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._last_flush = time.monotonic()
        if not pending:
            return
        by_run: dict[str, list[Any]] = {}
        for run, metric in pending:
            by_run.setdefault(run, []).append(metric)
        with self._guard("log metrics"):
            for run, metrics in by_run.items():
                for i in range(0, len(metrics), _BATCH_MAX):
                    self._client.log_batch(run, metrics=metrics[i : i + _BATCH_MAX])

    def mark_killed(self, autotune_run_ids: Sequence[str]) -> list[str]:
        from autotune.report import RUN_ID_PATTERN

        ids = [i for i in autotune_run_ids if RUN_ID_PATTERN.fullmatch(i)]
        if not ids:
            return []
        ended: list[str] = []
        # best effort: a store that will not say is no reason to stop the tune starting now
        with contextlib.suppress(Exception), _quiet_mlflow():
            experiments = [e.experiment_id for e in self._client.search_experiments()]
            parents = [
                run for i in ids for run in self._client.search_runs(
                    experiments, filter_string=f"tags.`autotune.run_id` = '{i}' and attributes.status = 'RUNNING'"
                )
            ]
            for parent in parents:
                children = self._client.search_runs(
                    experiments,
                    filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and attributes.status = 'RUNNING'",
                )
                for run in [*children, parent]:
                    self._client.set_terminated(run.info.run_id, "KILLED")
                    ended.append(run.info.run_id)
        return ended

    def end(self, status: Status = "FINISHED") -> None:
        if self._ended or self._parent is None:
            self._ended = True
            return
        self._ended = True
        # after a store failure a server lost mid-tune is waited out once, not twice: the
        # FAILED end that follows waited MLflow's minutes of retries again before the error
        with _fast_fail_http(self.uri or "", force=True) if self._failed else contextlib.nullcontext():
            self.flush()
            with self._guard("end the run"):
                for run in dict.fromkeys(reversed(self._stack + self._open)):
                    self._client.set_terminated(run, status)
                self._stack.clear()
                self._open.clear()
                self._client.set_terminated(self._parent, status)


def layer_params(layer: Mapping[str, Any]) -> dict[str, Any]:
    """A layer's MLflow params from its report entry (a finished layer's, or what a
    stopped tune knows of an open one)."""
    return {key: layer.get(key) for key in ("tuner", "op_class", "workload_key", "occurrences", "trials")}


def _layer_metrics(tracker: Tracker, layer: Mapping[str, Any], replay_curve: bool) -> None:
    """Per-layer params/tags/metrics from a report entry on the tracker's current (layer) run."""
    tracker.log_params(layer_params(layer))
    rematched = layer.get("rematched") or {}
    handed = layer.get("handed_over") or {}
    score = layer.get("match_score")
    tracker.set_tags({
        # as the layer's run was opened with it: 0.9237, not 0.5074478025534243
        "match_score": f"{float(score):.4f}" if isinstance(score, (int, float)) else score, "dispatch": layer.get("dispatch"),
        # params cannot change: a layer matched again mid-tune names its last tuner here
        "tuner_at_end": handed.get("to") or (layer.get("tuner") if rematched else None),
        "rematched_at_trial": rematched.get("at_trial"),
        "handed_over_after_configs": handed.get("after_configs"),
        # what the table's tuner column says beside the tuner: "gga (guided, probe)",
        # "resumed at 3"; MLflow had the bare tuner
        "probe": "true" if layer.get("probe") else None,
        "resumed_configs": layer.get("resumed") or None,
    })
    if replay_curve:
        for point in layer.get("curve") or []:
            try:
                step, latency = int(point[0]), point[1]
            except (TypeError, ValueError, IndexError):
                continue
            if latency is not None:
                tracker.log_trial(step, float(latency), layer.get("flops"))
    best = layer.get("best_latency")
    default = layer.get("default_latency")
    tracker.log_metric("final_best_latency_ms", None if best is None else float(best) * 1e3)
    flops = layer.get("flops")
    # a reused layer (no trial, so no per-trial gflops) showed GFLOP/s in the table alone
    tracker.log_metric("final_gflops", float(flops) / float(best) / 1e9 if flops and best else None)
    tracker.log_metric("default_latency_ms", None if default is None else float(default) * 1e3)
    tracker.log_metric("speedup", layer.get("speedup"))
    tracker.log_metric("share", layer.get("share"))


def finish_with_report(tracker: Tracker, report: Mapping[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write the report artifacts to `out_dir` and log everything in the report to the tracker.

    Works whether or not the pipeline logged layers live: layers without a nested run get one, with
    their convergence curve replayed as step metrics; layers with one get their final numbers and
    tags added. Starts the parent run if needed but does not end it (the caller or `with` does).
    With a disabled tracker only the files are written. Returns the written paths.
    """
    from autotune.report import write_artifacts

    data = dict(report)
    if tracker.enabled:
        if tracker.run_id is None:
            # with its params: the run's tags and description, and its layers' tags, come from them
            tracker.start(str(report.get("model") or "autotune"), report_params(report))
        if not data.get("run_id"):
            data["run_id"] = tracker.run_id
    paths = write_artifacts(data, out_dir)
    if not tracker.enabled:
        return paths

    tracker.flush()
    tracker.log_params(report_params(report))
    tracker.log_params({"n_layers": len(report.get("layers") or [])})
    before, after = report.get("model_latency_before"), report.get("model_latency_after")
    tracker.log_metric("model_latency_before_ms", None if before is None else float(before) * 1e3)
    tracker.log_metric("model_latency_after_ms", None if after is None else float(after) * 1e3)
    if before and after:
        tracker.log_metric("model_speedup", float(before) / float(after))
    spent = report.get("measure_seconds")
    if isinstance(spent, Mapping):
        for part in ("build", "run"):
            tracker.log_metric(f"measure_{part}_s", spent.get(part))
    twins = report.get("measure_twins")
    if isinstance(twins, Mapping):
        for kind, count in twins.items():
            tracker.log_metric(f"measure_twins_{kind}", count)
    # the budget is a param; what was spent of it, and what it changed, were in no number
    tracker.log_metric("trials_used", trials_used(report))
    tracker.log_metric("model_layers_changed", report.get("model_layers_changed"))
    tracker.set_tags({NOTE_TAG: report_note(report)})

    from autotune.report import summary_rows

    live_runs: dict[str, str] = getattr(tracker, "layer_runs", {})
    rows = summary_rows(report)
    for layer, row in zip(report.get("layers") or [], rows):
        layer = {**layer, "share": row["share"]}
        name = str(layer.get("name"))
        if name in live_runs and isinstance(tracker, MlflowTracker):
            tracker._stack.append(live_runs[name])  # reopen for logging; the run keeps its status
            try:
                _layer_metrics(tracker, layer, replay_curve=live_runs[name] not in tracker.stepped_runs)
                tracker.flush()
            finally:
                tracker._stack.pop()
        else:
            with tracker.layer(name):
                _layer_metrics(tracker, layer, replay_curve=True)

    for path in paths:
        tracker.log_artifact(path)
    tracker.flush()
    return paths
