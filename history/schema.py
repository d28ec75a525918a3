"""Tables, in SQLAlchemy Core, so one definition serves SQLite files and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

#: Bumped when tables change incompatibly; a newer file is refused rather than misread.
SCHEMA_VERSION = 1
#: Nullable columns added since without a version bump (an older autotune reads and
#: writes a file that has them): added when a file without them is opened for writing,
#: and left out of queries of one opened read-only.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"records": ("twin", "timing")}

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

targets = Table(
    "targets",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(512), nullable=False, unique=True),
    Column("kind", String(64), nullable=False),
    Column("arch", String(128), nullable=False),
    Column("device_name", String(256), nullable=False),
    Column("driver_version", String(128), nullable=False, default=""),
    Column("runtime_version", String(128), nullable=False, default=""),
    Column("tvm_version", String(128), nullable=False, default=""),
    Column("created_at", String(40), nullable=False),
)

workloads = Table(
    "workloads",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(1024), nullable=False, unique=True),
    Column("batch_invariant_key", String(1024), nullable=False, index=True),
    Column("op_class", String(128), nullable=False, index=True),
    Column("descriptor_json", Text, nullable=False),
    Column("features_json", Text, nullable=False, default="[]"),
    Column("flops", Double, nullable=False),
    Column("created_at", String(40), nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(256), primary_key=True),
    Column("model", Text, nullable=False),
    Column("target_id", Integer, ForeignKey("targets.id"), nullable=False),
    Column("tuner", String(128), nullable=False),
    Column("params_json", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", String(40), nullable=False),
    Column("finished_at", String(40), nullable=True),
    Column("summary_json", Text, nullable=True),
)

records = Table(
    "records",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("workload_id", Integer, ForeignKey("workloads.id"), nullable=False),
    Column("target_id", Integer, ForeignKey("targets.id"), nullable=False),
    Column("space_id", String(256), nullable=False),
    Column("config_json", Text, nullable=False),
    Column("config_hash", String(64), nullable=False),
    Column("latency_mean", Double, nullable=True),
    Column("latency_median", Double, nullable=True),
    Column("latency_std", Double, nullable=True),
    Column("repeats", Integer, nullable=False, default=0),
    Column("samples_json", Text, nullable=False, default="[]"),
    Column("status", String(16), nullable=False),
    Column("error", Text, nullable=True),
    Column("verified", Boolean, nullable=True),
    # True: answered with the timing of another config that compiled to the same program
    # (autotune.program_digest), not timed itself; NULL: timed, or recorded before
    # twins were marked. Added to older files when they are opened for writing.
    Column("twin", Boolean, nullable=True),
    # How it was timed, where not by TVM's evaluator (NULL: "launches", back to back, as
    # every record before 2026-12-07 was): "queued" behind a spin kernel, GPU time alone
    # (autotune.queued_timing). The two read few-microsecond CUDA kernels differently.
    Column("timing", String(16), nullable=True),
    # Not a foreign key: records imported from another machine name runs we do not have.
    Column("run_id", String(256), nullable=True, index=True),
    Column("tuner", String(128), nullable=False, default=""),
    Column("created_at", String(40), nullable=False),
    Index("ix_records_config", "workload_id", "target_id", "space_id", "config_hash"),
    Index("ix_records_best", "workload_id", "target_id", "status", "latency_median"),
    # The records a check found wrong, few: HistoryStore.summary asks how many there are
    # before every match, and counting them scanned every row (about 1 s at a million).
    Index("ix_records_rejected", "id", sqlite_where=text("verified = 0"), postgresql_where=text("verified = false")),
)

#: Indexes added since without a version bump, made when a file without them is opened
#: for writing (an older autotune ignores them; a file opened read-only goes without).
ADDED_INDEXES: dict[str, tuple[str, ...]] = {"records": ("ix_records_rejected",)}
