"""Turn a tuning report (a plain JSON-able dict) into tables, CSV/JSON files and a convergence plot.

The report dict is the one contract between the pipeline, MLflow and ``autotune report``; everything
here derives from it so a report downloaded from MLflow renders exactly like a fresh one. rich and
matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from autotune.errors import INT64_MAX, AutotuneError
from autotune.roofline import BUSY_LOAD, Peaks, achieved_flops, lookup_gpu, peaks_for_target, roofline_fraction
from autotune.progress import format_latency
from autotune.output_encoding import printable
from autotune.table_layout import Column, fitted_table

if TYPE_CHECKING:
    from autotune.history import HistoryStore

REPORT_JSON = "report.json"
REPORT_CSV = "report.csv"
CONVERGENCE_PNG = "convergence.png"
LAYERS_TXT = "layers.txt"
#: What :func:`write_artifacts` writes, and a run's report folder holds.
ARTIFACT_NAMES = (REPORT_JSON, REPORT_CSV, CONVERGENCE_PNG, LAYERS_TXT)
#: What tune writes beside them (``api._write_decomposition``), listed by ``report`` where
#: they are (a report rebuilt from its JSON has no model to take them from).
DECOMPOSITION_NAMES = ("decomposition.txt", "decomposition.json")


#: In a run's folder under the autotune home: where its report went instead (``--out-dir``).
REPORT_ELSEWHERE = "report_dir.txt"


def runs_root() -> Path:
    """The folder every run's default report folder is in."""
    from autotune.history.location import autotune_home

    return Path(autotune_home()) / "runs"


def run_dir(run_id: str) -> Path:
    """Where ``tune`` writes a run's report unless told otherwise, and where ``report`` looks first."""
    return runs_root() / run_id


def remember_report_dir(run_id: str, report_dir: str | os.PathLike[str]) -> None:
    """A run whose report went to ``--out-dir`` leaves its address in its own run folder,
    so that ``report RUN_ID`` finds it as it finds the others (it said the id was no run)."""
    folder = run_dir(run_id)
    if Path(report_dir).resolve() == folder.resolve():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomically(folder / REPORT_ELSEWHERE, str(Path(report_dir).resolve()) + "\n")
    except (OSError, AutotuneError):
        pass  # a convenience: the report itself is written


def _local_report(run_id: str) -> Path | None:
    """The report.json of a run of this machine, by its id or a unique prefix of it."""
    runs = run_dir(run_id).parent
    folder = runs / run_id
    if not folder.is_dir():
        try:
            found = [p for p in runs.iterdir() if p.name.startswith(run_id) and p.is_dir()]
        except OSError:
            found = []
        if len(found) > 1:
            raise AutotuneError(f"run id prefix {run_id!r} matches {len(found)} runs: "
                                f"{', '.join(sorted(p.name for p in found)[:5])}{'...' if len(found) > 5 else ''}")
        if not found:
            return None
        folder = found[0]
    if (folder / REPORT_JSON).is_file():
        return folder / REPORT_JSON
    pointer = folder / REPORT_ELSEWHERE
    if pointer.is_file():
        elsewhere = Path(pointer.read_text(encoding="utf-8").strip()) / REPORT_JSON
        if elsewhere.is_file():
            return elsewhere
        raise AutotuneError(f"run {folder.name}'s report was written to {elsewhere.parent}, which holds no {REPORT_JSON} now")
    return None


#: Column order of summary_rows / the CSV.
COLUMNS = [
    "name",
    "op_class",
    "occurrences",
    "match_score",
    "dispatch",
    "tuner",
    "trials",
    "budget",
    "probe",
    "resumed",
    "rematched",
    "handed_over",
    "nearest",
    "other_batch_winner",
    "best_latency_ms",
    "default_latency_ms",
    "speedup",
    "share",
    "gflops",
    "roofline_fraction",
]


def _num(value: Any) -> float | None:
    """A finite float or None; reports may carry null, NaN or inf for failed measurements."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def strict_json(value: Any) -> Any:
    """Strict-JSON copy of a report: NaN/inf -> null, tuples -> lists, Paths -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return strict_json(value.item())
    return str(value)


def report_peaks(report: Mapping[str, Any]) -> Peaks | None:
    """Roofline peaks for the report's device without measuring anything.

    Prefer the ``"roofline"`` entry the pipeline stored (measured on the tuning machine); else the
    GPU table by device name; else a cached CPU measurement for that device name.
    """
    stored = report.get("roofline")
    if isinstance(stored, Mapping):
        try:
            return Peaks.from_dict(stored)
        except (KeyError, TypeError, ValueError):
            pass
    target = report.get("target") or {}
    if isinstance(target, Mapping):
        try:
            return peaks_for_target(target, measure=False)
        except Exception:  # a corrupt cache must not break a report
            return lookup_gpu(str(target.get("device_name") or ""))
    return None


def summary_rows(report: Mapping[str, Any], peaks: Peaks | None = None) -> list[dict[str, Any]]:
    """One row per layer with derived numbers (ms, speedup, share, GFLOP/s, roofline fraction).

    ``share`` is the layer's part of the summed measured time of the layers listed (best
    latency times occurrences), whatever the report stores under that name: reports
    before 2026-11-24 stored the roofline estimate the budget was split by, which put a
    transformer's batch matmul at 1% of the time it spent 12% in.
    Missing derived fields are computed from the raw ones, so a partial report still summarizes.
    """
    layers: Sequence[Mapping[str, Any]] = report.get("layers") or []
    if peaks is None:
        peaks = report_peaks(report)
    weighted = [
        (_num(l.get("best_latency")) or 0.0) * (int(l.get("occurrences") or 1)) for l in layers
    ]
    total = sum(weighted)
    rows = []
    for layer, weight in zip(layers, weighted):
        best = _num(layer.get("best_latency"))
        default = _num(layer.get("default_latency"))
        flops = _num(layer.get("flops"))
        nbytes = _num(layer.get("bytes"))
        speedup = _num(layer.get("speedup"))
        if speedup is None and best and default:
            speedup = _num(default / best)
        share = _num(weight / total) if total > 0 and best is not None else None
        achieved = _num(achieved_flops(flops, best))
        fraction = None
        if peaks is not None and achieved is not None and best:
            fraction = _roofline(flops or 0.0, nbytes or 0.0, best, peaks)
        rows.append(
            {
                "name": layer.get("name"),
                "op_class": layer.get("op_class"),
                "occurrences": layer.get("occurrences", 1),
                "match_score": _num(layer.get("match_score")),
                "dispatch": layer.get("dispatch"),
                "tuner": layer.get("tuner"),
                "trials": layer.get("trials"),
                "budget": layer.get("budget"),
                "probe": bool(layer.get("probe")),  # a one-trial first chunk (history covers it closely)
                "resumed": int(layer.get("resumed") or 0),  # configs earlier runs measured of it
                "rematched": _rematched(layer.get("rematched")),  # dispatched cold, matched again mid-tune
                "handed_over": _handed_over(layer.get("handed_over")),  # the guided GA gave a shallow history's layer on
                # "other batch" where its match was taken from this layer at another batch size
                "nearest": _nearest_relation(layer.get("match")),
                # no budget reached it; its winner at another batch size, timed here, is its best
                "other_batch_winner": bool(isinstance(layer.get("other_batch"), Mapping) and layer["other_batch"].get("applied")),
                "best_latency_ms": None if best is None else _num(best * 1e3),
                "default_latency_ms": None if default is None else _num(default * 1e3),
                "speedup": speedup,
                "share": share,
                "gflops": None if achieved is None else achieved / 1e9,
                "roofline_fraction": fraction,
            }
        )
    return rows


def _roofline(flops: float, nbytes: float, best: float, peaks: Peaks) -> float | None:
    """The layer's roofline fraction, or None where its figures leave no roof above zero
    (1e-300 FLOPs over 1e300 bytes, in an edited report, divided by zero)."""
    bandwidth = peaks.memory_bw(nbytes)
    if nbytes > 0 and bandwidth > 0 and not flops / nbytes * bandwidth > 0:
        return None
    return _num(roofline_fraction(flops, nbytes, best, peaks.peak_flops, bandwidth))


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    num = _num(value)
    return "-" if num is None else format(num, spec) + suffix


def format_match(score: Any) -> str:
    """A match score to two places, rounded down: 0.795 read 0.80 beside the transfer
    tuner it was given, as a guided GA's threshold of 0.8 would not have."""
    num = _num(score)
    return "-" if num is None else f"{math.floor(num * 100 + 1e-9) / 100:.2f}"


def _fmt_model_latency(seconds: Any) -> str:
    """In the unit that keeps its digits (a model of one small layer read 0.001 ms -> 0.000 ms)."""
    from autotune.progress import format_latency

    return format_latency(_num(seconds))


#: Below this share of the model's time, the layers history changed cannot account for
#: a model timing's difference from 1.00x.
NOISE_SHARE = 0.02


def _changed_share(report: Mapping[str, Any]) -> float | None:
    """The part of the model's measured time in the layers its timed module changed, or
    None where the report does not say which those are."""
    names = report.get("model_changed_layers")
    if not isinstance(names, list):
        return None
    shares = {row["name"]: row["share"] for row in summary_rows(report)}
    if not shares or any(shares.get(n) is None for n in names):
        return None
    return float(sum(shares[n] for n in names))


def _unused_trials(report: Mapping[str, Any]) -> str | None:
    """The trials of the budget no layer took, and why, or None where all were spent: a
    tune of a model history covers ended with its budget untouched and no word of it."""
    budget = _num(report.get("budget"))
    layers = [l for l in report.get("layers") or [] if isinstance(l, Mapping)]
    if not budget or not layers:
        return None
    used = sum(_num(l.get("trials")) or 0 for l in layers)
    if used >= budget:
        return None
    hint = "`--min-trials N` tunes on those measured fewer than N times"
    why = ""
    if all(l.get("dispatch") == "exact" for l in layers):
        why = f": history covers every tunable layer ({hint})"
    else:
        # the tuned layers ran out of new configs: 720 trials went to a 0.0% layer, then
        # 280 were left with no word of why
        spent = [l for l in layers if l.get("exhausted")]
        if spent and all(l.get("dispatch") == "exact" or l.get("exhausted") for l in layers):
            names = ", ".join(f"{l.get('name')} ({_num(l.get('trials')) or 0:.0f})" for l in spent[:3])
            more = f" and {len(spent) - 3} more" if len(spent) > 3 else ""
            why = (f": the layers tuned ran out of new configs to measure ({names}{more}), and history covers the others "
                   f"({hint})")
    return f"{budget - used:.0f} of {budget:.0f} trials unused{why}"


def _trials_on_small_layers(report: Mapping[str, Any]) -> str | None:
    """Where this run's trials all went to layers that hold a sliver of the model's time,
    history covering the rest, the caption says so: the whole budget had gone to a layer
    of 0.2%, every other reused, with nothing said that a smaller one would have done."""
    layers = [l for l in report.get("layers") or [] if isinstance(l, Mapping)]
    tried = [l for l in layers if (_num(l.get("trials")) or 0) > 0]
    if not tried or not any(l.get("dispatch") == "exact" for l in layers):
        return None
    shares = {row["name"]: row["share"] for row in summary_rows(report)}
    held = [shares.get(l.get("name")) for l in tried]
    if any(share is None for share in held) or sum(held) >= NOISE_SHARE:
        return None
    trials = sum(_num(l.get("trials")) or 0 for l in tried)
    return (f"the {trials:.0f} trials went to layers holding {sum(held) * 100:.2g}% of the model's time, history's "
            "winners the rest: a smaller --trials would have done")


def budget_ran_out(layer: Mapping[str, Any]) -> bool:
    """The layer got no trials because the budget did not reach it (not an exact hit)."""
    return layer.get("budget") == 0 and layer.get("dispatch") != "exact"


def _rematched(info: Any) -> str | None:
    """``"xgb for 4"``: the tuner a layer had and for how many trials, before it was matched again."""
    if not isinstance(info, Mapping) or "from" not in info:
        return None
    return f"{info['from']} for {info.get('at_trial')}"


def _handed_over(info: Any) -> str | None:
    """``"tl_xgb after 32"``: the tuner that took a layer over, and after how many configs."""
    if not isinstance(info, Mapping) or "to" not in info:
        return None
    return f"{info['to']} after {info.get('after_configs')}"


def _nearest_relation(match: Any) -> str | None:
    """``"other batch"`` where the layer the match score was taken from is this one at
    another batch size, else None: the table showed 0.95 and nothing said it was this
    layer at batch 1. (A ``same layer`` relation is this layer's own records, on another
    target or too few for reuse here: ``resumed at`` says the latter.)"""
    neighbours = match.get("neighbours") if isinstance(match, Mapping) else None
    first = neighbours[0] if isinstance(neighbours, list) and neighbours and isinstance(neighbours[0], Mapping) else {}
    return "other batch" if first.get("relation") == "other batch" else None


def _fmt_tuner(row: Mapping[str, Any]) -> str:
    """The tuner and why; a layer the budget did not reach says so rather than name the
    tuner it would have had."""
    if budget_ran_out(row):
        # its winner at another batch size, timed at this one (tune._time_other_batch_winners)
        return "- (no budget left, other batch's winner)" if row.get("other_batch_winner") else "- (no budget left)"
    resumed = f"resumed at {row['resumed']}" if row.get("resumed") else None
    handed = f"then {row['handed_over']}" if row.get("handed_over") else None
    nearest = "from another batch size" if row.get("nearest") == "other batch" else None
    # a probe is a one-trial first chunk; the layer may have had more trials since
    probe = None if not row.get("probe") else "probe" if (row.get("trials") or 0) <= 1 else "probed first"
    why = ", ".join(w for w in (row.get("dispatch"), nearest, probe, resumed, row.get("rematched"), handed) if w)
    return str(row["tuner"] or "-") + (f" ({why})" if why else "")


#: A whole-model figure whose rounds spread wider than this (slowest over fastest, less
#: one) is said to be unsteady.
MODEL_SPREAD_NOTED = 0.25


def _model_rounds_spread(report: Mapping[str, Any]) -> float | None:
    """The widest spread of the whole-model timings' rounds (``model_latency_rounds``):
    slowest over fastest, less one; None where no model has two rounds."""
    rounds = report.get("model_latency_rounds")
    if not isinstance(rounds, Mapping):
        return None
    spreads = []
    for values in rounds.values():
        times = [t for t in (_num(v) for v in (values if isinstance(values, list) else [])) if t]
        if len(times) >= 2:
            spreads.append(max(times) / min(times) - 1)
    return max(spreads) if spreads else None


#: The columns of the per-layer table, the ones left out first on a narrow terminal last
#: (:mod:`autotune.table_layout`): a layer's name, its tuner and its figures stay.
TABLE_COLUMNS = (
    Column("layer", fold_at=20), Column("op", keep=6), Column("match", justify="right", keep=4),
    Column("tuner", fold_at=10), Column("trials", justify="right", keep=3), Column("best", justify="right"),
    Column("speedup", justify="right"), Column("share", justify="right", keep=5),
    Column("GFLOP/s", justify="right", keep=7), Column("roofline", justify="right", keep=8),
)


def format_table(report: Mapping[str, Any], width: int | None = None) -> str:
    """The per-layer table as plain text (no ANSI codes), for terminals, logs and artifacts
    alike: 160 columns wide, or ``width``, a terminal's, where the columns read least are
    left out if all do not fit (and said so)."""
    from rich.console import Console

    target = report.get("target") or {}
    target_text = " ".join(
        str(target.get(k)) for k in ("kind", "device_name") if isinstance(target, Mapping) and target.get(k)
    )
    before = _num(report.get("model_latency_before"))
    after = _num(report.get("model_latency_after"))
    batch = report.get("batch")
    size = f" (batch {batch['size']})" if isinstance(batch, Mapping) and batch.get("size") is not None else ""
    title = f"{report.get('model', '?')}{size} on {target_text or '?'}"
    options = report.get("options")
    if isinstance(options, Mapping) and options.get("model_latency") is False:  # read "- -> -"
        caption = "model latency: not timed (--no-model-latency)"
    else:
        caption = f"model latency: {_fmt_model_latency(before)} -> {_fmt_model_latency(after)}"
    if before and after:
        caption += f" ({before / after:.2f}x)"
        if report.get("model_layers_changed") == 0:  # 0.48x read as a slowdown, of the same module
            caption += " no layer's schedule changed: timing noise"
        else:
            changed = _changed_share(report)
            if changed is not None and changed < NOISE_SHARE:  # 0.68x with one layer of 0.1% changed
                caption += f" the layers that changed hold {changed * 100:.2g}% of the time: the rest is timing noise"
    notes: list[str] = []  # a line each under the table: one ran into the next across a fold
    spread = _model_rounds_spread(report)
    if spread is not None and spread > MODEL_SPREAD_NOTED:
        # two timings minutes apart read 0.98x for modules 1.46x apart; in turn, their rounds say how steady
        notes.append(f"its rounds varied by up to {spread * 100:.0f}%: other work on the machine weighs on it")
    peaks = report.get("roofline")
    busy = _num(peaks.get("load_per_core")) if isinstance(peaks, Mapping) else None
    if busy is not None and busy >= BUSY_LOAD:  # 103 GFLOP/s measured so, 166 idle: every % read high
        notes.append(f"roofline peaks measured while other work kept the cores {busy * 100:.0f}% busy: its "
                     "percentages read high (`autotune info --measure-roofline` on an idle machine)")
    if report.get("history_was_empty") is False and report.get("layers"):
        # what history held (a layer's default, a reused or resumed layer's best) is the
        # timing of the run that made it, under that run's load: set beside this run's it
        # mixes two machines' states (a helper's ResNet-50 tune read its new layers'
        # defaults 2x another run's); counting reused layers alone left the rest unsaid
        notes.append("figures history held (defaults, reused and resumed bests) are the timings of the runs that made them")
    if report.get("tunable_layers") == 0:  # an empty table: --quiet heard no note of why
        notes.append("no tunable layer: nothing to tune, its kernels keep TVM's defaults")
    unused = _unused_trials(report)
    if unused:
        notes.append(unused)
    small = _trials_on_small_layers(report)
    if small:
        notes.append(small)
    errors = report.get("model_latency_errors")
    if isinstance(errors, Mapping) and errors:
        notes.append(f"(not measured: {next(iter(errors.values()))})")
    others = report.get("concurrent_runs")
    if isinstance(others, list) and others:
        # the run that started first heard of the other only in report.json, and read 0.58x
        # for a model its twin run, with the same schedules, read 1.48x
        notes.append(f"{'another run' if len(others) == 1 else f'{len(others)} other runs'} measured on this machine "
                     f"meanwhile ({', '.join(map(str, others[:3]))}{', ...' if len(others) > 3 else ''}): its timings, "
                     "these too, ran slower")
    spent = report.get("measure_seconds")
    if isinstance(spent, Mapping) and any(_num(v) for v in spent.values()):
        notes.append(f"measuring: build {_num(spent.get('build')) or 0:.0f} s, run {_num(spent.get('run')) or 0:.0f} s")
        twins = report.get("measure_twins")
        reused = sum(_num(v) or 0 for v in twins.values()) if isinstance(twins, Mapping) else 0
        if reused:
            notes[-1] += f", {reused:.0f} twin program{'' if reused == 1 else 's'} answered unmeasured"
    measure = options.get("measure") if isinstance(options, Mapping) else None
    if isinstance(measure, Mapping) and measure.get("timing") == "queued":
        # its few-microsecond layers read lower than a tune timed by TVM's evaluator would
        notes.append("candidates timed queued behind a spin kernel (GPU time alone)")
    if report.get("history_was_empty"):
        notes.append(f"history was empty: {_history_path(report.get('history'))}")
    if report.get("run_id"):
        notes.append(f"run {report['run_id']}")

    from rich.markup import escape

    # a model named net[red]v2 read "netv2": rich takes [..] as markup; and what the file
    # holds is shown, not acted on by the terminal (see printable)
    rows = []
    for row in summary_rows(report):
        cells = (
            str(row["name"]),
            str(row["op_class"] or "-"),
            format_match(row["match_score"]),
            _fmt_tuner(row),
            "-" if row["trials"] is None else str(row["trials"]),
            format_latency(None if row["best_latency_ms"] is None else row["best_latency_ms"] / 1e3),
            _fmt(row["speedup"], ".2f", "x"),
            _fmt(None if row["share"] is None else row["share"] * 100, ".1f", "%"),
            _fmt(row["gflops"], ".1f"),
            _fmt(None if row["roofline_fraction"] is None else row["roofline_fraction"] * 100, ".1f", "%"),
        )
        # a layer named [/] in an edited report.json was rich's MarkupError, a traceback
        rows.append([escape(printable(cell)) for cell in cells])
    table, note = fitted_table(TABLE_COLUMNS, rows, width, title=escape(printable(title)),
                               caption="\n".join(escape(printable(line)) for line in [caption, *notes]),
                               caption_justify="left", show_lines=False)
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None, highlight=False)
    console.print(table)
    if note:
        console.print(note, markup=False)
    return buf.getvalue()


def _history_path(url: Any) -> str:
    """The history as a person gave it: a file's path, else the (masked) URL."""
    from autotune.history.location import sqlite_file

    path = sqlite_file(url) if isinstance(url, str) else None
    return str(path) if path is not None else str(url)


def write_csv(report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """summary_rows as CSV (empty cells for unknown values), for spreadsheets and pandas."""
    from autotune.compile import write_atomically

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            for row in summary_rows(report):
                writer.writerow({k: "" if v is None else v for k, v in row.items()})

    return write_atomically(Path(path), write)


def write_json(report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """The full report as strict JSON (NaN/inf written as null so any JSON reader accepts it)."""
    return write_text_atomically(Path(path), json.dumps(strict_json(report), indent=2, allow_nan=False) + "\n")


def write_text_atomically(path: Path, text: str) -> Path:
    """``path`` holding ``text``, written whole or not at all: on a full disk the report
    files were left empty, after a traceback."""
    from autotune.compile import write_atomically

    return write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _points(curve: Iterable[Any]) -> tuple[list[float], list[float]]:
    """(trial, best latency ms) pairs of a curve, dropping failed (null/inf/non-positive) points."""
    xs: list[float] = []
    ys: list[float] = []
    for point in curve or []:
        try:
            trial, latency = point[0], point[1]
        except (TypeError, IndexError, KeyError):
            continue
        t, lat = _num(trial), _num(latency)
        if t is None or lat is None or lat <= 0:
            continue
        xs.append(t)
        ys.append(lat * 1e3)
    return xs, ys


def _band(curves: Sequence[Any]) -> tuple[list[int], list[float], list[float], list[float]]:
    """Median, min and max across repeated curves, each carried forward: at the trial
    numbers the curves hold (drawn as steps, as every number between gave them), not at
    every number from the first to the last (a trial of 1e15 in an edited report hung)."""
    series = []
    for curve in curves:
        xs, ys = _points(curve)
        if xs:
            series.append(dict(zip((int(x) for x in xs), ys)))
    if not series:
        return [], [], [], []
    grid, med, lo, hi = [], [], [], []
    last: list[float | None] = [None] * len(series)
    for trial in sorted(set().union(*series)):
        for i, s in enumerate(series):
            if trial in s:
                last[i] = s[trial] if last[i] is None else min(last[i], s[trial])
        values = sorted(v for v in last if v is not None)
        if not values:
            continue
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        grid.append(trial)
        med.append(median)
        lo.append(values[0])
        hi.append(values[-1])
    return grid, med, lo, hi


def plot_convergence(report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """PNG of best latency vs trials: one step curve per layer, and for benchmark reports with a
    ``"tuners"`` dict (tuner -> list of curves, e.g. one per seed) one median curve per tuner with
    its min-max band. Uses the Agg canvas directly so no display or pyplot state is involved.
    """
    from autotune.matplotlib_config import settle_matplotlib_config

    settle_matplotlib_config()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    layer_curves = [
        (_plot_text(l.get("name")), _points(l.get("curve") or [])) for l in report.get("layers") or []
    ]
    layer_curves = [(name, pts) for name, pts in layer_curves if pts[0]]
    tuners = report.get("tuners") if isinstance(report.get("tuners"), Mapping) else {}
    panels = (1 if layer_curves or not tuners else 0) + (1 if tuners else 0)

    fig = Figure(figsize=(12, 4.5 * panels), dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(panels, 1, i + 1) for i in range(panels)]
    index = 0
    if layer_curves or not tuners:
        ax = axes[index]
        index += 1
        for i, (name, (xs, ys)) in enumerate(layer_curves):
            # a one-trial layer (a probe) is a point: a step of one point drew nothing; past
            # the 10 colours of the cycle, another dash tells two layers of one colour apart
            ax.step(xs, ys, where="post", label=name, linewidth=1.2, marker="o" if len(xs) == 1 else None, markersize=4,
                    linestyle=("-", "--", ":", "-.")[i // 10 % 4])
        ax.set_title(f"{_plot_text(report.get('model', ''))}: best latency per layer")
        _decorate(ax, bool(layer_curves), len(layer_curves))
    if tuners:
        ax = axes[index]
        for tuner, curves in tuners.items():
            grid, med, lo, hi = _band(curves if isinstance(curves, Sequence) else [])
            if not grid:
                continue
            (line,) = ax.step(grid, med, where="post", label=f"{_plot_text(tuner)} (n={len(curves)})", linewidth=1.5)
            if len(curves) > 1:
                ax.fill_between(grid, lo, hi, step="post", alpha=0.2, color=line.get_color())
        ax.set_title(f"{_plot_text(report.get('model', ''))}: tuner comparison (median, min-max)")
        _decorate(ax, True, len(tuners))
    fig.tight_layout()
    from autotune.compile import write_atomically

    return write_atomically(Path(path), lambda tmp: fig.savefig(tmp, format="png"), suffix=".tmp.png")


def _plot_text(value: Any) -> str:
    """A name as the plot draws it: control characters escaped (matplotlib warned of each
    glyph its font lacks, the character itself in the warning) and ``$`` as itself, not
    the start of TeX math (a ``$`` or two in a name can be math that does not parse)."""
    return printable(str(value)).replace("$", r"\$")


def _decorate(ax: Any, has_data: bool, n_series: int) -> None:
    ax.set_xlabel("trials")
    ax.set_ylabel("best latency (ms)")
    if not has_data:
        ax.text(0.5, 0.5, "no measured trials", ha="center", va="center", transform=ax.transAxes)
        return
    ax.set_yscale("log")  # layers differ by orders of magnitude
    ax.grid(True, which="both", alpha=0.3)
    if n_series:  # beside the axes: inside, a model's 18 layers' names covered their curves
        ax.legend(fontsize="x-small" if n_series > 8 else "small", ncol=2 if n_series > 24 else 1,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def write_artifacts(report: Mapping[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """report.json, report.csv, convergence.png and layers.txt in `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        write_json(report, out / REPORT_JSON),
        write_csv(report, out / REPORT_CSV),
        plot_convergence(report, out / CONVERGENCE_PNG),
    ]
    paths.append(write_text_atomically(out / LAYERS_TXT, format_table(report)))
    return paths


def _read_report_file(path: Path, name: str | None = None) -> dict[str, Any]:
    """The report in ``path``, checked (:func:`check_report`) before anything renders it;
    ``name`` is how errors call the file (an MLflow download's temporary path says nothing)."""
    name = name or str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # `[[[[...` 100000 deep: json's own traceback
        raise AutotuneError(f"cannot read report {name}: its JSON is nested too deeply") from None
    except (OSError, ValueError) as exc:
        raise AutotuneError(f"cannot read report {name}: {exc}") from None
    if not isinstance(data, dict):
        raise AutotuneError(f"{name} is not a report (expected a JSON object)")
    if not isinstance(data.get("layers"), list):
        # a history export read as one printed an empty table titled '? on ?'
        raise AutotuneError(f"{name} is not an autotune report (it has no list of layers)")
    check_report(data, name)
    return data


# -- checking a report read from a file -------------------------------------------------------------
# A report.json edited by hand or damaged (a string for a number, null, -1, NaN, 1e400, a
# list for an object) ended `report` in some 16 tracebacks of the code that renders it; it
# is checked once here, after reading, and refused in one line naming the field.

def _number(value: Any) -> str | None:
    """A measurement (seconds, FLOPs, bytes, a ratio): finite and not negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number"
    if isinstance(value, int) and value > sys.float_info.max:  # float() of it overflowed
        return "too large a number"
    if not math.isfinite(value):
        return "not a finite number"
    return "not a number of 0 or more" if value < 0 else None


def _count(value: Any) -> str | None:
    """A count (trials, occurrences, a budget): a whole number a history's int64 holds."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "not a whole number"
    if not 0 <= value <= INT64_MAX:
        return f"not a whole number from 0 to {INT64_MAX}"
    return None


def _trial(value: Any) -> str | None:
    """A curve's trial number: a trial of 1e300 ended the plot in numpy's TypeError (the
    plot takes it as a whole number; one past int64 is no number numpy holds)."""
    what = _number(value)
    if what is None and value > INT64_MAX:
        return f"not a trial number from 0 to {INT64_MAX}"
    return what


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else "not a string"


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else "not true or false"


class _Each:
    """An object of any keys whose every value fits ``spec`` (``{"before": [...], ...}``)."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec


#: A curve's point: ``[trial, best latency]`` (more items are let be), the latency null where
#: the trials had failed.
_POINT = (_trial, _number)
_CURVE = [_POINT]
_LAYER = {
    "name": _text, "op_class": _text, "occurrences": _count, "flops": _number, "bytes": _number,
    "match_score": _number, "match": {"neighbours": [{"relation": _text}]}, "dispatch": _text, "tuner": _text,
    "trials": _count, "budget": _count, "probe": _flag, "resumed": _count, "exhausted": _flag,
    "rematched": {"from": _text, "at_trial": _count}, "handed_over": {"to": _text, "after_configs": _count},
    "other_batch": {"applied": _flag}, "best_latency": _number, "default_latency": _number, "speedup": _number,
    "share": _number, "curve": _CURVE,
}
#: What this module reads of a report, and what each must be where present and not null:
#: an object (a dict of fields), a list of items (``[spec]``), a point (a tuple) or a leaf
#: (a function saying what a value that does not fit should have been, else None).
#: Fields not named here are only passed on (``report --json``).
REPORT_SPEC = {
    "run_id": _text, "model": _text, "history": _text, "budget": _count, "history_was_empty": _flag,
    "target": {"kind": _text, "device_name": _text}, "batch": {"size": _count},
    "options": {"model_latency": _flag, "measure": {"timing": _text}},
    "roofline": {"peak_flops": _number, "peak_bw": _number, "cache_bw": _number, "cache_bytes": _number,
                 "load_per_core": _number},
    "model_latency_before": _number, "model_latency_after": _number, "model_latency_rounds": _Each([_number]),
    "model_latency_errors": _Each(_text), "model_layers_changed": _count, "model_changed_layers": [_text],
    "tunable_layers": _count, "concurrent_runs": [_text], "measure_seconds": _Each(_number),
    "measure_twins": _Each(_count), "tuners": _Each([_CURVE]), "layers": [_LAYER],
}


def check_report(report: Mapping[str, Any], name: str) -> None:
    """Refuse, in one line naming the field, a report whose values are not of the kinds
    :data:`REPORT_SPEC` says, or that holds NaN or Infinity anywhere (``report --json``
    printed them back, which no strict JSON reader takes; tune writes null)."""
    found = _non_finite(report) or _misfit(report, REPORT_SPEC, "")
    if found is not None:
        where, value, what = found
        raise AutotuneError(f"{name}: {where or 'the report'} is {_shown(value)}, {what}")


def _non_finite(data: Any) -> tuple[str, Any, str] | None:
    """The first NaN or Infinity in ``data``, anywhere. Iterative: JSON nested a few hundred
    deep parses, and a recursive walk would then overflow the stack."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where, value, "which JSON does not hold (a report holds null for a value not known)"
        if isinstance(value, Mapping):
            stack.extend((_field(where, k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return None


def _misfit(value: Any, spec: Any, where: str) -> tuple[str, Any, str] | None:
    """(where, value, what it should be) of the first value in ``value`` that does not fit
    ``spec``, or None. Null is a value not known: a field may be null, and a leaf (a
    failed trial's latency), but no layer, curve or point in a list is."""
    if isinstance(spec, dict):
        if not isinstance(value, Mapping):
            return where, value, "not an object"
        items = [(_field(where, key), value[key], sub) for key, sub in spec.items() if value.get(key) is not None]
    elif isinstance(spec, _Each):
        if not isinstance(value, Mapping):
            return where, value, "not an object"
        items = [(_field(where, key), item, spec.spec) for key, item in value.items()]
    elif isinstance(spec, (list, tuple)):
        if not isinstance(value, list):
            return where, value, "not a list"
        if isinstance(spec, tuple) and len(value) < len(spec):
            return where, value, f"not a list of {len(spec)} items"
        subs = spec if isinstance(spec, tuple) else [spec[0]] * len(value)
        items = [(f"{where}[{i}]", item, sub) for i, (item, sub) in enumerate(zip(value, subs))]
    else:
        what = None if value is None else spec(value)
        return None if what is None else (where, value, what)
    for item_where, item, sub in items:
        found = _misfit(item, sub, item_where)
        if found is not None:
            return found
    return None


#: A key written after a dot; others are written in brackets, quoted (``["a b"]``).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _field(where: str, key: Any) -> str:
    """``layers[3].best_latency``: where a field is, as a person would write it."""
    key = str(key)
    if _NAME.fullmatch(key):
        return f"{where}.{key}" if where else key
    return f"{where}[{_shown(key)}]"


#: The most characters of a string an error message quotes.
SHOWN_CHARS = 40


def _shown(value: Any) -> str:
    """A value as an error line quotes it: JSON's spelling, short, control characters escaped."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"a number of {len(str(abs(value)))} digits"
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        value = value[:SHOWN_CHARS] + "..."
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    return printable(json.dumps(value, ensure_ascii=False))


#: What an autotune or MLflow run id can look like (hex, as both make them); anything else
#: is neither looked up as a directory name under the home nor put into a search filter.
RUN_ID_PATTERN = re.compile(r"[0-9A-Za-z_-]{1,64}")


def _tagged_run(client: Any, autotune_run_id: str) -> str | None:
    """The MLflow run ``tune`` tagged with this autotune run id (the newest, should a
    copied store hold two), or None."""
    if not RUN_ID_PATTERN.fullmatch(autotune_run_id):
        return None
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return None
    runs = client.search_runs(
        experiments, filter_string=f"tags.`autotune.run_id` = '{autotune_run_id}'",
        order_by=["attributes.start_time DESC"], max_results=1,
    )
    if runs or len(autotune_run_id) < 4:
        return runs[0].info.run_id if runs else None
    # a prefix, as a run folder's name is taken: a run stopped before its report has no
    # folder, and its prefix was looked up as an MLflow run id's only
    try:
        runs = client.search_runs(
            experiments, filter_string=f"tags.`autotune.run_id` LIKE '{autotune_run_id}%'",
            order_by=["attributes.start_time DESC"], max_results=50,
        )
    except Exception:  # a server older than LIKE on tags: the full id is still taken
        return None
    tops = {r.data.tags.get("autotune.run_id"): r.info.run_id for r in reversed(runs)
            if r.data.tags.get("mlflow.parentRunId") is None}
    if len(tops) > 1:
        raise AutotuneError(f"run id prefix {autotune_run_id!r} matches {len(tops)} runs: {', '.join(sorted(tops)[:5])}")
    return next(iter(tops.values()), None)


#: An MLflow run id is 32 hex digits; a shorter start of one is looked up as a prefix.
_MLFLOW_PREFIX = re.compile(r"[0-9a-f]{4,31}")


def _run_by_prefix(client: Any, prefix: str) -> str | None:
    """The MLflow run whose id starts with ``prefix`` (as ``git`` takes a commit's), or None;
    a prefix two runs share is refused with both named."""
    if not _MLFLOW_PREFIX.fullmatch(prefix):
        return None
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return None
    try:
        runs = client.search_runs(experiments, filter_string=f"attributes.run_id LIKE '{prefix}%'", max_results=6)
    except Exception:  # a server older than LIKE on run ids: the full id is still taken
        return None
    ids = sorted(r.info.run_id for r in runs)
    if len(ids) > 1:
        raise AutotuneError(f"MLflow run id prefix {prefix!r} matches {len(ids)}{'+' if len(ids) > 5 else ''} runs: "
                            f"{', '.join(ids[:5])}")
    return ids[0] if ids else None


def _why_no_report_anywhere(run, uri: str, history: str | None) -> str:
    """:func:`_why_no_report`, said as history says it where history knows the tune (how
    it ended and how many records it left): the same run read one way by its full id and
    another by a prefix."""
    tags = run.data.tags
    autotune_id = tags.get("autotune.run_id")
    if autotune_id and not tags.get("mlflow.parentRunId") and run.info.status != "FINISHED":
        said = _why_not_found(autotune_id, uri, history)
        if said.startswith("run "):
            return f"{said}; MLflow run {run.info.run_id}"
    return _why_no_report(run)


def _why_no_report(run) -> str:
    """Why an MLflow run holds no report: a layer of a tune (whose parent has it), or a
    tune that ended before writing one. 'has no report.json artifact' said neither."""
    tags = run.data.tags
    parent = tags.get("mlflow.parentRunId")
    if parent:
        return f"MLflow run {run.info.run_id} is layer {run.info.run_name!r} of tune run {parent}: report that one"
    status = run.info.status
    where = f"autotune run {tags['autotune.run_id']}" if tags.get("autotune.run_id") else "the run"
    if status in ("KILLED", "FAILED"):
        return (f"MLflow run {run.info.run_id} ended {status.lower()} before its report was written; what {where} "
                "measured is in history (`autotune history runs`)")
    if status == "RUNNING":
        return f"MLflow run {run.info.run_id} is still running (or was killed outright): no report yet"
    return f"MLflow run {run.info.run_id} has no {REPORT_JSON} artifact"


#: How long the run ids tune gives are: a shorter id is a prefix of one.
AUTOTUNE_RUN_ID_LENGTH = 12


def _refuse_shared_prefix(prefix: str, history: str | None) -> None:
    """Refuse a prefix of two runs, the reports folder's and history's together, as
    ``history rm`` does: a run that failed before its report leaves no folder, and
    ``report 9`` took the one folder of two runs starting with 9 without a word."""
    if len(prefix) >= AUTOTUNE_RUN_ID_LENGTH:
        return
    runs = run_dir(prefix).parent
    try:
        found = {p.name for p in runs.iterdir() if p.name.startswith(prefix) and p.is_dir()}
    except OSError:
        found = set()
    found |= set(_history_run_ids(prefix, history))
    if len(found) > 1:
        listed = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise AutotuneError(f"run id prefix {prefix!r} matches {len(found)} runs: {listed}; give more characters")


def _history_run_ids(prefix: str, history: str | None) -> list[str]:
    """The ids of history's runs that start with ``prefix`` ([] where there is no history
    to ask: the report may well be elsewhere)."""
    from autotune.history import HistoryError, open_history, resolve_location
    from autotune.history.location import sqlite_file

    url = resolve_location(history)
    path = sqlite_file(url)
    if path is not None and not path.exists():
        return []
    try:
        with open_history(history, create=False, readonly=True) as store:
            return list(store.run_ids(prefix))
    except HistoryError:
        return []


def _history_run(store: HistoryStore, run_id: str) -> dict[str, Any] | None:
    """History's row of the run ``run_id`` names: its whole id, or a prefix of one run's
    alone, as ``report`` takes one of a run folder's name (None for a prefix of several)."""
    run = store.run(run_id)
    if run is None:
        found = [r for r in (store.run(i) for i in store.run_ids(run_id)) if r is not None]
        run = found[0] if len(found) == 1 else None
    return run


def _report_history_names(run_id: str, history: str | None) -> Path | None:
    """The report.json a run's history entry says its ``--out-dir`` holds, where it does:
    the pointer in the home's runs folder is not written where that folder cannot be."""
    from autotune.history import HistoryError, open_history
    from autotune.history.location import no_history_yet

    if no_history_yet(history):
        return None
    try:
        with open_history(history, create=False, readonly=True) as store:
            run = _history_run(store, run_id)
    except HistoryError:
        return None
    summary = run.get("summary") if run is not None else None
    folder = summary.get("report_dir") if isinstance(summary, dict) else None
    if not isinstance(folder, str):
        return None
    path = Path(folder) / REPORT_JSON
    return path if path.is_file() else None


def _why_not_found(run_id: str, uri: str, history: str | None) -> str:
    """A run id tune gave that has no report anywhere: history knows the run (the runs
    table has every tune, with ``--no-mlflow`` too) and says why, where it holds it. A
    killed ``--no-mlflow`` tune was 'neither a directory with report.json nor a run in
    tracking store ...', which read as a mistyped id."""
    plain = f"{run_id!r} is neither a directory with {REPORT_JSON} nor a run in tracking store {uri}"
    if not RUN_ID_PATTERN.fullmatch(run_id):
        return plain
    from autotune.history import HistoryError, mask_url, open_history, resolve_location
    from autotune.history.location import history_option, sqlite_file

    url = resolve_location(history)
    path = sqlite_file(url)
    if path is not None and not path.exists():
        return plain + f", nor in history at {mask_url(url)}"
    try:
        with open_history(history, create=False, readonly=True) as store:
            run = _history_run(store, run_id)
    except HistoryError:
        return plain
    if run is None:
        return plain + f", nor in history at {mask_url(url)}"
    why = {
        "killed": "it was stopped before the end",
        "failed": "it failed before the end",
        "running": "it is still running, or was killed outright",
    }.get(run["status"], f"it ended {run['status']}, but its report is neither in {run_dir(run['run_id'])} nor in MLflow")
    return (f"run {run['run_id']} ({run['model']} on {run['target_key']}) has no report: {why}; what it measured "
            f"({run['n_records']} records) is in history at {mask_url(url)} (`autotune history runs{history_option(mask_url(url))}`)")


def artifacts_on_disk(run_id_or_dir: str | os.PathLike[str], report: Mapping[str, Any], *,
                      history: str | None = None) -> list[Path]:
    """The files tune wrote beside the report ``load_report`` read, where that was a local
    folder holding them all: ``report`` then needs to write none again (it wrote a
    folder of copies into the working directory at every call)."""
    path = Path(run_id_or_dir).expanduser()
    folder = path if path.is_dir() else (path.parent if path.is_file() else None)
    if folder is None and RUN_ID_PATTERN.fullmatch(str(report.get("run_id") or "")):
        run_id = str(report["run_id"])
        try:
            found = _local_report(run_id) or _report_history_names(run_id, history)
        except AutotuneError:
            found = None
        folder = found.parent if found is not None else None
    if folder is None:
        return []
    files = [folder / name for name in ARTIFACT_NAMES]
    if not all(f.is_file() for f in files):
        return []
    # the model's layers too: `report` listed 4 of the folder's 6 files
    return files + [folder / name for name in DECOMPOSITION_NAMES if (folder / name).is_file()]


def load_report(run_id_or_dir: str | os.PathLike[str], tracking_uri: str | None = None, *, history: str | None = None) -> dict[str, Any]:
    """Load a report from a directory (or file) holding report.json, from an autotune run id
    (what ``tune`` and ``history runs`` print), or from an MLflow run id.

    An autotune run id is looked up first in ``runs/RUN_ID`` under the autotune home, where
    ``tune`` writes its report unless ``--out-dir`` moved it, then among MLflow runs tagged
    with it. An MLflow run's ``report.json`` artifact is downloaded through MlflowClient from
    the store that ``Tracker.create`` would use (argument, then MLFLOW_TRACKING_URI, then the
    local default).
    """
    path = Path(run_id_or_dir).expanduser()
    if path.is_dir():
        candidate = path / REPORT_JSON
        if not candidate.is_file():
            raise AutotuneError(f"no {REPORT_JSON} in directory {path}")
        return _read_report_file(candidate)
    if path.is_file():
        return _read_report_file(path)

    run_id = str(run_id_or_dir).strip()
    if RUN_ID_PATTERN.fullmatch(run_id):
        _refuse_shared_prefix(run_id, history)
        local = _local_report(run_id) or _report_history_names(run_id, history)
        if local is not None:
            return _read_report_file(local)
    from autotune.tracking import _fast_fail_http, _one_line, _quiet_mlflow, _sqlite_path, env_defaults, open_client, resolve_tracking_uri

    resolved = resolve_tracking_uri(tracking_uri)
    store_file = _sqlite_path(resolved)
    if store_file is not None and not store_file.exists():  # no runs there: not made just to be asked
        raise AutotuneError(_why_not_found(run_id, resolved, history))
    client, uri = open_client(tracking_uri)
    quiet = env_defaults(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
    try:
        with _quiet_mlflow(), _fast_fail_http(uri), quiet:
            from mlflow.exceptions import MlflowException

            try:
                found = client.get_run(run_id)
            except MlflowException as exc:
                if exc.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                    raise
                tagged = _tagged_run(client, run_id) or _run_by_prefix(client, run_id)
                if tagged is None:
                    raise AutotuneError(_why_not_found(run_id, uri, history)) from None
                run_id = tagged
                found = client.get_run(run_id)
            with tempfile.TemporaryDirectory(prefix="autotune-report-") as tmp:
                try:
                    local = client.download_artifacts(run_id, REPORT_JSON, tmp)
                except Exception:  # a missing artifact surfaces as various mlflow/OS errors
                    raise AutotuneError(_why_no_report_anywhere(found, uri, history)) from None
                return _read_report_file(Path(local), f"{REPORT_JSON} of MLflow run {run_id}")
    except AutotuneError:
        raise
    except Exception as exc:
        raise AutotuneError(f"cannot load run {run_id} from {uri}: {_one_line(exc)}") from None
