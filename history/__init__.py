"""Tuning-history database: every measured config, on every target, kept for reuse.

Public API: :func:`open_history` returns a :class:`HistoryStore`; values in and out are
the frozen dataclasses of :mod:`autotune.history.models`; errors a user should see are
:class:`HistoryError`. Depends only on the stdlib, SQLAlchemy (Core) and numpy.
"""

from __future__ import annotations

from .errors import HistoryError
from .io import export_json, import_json
from .location import ENV_VAR, autotune_home, mask_url, resolve_location
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
    config_hash,
    split_target_key,
)
from .schema import SCHEMA_VERSION
from .store import HistoryStore, open_history

__all__ = [
    "BASELINE_SPACE_PREFIX",
    "autotune_home",
    "ENV_VAR",
    "HistoryError",
    "HistoryStore",
    "MAX_ERROR_CHARS",
    "OTHER_BATCH_TUNER",
    "RECORD_STATUSES",
    "RECORD_TIMINGS",
    "RUN_STATUSES",
    "Record",
    "SCHEMA_VERSION",
    "TargetInfo",
    "WorkloadInfo",
    "canonical_json",
    "config_hash",
    "export_json",
    "import_json",
    "mask_url",
    "open_history",
    "resolve_location",
    "split_target_key",
]
