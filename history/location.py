"""Where history lives: one function decides, so every command agrees on the same database."""

from __future__ import annotations

import os

#: Environment variable naming the history location (file path or SQLAlchemy URL).
ENV_VAR = "AUTOTUNE_HISTORY"
#: Used when neither an explicit location nor the environment variable is given.
DEFAULT_PATH = os.path.join("~", ".autotune", "history.db")


def is_url(location: str) -> bool:
    """A location containing ``://`` is a SQLAlchemy URL; anything else is a file path."""
    return "://" in location


def resolve_location(location: str | os.PathLike[str] | None = None) -> str:
    """SQLAlchemy URL of the history: explicit argument, else $AUTOTUNE_HISTORY, else the default.

    File paths become ``sqlite:///<absolute path>`` so the URL does not depend on the
    current directory of whoever prints or reopens it.
    """
    if location is not None:
        value = os.fspath(location)
    else:
        value = os.environ.get(ENV_VAR, "").strip() or DEFAULT_PATH
    if is_url(value):
        return value
    return "sqlite:///" + os.path.abspath(os.path.expanduser(value))


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
