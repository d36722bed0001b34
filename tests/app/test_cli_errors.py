"""CLI misuse and the daemon's start-up checks (issue 16): one line saying what is wrong and what to do,
the documented exit status (README, "Exit statuses"), never a traceback.

In process with Typer's CliRunner (the same ``app`` the console script runs), each in an empty folder
with no GPUSCHED_* variable from outside.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.app import cli
from scheduler.lifecycle.service import JobView

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "helmet-s-train.yaml"
TOKEN = "t" * 32
REFUSED_PG = "postgresql+psycopg://gpusched@127.0.0.1:1/test"  # port 1: nothing listens there

OK, FAILED, BAD_INPUT, UNREACHABLE = 0, 1, 2, 3


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("GPUSCHED_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env, and the default data folder is the test's own


def run(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(cli.app, list(args), env=env)
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "Traceback" not in text
    # The runner catches what would have been a traceback; there must be none.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def one_line_error(result, *words: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(("error: ", "internal error: ")) and "; fix: " in line, line
    for w in words:
        assert w in line, line
    return line


# --- the CLI ----------------------------------------------------------------------------------------


def test_a_path_with_rich_markup_in_it_is_shown_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "a[" / "x]"  # the path holds "a[/x]", a closing tag no tag opened
    folder.mkdir(parents=True)
    job = folder / "j[bold].yaml"
    job.write_text(JOB.read_text())
    r = run("validate", str(job))
    assert r.exit_code == OK
    assert str(job) in r.stdout


def test_a_bad_file_whose_name_has_markup_is_named_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "b[").mkdir()
    job = tmp_path / "b[" / "x].yaml"
    job.write_text("name: [\n")
    r = run("validate", str(job))
    assert r.exit_code == BAD_INPUT
    assert str(job) in r.stderr


@pytest.mark.parametrize("make, words", [
    (lambda d: d / "missing.yaml", ["no such file"]),
    (lambda d: d, ["is a folder"]),
    (lambda d: (d / "latin1.yaml").write_bytes(b"name: caf\xe9\n") and d / "latin1.yaml", ["UTF-8"]),
])
def test_validate_names_what_is_wrong_with_the_file(tmp_path: Path, make, words) -> None:
    path = make(tmp_path)
    r = run("validate", str(path))
    assert r.exit_code == BAD_INPUT
    for w in words:
        assert w in r.stderr


@pytest.mark.skipif(not Path("/dev/urandom").exists(), reason="needs /dev/urandom (a Unix)")
@pytest.mark.timeout(20)
def test_validate_reads_an_endless_file_only_up_to_the_cap() -> None:
    r = run("validate", "/dev/urandom")
    assert r.exit_code == BAD_INPUT
    assert "larger than 64 KiB" in r.stderr


def test_plan_at_a_time_that_is_not_iso_is_a_usage_error() -> None:
    r = run("plan", str(JOB), "--at", "yesterday")
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "--at", "yesterday", "ISO 8601", "gpusched plan --help")


def test_plan_at_a_time_without_an_offset_is_utc() -> None:
    assert run("plan", str(JOB), "--at", "2026-11-02T09:00:00").exit_code == OK


@pytest.mark.parametrize("args, words", [
    (["nosuch"], ["No such command", "gpusched --help"]),
    (["plan"], ["Missing argument", "gpusched plan --help"]),
    (["plan", str(JOB), "--show", "many"], ["--show"]),
    (["report"], ["--month"]),
    (["plan", str(JOB), "--at", "9999-12-31T23:00:00+00:00"], ["--at", "1970-2199"]),
    (["report", "--month", "9999-12"], ["9999-12"]),
    (["trace", "generate", "--out", "t.jsonl", "--teams", "0"], ["team"]),
    (["simulate", "--trace", "t.jsonl", "--policy", "cheapest"], ["policy"]),
])
def test_command_line_mistakes_are_one_line_and_status_2(args: list[str], words: list[str]) -> None:
    r = run(*args)
    assert r.exit_code == BAD_INPUT
    one_line_error(r, *words)


def test_report_out_at_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    r = run("report", "--month", "2026-11", "--out", str(tmp_path / "afile"))
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "--out", "is a file, not a folder")


def test_report_out_where_no_folder_can_be_made(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    r = run("report", "--month", "2026-11", "--out", str(tmp_path / "afile" / "reports"))
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "cannot create --out")


def test_simulate_output_at_a_folder(tmp_path: Path) -> None:
    assert run("trace", "generate", "--out", str(tmp_path / "t.jsonl"), "--jobs", "3").exit_code == OK
    r = run("simulate", "--trace", str(tmp_path / "t.jsonl"), "--no-lower-bound", "--seed", "-1",
            "--output", str(tmp_path))
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "--output")


def test_live_clouds_without_credentials_are_one_line(tmp_path: Path) -> None:
    r = run("offers", env={"GPUSCHED_BACKEND": "live"})
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "ACCESS_KEY")


def test_demo_out_at_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    r = run("demo", "--out", str(tmp_path / "afile"))
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "--out", "is a file")


@pytest.mark.parametrize("env, names", [
    ({"GPUSCHED_FX_USD_CNY": "1e999999"}, ["GPUSCHED_FX_USD_CNY", "1000"]),
    ({"GPUSCHED_FX_USD_CNY": "NaN"}, ["GPUSCHED_FX_USD_CNY"]),
    ({"GPUSCHED_TICK_SECONDS": "inf"}, ["GPUSCHED_TICK_SECONDS", "finite"]),
    ({"GPUSCHED_IDLE_STOP_MINUTES": "9" * 30}, ["GPUSCHED_IDLE_STOP_MINUTES"]),
    ({"GPUSCHED_STOPPED_RETENTION_HOURS": "1e300"}, ["GPUSCHED_STOPPED_RETENTION_HOURS"]),
    ({"GPUSCHED_TEAM_BUDGETS": '{"qa": "0 CNY"}'}, ["GPUSCHED_TEAM_BUDGETS", "qa"]),
    ({"GPUSCHED_TEAM_BUDGETS": "{not json"}, ["team_budgets", "JSON"]),
    ({"GPUSCHED_FX_USD_CNY": "7", "GPUSCHED_REPORT_CURRENCY": "EUR", "GPUSCHED_API_PORT": "0"},
     ["GPUSCHED_REPORT_CURRENCY", "GPUSCHED_API_PORT"]),
    # Left empty in a .env, no cloud: every job refused one by one, the daemon up and useless.
    ({"GPUSCHED_PROVIDERS": ""}, ["GPUSCHED_PROVIDERS: is empty: name the clouds to run jobs on"]),
    ({"GPUSCHED_PROVIDERS": " , "}, ["GPUSCHED_PROVIDERS: is empty"]),
    # A slot per free reserved machine every tick: a billion of them stopped the daemon. The place in the JSON.
    ({"GPUSCHED_RESERVED": '[{"provider": "aws", "region": "us-east-1", "instance_type": "g5.xlarge", '
                           '"count": 1000000000, "until": "2027-11-01T00:00:00Z"}]'},
     ["GPUSCHED_RESERVED[0].count:", "less than or equal to 1000"]),
])
def test_settings_out_of_range_are_one_line_naming_the_variable(env: dict[str, str], names: list[str]) -> None:
    r = run("plan", str(JOB), env=env)
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "invalid settings", *names)


@pytest.mark.parametrize("args", [["status"], ["cancel", "j-1"], ["submit", str(JOB)], ["status", "j-1"]])
def test_an_unreachable_daemon_is_status_3(args: list[str]) -> None:
    r = run(*args, env={"GPUSCHED_API_URL": "http://127.0.0.1:9", "GPUSCHED_API_TOKEN": TOKEN})
    assert r.exit_code == UNREACHABLE
    one_line_error(r, "cannot reach the gpusched daemon", "gpusched daemon")


def test_a_job_reason_with_markup_is_listed_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2026, 11, 2, tzinfo=timezone.utc)
    reason = "[/x] agent said [bold]boom[/bold] \udcff"  # markup, and a lone surrogate no terminal encodes
    view = JobView(id="j-1", name="helmet", team="qa", project=None, kind="train", model="yolov9-s",
                   state="failed", priority=0, submitted_at=now, deadline_at=None, budget=None, attempt=1,
                   preemptions=0, epochs_done=0, epochs_total=10, reason=reason, finished_at=now, updated_at=now)

    class Client:
        def list_jobs(self, **_kw: object) -> list[JobView]:
            return [view]

    monkeypatch.setattr(cli, "_client", lambda _settings: Client())
    r = run("status", env={"COLUMNS": "300"})
    assert r.exit_code == OK
    assert "[/x] agent said [bold]boom[/bold]" in r.stdout


def test_an_unexpected_error_is_one_line_and_status_1_and_traceback_on_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("a bug [/x]")

    monkeypatch.setattr(cli, "_settings", broken)
    r = run("offers")
    assert r.exit_code == FAILED
    one_line_error(r, "internal error", "RuntimeError: a bug [/x]", "--traceback")
    r = CliRunner().invoke(cli.app, ["--traceback", "offers"])
    assert isinstance(r.exception, RuntimeError)


def test_the_data_folder_a_file_for_commands_that_use_the_store(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("x")
    for args in (["perf"], ["db", "upgrade"], ["report", "--month", "2026-11", "--out", str(tmp_path / "r")]):
        r = run(*args, env={"GPUSCHED_DATA_DIR": str(tmp_path / "data")})
        assert r.exit_code == BAD_INPUT, args
        one_line_error(r, "GPUSCHED_DATA_DIR", "is a file, not a folder")


@pytest.mark.timeout(60)
def test_a_store_another_program_holds_locked_says_so(tmp_path: Path) -> None:
    """It said to check the file's permissions, which were fine. (Waits out the store's 10 s busy timeout.)"""
    import sqlite3

    db = a_store(tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        r = run("perf", env={"GPUSCHED_DATA_DIR": str(tmp_path / "data")})
    finally:
        holder.close()
    assert r.exit_code == UNREACHABLE
    one_line_error(r, "database is locked", "another program holds the SQLite file's write lock")


@pytest.mark.timeout(60)
def test_a_refused_postgresql_for_db_upgrade_is_status_3(tmp_path: Path) -> None:
    r = run("db", "upgrade", env={"GPUSCHED_DATABASE_URL": REFUSED_PG, "GPUSCHED_DATA_DIR": str(tmp_path)})
    assert r.exit_code == UNREACHABLE
    line = one_line_error(r, "cannot open the store", "127.0.0.1:1", "GPUSCHED_DATABASE_URL")
    assert "sqlalche.me" not in line


# --- the daemon's start ------------------------------------------------------------------------------


def daemon(tmp_path: Path, **env: str):
    base = {"GPUSCHED_API_TOKEN": TOKEN, "GPUSCHED_DATA_DIR": str(tmp_path / "data"),
            "GPUSCHED_API_PORT": "1"}  # never reached: every case fails before serving
    return run("daemon", env={**base, **env})


def a_store(tmp_path: Path) -> Path:
    r = run("db", "upgrade", env={"GPUSCHED_DATA_DIR": str(tmp_path / "data")})
    assert r.exit_code == OK, r.stderr
    return tmp_path / "data" / "gpusched.db"


@pytest.mark.timeout(60)
def test_daemon_on_a_refused_postgresql(tmp_path: Path) -> None:
    r = daemon(tmp_path, GPUSCHED_DATABASE_URL=REFUSED_PG)
    assert r.exit_code == UNREACHABLE
    one_line_error(r, "cannot open the store", "start PostgreSQL or correct GPUSCHED_DATABASE_URL")


def test_daemon_on_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "gpusched.db").write_bytes(os.urandom(8192))
    r = daemon(tmp_path)
    assert r.exit_code == UNREACHABLE
    one_line_error(r, "not a sound gpusched database", "backup")


def test_daemon_on_a_truncated_store(tmp_path: Path) -> None:
    db = a_store(tmp_path)
    os.truncate(db, db.stat().st_size // 2)
    r = daemon(tmp_path)
    assert r.exit_code == UNREACHABLE
    one_line_error(r, "gpusched.db", "backup")


def test_daemon_on_a_store_with_a_damaged_table(tmp_path: Path) -> None:
    """Pages torn in the middle of the file: the schema reads, the data does not (quick_check finds it)."""
    db = a_store(tmp_path)
    # Closed, not only committed: the filler is then in the file itself, its last pages, whatever the schema
    # before it (an open connection leaves it in the WAL, whose copies of pages hide their damage).
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE filler (x BLOB)")
        conn.executemany("INSERT INTO filler VALUES (?)", [(os.urandom(3000),) for _ in range(40)])
    assert not db.with_name(db.name + "-wal").exists()
    data = bytearray(db.read_bytes())
    page = 4096
    last = len(data) // page
    for n in range(last - 20, last - 2):
        data[n * page + 8:n * page + 200] = os.urandom(192)
    db.write_bytes(bytes(data))
    r = daemon(tmp_path)
    assert r.exit_code == UNREACHABLE
    one_line_error(r, "gpusched.db", "backup")


def test_daemon_whose_reports_folder_cannot_be_written(tmp_path: Path) -> None:
    """It started, and the month's report failed on the 1st."""
    (tmp_path / "reports").write_text("x")
    r = daemon(tmp_path, GPUSCHED_REPORT_DIR=str(tmp_path / "reports"))
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "GPUSCHED_REPORT_DIR", "is a file, not a folder")


def test_daemon_with_its_data_folder_a_file(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("x")
    r = daemon(tmp_path)
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "GPUSCHED_DATA_DIR", "is a file")


@pytest.mark.parametrize("env, name", [
    ({"GPUSCHED_SANDBOX_SPEEDUP": "inf"}, "GPUSCHED_SANDBOX_SPEEDUP"),
    ({"GPUSCHED_SANDBOX_SPEEDUP": "1e9"}, "GPUSCHED_SANDBOX_SPEEDUP"),
    ({"GPUSCHED_TICK_SECONDS": "-1"}, "GPUSCHED_TICK_SECONDS"),
    ({"GPUSCHED_TICK_SECONDS": "1e-6"}, "GPUSCHED_TICK_SECONDS: Input should be greater than or equal to 0.05"),
    ({"GPUSCHED_API_TOKEN": "short"}, "GPUSCHED_API_TOKEN"),
    ({"GPUSCHED_API_TOKEN": ""}, "API token"),
    ({"GPUSCHED_REPORT_CRON": "every day"}, "GPUSCHED_REPORT_CRON"),
    ({"GPUSCHED_LEADER_LEASE_S": "0"}, "GPUSCHED_LEADER_LEASE_S"),
    ({"GPUSCHED_LEADER_RENEW_S": "30"}, "GPUSCHED_LEADER_RENEW_S"),  # not less than the default lease
    ({"GPUSCHED_LEADER_RENEW_S": "1e-9"}, "GPUSCHED_LEADER_RENEW_S: Input should be greater than or equal to 0.1"),
    ({"GPUSCHED_SANDBOX_CLOCK_START": "2026-11-20T08:00:00"}, "GPUSCHED_SANDBOX_CLOCK_START"),
    ({"GPUSCHED_BUDGET_CHECK_MINUTES": "inf"}, "GPUSCHED_BUDGET_CHECK_MINUTES"),  # an internal OverflowError
    ({"GPUSCHED_BUDGET_CHECK_MINUTES": "0.0001"}, "GPUSCHED_BUDGET_CHECK_MINUTES"),  # a look every 6 ms
    # A budget under a name no job file can give never applied, silently.
    ({"GPUSCHED_TEAM_BUDGETS": '{"Vision QA": "5000 CNY"}'}, "GPUSCHED_TEAM_BUDGETS: 'Vision QA' is not a team name"),
    ({"GPUSCHED_PROJECT_BUDGETS": '{"vision-qa/helmet": "5000 CNY"}'}, "is not a project name"),
    # Found only when the month's report failed to go out, weeks after the start.
    ({"GPUSCHED_SMTP_URL": "mail.example.com"}, "GPUSCHED_SMTP_URL: must start with smtp://"),
])
def test_daemon_with_a_setting_out_of_range(tmp_path: Path, env: dict[str, str], name: str) -> None:
    r = daemon(tmp_path, **env)
    assert r.exit_code == BAD_INPUT
    one_line_error(r, name)


@pytest.mark.parametrize("start, speedup, why", [
    # Run back from the future, the sped-up clock read before year 1: an internal OverflowError at start.
    ("2199-12-31T23:59:50+00:00", "60", "is in the future"),
    ("1970-01-01T00:00:00+00:00", "60", "outside the years 2000-2199"),  # in the 5300s and on: no job time may be
    ("2000-01-01T00:00:00+00:00", "100000", "past year 9999"),
])
def test_daemon_whose_sandbox_clock_would_read_no_job_time(tmp_path: Path, start: str, speedup: str,
                                                           why: str) -> None:
    r = daemon(tmp_path, GPUSCHED_SANDBOX_CLOCK_START=start, GPUSCHED_SANDBOX_SPEEDUP=speedup)
    assert r.exit_code == BAD_INPUT
    assert one_line_error(r, "GPUSCHED_SANDBOX_CLOCK_START", why).startswith("error: ")


def test_a_trace_is_read_only_up_to_its_cap_even_gzipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gzip

    from scheduler.simulation import trace_file

    monkeypatch.setattr(trace_file, "MAX_TRACE_BYTES", 1024)
    bomb = tmp_path / "t.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\n" * 100_000))  # 100 kB of nothing in a few hundred bytes
    r = run("simulate", "--trace", str(bomb), "--no-lower-bound")
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "MiB of JSON lines (uncompressed)", "split the trace")


def test_a_full_disk_under_the_store_is_told_with_the_space_left(tmp_path: Path) -> None:
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from scheduler.app.startup import store_fix
    from scheduler.store.database import Store

    store = Store(f"sqlite:///{tmp_path / 'gpusched.db'}")
    full = OperationalError("INSERT ...", {}, sqlite3.OperationalError("database or disk is full"))
    fix = store_fix(store, full)
    assert fix.startswith("free space on the disk that holds the store (") and "KiB free)" in fix
    store.dispose()


def test_a_malformed_smtp_url_is_refused_at_start_without_its_password(tmp_path: Path) -> None:
    r = daemon(tmp_path, GPUSCHED_SMTP_URL="smtp://reports:hunter2-secret@mail.example.com:99999")
    assert r.exit_code == BAD_INPUT
    line = one_line_error(r, "GPUSCHED_SMTP_URL: is not a URL")
    assert "hunter2" not in r.stderr + r.stdout and "mail.example.com" not in line


@pytest.mark.parametrize("url, words", [
    ("http://[::1", "is not a URL (Invalid IPv6 URL)"),  # was an internal error: InvalidURL
    ("daemon.internal:8642", "must be an http:// or https:// URL"),  # was "cannot reach the gpusched daemon"
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://ops:hunter2@10.0.0.5:8642", "must not carry a user or password"),
])
def test_a_malformed_api_url_is_a_settings_error(url: str, words: str) -> None:
    r = run("status", env={"GPUSCHED_API_URL": url, "GPUSCHED_API_TOKEN": TOKEN})
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "GPUSCHED_API_URL", words)
    assert "hunter2" not in r.stderr


def test_a_malformed_agent_api_url_stops_the_daemon_before_it_launches_machines(tmp_path: Path) -> None:
    """The URL goes into every machine's user-data: a typo booted machines that could never report."""
    r = daemon(tmp_path, GPUSCHED_AGENT_API_URL="10.0.0.5:8642")
    assert r.exit_code == BAD_INPUT
    one_line_error(r, "GPUSCHED_AGENT_API_URL", "must be an http:// or https:// URL")


@pytest.mark.parametrize("args, option", [
    (["plan", str(ROOT / "examples" / "helmet-s-train.yaml"), "--show", "-1"], "--show"),  # showed all but one
    (["logs", "job-1", "--attempt", "99999999999999999999"], "--attempt"),  # the daemon's 400 on query.attempt
    (["bench", "spot-traces", "--traces", ".", "--starts", "0"], "--starts"),  # an internal ValidationError
    (["bench", "spot-traces", "--traces", ".", "--starts", "999999999999"], "--starts"),  # ran for days
    (["bench", "spot-traces", "--traces", ".", "--workers", "-3"], "--workers"),  # an internal ValidationError
])
def test_an_option_out_of_its_range_is_told_by_the_option(args: list[str], option: str) -> None:
    r = run(*args)
    assert r.exit_code == BAD_INPUT
    one_line_error(r, f"'{option}'")
