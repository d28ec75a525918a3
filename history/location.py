"""Where history lives: one function decides, so every command agrees on the same database."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

#: Environment variable naming the history location (file path or SQLAlchemy URL).
ENV_VAR = "AUTOTUNE_HISTORY"
#: Environment variable moving the per-user state directory (history, runs, MLflow store).
HOME_ENV_VAR = "AUTOTUNE_HOME"
#: History file name inside the state directory, used when nothing else names one.
DEFAULT_NAME = "history.db"


def autotune_home() -> str:
    """The per-user state directory: ``$AUTOTUNE_HOME``, else ``~/.autotune``.

    Defined here, in the lowest layer, so history, MLflow store, run reports and caches
    all move together when the variable is set.
    """
    given = os.environ.get(HOME_ENV_VAR, "").strip()
    # absolute: a relative HOME or AUTOTUNE_HOME was shown as given, beside absolute paths under it
    return os.path.abspath(os.path.expanduser(given) if given else os.path.join(user_home(), ".autotune"))


def user_home() -> str:
    """``~``, where a HOME set empty counts as unset: expanded, it put the state of a
    tune run as root in ``/.autotune``. The account's home then, as with HOME unset."""
    if os.environ.get("HOME") == "":
        try:
            import pwd

            return pwd.getpwuid(os.getuid()).pw_dir
        except (ImportError, KeyError):  # no account database (Windows): as Python would
            pass
    return os.path.expanduser("~")


def is_url(location: str) -> bool:
    """A location containing ``://`` is a SQLAlchemy URL; anything else is a file path."""
    return "://" in location


def in_memory(url) -> bool:
    """Whether a history URL (text or parsed) names SQLite's in-memory database, which ends with its process."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return False
    return parsed.get_backend_name() == "sqlite" and (parsed.database or "") in ("", ":memory:")


def resolve_location(location: str | os.PathLike[str] | None = None) -> str:
    """SQLAlchemy URL of the history: explicit argument, else $AUTOTUNE_HISTORY, else
    ``history.db`` in :func:`autotune_home`.

    File paths become ``sqlite:///<absolute path>`` so the URL does not depend on the
    current directory of whoever prints or reopens it.
    """
    if location is not None:
        value = os.fspath(location)
    else:
        value = os.environ.get(ENV_VAR, "").strip() or os.path.join(autotune_home(), DEFAULT_NAME)
    if is_url(value):
        return value
    if value.endswith(("/", os.sep)):  # `--history newh/` made a database file named newh
        from .errors import HistoryError

        raise HistoryError(f"history {value}: the name ends in '/', a folder's; give the database's file name")
    return sqlite_url(os.path.abspath(os.path.expanduser(value)))


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """``sqlite:///`` and ``path`` percent-encoded: a URL's reader decodes ``%XX`` and cuts
    at ``?``, so ``--history 'a%41.db'`` opened ``aA.db`` and ``n?x=1.db`` created ``n``."""
    from urllib.parse import quote

    return "sqlite:///" + quote(os.fspath(path), safe="/")


def no_history_yet(location: str | os.PathLike[str] | None) -> bool:
    """Whether no history was named and the default one (``$AUTOTUNE_HISTORY`` or the
    home's) is a file not made yet: no tune has run, so there is nothing to read, which
    is no error (a history named outright and missing is a typo, said as such)."""
    if location is not None:
        return False
    path = sqlite_file(resolve_location(None))
    return path is not None and not path.exists()


def sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite:`` URL names, as the store opens it (``%XX`` decoded, ``~``
    expanded, relative to the working directory); None for a server or in-memory.
    Taking the text after ``sqlite:///`` as it stood, a percent-encoded
    ``$AUTOTUNE_HISTORY`` named no file: compile read no history and ``-o`` wrote the
    module over the database."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    if parsed.get_backend_name() != "sqlite" or (parsed.database or "") in ("", ":memory:"):
        return None
    return Path(os.path.abspath(os.path.expanduser(parsed.database)))


def history_option(url: str) -> str:
    """`` --history PATH`` naming this history in a command a message suggests, or ""
    for the one a command reads by default: `autotune history show KEY`, suggested by a
    tune of another history, read the default one, which held other records of the key."""
    import shlex

    if url == mask_url(resolve_location(None)):
        return ""
    path = sqlite_file(url)
    return f" --history {shlex.quote(str(path) if path is not None else url)}"


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for messages and listings."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        # Unparseable: hide everything between "://" and "@" in case it holds credentials.
        scheme, sep, rest = url.partition("://")
        if sep and "@" in rest:
            return f"{scheme}://***@{rest.rpartition('@')[2]}"
        return url


#: The names of :func:`temporary_beside`: the pid of the process writing it.
TEMPORARY_NAME = re.compile(r"\.autotune-(\d+)-[0-9a-f]{16}(\.|$)")
#: Its names before they named the process (2026-12-05/06): no owner to ask after.
UNOWNED_TEMPORARY_NAME = re.compile(r"\.autotune-[0-9a-f]{16}(\.|$)")

#: Seconds a killed process's temporary file is left before it is removed: in a folder
#: other hosts write to, a pid says nothing, and no write takes this long to finish.
ORPHAN_AGE_S = 600.0
#: Seconds an unowned (older autotune's) temporary file is left: a day.
UNOWNED_AGE_S = 86400.0


def temporary_beside(parent: Path, suffix: str) -> Path:
    """A fresh, short, hidden name in ``parent`` for a file written whole and then renamed
    over an output (an export, a module, a report). One built from the output's own name
    (and a pid and a uuid) went past the file-name limit for outputs of a legal length.
    It names the process, so that one killed mid-write leaves a file a later write to the
    folder removes (:func:`remove_orphaned_temporaries`). Here, in the
    lowest layer, because history's exports write so too."""
    return parent / f".autotune-{os.getpid()}-{uuid.uuid4().hex[:16]}{suffix}"


def remove_orphaned_temporaries(parent: Path) -> list[str]:
    """Remove the temporary files of :func:`temporary_beside` in ``parent`` whose process
    is gone: a tune or compile killed outright mid-export (SIGKILL, the OOM killer during
    the link) left a 47 MB hidden module beside the output, for good. Those of an older
    autotune, whose names say no process, go once a day old. Returns the names."""
    import time

    from .processes import pid_alive

    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        found = TEMPORARY_NAME.match(name)
        if found is not None:
            if int(found.group(1)) == os.getpid() or pid_alive(int(found.group(1))):
                continue
            age = ORPHAN_AGE_S
        elif UNOWNED_TEMPORARY_NAME.match(name):
            age = UNOWNED_AGE_S
        else:
            continue
        path = parent / name
        try:
            if now - path.lstat().st_mtime >= age:
                path.unlink()
                removed.append(name)
        except OSError:
            continue
    return removed
