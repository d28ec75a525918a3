"""Where matplotlib keeps its settings, for a user whose home cannot be written."""

from __future__ import annotations

import os


def settle_matplotlib_config() -> None:
    """Matplotlib keeps its settings and font cache in ``~/.config/matplotlib``; where that
    cannot be written (a read-only HOME) it warned in two lines on every tune, ``--quiet``
    or not, and used a temporary folder. Such a folder, named per user, is given it
    outright then (``MPLCONFIGDIR``), before anything imports it."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    from autotune.history.location import user_home

    folder = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(user_home(), ".config"), "matplotlib")
    nearest = folder
    while not os.path.exists(nearest) and os.path.dirname(nearest) != nearest:
        nearest = os.path.dirname(nearest)
    if os.path.isdir(nearest) and os.access(nearest, os.W_OK | os.X_OK):
        return
    import tempfile

    own = os.path.join(tempfile.gettempdir(), f"autotune-matplotlib-{os.getuid() if hasattr(os, 'getuid') else 0}")
    try:
        os.makedirs(own, mode=0o700, exist_ok=True)
        if hasattr(os, "getuid") and (os.stat(own).st_uid != os.getuid() or os.stat(own).st_mode & 0o077):
            return  # another user's, made first: matplotlib's own fallback (and its warning) then
    except OSError:
        return
    os.environ["MPLCONFIGDIR"] = own
