"""Progress reporting for a tuning run, decoupled from the pipeline so the CLI can pick the output.

Three modes share one interface: ``rich`` (live bars on stderr for people), ``quiet`` (nothing), and
``json`` (one JSON object per line per event on stdout, for scripts and CI). rich is imported only
when a rich reporter is made, keeping ``autotune --help`` fast.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import IO, Any, Literal, Mapping

Mode = Literal["rich", "quiet", "json"]


def _clean(value: Any) -> Any:
    from autotune.report import strict_json  # light module: no mlflow/matplotlib at import

    return strict_json(value)


def format_latency(seconds: float | None) -> str:
    """Seconds in the unit that keeps their digits: a small layer's kernel runs for
    microseconds, which a fixed "ms" printed as 0.0000."""
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.1f} ns"


class Reporter:
    """The interface the pipeline calls; this base class is the quiet reporter (every event ignored)."""

    mode: Mode = "quiet"

    def start_model(self, model: str, layers: list[tuple[str, int | None]], total: int | None = None) -> None:
        """A model run begins; `layers` lists (layer name, trial budget) in model order, the
        budget None where it is decided as tuning goes (``--budget-split adaptive``);
        `total` is the model's budget (default: the layers' sum)."""

    def start_layer(self, name: str, trials: int, tuner: str | None, match_score: float | None) -> None:
        """Tuning of one layer begins with this budget, tuner choice and history match score
        (tuner None: a layer the budget did not reach, opened only to be closed)."""

    def layer_budget(self, name: str, trials: int) -> None:
        """The layer's budget is now `trials` (an adaptive split gives trials chunk by chunk)."""

    def trial(self, name: str, done: int, best_latency: float | None) -> None:
        """`done` trials of layer `name` are finished; `best_latency` is the best so far (seconds)."""

    def end_layer(self, name: str, summary: Mapping[str, Any]) -> None:
        """Layer finished; `summary` is its report row (best_latency, speedup, trials, ...)."""

    def message(self, text: str) -> None:
        """A free-form note for the user (e.g. 'history hit, reusing schedule')."""

    def stage(self, text: str) -> None:
        """What the run does before its next trial ('timing TVM's defaults of 18 layers'):
        a bar at 0 with no word of why sat there for 24 s."""

    def close(self) -> None:
        """Stop any live display; safe to call twice."""

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


QuietReporter = Reporter


class JsonReporter(Reporter):
    """One JSON object per line per event, flushed at once so a consumer sees events live."""

    mode: Mode = "json"

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._t0 = time.monotonic()

    def _emit(self, event: str, **fields: Any) -> None:
        stream = self._stream or sys.stdout
        record = {"event": event, "elapsed_s": round(time.monotonic() - self._t0, 3), **fields}
        stream.write(json.dumps(_clean(record), allow_nan=False) + "\n")
        stream.flush()

    def start_model(self, model: str, layers: list[tuple[str, int | None]], total: int | None = None) -> None:
        if total is None:
            total = sum(t or 0 for _, t in layers)
        self._emit("start_model", model=model, trials=total, layers=[{"name": n, "trials": t} for n, t in layers])

    def start_layer(self, name: str, trials: int, tuner: str | None, match_score: float | None) -> None:
        self._emit("start_layer", layer=name, trials=trials, tuner=tuner, match_score=match_score)

    def layer_budget(self, name: str, trials: int) -> None:
        self._emit("layer_budget", layer=name, trials=trials)

    def trial(self, name: str, done: int, best_latency: float | None) -> None:
        self._emit("trial", layer=name, done=done, best_latency=best_latency)

    def end_layer(self, name: str, summary: Mapping[str, Any]) -> None:
        self._emit("end_layer", layer=name, summary=dict(summary))

    def message(self, text: str) -> None:
        self._emit("message", text=text)

    def stage(self, text: str) -> None:
        self._emit("stage", text=text)

    def close(self) -> None:
        pass


#: Off a terminal, a layer's trials are said at most this often (a line each).
PLAIN_EVERY_S = 30.0


class RichReporter(Reporter):
    """An overall bar plus one bar for the layer being tuned (trials done, best so far, ETA) on stderr.

    Finished layers are printed as one line each above the bars, so the scrollback keeps a record.
    """

    mode: Mode = "rich"

    def __init__(self, stream: IO[str] | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from rich.table import Column

        self.console = Console(file=stream if stream is not None else sys.stderr)
        # off a terminal (a log, CI, a pipe) rich draws no bars: nothing came for most of a
        # tune (27 s, then every layer's line at once), which read as a hang. There, stages,
        # layer starts and, every PLAIN_EVERY_S, a layer's trials are lines of their own,
        # and the bars' last frame (cut to the name column's width) is not left in the log.
        self._plain = not self.console.is_terminal
        # the name column gives way first: at 80 columns a long layer name pushed the
        # count, the time and the ETA off the line (each read "eta 0..." alone)
        name_width = max(24, self.console.width - 56)
        self._progress = Progress(
            TextColumn("{task.description}", markup=False,
                       table_column=Column(no_wrap=True, overflow="ellipsis", max_width=name_width)),
            BarColumn(bar_width=max(10, min(40, self.console.width - name_width - 46))),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=self._plain,
        )
        self._overall: Any = None
        self._model_title = ""
        self._layer_tasks: dict[str, Any] = {}
        self._budgets: dict[str, int] = {}
        self._done: dict[str, int] = {}
        self._finished: set[str] = set()
        self._started = False
        self._closed = False
        self._last_line: dict[str, float] = {}
        self._last_stage = ""

    def _ensure_started(self) -> None:
        if not self._started:
            self._progress.start()
            self._started = True

    def _overall_completed(self) -> int:
        """Trials done so far; a finished layer counts its full budget (early stop shrinks nothing)."""
        names = set(self._budgets) | set(self._done)
        return sum(
            self._budgets.get(n, self._done.get(n, 0)) if n in self._finished else self._done.get(n, 0)
            for n in names
        )

    def start_model(self, model: str, layers: list[tuple[str, int | None]], total: int | None = None) -> None:
        self._ensure_started()
        self._budgets = {name: int(trials) for name, trials in layers if trials is not None}
        if total is None:
            total = sum(self._budgets.values())
        # the layers it may tune (memnet's 5 of 13 kernels; one with --max-layers 1)
        self._model_title = f"{model} ({len(layers)} tunable layer{'' if len(layers) == 1 else 's'})"
        self._overall = self._progress.add_task(self._model_title, total=total or None, best="")

    def stage(self, text: str) -> None:
        if self._overall is not None:  # on the model's bar, until its first layer starts
            self._progress.update(self._overall, description=f"{self._model_title}: {text}")
        if self._plain and text != self._last_stage:
            self._last_stage = text
            self._line(f"{self._model_title}: {text}")

    def _line(self, text: str) -> None:
        from rich.markup import escape

        self.console.print(escape(text), soft_wrap=True)

    def start_layer(self, name: str, trials: int, tuner: str | None, match_score: float | None) -> None:
        self._ensure_started()
        if self._overall is not None:
            self._progress.update(self._overall, description=self._model_title)
        self._budgets.setdefault(name, int(trials))
        self._done.setdefault(name, 0)
        from autotune.report import format_match  # light module; as the table rounds it

        score = "" if match_score is None else f" match {format_match(match_score)}"
        self._layer_tasks[name] = self._progress.add_task(
            f"  {name} [{tuner or 'no trials'}{score}]", total=max(int(trials), 1), best="best -"
        )
        if self._plain and tuner:
            self._last_line[name] = time.monotonic()
            given = f", {trials} trial{'' if trials == 1 else 's'}" if trials else ""  # an adaptive split gives them later
            self._line(f"tuning {name} [{tuner}{score}]{given}")

    def layer_budget(self, name: str, trials: int) -> None:
        self._budgets[name] = int(trials)
        task = self._layer_tasks.get(name)
        if task is not None:
            self._progress.update(task, total=max(int(trials), 1))

    def trial(self, name: str, done: int, best_latency: float | None) -> None:
        task = self._layer_tasks.get(name)
        self._done[name] = int(done)
        if task is not None:
            self._progress.update(task, completed=done, best=f"best {format_latency(best_latency)}")
        if self._overall is not None:
            self._progress.update(self._overall, completed=self._overall_completed())
        if self._plain and time.monotonic() - self._last_line.get(name, 0.0) >= PLAIN_EVERY_S:
            self._last_line[name] = time.monotonic()
            self._line(f"  {name}: {done} of {self._budgets.get(name, done)} trials, best {format_latency(best_latency)}")

    def end_layer(self, name: str, summary: Mapping[str, Any]) -> None:
        self._finished.add(name)
        task = self._layer_tasks.pop(name, None)
        if task is not None:
            self._progress.remove_task(task)
        if self._overall is not None:
            self._progress.update(self._overall, completed=self._overall_completed())
        from rich.markup import escape

        from autotune.report import budget_ran_out

        parts = [name]
        if budget_ran_out(summary):
            parts.append("no budget left")  # as the table says: no tuner ran
        elif summary.get("tuner"):
            parts.append(str(summary["tuner"]))
        if summary.get("trials") is not None:
            parts.append(f"{summary['trials']} trial{'' if summary['trials'] == 1 else 's'}")
        best = summary.get("best_latency")
        if best is not None:
            parts.append(f"best {format_latency(best)}")
        speedup = summary.get("speedup")
        if isinstance(speedup, (int, float)) and math.isfinite(speedup):
            parts.append(f"{speedup:.2f}x vs default")
        # soft_wrap: no breaks of rich's own (at 80 columns into a log, a lone "default" line)
        self.console.print("[green]done[/green] " + escape("  ".join(parts)), soft_wrap=True)

    def message(self, text: str) -> None:
        self._line(text)

    def close(self) -> None:
        if self._started and not self._closed:
            self._progress.stop()
        self._closed = True


def make_reporter(mode: Mode = "rich", stream: IO[str] | None = None) -> Reporter:
    """Reporter for the CLI's output mode; `stream` overrides stderr (rich) or stdout (json)."""
    if mode == "quiet":
        return QuietReporter()
    if mode == "json":
        return JsonReporter(stream)
    if mode == "rich":
        return RichReporter(stream)
    raise ValueError(f"unknown progress mode {mode!r}; expected rich, quiet or json")
