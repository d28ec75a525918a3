"""HistoryStore: every read and write of tuning history goes through here.

SQLAlchemy Core (no ORM) keeps one code path for a SQLite file and a PostgreSQL server.
Each public write is its own committed transaction, so a tuning process killed at any
moment loses nothing it already recorded; SQLite runs in WAL mode with a busy timeout
and ``BEGIN IMMEDIATE`` writes so several processes can share one file (how a file is
checked and opened that way is :mod:`autotune.history.sqlite_db`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Collection, Iterator, Mapping, Sequence

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    case,
    create_engine,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import (
    ArgumentError,
    IntegrityError,
    NoSuchModuleError,
    SQLAlchemyError,
)

from . import schema, sqlite_db
from .errors import HistoryError, cause
from .location import in_memory, mask_url, resolve_location
from .models import (
    BASELINE_SPACE_PREFIX,
    MAX_ERROR_CHARS,
    OTHER_BATCH_TUNER,
    RECORD_STATUSES,
    RECORD_TIMINGS,
    RUN_STATUSES,
    Record,
    TargetInfo,
    WorkloadInfo,
    canonical_json,
    check_samples,
    config_hash,
    sample_stats,
)
from .sqlite_db import (
    BEGIN_OPTION,
    check_existing_file,
    create_file,
    enable_wal,
    is_busy,
    leave_rollback_journal,
    make_parents,
    remove_created,
    retry_while_busy,
    sqlite_engine,
)

#: Seconds to wait for a database server before reporting it unreachable.
CONNECT_TIMEOUT_S = 5
#: PostgreSQL advisory-lock keys (any fixed 64-bit numbers), held to commit: one while
#: creating tables, one while importing (an import's duplicate check must see every record
#: an import running beside it added; SQLite's BEGIN IMMEDIATE serializes both already).
_PG_SCHEMA_LOCK = 0x6175746F74756E65  # "autotune"
_PG_IMPORT_LOCK = _PG_SCHEMA_LOCK + 1


def utc_now() -> str:
    """UTC ISO-8601 timestamp with microseconds: sortable as text, same on every machine."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _truncate(error: str | None) -> str | None:
    """Error text as stored: NUL written as ``\\x00``, cut to MAX_ERROR_CHARS.

    Compiler and crash output can hold NUL bytes; PostgreSQL text cannot, and refusing the
    record would stop a tuning run over a diagnostic. Both backends store the same text.
    """
    if error is None:
        return None
    error = str(error).replace("\x00", "\\x00")
    return error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 3] + "..."


def _missing(conn: Connection, added: Mapping[str, Sequence[str]], present: Any) -> list[tuple[str, str]]:
    """(table, name) of the ``added`` columns or indexes an existing table lacks, where
    ``present(inspector, table)`` lists what the table has (dicts with a "name")."""
    inspector = inspect(conn)
    tables = set(inspector.get_table_names())
    return [
        (table, name)
        for table, names in added.items()
        if table in tables
        for name in sorted(set(names) - {item["name"] for item in present(inspector, table)})
    ]


class HistoryStore:
    """A connection to one history database; open it with :func:`open_history`."""

    url: str  #: the database URL with any password masked, for display
    location: str  #: the file path (SQLite) or masked URL, as named in error messages
    readonly: bool

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        readonly: bool = False,
    ) -> None:
        raw = resolve_location(location)
        self.url = mask_url(raw)
        self.location = self.url
        self.readonly = readonly
        self._engine: Engine | None = None
        self._wal = False  # SQLite: put connections in WAL mode (set once the file is checked)
        self._pinned = threading.local()  # .conn: the connection a snapshot() block reads through
        # every workload, parsed, and the state of the table it was read at (see workloads())
        self._workloads_read: tuple[tuple, list[WorkloadInfo]] | None = None
        # summary() rows by its arguments, and the state of the records table they were read at
        self._summaries: dict[tuple, tuple[tuple, list[dict[str, Any]]]] = {}
        try:
            url = make_url(raw)
        except (ArgumentError, ValueError) as exc:
            raise HistoryError(f"invalid history location {self.url!r}: {exc}") from None
        self._sqlite = url.get_backend_name() == "sqlite"
        if self._sqlite:
            self._open_sqlite(url, create=create, readonly=readonly)
        else:
            self._open_server(url, create=create, readonly=readonly)

    # ------------------------------------------------------------------ opening

    def _open_sqlite(self, url: URL, *, create: bool, readonly: bool) -> None:
        """Open a SQLite file after checking it by hand, so failures are clear and leave nothing."""
        database = url.database or ""
        if in_memory(url):
            self.location = "sqlite in-memory database"
            self._engine = sqlite_engine(":memory:", readonly=False, immutable=False, memory=True, wal=self._uses_wal)
            self._init_schema(writable=True, create=True)
            return
        path = os.path.abspath(os.path.expanduser(database))
        self.location = path
        created_dirs: list[str] = []
        created_file = False
        try:
            immutable = False
            if os.path.lexists(path):
                check_existing_file(path, readonly=readonly)
                if readonly:
                    # A WAL database in a directory we cannot write (no -shm to create)
                    # can still be read if nobody writes it: nobody can, without a -wal.
                    parent = os.path.dirname(path)
                    immutable = not os.access(parent, os.W_OK) and not os.path.exists(path + "-shm")
            elif readonly or not create:
                raise HistoryError(f"no history at {path} (file does not exist)")
            else:
                created_dirs = make_parents(path)
                created_file = create_file(path)
            self._engine = sqlite_engine(
                path, readonly=readonly, immutable=immutable, memory=False, wal=self._uses_wal
            )
            retry_while_busy(lambda: self._init_schema(writable=not readonly, create=create))
            if not readonly:
                # Only now, once the file is known to be ours: WAL rewrites the file header.
                self._wal = True
                try:
                    retry_while_busy(lambda: enable_wal(self.engine, path), seconds=sqlite_db.WAL_SWITCH_WAIT_S)
                except HistoryError as exc:
                    if not is_busy(exc):
                        raise
                    # Still contended: the rollback journal is just as safe, only less concurrent.
        except BaseException:
            self._dispose()
            remove_created(path, created_file, created_dirs)
            raise

    def _uses_wal(self) -> bool:
        return self._wal

    def _open_server(self, url: URL, *, create: bool, readonly: bool) -> None:
        """Open a database server (PostgreSQL...): unknown dialect, missing driver, unreachable -> HistoryError."""
        connect_args: dict[str, Any] = {}
        if url.get_backend_name() == "postgresql":
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        if url.drivername == "postgresql":
            # A URL naming no driver means "whichever is installed": SQLAlchemy 2.0 would
            # insist on psycopg2 (2.1 on psycopg), while the `postgres` extra installs psycopg.
            for driver in ("psycopg", "psycopg2"):
                if importlib.util.find_spec(driver) is not None:
                    url = url.set(drivername=f"postgresql+{driver}")
                    break
        try:
            self._engine = create_engine(url, connect_args=connect_args, pool_pre_ping=True)
        except NoSuchModuleError:
            raise HistoryError(
                f"cannot open history at {self.url}: unknown database type {url.drivername!r} "
                "(use a file path, sqlite:///path or postgresql://...)"
            ) from None
        except ImportError as exc:
            raise HistoryError(
                f"cannot open history at {self.url}: database driver {exc.name or exc} is not installed"
            ) from None
        except (ArgumentError, ValueError, TypeError) as exc:
            raise HistoryError(f"invalid history location {self.url}: {exc}") from None
        try:
            try:
                with self._engine.connect():
                    pass
            except SQLAlchemyError as exc:
                raise HistoryError(f"cannot connect to history at {self.url}: {cause(exc)}") from None
            self._init_schema(writable=not readonly, create=create)
        except BaseException:
            self._dispose()
            raise

    def _init_schema(self, *, writable: bool, create: bool) -> None:
        """Create tables in a fresh database; refuse foreign databases and newer schemas.

        A complete schema is checked in a read transaction: a writer that has nothing to
        create must not need the write lock just to open the file.
        """
        self._absent_columns: set[tuple[str, str]] = set()  # (table, column): read-only, not added
        if writable:
            with self._read() as conn:
                writable = not set(schema.metadata.tables) <= set(inspect(conn).get_table_names()) or bool(
                    self._missing_columns(conn) or self._missing_indexes(conn)
                )
        ctx = self._write("create tables") if writable else self._read()
        with ctx as conn:
            if writable:
                # Two processes opening a new database at once would both CREATE TABLE and
                # the second fail on PostgreSQL's catalog. The next one in sees the tables made.
                self._serialize(conn, _PG_SCHEMA_LOCK)
            names = set(inspect(conn).get_table_names())
            if "meta" not in names:
                if names:
                    raise HistoryError(
                        f"cannot open history at {self.location}: the database holds other tables "
                        "but is not an autotune history (refusing to modify it)"
                    )
                if not (writable and create):
                    raise HistoryError(f"no history at {self.location} (database has no history tables)")
                schema.metadata.create_all(conn)
                conn.execute(
                    insert(schema.meta).values(key="schema_version", value=str(schema.SCHEMA_VERSION))
                )
                return
            value = conn.execute(
                select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")
            ).scalar()
            try:
                version = int(value) if value is not None else None
            except ValueError:
                version = None
            if version is None:
                raise HistoryError(f"cannot open history at {self.location}: missing or bad schema version")
            if version > schema.SCHEMA_VERSION:
                raise HistoryError(
                    f"cannot open history at {self.location}: written by a newer autotune "
                    f"(schema {version}, this version reads up to {schema.SCHEMA_VERSION})"
                )
            if writable:
                schema.metadata.create_all(conn)  # checkfirst: only tables missing so far
                for table, column in self._missing_columns(conn):
                    col = schema.metadata.tables[table].c[column]
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {col.type.compile(dialect=conn.dialect)}"))
                for table, name in self._missing_indexes(conn):
                    (index,) = [i for i in schema.metadata.tables[table].indexes if i.name == name]
                    index.create(conn)
            else:
                self._absent_columns = set(self._missing_columns(conn))

    @staticmethod
    def _missing_columns(conn: Connection) -> list[tuple[str, str]]:
        """(table, column) of :data:`schema.ADDED_COLUMNS` an existing table lacks."""
        return _missing(conn, schema.ADDED_COLUMNS, lambda inspector, table: inspector.get_columns(table))

    @staticmethod
    def _missing_indexes(conn: Connection) -> list[tuple[str, str]]:
        """(table, index) of :data:`schema.ADDED_INDEXES` an existing table lacks."""
        return _missing(conn, schema.ADDED_INDEXES, lambda inspector, table: inspector.get_indexes(table))

    # ------------------------------------------------------------ transactions

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise HistoryError(f"history at {self.location} is closed")
        return self._engine

    def _error(self, action: str, exc: BaseException) -> HistoryError:
        return HistoryError(f"cannot {action} in history at {self.location}: {cause(exc)}")

    @staticmethod
    def _serialize(conn: Connection, key: int) -> None:
        """Wait until no other PostgreSQL transaction holds ``key``, and hold it to commit.

        SQLite needs nothing: its writers already run one at a time (BEGIN IMMEDIATE).
        """
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(key)))

    @contextmanager
    def _write(self, action: str = "write") -> Iterator[Connection]:
        """One committed transaction; any database error (disk full...) rolls back -> HistoryError."""
        if self.readonly:
            raise HistoryError(f"cannot {action}: history at {self.location} was opened read-only")
        try:
            with self.engine.connect() as conn:
                if self._sqlite:
                    conn.execution_options(**{BEGIN_OPTION: "BEGIN IMMEDIATE"})
                with conn.begin():
                    yield conn
        except SQLAlchemyError as exc:
            raise self._error(action, exc) from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        pinned = getattr(self._pinned, "conn", None)
        if pinned is not None:  # inside snapshot(): the same transaction, left open
            try:
                yield pinned
            except SQLAlchemyError as exc:
                raise self._error("read", exc) from exc
            return
        try:
            with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise self._error("read", exc) from exc

    @contextmanager
    def snapshot(self) -> Iterator[bool]:
        """Reads in this block (in this thread) see history as it was at the first of them.

        Yields whether they do. An export reads a page of records at a time and then the
        runs, targets and workloads; a `history rm` between the pages wrote records of a run
        the export then did not list. One read transaction sees one state: a WAL reader
        holds its snapshot without holding off writers, and PostgreSQL's REPEATABLE READ
        does the same. A SQLite file is in WAL mode while a writer (a tune) has it open;
        once the last one closes it, it is back in its rollback journal, where one long
        read would lock out every writer (a tune starting meanwhile would fail on its first
        record), so there the reads stay separate and this yields False: an idle
        history's export is read page by page (io._write_export refuses one a removal
        cut through).
        """
        if getattr(self._pinned, "conn", None) is not None:
            yield True
            return
        try:
            with self.engine.connect() as conn:
                if self._sqlite:
                    mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                    if str(mode).lower() != "wal":
                        conn.rollback()
                        conn = None  # type: ignore[assignment]
                else:
                    conn.rollback()
                    conn.execution_options(isolation_level="REPEATABLE READ")
                self._pinned.conn = conn
                try:
                    yield conn is not None
                finally:
                    self._pinned.conn = None
        except SQLAlchemyError as exc:
            raise self._error("read", exc) from exc

    def close(self) -> None:
        """Release connections; the last SQLite writer out leaves the file in rollback-journal mode."""
        engine = self._engine
        self._dispose()
        if engine is not None and self._sqlite and not self.readonly and os.path.isabs(self.location):
            leave_rollback_journal(self.location)

    def _dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HistoryStore({self.url!r}{', readonly' if self.readonly else ''})"

    # ------------------------------------------------------- small settings

    def get_meta(self, key: str) -> str | None:
        """A value kept beside the data (e.g. smoothed feature importances), or None."""
        with self._read() as conn:
            return conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == key)).scalar()

    def set_meta(self, key: str, value: str) -> None:
        """Insert or replace one value; ``schema_version`` is reserved."""
        if key == "schema_version":
            raise ValueError("schema_version is managed by the store")
        with self._write("write a setting") as conn:
            if conn.execute(select(schema.meta.c.key).where(schema.meta.c.key == key)).first():
                conn.execute(update(schema.meta).where(schema.meta.c.key == key).values(value=value))
            else:
                conn.execute(insert(schema.meta).values(key=key, value=value))

    # ------------------------------------------------------- targets, workloads

    def register_target(self, target: TargetInfo) -> int:
        """Id of the target with this key, creating it if new (idempotent)."""
        with self._write("register target") as conn:
            return self._get_or_create_target(conn, target)

    def register_workload(self, workload: WorkloadInfo) -> int:
        """Id of the workload with this key, creating it if new. Its features are the
        ones given: a layer read by this version describes itself as this version
        compares layers (since 2026-11-28 a layer's features leave its batch size out;
        a workload stored at batch 4 before kept features that count it). An import
        only fills in features that are missing."""
        with self._write("register workload") as conn:
            return self._workload_id_created(conn, workload, refresh_features=True)[0]

    def _get_or_create_target(self, conn: Connection, target: TargetInfo) -> int:
        return self._target_id_created(conn, target)[0]

    def _target_id_created(self, conn: Connection, target: TargetInfo) -> tuple[int, bool]:
        t = schema.targets
        for name in ("kind", "arch", "device_name", "driver_version", "runtime_version", "tvm_version"):
            _check_str(f"target {name}", getattr(target, name))
        key = target.key
        row = conn.execute(select(t.c.id, t.c.driver_version, t.c.runtime_version, t.c.tvm_version).where(t.c.key == key)).first()
        if row is None:
            try:
                with conn.begin_nested():
                    new_id = conn.execute(
                        insert(t).values(
                            key=key,
                            kind=target.kind,
                            arch=target.arch,
                            device_name=target.device_name,
                            driver_version=target.driver_version,
                            runtime_version=target.runtime_version,
                            tvm_version=target.tvm_version,
                            created_at=utc_now(),
                        )
                    ).inserted_primary_key[0]
                return int(new_id), True
            except IntegrityError:  # created concurrently (server databases)
                row = conn.execute(select(t.c.id, t.c.driver_version, t.c.runtime_version, t.c.tvm_version).where(t.c.key == key)).one()
        # Versions are not part of the key; record them when they were unknown so far.
        fill = {
            name: getattr(target, name)
            for name in ("driver_version", "runtime_version", "tvm_version")
            if getattr(target, name) and not getattr(row, name)
        }
        if fill:
            conn.execute(update(t).where(t.c.id == row.id).values(**fill))
        return int(row.id), False

    def _workload_id_created(self, conn: Connection, workload: WorkloadInfo, *, refresh_features: bool = False) -> tuple[int, bool]:
        w = schema.workloads
        _check_str("workload key", workload.key)
        _check_str("workload batch_invariant_key", workload.batch_invariant_key)
        _check_str("workload op_class", workload.op_class)
        if not isinstance(workload.descriptor, Mapping):
            raise ValueError("workload descriptor must be a dict")
        descriptor_json = canonical_json(dict(workload.descriptor))
        features = [float(f) for f in workload.features]
        features_json = canonical_json(features)
        flops = float(workload.flops)
        row = conn.execute(select(w.c.id, w.c.features_json).where(w.c.key == workload.key)).first()
        if row is None:
            try:
                with conn.begin_nested():
                    new_id = conn.execute(
                        insert(w).values(
                            key=workload.key,
                            batch_invariant_key=workload.batch_invariant_key,
                            op_class=workload.op_class,
                            descriptor_json=descriptor_json,
                            features_json=features_json,
                            flops=flops,
                            created_at=utc_now(),
                        )
                    ).inserted_primary_key[0]
                return int(new_id), True
            except IntegrityError:
                row = conn.execute(select(w.c.id, w.c.features_json).where(w.c.key == workload.key)).one()
        stored = json.loads(row.features_json)
        if features and (stored == [] or (refresh_features and stored != features)):
            conn.execute(update(w).where(w.c.id == row.id).values(features_json=features_json))
            # features replaced by ones of the same length of text leave the table's state
            # (see workloads) as it was: this handle reads them again; another reads them
            # once the table next changes
            self._workloads_read = None
        return int(row.id), False

    def _target_id(self, conn: Connection, key: str) -> int:
        found = conn.execute(select(schema.targets.c.id).where(schema.targets.c.key == key)).scalar()
        if found is None:
            raise HistoryError(f"unknown target {key!r} in history at {self.location} (register it first)")
        return int(found)

    def _workload_id(self, conn: Connection, key: str) -> int:
        found = conn.execute(select(schema.workloads.c.id).where(schema.workloads.c.key == key)).scalar()
        if found is None:
            raise HistoryError(f"unknown workload {key!r} in history at {self.location} (register it first)")
        return int(found)

    def _workload_from_row(self, row: Any) -> WorkloadInfo:
        with self._read_back("workload", row.key):
            return WorkloadInfo(
                key=_text(row, "key"),
                batch_invariant_key=_text(row, "batch_invariant_key"),
                op_class=_text(row, "op_class"),
                descriptor=_json_of(row.descriptor_json, dict),
                flops=_real(row.flops),
                features=tuple(_real(f) for f in _json_of(row.features_json or "[]", list)),
            )

    @contextmanager
    def _read_back(self, what: str, ident: Any) -> Iterator[None]:
        """A row this code did not write as it stands (edited by hand, damaged): one line
        naming it, not the traceback of whichever reader met it first (a helper's fuzzing
        of history files found some 150, from `history ls` to a tune)."""
        try:
            yield
        except _UNREADABLE as exc:
            raise self._unreadable(what, ident, exc) from None

    def _unreadable(self, what: str, ident: Any, exc: BaseException) -> HistoryError:
        """:meth:`_read_back`'s line, for a reader that cannot afford a context per row."""
        return HistoryError(f"history at {self.location} holds a {what} it cannot read ({ident}): "
                            f"{str(exc)[:120]}; was the file edited by hand?")

    def workloads(self, op_class: str | None = None) -> list[WorkloadInfo]:
        """All workloads (of one operator class), in registration order.

        Parsed once and read again only when the table has changed (rows are only ever
        added, and a workload's features filled in or replaced by a tune's register,
        which the table's count, last id and features' total length show, whoever wrote
        them, but for a replacement of the same length by another handle): a tune matches its
        layers against them after every chunk, and parsing 15,000 conv workloads' JSON
        each time took a second a match."""
        w = schema.workloads
        with self._read() as conn:
            state = tuple(conn.execute(
                select(func.count(w.c.id), func.max(w.c.id), func.sum(func.length(w.c.features_json)))
            ).one())
            if self._workloads_read is None or self._workloads_read[0] != state:
                parsed = [self._workload_from_row(r) for r in conn.execute(select(w).order_by(w.c.id))]
                self._workloads_read = (state, parsed)
        found = self._workloads_read[1]
        return list(found) if op_class is None else [x for x in found if x.op_class == op_class]

    def workload(self, key: str) -> WorkloadInfo | None:
        w = schema.workloads
        with self._read() as conn:
            row = conn.execute(select(w).where(w.c.key == key)).first()
        return None if row is None else self._workload_from_row(row)

    def targets(self) -> list[TargetInfo]:
        """All targets, in registration order."""
        t = schema.targets
        with self._read() as conn:
            rows = conn.execute(select(t).order_by(t.c.id)).all()
        return [self._target_from_row(r) for r in rows]

    def _target_from_row(self, row: Any) -> TargetInfo:
        with self._read_back("target", row.key):
            return TargetInfo(**{name: _text(row, name) for name in
                                 ("kind", "arch", "device_name", "driver_version", "runtime_version", "tvm_version")})

    # ----------------------------------------------------------------- records

    def add_record(
        self,
        *,
        workload_key: str,
        target_key: str,
        space_id: str,
        config: Mapping[str, Any],
        samples: Sequence[float],
        status: str,
        error: str | None = None,
        run_id: str | None = None,
        tuner: str = "",
        verified: bool | None = None,
        twin: bool = False,
        timing: str = RECORD_TIMINGS[0],
    ) -> int:
        """Store one measurement (committed at once); stats are computed from ``samples`` (seconds).
        ``twin``: the samples are those of another config that compiled to the same program;
        ``timing``: how they were timed (:data:`RECORD_TIMINGS`)."""
        values = self._record_values(
            space_id=space_id,
            config=config,
            samples=samples,
            status=status,
            error=error,
            run_id=run_id,
            tuner=tuner,
            verified=verified,
            twin=twin,
            timing=timing,
        )
        with self._write("add record") as conn:
            values["workload_id"] = self._workload_id(conn, workload_key)
            values["target_id"] = self._target_id(conn, target_key)
            return int(conn.execute(insert(schema.records).values(**values)).inserted_primary_key[0])

    @staticmethod
    def _record_values(
        *,
        space_id: str,
        config: Mapping[str, Any],
        samples: Sequence[float],
        status: str,
        error: str | None,
        run_id: str | None,
        tuner: str,
        verified: bool | None,
        twin: bool = False,
        timing: str = RECORD_TIMINGS[0],
        stats: tuple[float | None, float | None, float | None, int] | None = None,
        created_at: str | None = None,
    ) -> dict[str, Any]:
        """Validated column values of a record (shared by add_record and import)."""
        if status not in RECORD_STATUSES:
            raise ValueError(f"invalid record status {status!r}; expected one of {', '.join(RECORD_STATUSES)}")
        _check_str("space_id", space_id)
        _check_str("tuner", tuner)
        if run_id is not None:
            _check_str("run_id", run_id)
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict, got {type(config).__name__}")
        if verified is not None and not isinstance(verified, bool):
            raise ValueError(f"verified must be True, False or None, got {verified!r}")
        if not isinstance(twin, bool):
            raise ValueError(f"twin must be True or False, got {twin!r}")
        if timing not in RECORD_TIMINGS:
            raise ValueError(f"invalid record timing {timing!r}; expected one of {', '.join(RECORD_TIMINGS)}")
        if isinstance(samples, (str, bytes)):
            raise ValueError("samples must be a sequence of seconds")
        # given stats (an import's, computed as it was read) only need the samples checked:
        # numpy's statistics twice over were half of importing 120,000 records
        sample_list = check_samples(samples) if stats is not None else [float(s) for s in samples]
        mean, median, std, repeats = stats if stats is not None else sample_stats(sample_list)
        if status == "ok" and median is None:
            raise ValueError("a record with status 'ok' needs at least one latency sample")
        cfg_json = canonical_json(dict(config))
        return {
            "space_id": space_id,
            "config_json": cfg_json,
            "config_hash": config_hash(cfg_json),
            "latency_mean": mean,
            "latency_median": median,
            "latency_std": std,
            "repeats": repeats,
            "samples_json": canonical_json(sample_list),
            "status": status,
            "error": _truncate(error),
            "verified": verified,
            "twin": twin or None,
            # NULL for the evaluator's: what an autotune before the column wrote, and reads
            "timing": None if timing == RECORD_TIMINGS[0] else timing,
            "run_id": run_id,
            "tuner": tuner,
            "created_at": created_at or utc_now(),
        }

    def set_verified(self, record_id: int, ok: bool, error: str | None = None) -> None:
        """Mark a record checked against the reference; a mismatch turns it into 'wrong_result'."""
        r = schema.records
        if ok:
            values: dict[str, Any] = {"verified": True}
        else:
            values = {
                "verified": False,
                "status": "wrong_result",
                "error": _truncate(error if error is not None else "output did not match the reference"),
            }
        with self._write("set verified") as conn:
            result = conn.execute(update(r).where(r.c.id == int(record_id)).values(**values))
            if result.rowcount == 0:
                raise HistoryError(f"no record {record_id} in history at {self.location}")

    def _record_query(self) -> Any:
        r, w, t = schema.records, schema.workloads, schema.targets
        return select(
            *(c for c in r.c if (r.name, c.name) not in self._absent_columns),
            w.c.key.label("workload_key"),
            w.c.batch_invariant_key,
            w.c.op_class,
            t.c.key.label("target_key"),
        ).select_from(r.join(w, r.c.workload_id == w.c.id).join(t, r.c.target_id == t.c.id))

    def _record_from_row(self, row: Any) -> Record:
        with self._read_back("record", f"id {row.id}"):
            return Record(
                id=int(row.id),
                workload_key=_text(row, "workload_key"),
                batch_invariant_key=_text(row, "batch_invariant_key"),
                op_class=_text(row, "op_class"),
                target_key=_text(row, "target_key"),
                space_id=_text(row, "space_id"),
                config=_json_of(row.config_json, dict),
                latency_median=None if row.latency_median is None else _real(row.latency_median),
                latency_mean=None if row.latency_mean is None else _real(row.latency_mean),
                latency_std=None if row.latency_std is None else _real(row.latency_std),
                repeats=int(row.repeats),
                samples=tuple(_real(s) for s in _json_of(row.samples_json or "[]", list)),
                status=_text(row, "status"),
                error=_text(row, "error", nullable=True),
                verified=None if row.verified is None else bool(row.verified),
                run_id=_text(row, "run_id", nullable=True),
                tuner=_text(row, "tuner"),
                created_at=_text(row, "created_at"),
                twin=bool(row._mapping.get("twin")),
                timing=_text(row, "timing", nullable=True) or RECORD_TIMINGS[0],
            )

    @staticmethod
    def _usable() -> Any:
        r = schema.records
        # > 0: imports before 2026-11-27 took any latency, and the least is the one reused
        return and_(r.c.status == "ok", r.c.verified.is_not(False), r.c.latency_median > 0)

    def best(self, workload_key: str, target_key: str, *, space_id: str | None = None) -> Record | None:
        """Fastest usable record: status 'ok', not verified wrong, lowest median latency."""
        ranked = self.fastest(workload_key, target_key, space_id=space_id, limit=1)
        return ranked[0] if ranked else None

    def fastest(self, workload_key: str, target_key: str, *, space_id: str | None = None, limit: int = 10) -> list[Record]:
        """The ``limit`` fastest usable records, fastest first: where the best will not
        apply (a config no space holds, imported by hand), the next one may."""
        r, w, t = schema.records, schema.workloads, schema.targets
        query = (
            self._record_query()
            .where(w.c.key == workload_key, t.c.key == target_key, self._usable())
            .order_by(r.c.latency_median, r.c.id)
            .limit(limit)
        )
        if space_id is not None:
            query = query.where(r.c.space_id == space_id)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [self._record_from_row(row) for row in rows]

    def best_at_other_batches(self, workload_key: str, batch_invariant_key: str, target_key: str) -> list[tuple[Record, float]]:
        """The best usable record of each *other* workload with this batch-invariant key
        (the same layer at another batch size) on the target, with that workload's FLOPs:
        their ratio to this layer's is the ratio of the batch sizes. Only workloads
        searched there count: TVM's default timed alone (a tune whose budget did not reach
        the layer) says nothing of what wins, and as the nearest batch it hid a tuned
        winner at the next (dqn at batch 2, between a default at 1 and a winner at 4);
        nor does another batch's winner timed there alone (``OTHER_BATCH_TUNER``), one
        measurement that stood for its batch over the four-deep search it was copied from."""
        r, w, t = schema.records, schema.workloads, schema.targets
        query = select(w.c.key, w.c.flops).where(w.c.batch_invariant_key == batch_invariant_key, w.c.key != workload_key)
        searched = (
            select(func.count(r.c.id))
            .select_from(r.join(w, r.c.workload_id == w.c.id).join(t, r.c.target_id == t.c.id))
            .where(t.c.key == target_key, r.c.status == "ok", ~r.c.space_id.startswith(BASELINE_SPACE_PREFIX, autoescape=True),
                   or_(r.c.tuner.is_(None), r.c.tuner != OTHER_BATCH_TUNER))
        )
        with self._read() as conn:
            others = [(key, flops) for key, flops in conn.execute(query.order_by(w.c.id)).all()
                      if conn.execute(searched.where(w.c.key == key)).scalar_one()]
        found = []
        for key, flops in others:
            record = self.best(key, target_key)
            if record is not None:
                found.append((record, float(flops)))
        return found

    def records(
        self,
        *,
        workload_key: str | None = None,
        target_key: str | None = None,
        op_class: str | None = None,
        batch_invariant_key: str | None = None,
        status: str | None = None,
        space_id: str | None = None,
        run_id: str | None = None,
        timing: str | None = None,
        limit: int | None = None,
        last: int | None = None,
    ) -> list[Record]:
        """Records matching every given filter, oldest first (by id). ``timing``: those
        timed so (:data:`RECORD_TIMINGS`), where a few-microsecond kernel's figure
        depends on it (a layer's time before tuning, set beside its tuned one). ``last``:
        only the newest so many (still oldest first): ``history show`` read 50,000 records
        of a layer to print its last 50."""
        r = schema.records
        query = self._filtered(
            self._record_query(), workload_key=workload_key, target_key=target_key, op_class=op_class,
            batch_invariant_key=batch_invariant_key, status=status, space_id=space_id, run_id=run_id, timing=timing,
        )
        if query is None:
            return []
        query = query.order_by(r.c.id.desc() if last is not None else r.c.id)
        count = last if last is not None else limit
        if count is not None:
            query = query.limit(int(count))
        with self._read() as conn:
            found = [self._record_from_row(row) for row in conn.execute(query)]
        return found[::-1] if last is not None else found

    def iter_records(self, *, page: int = 5000, **filters: Any) -> Iterator[Record]:
        """:meth:`records` of the same filters, oldest first, read ``page`` at a time in
        reads of their own: an export of a million records held them all at once (10.7 GB),
        and one long read would hold off other writers in rollback-journal mode."""
        r = schema.records
        query = self._filtered(self._record_query(), **filters)
        if query is None:
            return
        query = query.order_by(r.c.id).limit(int(page))
        after = 0
        while True:
            with self._read() as conn:
                rows = conn.execute(query.where(r.c.id > after)).all()
            for row in rows:
                yield self._record_from_row(row)
            if len(rows) < page:
                return
            after = rows[-1]._mapping["id"]

    def count_records(self, **filters: Any) -> int:
        """How many records :meth:`records` would return for the same filters (one query)."""
        r, w, t = schema.records, schema.workloads, schema.targets
        query = self._filtered(
            select(func.count(r.c.id)).select_from(r.join(w, r.c.workload_id == w.c.id).join(t, r.c.target_id == t.c.id)),
            **filters,
        )
        if query is None:
            return 0
        with self._read() as conn:
            return int(conn.execute(query).scalar_one())

    def _filtered(
        self,
        query: Any,
        *,
        workload_key: str | None = None,
        target_key: str | None = None,
        op_class: str | None = None,
        batch_invariant_key: str | None = None,
        status: str | None = None,
        space_id: str | None = None,
        run_id: str | None = None,
        timing: str | None = None,
    ) -> Any:
        """``query`` (over records joined to workloads and targets) narrowed to the given
        filters; None where none can match (a timing a file from before the column lacks)."""
        r, w, t = schema.records, schema.workloads, schema.targets
        if timing is not None:
            if timing not in RECORD_TIMINGS:
                raise ValueError(f"invalid record timing {timing!r}; expected one of {', '.join(RECORD_TIMINGS)}")
            if ("records", "timing") in self._absent_columns:  # a file from before the column, read-only
                if timing != RECORD_TIMINGS[0]:
                    return None
            elif timing == RECORD_TIMINGS[0]:
                query = query.where(or_(r.c.timing.is_(None), r.c.timing == timing))
            else:
                query = query.where(r.c.timing == timing)
        filters = [
            (w.c.key, workload_key),
            (t.c.key, target_key),
            (w.c.op_class, op_class),
            (w.c.batch_invariant_key, batch_invariant_key),
            (r.c.status, status),
            (r.c.space_id, space_id),
            (r.c.run_id, run_id),
        ]
        for column, value in filters:
            if value is not None:
                query = query.where(column == value)
        return query

    def has_records(self, *, excluding_runs: Collection[str] = ()) -> bool:
        """Whether history holds a record not written by ``excluding_runs`` (one query,
        however large history is): a tune's "history was empty" leaves out runs still
        tuning beside it, whose workloads and first records its twin saw as history."""
        r = schema.records
        query = select(r.c.id).limit(1)
        if excluding_runs:
            query = query.where(or_(r.c.run_id.is_(None), r.c.run_id.not_in(list(excluding_runs))))
        with self._read() as conn:
            return conn.execute(query).first() is not None

    def run_touched(self, run_id: str, workload_keys: Collection[str]) -> bool:
        """Whether run ``run_id`` wrote a record of one of ``workload_keys`` (one query: a
        compile beside a long tune read every record that tune had written to ask it)."""
        if not workload_keys:
            return False
        r, w = schema.records, schema.workloads
        query = (
            select(r.c.id)
            .select_from(r.join(w, r.c.workload_id == w.c.id))
            .where(r.c.run_id == run_id, w.c.key.in_(list(workload_keys)))
            .limit(1)
        )
        with self._read() as conn:
            return conn.execute(query).first() is not None

    def count_measured(self, workload_key: str, target_key: str, space_id: str | None = None) -> int:
        """How many configs of the layer were measured on the target (any status but
        ``invalid``: a config the space rejected was never built, so it was no trial)."""
        r, w, t = schema.records, schema.workloads, schema.targets
        query = (
            select(func.count(r.c.id))
            .select_from(r.join(w, r.c.workload_id == w.c.id).join(t, r.c.target_id == t.c.id))
            .where(w.c.key == workload_key, t.c.key == target_key, r.c.status != "invalid")
        )
        if space_id is not None:
            query = query.where(r.c.space_id == space_id)
        with self._read() as conn:
            return int(conn.execute(query).scalar_one())

    def measured_configs(self, workload_key: str, target_key: str, space_id: str) -> set[str]:
        """Canonical JSON of every config already recorded (any status): resume never re-measures."""
        r, w, t = schema.records, schema.workloads, schema.targets
        query = (
            select(r.c.config_json)
            .select_from(r.join(w, r.c.workload_id == w.c.id).join(t, r.c.target_id == t.c.id))
            .where(w.c.key == workload_key, t.c.key == target_key, r.c.space_id == space_id)
        )
        with self._read() as conn:
            return set(conn.execute(query).scalars())

    def summary(self, target_key: str | None = None, *, searched_only: bool = False) -> list[dict[str, Any]]:
        """One row per (workload, target) with record counts and the best latency, for listings.

        With ``searched_only``, baseline records (TVM's default schedule) are left out, as
        if never made: a layer measured only at its default is no tuning evidence.

        In a SQLite file the rows are kept between calls and, where records were only
        added since (the table's count, last id and records found wrong show it, whoever
        wrote them), only the workloads with new records are read again: a tune matches
        its layers after every chunk, and a pass over 120,000 records took 0.3 s a time."""
        if not self._sqlite:
            with self._read() as conn:
                return self._summary_rows(conn, target_key, searched_only)
        r = schema.records
        with self._read() as conn:
            # the records found wrong counted apart, through their partial index (one query
            # of the three took about 1 s at a million records, scanning every row)
            state = (*conn.execute(select(func.count(r.c.id), func.max(r.c.id))).one(),
                     conn.execute(select(func.count()).select_from(r).where(r.c.verified == False)).scalar_one())  # noqa: E712
            kept = self._summaries.get((target_key, searched_only))
            if kept is not None and kept[0] == state:
                return [dict(row) for row in kept[1]]
            added = (kept is not None and kept[0][1] is not None and state[1] is not None and kept[0][2] == state[2]
                     and state[0] - kept[0][0] == state[1] - kept[0][1] > 0)
            if not added:
                rows = self._summary_rows(conn, target_key, searched_only)
            else:
                changed = sorted(conn.execute(select(r.c.workload_id).distinct().where(r.c.id > kept[0][1])).scalars())
                fresh = []
                for start in range(0, len(changed), 500):
                    fresh += self._summary_rows(conn, target_key, searched_only, workload_ids=changed[start:start + 500])
                renewed = {row["workload_key"] for row in fresh}
                rows = [row for row in kept[1] if row["workload_key"] not in renewed] + fresh
                rows.sort(key=lambda row: (row["op_class"], row["workload_key"], row["target_key"]))
        self._summaries[(target_key, searched_only)] = (state, rows)
        return [dict(row) for row in rows]

    def _summary_rows(self, conn: Connection, target_key: str | None, searched_only: bool,
                      workload_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """:meth:`summary`'s rows as the database gives them, of ``workload_ids`` only where given."""
        r, w, t = schema.records, schema.workloads, schema.targets
        usable = self._usable()
        if searched_only:
            usable = and_(usable, ~r.c.space_id.startswith(BASELINE_SPACE_PREFIX, autoescape=True))
        among = r.c.workload_id.in_(workload_ids) if workload_ids is not None else true()
        ranked = (
            select(
                r.c.workload_id,
                r.c.target_id,
                r.c.id,
                r.c.latency_median,
                func.row_number()
                .over(partition_by=(r.c.workload_id, r.c.target_id), order_by=(r.c.latency_median, r.c.id))
                .label("rank"),
            )
            .where(usable, among)
            .subquery("ranked")
        )
        counts = (
            select(
                r.c.workload_id,
                r.c.target_id,
                func.count(r.c.id).label("n_records"),
                func.sum(case((usable, 1), else_=0)).label("n_ok"),
            )
            .where(among)
            .group_by(r.c.workload_id, r.c.target_id)
            .subquery("counts")
        )
        query = (
            select(
                w.c.key.label("workload_key"),
                w.c.op_class,
                t.c.key.label("target_key"),
                counts.c.n_records,
                counts.c.n_ok,
                ranked.c.latency_median.label("best_latency"),
                ranked.c.id.label("best_record_id"),
            )
            .select_from(
                counts.join(w, counts.c.workload_id == w.c.id)
                .join(t, counts.c.target_id == t.c.id)
                .outerjoin(
                    ranked,
                    and_(
                        ranked.c.workload_id == counts.c.workload_id,
                        ranked.c.target_id == counts.c.target_id,
                        ranked.c.rank == 1,
                    ),
                )
            )
            .order_by(w.c.op_class, w.c.key, t.c.key)
        )
        if target_key is not None:
            query = query.where(t.c.key == target_key)
        return [self._summary_from_row(row) for row in conn.execute(query).all()]

    def _summary_from_row(self, row: Any) -> dict[str, Any]:
        """One of :meth:`summary`'s rows, its values checked as a record's are read: SQLite
        ranks text above every number, so a median edited to 'abc' passed the query as a
        layer's best and reached `history ls` (a fuzzing trial's traceback). No
        :meth:`_read_back` here: two contexts a row were a tenth of a summary's time."""
        try:
            names = {name: _text(row, name) for name in ("workload_key", "op_class", "target_key")}
        except _UNREADABLE as exc:
            raise self._unreadable("workload", row.workload_key, exc) from None
        try:
            best = None if row.best_latency is None else _real(row.best_latency)
        except _UNREADABLE as exc:
            raise self._unreadable("record", f"id {row.best_record_id}", exc) from None
        return {
            **names,
            "n_records": int(row.n_records),
            "n_ok": int(row.n_ok or 0),
            "best_latency": best,
            "best_record_id": None if row.best_record_id is None else int(row.best_record_id),
        }

    # -------------------------------------------------------------------- runs

    def start_run(
        self, run_id: str, *, model: str, target_key: str, tuner: str, params: Mapping[str, Any]
    ) -> None:
        """Record that a tuning run began; restarting a run id of the same model/target resumes it."""
        _check_str("run_id", run_id)
        _check_str("model", model)
        _check_str("tuner", tuner)
        params_json = canonical_json(dict(params))
        runs = schema.runs
        with self._write("start run") as conn:
            target_id = self._target_id(conn, target_key)
            row = conn.execute(select(runs.c.model, runs.c.target_id).where(runs.c.id == run_id)).first()
            if row is None:
                conn.execute(
                    insert(runs).values(
                        id=run_id,
                        model=model,
                        target_id=target_id,
                        tuner=tuner,
                        params_json=params_json,
                        status="running",
                        started_at=utc_now(),
                    )
                )
            elif row.model != model or row.target_id != target_id:
                raise HistoryError(
                    f"run {run_id!r} already exists in history at {self.location} for another model or target"
                )
            else:
                conn.execute(
                    update(runs)
                    .where(runs.c.id == run_id)
                    .values(status="running", finished_at=None, tuner=tuner, params_json=params_json)
                )

    def finish_run(self, run_id: str, status: str, summary: Mapping[str, Any]) -> None:
        """Close a run with its final status ('finished', 'failed' or 'killed') and a JSON summary."""
        _check_final_status(status)
        summary_json = canonical_json(dict(summary))
        runs = schema.runs
        with self._write("finish run") as conn:
            result = conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(status=status, finished_at=utc_now(), summary_json=summary_json)
            )
            if result.rowcount == 0:
                raise HistoryError(f"no run {run_id!r} in history at {self.location}")

    def save_run_summary(self, run_id: str, summary: Mapping[str, Any]) -> None:
        """A run's JSON summary, its status left as it is (still running: what its caller
        writes after the layers is not written yet)."""
        runs = schema.runs
        with self._write("save run summary") as conn:
            conn.execute(update(runs).where(runs.c.id == run_id).values(summary_json=canonical_json(dict(summary))))

    def close_run(self, run_id: str, status: str) -> None:
        """Close a run with its final status and the time, its summary kept."""
        _check_final_status(status)
        runs = schema.runs
        with self._write("finish run") as conn:
            conn.execute(update(runs).where(runs.c.id == run_id).values(status=status, finished_at=utc_now()))

    def _run_query(self) -> Any:
        runs, t, r = schema.runs, schema.targets, schema.records
        n_records = (
            select(func.count(r.c.id)).where(r.c.run_id == runs.c.id).scalar_subquery().label("n_records")
        )
        return select(runs, t.c.key.label("target_key"), n_records).select_from(
            runs.join(t, runs.c.target_id == t.c.id)
        )

    def _run_from_row(self, row: Any) -> dict[str, Any]:
        with self._read_back("run", row.id):
            return {
                "run_id": _text(row, "id"),
                "model": _text(row, "model"),
                "target_key": _text(row, "target_key"),
                "tuner": _text(row, "tuner"),
                "params": _json_of(row.params_json, dict),
                "status": _text(row, "status"),
                "started_at": _text(row, "started_at"),
                "finished_at": _text(row, "finished_at", nullable=True),
                # as :meth:`finish_run` writes it: bytes there passed json.loads
                "summary": _json_of(row.summary_json, dict) if row.summary_json not in (None, "") else None,
                "n_records": int(row.n_records or 0),
            }

    def runs(self) -> list[dict[str, Any]]:
        """All runs, oldest first, with the number of records each wrote."""
        runs = schema.runs
        with self._read() as conn:
            rows = conn.execute(self._run_query().order_by(runs.c.started_at, runs.c.id)).all()
        return [self._run_from_row(row) for row in rows]

    def run(self, run_id: str) -> dict[str, Any] | None:
        runs = schema.runs
        with self._read() as conn:
            row = conn.execute(self._run_query().where(runs.c.id == run_id)).first()
        return None if row is None else self._run_from_row(row)

    def run_ids(self, prefix: str = "") -> list[str]:
        """Every run id history knows that starts with ``prefix``: its runs, and the run ids
        its records name (records imported from another machine name runs never held here)."""
        runs, r = schema.runs, schema.records
        with self._read() as conn:
            ids = set(conn.execute(select(runs.c.id).where(runs.c.id.startswith(prefix, autoescape=True))).scalars())
            ids.update(conn.execute(
                select(r.c.run_id).distinct().where(r.c.run_id.is_not(None), r.c.run_id.startswith(prefix, autoescape=True))
            ).scalars())
        return sorted(ids)

    def remove_runs(self, run_ids: Sequence[str], *, dry_run: bool = False, gone: Collection[str] = ()) -> list[dict[str, Any]]:
        """Remove runs and every record each wrote, all in one transaction.

        History answers an exact match with its stored winner and never measures it again,
        so a run timed on a busy machine, or tuned with settings since regretted, would go
        on deciding kernels until removed. What other runs measured is left alone, as are
        workloads, targets and the learned feature importances. A run still marked running
        is refused (its process would go on writing), unless the caller knows its process
        is ``gone`` (killed outright; what ``history runs`` shows as killed); so is an id
        history does not know. Returns, per run, what was (or with ``dry_run``, would be)
        removed."""
        runs, r = schema.runs, schema.records
        ids = list(dict.fromkeys(run_ids))
        with (self._read() if dry_run else self._write("remove runs")) as conn:
            removed = []
            for run_id in ids:
                row = conn.execute(select(runs.c.status, runs.c.params_json).where(runs.c.id == run_id)).first()
                n = int(conn.execute(select(func.count(r.c.id)).where(r.c.run_id == run_id)).scalar_one())
                if row is None and n == 0:
                    raise HistoryError(f"no run {run_id!r} in history at {self.location}")
                if row is not None and row.status == "running" and run_id not in gone:
                    params = json.loads(row.params_json or "{}")
                    where = f" (pid {params.get('pid')} on {params.get('host')})" if params.get("pid") else ""
                    raise HistoryError(f"run {run_id!r} is still running{where}; stop it before removing it")
                removed.append({"run_id": run_id, "records": n, "run_row": row is not None,
                                "status": None if row is None else "killed" if run_id in gone else row.status})
            if not dry_run:
                for run_id in ids:
                    conn.execute(r.delete().where(r.c.run_id == run_id))
                    conn.execute(runs.delete().where(runs.c.id == run_id))
        return removed


def _check_final_status(status: str) -> None:
    if status not in RUN_STATUSES or status == "running":
        raise ValueError(f"invalid final run status {status!r}; expected finished, failed or killed")


def open_history(
    location: str | os.PathLike[str] | None = None, *, create: bool = True, readonly: bool = False
) -> HistoryStore:
    """Open (and by default create) the history at ``location`` (see :func:`resolve_location`).

    ``readonly=True`` never creates or modifies anything (SQLite opens with ``mode=ro``),
    for listing commands; a missing history is then a HistoryError.
    """
    return HistoryStore(location, create=create, readonly=readonly)


#: What reading a row this code did not write raises (OverflowError: int() of SQLite's 1e999).
_UNREADABLE = (ValueError, TypeError, OverflowError, RecursionError)


def _json_of(text: Any, kind: type) -> Any:
    """A JSON column's value, of the kind this code writes there (TypeError otherwise)."""
    if not isinstance(text, str):
        raise TypeError(f"{type(text).__name__} where JSON text belongs")
    value = json.loads(text)
    if not isinstance(value, kind):
        raise TypeError(f"a JSON {type(value).__name__} where a {kind.__name__} belongs")
    return value


def _real(value: Any) -> float:
    """A number column's value as a float: text or bytes there are no number (float() took
    "1.5"), nor is infinity (SQLite's 1e999) one this code writes: JSON has none, and an
    export of it ended in json's ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{type(value).__name__} {str(value)[:40]!r} where a number belongs")
    if not math.isfinite(value):
        raise ValueError(f"{value!r} where a finite number belongs")
    return float(value)


def _text(row: Any, column: str, *, nullable: bool = False) -> str | None:
    """A text column's value as this code writes it, naming the column where it is not:
    bytes there (a BLOB edited in, ``X'616263'``) reached exports and listings, which
    ended in json's "Object of type bytes is not JSON serializable"."""
    value = getattr(row, column, None)  # a file from before the column (timing) has none
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{column}: {type(value).__name__} {str(value)[:40]} where text belongs")
    return value
