"""JSON export/import of history, to move tuning results between machines.

Records carry workload and target *keys* (ids are local to one database). Import checks
the whole file before writing and writes in one transaction: a bad file changes nothing,
and importing the same file twice adds nothing the second time.

The runs that wrote the records travel too (``runs``, optional: files written before
2026-11-27 have none, and readers before then skip it): imported history listed no runs,
and ``history rm`` pointed to ``history runs`` for ids it then could not show.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Mapping

from sqlalchemy import insert, select, update

from . import schema
from .errors import HistoryError
from .location import remove_orphaned_temporaries, temporary_beside
from .models import (RECORD_STATUSES, RECORD_TIMINGS, RUN_STATUSES, TargetInfo, WorkloadInfo, canonical_json, sample_stats,
                     split_target_key)
from .store import _PG_IMPORT_LOCK, HistoryStore

FORMAT = "autotune-history"
VERSION = 1

_TARGET_FIELDS = ("kind", "arch", "device_name", "driver_version", "runtime_version", "tvm_version")


#: Records an export reads at a time (history.store.iter_records).
EXPORT_PAGE = 5000
#: Times an export to a file is written before a history that keeps changing under it
#: (runs removed between its pages, :class:`HistoryChanged`) is said.
EXPORT_ATTEMPTS = 3


class HistoryChanged(HistoryError):
    """A run was removed between two pages of an export read page by page."""


def _record_to_json(rec: Any) -> dict[str, Any]:
    return {
        "workload_key": rec.workload_key,
        "target_key": rec.target_key,
        "space_id": rec.space_id,
        "config": rec.config,
        "latency_median": rec.latency_median,
        "latency_mean": rec.latency_mean,
        "latency_std": rec.latency_std,
        "repeats": rec.repeats,
        "samples": list(rec.samples),
        "status": rec.status,
        "error": rec.error,
        "verified": rec.verified,
        "twin": rec.twin,
        "timing": rec.timing,
        "run_id": rec.run_id,
        "tuner": rec.tuner,
        "created_at": rec.created_at,
    }


def _run_to_json(run: Mapping[str, Any]) -> dict[str, Any]:
    return {name: run[name] for name in ("run_id", "model", "target_key", "tuner", "params", "status", "started_at",
                                         "finished_at", "summary")}


def export_json(
    store: HistoryStore,
    fp_or_path: str | os.PathLike[str] | IO[str],
    *,
    workload_key: str | None = None,
    target_key: str | None = None,
) -> int:
    """Write history (optionally one workload/target) as JSON; returns the number of records.

    A path is written atomically (temp file + rename), so a failed export leaves no half file.
    Records are written as they are read, a page at a time: the text is what one
    ``json.dumps(document, indent=1, sort_keys=True)`` wrote, which held every record
    three times over (10.7 GB for a million).
    """
    if hasattr(fp_or_path, "write"):
        with store.snapshot():
            return _write_export(store, fp_or_path.write, workload_key, target_key)  # type: ignore[union-attr]
    given = os.fspath(fp_or_path)  # type: ignore[arg-type]
    if given.endswith(("/", os.sep)):  # written as a file of the folder's name
        raise HistoryError(f"cannot export history to {given}: the name ends in '/', a folder's; give a file name")
    path = os.path.abspath(os.path.expanduser(given))  # `export '~/e.json'` wrote ./~/e.json
    directory = os.path.dirname(path)
    if _is_sqlite_file(path):
        # `history export --history h.db h.db` (or another database) replaced it with JSON
        raise HistoryError(f"refusing to export history over {path}: it is a SQLite database (name another file)")
    if not _replaceable(path):
        # `history export model.onnx` replaced the user's model with JSON
        raise HistoryError(f"refusing to export history over {path}: it is not an earlier export (name another file, "
                           "or remove it first)")
    try:
        os.makedirs(directory, exist_ok=True)  # as `tune --out` and `compile -o` make theirs
        remove_orphaned_temporaries(Path(directory))  # what exports killed midway left there
        # a name that says whose it is: killed mid-export (the whole export, now that it
        # streams), the file is removed by a later write to the folder once that process
        # is gone (remove_orphaned_temporaries above); mode 0666 less the umask,
        # as any new file (mkstemp's 0600 was chmod-ed: an export is meant to be shared)
        tmp = str(temporary_beside(Path(directory), ".json.tmp"))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        from .sqlite_db import why_not_creatable

        # a file where a folder of the path should be said "File exists"
        raise HistoryError(f"cannot export history to {path}: {why_not_creatable(path) or exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            for attempt in range(1, EXPORT_ATTEMPTS + 1):
                # it wrote plain JSON to x.json.gz. zlib's own gzip header (no name, no time), as
                # ``gzip.compress(data, mtime=0)`` wrote it: an export of the same history is the
                # same bytes, as it was before exports were streamed
                packer = zlib.compressobj(9, zlib.DEFLATED, 31) if path.endswith(".gz") else None

                def write(text: str) -> None:
                    data = text.encode("utf-8")
                    fh.write(packer.compress(data) if packer is not None else data)

                try:
                    with store.snapshot():  # records, runs and workloads of one state of history
                        count = _write_export(store, write, workload_key, target_key)
                except HistoryChanged:
                    if attempt == EXPORT_ATTEMPTS:
                        raise
                    fh.seek(0)  # a file can be written again; standard output cannot
                    fh.truncate()
                    continue
                break
            if packer is not None:
                fh.write(packer.flush())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise HistoryError(f"cannot export history to {path}: {exc.strerror or exc}") from None
        raise
    return count


def _write_export(store: HistoryStore, write, workload_key: str | None, target_key: str | None) -> int:
    """The export document, key by key in sorted order, its records as they are read;
    returns how many records it wrote."""
    used_workloads: set[str] = set()
    used_targets: set[str] = set()
    wrote_runs: set[str | None] = set()
    count = 0
    runs_before = {run["run_id"] for run in store.runs()}

    def records():
        nonlocal count
        for rec in store.iter_records(page=EXPORT_PAGE, workload_key=workload_key, target_key=target_key):
            used_workloads.add(rec.workload_key)
            used_targets.add(rec.target_key)
            wrote_runs.add(rec.run_id)
            count += 1
            yield _record_to_json(rec)

    def runs():
        listed = store.runs()
        gone = (runs_before - {run["run_id"] for run in listed}) & wrote_runs
        if gone:  # removed between two pages of records (no snapshot(): a rollback journal)
            raise HistoryChanged(f"history changed during the export (run {sorted(gone)[0]} was removed after "
                                 "some of its records were written); export again")
        if workload_key is not None or target_key is not None:
            listed = [run for run in listed if run["run_id"] in wrote_runs]
        return [_run_to_json(run) for run in listed]

    # An export carries what its records need (plus a named workload/target): a workload
    # stays in history when the last run that measured it is removed (a tune running
    # meanwhile may be about to), and an export after `history rm` listed 52 workloads
    # beside 40 records, the removed run's shapes among them. Read after the records
    # ("records" sorts first), so that each record's workload and target are there.
    def targets():
        return [{"key": t.key, **{f: getattr(t, f) for f in _TARGET_FIELDS}}
                for t in store.targets() if t.key in used_targets or t.key == target_key]

    def workloads():
        return [
            {
                "key": w.key,
                "batch_invariant_key": w.batch_invariant_key,
                "op_class": w.op_class,
                "descriptor": dict(w.descriptor),
                "flops": w.flops,
                "features": list(w.features),
            }
            for w in store.workloads() if w.key in used_workloads or w.key == workload_key
        ]

    parts = {"format": lambda: FORMAT, "records": records, "runs": runs, "targets": targets, "version": lambda: VERSION,
             "workloads": workloads}
    write("{")
    for i, key in enumerate(sorted(parts)):
        write(("," if i else "") + f"\n {json.dumps(key)}: ")
        if key != "records":
            write(_dumps(parts[key]()).replace("\n", "\n "))
            continue
        first = True
        for item in records():
            write(("[\n  " if first else ",\n  ") + _dumps(item).replace("\n", "\n  "))
            first = False
        write("[]" if first else "\n ]")
    write("\n}\n")
    return count


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, allow_nan=False)


def _replaceable(path: str) -> bool:
    """An export may replace what is not there, an empty file, or an earlier export."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        return True
    except OSError:
        return True  # the write says why it cannot
    if not head:
        return True
    if head[:2] == _GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(4096)
        except _GZIP_ERRORS:
            return False
    return f'"format": "{FORMAT}"'.encode() in head


#: The first bytes of a gzip file, and of a SQLite database.
_GZIP_MAGIC = b"\x1f\x8b"
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: What reading a damaged gzip file raises: a bad header, CRC or length is an OSError
#: (BadGzipFile), one cut short an EOFError, and a damaged deflate stream zlib.error,
#: which is neither (a fuzzing trial's traceback).
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


def export_text(data: bytes, name: str) -> str:
    """An export file's bytes as JSON text: gunzipped where gzip (``history export x.json.gz``
    writes it so), less a UTF-8 byte-order mark; a SQLite database or other binary data is
    refused as what it is (it read "'utf-8' codec can't decode byte 0x8b")."""
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except _GZIP_ERRORS as exc:
            raise HistoryError(f"cannot import {name}: a damaged gzip file ({exc})") from None
    if data[:16] == _SQLITE_MAGIC:
        raise HistoryError(f"cannot import {name}: it is a SQLite history, not an export (open it with --history, "
                           "or `autotune history export --history FILE` it first)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise HistoryError(f"cannot import {name}: not a JSON export (binary data)") from None


def _is_sqlite_file(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


# ------------------------------------------------------------------ validation


class _Invalid(Exception):
    """A problem at a path inside the document, turned into one HistoryError line."""


#: What an imported latency may be, in seconds: no kernel runs in under a nanosecond
#: (a call costs more), and no measurement here waits an hour.
MIN_LATENCY = 1e-9
MAX_LATENCY = 3600.0
#: The largest integer a history column holds (SQLite's and PostgreSQL's BIGINT).
MAX_INT64 = 2**63 - 1


def _get(obj: Mapping[str, Any], where: str, name: str, kinds: tuple[type, ...], *, required: bool = True,
         default: Any = None, nullable: bool = False) -> Any:
    if name not in obj:
        if required:
            raise _Invalid(f"{where}: missing field {name!r}")
        return default
    value = obj[name]
    if value is None and nullable:
        return None
    # bool is an int subclass: never accept True where a number is meant.
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        expected = " or ".join(k.__name__ for k in kinds) + (" or null" if nullable else "")
        raise _Invalid(f"{where}.{name}: expected {expected}, got {type(value).__name__}")
    return value


def _number(obj: Mapping[str, Any], where: str, name: str, **kw: Any) -> float | None:
    value = _get(obj, where, name, (int, float), **kw)
    if value is None:
        return None
    value = _finite(value)
    if value is None:
        raise _Invalid(f"{where}.{name}: must be a finite number")
    return value


def _finite(value: int | float) -> float | None:
    """``value`` as a finite float, or None: an integer past a float's range (10**400)
    raised OverflowError from ``float()``, a traceback for the user."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _numbers(obj: Mapping[str, Any], where: str, name: str, *, required: bool = True) -> list[float]:
    values = _get(obj, where, name, (list,), required=required, default=[])
    out = []
    for i, v in enumerate(values):
        number = None if isinstance(v, bool) or not isinstance(v, (int, float)) else _finite(v)
        if number is None:
            raise _Invalid(f"{where}.{name}[{i}]: expected a finite number, got {str(v)[:40]}")
        out.append(number)
    return out


def _items(doc: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    items = _get(doc, "file", name, (list,))
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _Invalid(f"{name}[{i}]: expected an object, got {type(item).__name__}")
    return items


def _parse_target(item: Mapping[str, Any], where: str) -> TargetInfo:
    kw = {f: _get(item, where, f, (str,), required=f in ("kind", "arch", "device_name"), default="") for f in _TARGET_FIELDS}
    target = TargetInfo(**kw)
    key = _get(item, where, "key", (str,), required=False)
    if key is not None and key != target.key:
        raise _Invalid(f"{where}.key: {key!r} does not match kind:arch:device_name {target.key!r}")
    return target


def _parse_workload(item: Mapping[str, Any], where: str) -> WorkloadInfo:
    return WorkloadInfo(
        key=_get(item, where, "key", (str,)),
        batch_invariant_key=_get(item, where, "batch_invariant_key", (str,)),
        op_class=_get(item, where, "op_class", (str,)),
        descriptor=_get(item, where, "descriptor", (dict,)),
        flops=_number(item, where, "flops"),  # type: ignore[arg-type]
        features=tuple(_numbers(item, where, "features", required=False)),
    )


def _parse_record(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    status = _get(item, where, "status", (str,))
    if status not in RECORD_STATUSES:
        raise _Invalid(f"{where}.status: {status!r} is not one of {', '.join(RECORD_STATUSES)}")
    samples = _numbers(item, where, "samples")
    if any(s < 0 for s in samples):
        raise _Invalid(f"{where}.samples: latencies must be >= 0 seconds")
    if any(s > MAX_LATENCY for s in samples):  # 1e308 overflowed numpy's mean, with warnings printed
        raise _Invalid(f"{where}.samples: a latency past {MAX_LATENCY:g} seconds is none a measurement gives")
    created_at = _timestamp(item, where, "created_at")
    mean, median, std, repeats = sample_stats(samples)
    computed = (mean, median, std)
    # Stored statistics are kept as exported (they identify duplicates); missing ones are
    # recomputed. None may be negative, nor say other than the samples do: the fastest
    # record is the one history reuses, and a -0.5 s median imported won every layer.
    stats = {}
    for i, name in enumerate(("latency_mean", "latency_median", "latency_std")):
        value = _number(item, where, name, nullable=True) if name in item else computed[i]
        if value is not None and value < 0:
            raise _Invalid(f"{where}.{name}: must be >= 0 seconds")
        if samples and value is not None and not math.isclose(value, computed[i], rel_tol=1e-6, abs_tol=1e-15):
            raise _Invalid(f"{where}.{name}: {value!r} is not what its samples give ({computed[i]!r})")
        stats[name] = value
    mean, median, std = stats["latency_mean"], stats["latency_median"], stats["latency_std"]
    if status == "ok" and median == 0:
        raise _Invalid(f"{where}.latency_median: an 'ok' record's latency must be > 0 seconds")
    if status == "ok" and median is not None and not MIN_LATENCY <= median <= MAX_LATENCY:
        # a 1e-30 s record imported won every layer it matched ("0.0 ns")
        raise _Invalid(f"{where}.latency_median: {median!r} seconds is no kernel's time "
                       f"(a measurement gives {MIN_LATENCY:g} to {MAX_LATENCY:g})")
    if "repeats" in item:
        repeats = _get(item, where, "repeats", (int,))
        if not 0 <= repeats <= MAX_INT64:  # 10**30 stopped the import in SQLite's OverflowError traceback
            raise _Invalid(f"{where}.repeats: must be >= 0 and at most {MAX_INT64}")
        if samples and repeats != len(samples) or not samples and repeats:
            raise _Invalid(f"{where}.repeats: {repeats} is not what its samples give ({len(samples)})")
    if status == "ok" and median is None:
        raise _Invalid(f"{where}: status 'ok' needs a latency (samples or latency_median)")
    # files before 2026-12-07 have none, and null is how a database keeps it: TVM's
    # evaluator timed every record then
    timing = _get(item, where, "timing", (str,), required=False, nullable=True) or RECORD_TIMINGS[0]
    if timing not in RECORD_TIMINGS:
        raise _Invalid(f"{where}.timing: {timing!r} is not one of {', '.join(RECORD_TIMINGS)}")
    target_key = _get(item, where, "target_key", (str,))
    if timing != RECORD_TIMINGS[0] and split_target_key(target_key)[0] != "cuda":
        # `history best` said "timed queued" of a CPU record, which no tune makes
        raise _Invalid(f"{where}.timing: {timing!r} times CUDA kernels, and the record is of {target_key}")
    return {
        "workload_key": _get(item, where, "workload_key", (str,)),
        "target_key": target_key,
        "space_id": _get(item, where, "space_id", (str,)),
        "config": _get(item, where, "config", (dict,)),
        "samples": samples,
        "stats": (mean, median, std, repeats),
        "status": status,
        "error": _get(item, where, "error", (str,), required=False, nullable=True),
        "verified": _get(item, where, "verified", (bool,), required=False, nullable=True),
        "twin": _get(item, where, "twin", (bool,), required=False, default=False),
        "timing": timing,
        "run_id": _get(item, where, "run_id", (str,), required=False, nullable=True),
        "tuner": _get(item, where, "tuner", (str,), required=False, default="") or "",
        "created_at": created_at,
    }


def _timestamp(item: Mapping[str, Any], where: str, name: str, *, nullable: bool = False) -> str | None:
    value = _get(item, where, name, (str,), nullable=nullable)
    if value is not None:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise _Invalid(f"{where}.{name}: {value!r} is not an ISO-8601 timestamp") from None
    return value


def _parse_run(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    run_id = _get(item, where, "run_id", (str,))
    if not run_id.strip():
        raise _Invalid(f"{where}.run_id: must not be empty")
    # the columns' lengths, which PostgreSQL enforces (SQLite would take any)
    for field, most in (("run_id", schema.runs.c.id.type.length), ("tuner", schema.runs.c.tuner.type.length)):
        value = item.get(field)
        if isinstance(value, str) and len(value) > most:
            raise _Invalid(f"{where}.{field}: longer than {most} characters")
    status = _get(item, where, "status", (str,))
    if status not in RUN_STATUSES:
        raise _Invalid(f"{where}.status: {status!r} is not one of {', '.join(RUN_STATUSES)}")
    return {
        "run_id": run_id,
        "model": _get(item, where, "model", (str,)),
        "target_key": _get(item, where, "target_key", (str,)),
        "tuner": _get(item, where, "tuner", (str,)),
        "params": _get(item, where, "params", (dict,)),
        "status": status,
        "started_at": _timestamp(item, where, "started_at"),
        "finished_at": _timestamp(item, where, "finished_at", nullable=True),
        "summary": _get(item, where, "summary", (dict,), required=False, nullable=True),
    }


def _parse(doc: Any, *, consume: bool = False) -> tuple[list[TargetInfo], list[WorkloadInfo], list[dict[str, Any]], list[dict[str, Any]]]:
    if not isinstance(doc, dict):
        raise _Invalid(f"expected a JSON object at top level, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise _Invalid(f"not an autotune history export (format is {doc.get('format')!r}, expected {FORMAT!r})")
    version = doc.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise _Invalid(f"unsupported version {version!r} (this autotune reads version {VERSION})")
    targets = [_parse_target(t, f"targets[{i}]") for i, t in enumerate(_items(doc, "targets"))]
    workloads = [_parse_workload(w, f"workloads[{i}]") for i, w in enumerate(_items(doc, "workloads"))]
    raw = _items(doc, "records")
    records = []
    for i in range(len(raw)):
        records.append(_parse_record(raw[i], f"records[{i}]"))
        if consume:  # each raw record let go once parsed: the two lists were held whole at once
            raw[i] = None
    runs = [_parse_run(r, f"runs[{i}]") for i, r in enumerate(_items(doc, "runs"))] if "runs" in doc else []
    return targets, workloads, records, runs


#: A character no UTF-8 text holds: half of a UTF-16 surrogate pair, alone.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: A JSON string escape: a high surrogate's (group 1), a low one's (group 2), or another
#: (``\\`` among them: ``\\ud800`` is a backslash and "ud800", no surrogate).
_ESCAPE = re.compile(r"\\(?:u[dD]([89abAB][0-9a-fA-F]{2})|u[dD]([c-fC-F][0-9a-fA-F]{2})|.)", re.DOTALL)


def _holds_lone_surrogate(text: str) -> bool:
    """Whether JSON ``text`` parses to a string holding a lone surrogate: spelled as an
    escape (``\\ud800``) other than a pair's halves, as ``ensure_ascii`` writes a character
    past U+FFFF (an emoji: ``\\ud83d\\ude00``), or held as it is (a stream read with
    ``errors="surrogateescape"``). A scan of the text: walking the parsed document
    (:func:`_refuse_lone_surrogates`, for the field to name) took 7 s at 120,000 records."""
    if not text.isascii() and _SURROGATE.search(text):
        return True
    if "\\ud" not in text and "\\uD" not in text:
        return False
    due = -1  # where the last high half's escape ended: its low half belongs there
    for escape in _ESCAPE.finditer(text):
        high, low = escape.group(1), escape.group(2)
        if low is not None:
            if escape.start() != due:  # a low half with no high half before it
                return True
            due = -1
        elif due >= 0:  # a high half with no low half after it
            return True
        else:
            due = escape.end() if high is not None else -1
    return due >= 0


def _refuse_lone_surrogates(doc: Any) -> None:
    """Raise :class:`_Invalid` naming the first string or key of ``doc`` that holds a lone
    surrogate (JSON's ``"\\ud800"``). No UTF-8 history holds one: sqlite3 refused it inside
    the import's transaction, which rolled back, but opening the history to write had
    already changed its header's bytes (or created it). Checked here, before it is opened."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                raise _Invalid(f"{where}: {value[:40]!r} holds a lone surrogate, which UTF-8 text cannot hold")
        elif isinstance(value, Mapping):
            for key in value:
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise _Invalid(f"{where or 'the document'}: a key ({key[:40]!r}) holds a lone surrogate, which UTF-8 "
                                   "text cannot hold")
            stack.extend((value[key], f"{where}.{key}" if where else str(key)) for key in reversed(list(value)))
        elif isinstance(value, (list, tuple)):
            stack.extend((value[i], f"{where}[{i}]") for i in reversed(range(len(value))))


@dataclass(frozen=True)
class Export:
    """An export read and checked whole (:func:`read_export`), not yet merged anywhere."""

    name: str
    targets: list[TargetInfo]
    workloads: list[WorkloadInfo]
    records: list[dict[str, Any]]
    runs: list[dict[str, Any]]


def read_export(fp_or_path: str | os.PathLike[str] | IO[str]) -> Export:
    """An export file (or stream) read and checked whole: a bad one is refused before a
    history is opened for writing (which rewrites the file's header, changing its bytes)."""
    if hasattr(fp_or_path, "read"):
        name = getattr(fp_or_path, "name", "<stream>")
        try:
            text = fp_or_path.read()  # type: ignore[union-attr]
        except (OSError, UnicodeDecodeError) as exc:
            raise HistoryError(f"cannot read history import {name}: {exc}") from None
    else:
        name = os.fspath(fp_or_path)  # type: ignore[arg-type]
        try:
            with open(name, "rb") as fh:
                text = export_text(fh.read(), name)
        except OSError as exc:
            raise HistoryError(f"cannot read history import {name}: {exc.strerror or exc}") from None
    if isinstance(text, bytes):
        text = export_text(text, name)
    return read_export_text(text, name)


def read_export_text(text: str, name: str) -> Export:
    """:func:`read_export` of the text in hand (the CLI's, read from a file or standard
    input): a stream of it held the text a second time."""

    def _reject_constant(token: str) -> Any:
        raise ValueError(f"{token} is not valid JSON")

    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise HistoryError(f"cannot import {name}: not valid JSON ({exc})") from None
    except RecursionError:  # 100,000 nested brackets: the decoder's traceback, 23 lines
        raise HistoryError(f"cannot import {name}: nested too deep to be a history export") from None
    try:
        if _holds_lone_surrogate(text):  # the document walked only then, for the field to name
            _refuse_lone_surrogates(doc)
        return Export(name, *_parse(doc, consume=True))  # a document of our own, read from the text
    except _Invalid as exc:
        raise HistoryError(f"cannot import {name}: {exc}; nothing was imported") from None


def check_references(export: Export, store: HistoryStore | None) -> None:
    """Refuse, before history is opened for writing (which rewrites its header), an
    export whose records or runs name a workload or target neither the file nor
    ``store`` (None: a history not created yet) holds; inside the import's transaction
    such a file was rolled back, but its bytes had changed."""
    workloads = {w.key for w in export.workloads} | ({w.key for w in store.workloads()} if store is not None else set())
    targets = {t.key for t in export.targets} | ({t.key for t in store.targets()} if store is not None else set())
    where = f"history at {store.location}" if store is not None else "history (not created yet)"
    for section, items in (("records", export.records), ("runs", export.runs)):
        for i, item in enumerate(items):
            for kind, key, known in (("workload", item.get("workload_key"), workloads), ("target", item["target_key"], targets)):
                if key is not None and key not in known:
                    raise HistoryError(f"cannot import {export.name}: {section}[{i}]: unknown {kind} {key!r}: neither the "
                                       f"file nor {where} has it; nothing was imported")


def import_json(
    store: HistoryStore, source: str | os.PathLike[str] | IO[str] | Mapping[str, Any] | Export
) -> dict[str, Any]:
    """Merge an export (a file, a stream, the parsed JSON document, or one
    :func:`read_export` read) into ``store`` in one transaction; returns counts of what
    was added/skipped.

    Duplicates (same workload, target, space, config, created_at and median) are skipped,
    so importing the same file again is a no-op. Where the file's versions of a target
    (TVM, driver, runtime) differ from those history keeps, ``versions_differ`` says so:
    history keeps one set per target, the first known.
    """
    if isinstance(source, Mapping):  # json.load(f) in hand: os.fspath refused it with a TypeError
        try:
            _refuse_lone_surrogates(source)
            source = Export("<document>", *_parse(source))
        except _Invalid as exc:
            raise HistoryError(f"cannot import the document: {exc}; nothing was imported") from None
    elif not isinstance(source, (Export, str, os.PathLike)) and not hasattr(source, "read"):
        raise HistoryError(f"cannot import a {type(source).__name__}: give a file, a stream or the parsed document")
    export = source if isinstance(source, Export) else read_export(source)
    name, targets, workloads, records = export.name, export.targets, export.workloads, export.records
    counts = {"added": 0, "skipped": 0, "targets_added": 0, "workloads_added": 0, "runs_added": 0}
    r = schema.records
    held = {t.key: t for t in store.targets()}
    # A target's versions are kept once, the first known: records made with another TVM
    # went in under the versions history holds, unsaid (and a merge's labels hung on its order)
    differ = [f"{t.key}: {field.replace('_version', '')} {getattr(held[t.key], field)} in history, {getattr(t, field)} in {name}"
              for t in targets if t.key in held for field in ("tvm_version", "driver_version", "runtime_version")
              if getattr(held[t.key], field) and getattr(t, field) and getattr(held[t.key], field) != getattr(t, field)]
    if differ:
        counts["versions_differ"] = differ  # type: ignore[assignment]
    with store._write("import") as conn:
        store._serialize(conn, _PG_IMPORT_LOCK)
        for target in targets:
            counts["targets_added"] += store._target_id_created(conn, target)[1]
        for workload in workloads:
            counts["workloads_added"] += store._workload_id_created(conn, workload)[1]
        target_ids: dict[str, int] = {}
        workload_ids: dict[str, int] = {}
        for i, rec in enumerate(records):
            try:
                if rec["workload_key"] not in workload_ids:
                    workload_ids[rec["workload_key"]] = store._workload_id(conn, rec["workload_key"])
                if rec["target_key"] not in target_ids:
                    target_ids[rec["target_key"]] = store._target_id(conn, rec["target_key"])
            except HistoryError as exc:
                raise HistoryError(f"cannot import {name}: records[{i}]: {exc}; nothing was imported") from None
        # Duplicates found in one read of what history holds of these workloads, and the
        # rest inserted in batches as they are made: a query and an insert per record took
        # 226 s for an export of 120,000 records, and every row made first held them all.
        held = _record_identities(conn, sorted(set(workload_ids.values())))
        batch: list[dict[str, Any]] = []
        run_ids: set[str] = set()
        for i, rec in enumerate(records):
            try:
                values = store._record_values(
                    space_id=rec["space_id"],
                    config=rec["config"],
                    samples=rec["samples"],
                    status=rec["status"],
                    error=rec["error"],
                    run_id=rec["run_id"],
                    tuner=rec["tuner"],
                    verified=rec["verified"],
                    twin=rec["twin"],
                    timing=rec["timing"],
                    stats=rec["stats"],
                    created_at=rec["created_at"],
                )
            except ValueError as exc:
                raise HistoryError(f"cannot import {name}: records[{i}]: {exc}; nothing was imported") from None
            values["workload_id"] = workload_ids[rec["workload_key"]]
            values["target_id"] = target_ids[rec["target_key"]]
            identity = _identity(values)
            if identity in held:
                counts["skipped"] += 1
                continue
            held.add(identity)
            if values.get("run_id"):
                run_ids.add(values["run_id"])
            batch.append(values)
            counts["added"] += 1
            if len(batch) == _INSERT_BATCH:
                conn.execute(insert(r), batch)
                batch = []
        if batch:
            conn.execute(insert(r), batch)
        counts["runs_added"] = _import_runs(store, conn, name, export.runs)
    # A file exported before runs travelled (2026-11-27) carries none: its records came
    # in, and `history runs`, `history rm` and compile's batch-norm hint knew nothing of
    # them, unsaid.
    # (each run looked up by id: store.runs() counts every run's records, a pass over history)
    unknown = sum(1 for run_id in run_ids if store.run(run_id) is None)
    if unknown:
        counts["runs_unknown"] = unknown
    return counts


#: Records inserted per statement on import.
_INSERT_BATCH = 1000
#: Columns that make two records one (an import of the same file again adds nothing).
_IDENTITY = ("workload_id", "target_id", "space_id", "config_hash", "created_at", "latency_median")


def _identity(values: Mapping[str, Any]) -> tuple:
    return tuple(values[c] for c in _IDENTITY)


def _record_identities(conn, workload_ids: list[int]) -> set[tuple]:
    """The identities of every record history holds for ``workload_ids``."""
    r = schema.records
    held: set[tuple] = set()
    for start in range(0, len(workload_ids), 500):  # bound parameters per statement
        query = select(*(r.c[c] for c in _IDENTITY)).where(r.c.workload_id.in_(workload_ids[start:start + 500]))
        held.update(tuple(row) for row in conn.execute(query))
    return held


#: The summary of a run exported while it ran: here it writes nothing more.
IMPORTED_WHILE_RUNNING = {"reason": "exported while it was running; nothing more of it reaches this history"}


def _import_runs(store: HistoryStore, conn: Any, name: str, runs: list[dict[str, Any]]) -> int:
    """The runs history lacks, as they were. A run exported while it ran is stored as
    killed: it writes into its own history, not this one, and as 'running' here no
    `history rm` could remove it (a run on another host is never found stale). Imported
    again once it ended, it takes its final state; any other run id history holds is
    left alone (the same file imported again, or the run's own history)."""
    table = schema.runs
    added = 0
    for i, run in enumerate(runs):
        status, summary = run["status"], run["summary"]
        if status == "running":
            status, summary = "killed", IMPORTED_WHILE_RUNNING
        values = dict(status=status, finished_at=run["finished_at"],
                      summary_json=None if summary is None else canonical_json(summary))
        held = conn.execute(select(table.c.summary_json).where(table.c.id == run["run_id"])).first()
        if held is not None:
            if held.summary_json == canonical_json(IMPORTED_WHILE_RUNNING) and run["status"] != "running":
                conn.execute(update(table).where(table.c.id == run["run_id"]).values(**values))
            continue
        try:
            target_id = store._target_id(conn, run["target_key"])
        except HistoryError as exc:
            raise HistoryError(f"cannot import {name}: runs[{i}]: {exc}; nothing was imported") from None
        conn.execute(insert(table).values(
            id=run["run_id"], model=run["model"], target_id=target_id, tuner=run["tuner"],
            params_json=canonical_json(run["params"]), started_at=run["started_at"], **values,
        ))
        added += 1
    return added


__all__ = ["export_json", "import_json", "FORMAT", "VERSION"]
