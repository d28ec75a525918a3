"""Opening a SQLite history file: checked by hand first, then WAL with a busy timeout.

Kept apart from :mod:`autotune.history.store` (the data API) because none of it is about tuning
records: it is what lets several processes share one file, and what makes a bad path fail
with one clear line that leaves nothing behind (no stray file, no half-made directory).
"""

from __future__ import annotations

import errno
import os
import random
import sqlite3
import time
from typing import Any, Callable
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import QueuePool, StaticPool

from .errors import HistoryError, cause

#: Seconds a SQLite writer waits for another process's write lock before giving up.
BUSY_TIMEOUT_S = 60.0
#: Seconds the switch to WAL mode waits for other processes' locks (at open, and on each
#: new connection) before the file keeps its rollback journal.
WAL_SWITCH_WAIT_S = 5.0
#: Execution option naming the statement that begins a transaction (``BEGIN IMMEDIATE`` for writers).
BEGIN_OPTION = "history_begin"
_SQLITE_HEADER = b"SQLite format 3\x00"


def is_busy(exc: BaseException | None) -> bool:
    """SQLITE_BUSY/LOCKED anywhere in the cause chain (HistoryError -> SQLAlchemy -> sqlite3)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, sqlite3.OperationalError):
            code = getattr(exc, "sqlite_errorcode", None)
            if code is not None:
                return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            return "database is locked" in str(exc)
        exc = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc.__cause__
        seen += 1
    return False


def retry_while_busy(step: Callable[[], None], seconds: float = BUSY_TIMEOUT_S) -> None:
    """Run ``step`` again while SQLite answers "database is locked" without waiting.

    SQLite's busy timeout does not cover every lock conflict: to avoid a deadlock it fails at
    once when, for example, two processes that both just created a file race to create the
    tables and switch to WAL (the journal-mode switch wants an exclusive lock while the other
    holds a shared one). Backing off and trying again resolves it.
    """
    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        try:
            step()
            return
        except HistoryError as exc:
            if not is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.25)


def switch_to_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL``, waiting at most WAL_SWITCH_WAIT_S for other processes' locks.

    The switch needs the file to itself; a reader of a rollback-journal file blocks it, and
    nothing is gained by waiting the full write timeout for it.
    """
    conn.execute(f"PRAGMA busy_timeout={int(WAL_SWITCH_WAIT_S * 1000)}")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")


def is_empty_file(path: str) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return False



def check_existing_file(path: str, *, readonly: bool) -> None:
    """Refuse anything that is not a (possibly empty) SQLite file we may use as asked."""
    if os.path.isdir(path):
        raise HistoryError(f"cannot open history at {path}: it is a directory, not a database file")
    if not os.path.isfile(path):
        raise HistoryError(f"cannot open history at {path}: not a regular file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise HistoryError(f"cannot read history at {path}: {exc.strerror or exc}") from None
    if head and head != _SQLITE_HEADER:
        raise HistoryError(
            f"cannot open history at {path}: the file exists but is not a SQLite database "
            "(refusing to overwrite it; choose another location)"
        )
    if readonly:
        return
    try:
        fd = os.open(path, os.O_RDWR)
        os.close(fd)
    except OSError as exc:
        raise HistoryError(
            f"cannot open history at {path} for writing: {exc.strerror or exc} (the file is read-only)"
        ) from None
    parent = os.path.dirname(path)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise HistoryError(
            f"cannot open history at {path} for writing: directory {parent} is not writable "
            "(SQLite keeps its journal files next to the database)"
        )

def why_not_creatable(path: str) -> str | None:
    """Why a database could not be created at ``path``, as far as looking can tell
    (the nearest existing folder above it is a file, or not writable); None otherwise."""
    probe = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(probe):
        up = os.path.dirname(probe)
        if up == probe:
            break
        probe = up
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"directory {probe} is not writable"
    return None


def check_creatable(path: str) -> None:
    """What opening ``path`` to write would refuse, said before anything is made (by the
    caller or by others, such as an MLflow store set up first): an existing file as
    :func:`check_existing_file` reads it, a missing one as :func:`why_not_creatable` does."""
    if os.path.lexists(path):
        check_existing_file(path, readonly=False)
        return
    why = why_not_creatable(path)
    if why is not None:
        raise HistoryError(f"cannot create history at {path}: {why}")


def make_parents(path: str) -> list[str]:
    """Create missing parent directories, returning those created (to remove on failure)."""
    parent = os.path.dirname(path)
    missing: list[str] = []
    probe = parent
    while not os.path.exists(probe):
        missing.append(probe)
        up = os.path.dirname(probe)
        if up == probe:
            break
        probe = up
    if not os.path.isdir(probe):
        raise HistoryError(f"cannot create history at {path}: {probe} is not a directory")
    created: list[str] = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            continue  # created concurrently by another process: fine
        except OSError as exc:
            for c in reversed(created):
                try:
                    os.rmdir(c)
                except OSError:
                    pass
            raise HistoryError(
                f"cannot create history at {path}: cannot create directory {d}: {exc.strerror or exc}"
            ) from None
        created.append(d)
    return created

def create_file(path: str) -> bool:
    """Create the empty database file ourselves: a clearer error than SQLite's, and exclusive."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False  # another process created it in the meantime; SQLite will share it
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            why = f"directory {os.path.dirname(path)} is not writable ({why})"
        raise HistoryError(f"cannot create history at {path}: {why}") from None
    os.close(fd)
    return True

def remove_created(path: str, created_file: bool, created_dirs: list[str]) -> None:
    """Undo a failed open: the file if nobody has written to it yet, then the directories made for it."""
    # Only a file nobody has written to yet: another process may already share it.
    if created_file and is_empty_file(path):
        for suffix in ("-wal", "-shm", "-journal", ""):
            try:
                os.unlink(path + suffix)
            except OSError:
                pass
    for d in reversed(created_dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass


def enable_wal(engine: Engine, location: str) -> None:
    """Switch the open file to WAL; a contended switch raises a HistoryError that :func:`is_busy` knows."""
    try:
        raw = engine.raw_connection()
        try:
            switch_to_wal(raw.driver_connection)  # type: ignore[arg-type]
        finally:
            raw.close()
    except (sqlite3.Error, SQLAlchemyError) as exc:
        raise HistoryError(f"cannot open history at {location}: {cause(exc)}") from exc


def leave_rollback_journal(path: str) -> None:
    """Switch the file back to DELETE mode if nobody else has it open; otherwise do nothing.

    A read-only (``mode=ro``) reader of a WAL-mode file creates ``-wal``/``-shm`` files it
    can never remove, so listing commands would litter the directory. The switch needs
    exclusive access: it silently does nothing while others use the file.
    """
    try:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            conn.close()
    except sqlite3.Error:
        pass


def sqlite_engine(
    path: str, *, readonly: bool, immutable: bool, memory: bool, wal: Callable[[], bool]
) -> Engine:
    """Engine whose connections have FKs on, a busy timeout, WAL once ``wal()`` says so, and explicit BEGINs."""

    def connect() -> sqlite3.Connection:
        if memory:
            return sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        if readonly:
            uri = f"file:{quote(path)}?mode=ro" + ("&immutable=1" if immutable else "")
            return sqlite3.connect(
                uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)

    engine = create_engine(
        "sqlite://", creator=connect, poolclass=StaticPool if memory else QueuePool
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # pysqlite's own transaction handling is off (isolation_level=None); we BEGIN below.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            if readonly:
                cur.execute("PRAGMA query_only=ON")
            elif wal():
                # Best effort: another process's close() may have switched the file back to a
                # rollback journal; if the switch is contended now, that journal is just as safe.
                try:
                    switch_to_wal(dbapi_conn)
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the lock up front (BEGIN IMMEDIATE): a deferred transaction that
        # upgrades to a writer later fails at once with "database is locked" in WAL mode.
        conn.exec_driver_sql(conn.get_execution_options().get(BEGIN_OPTION, "BEGIN"))

    return engine
