"""``gpusched token ...``, ``gpusched audit`` and ``submit``/``status`` with personal tokens, against the
daemon's real API served by uvicorn on a local port."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
import yaml
from pydantic import SecretStr
from typer.testing import CliRunner

from scheduler.app import cli
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.logs import configure_logging
from scheduler.settings import Settings
from scheduler.store.database import Store
from tests.app.test_api import JOB, NOW, TOKEN, reset_logging

ROOT = Path(__file__).resolve().parents[2]


class Served:
    """The API on a fresh store, served by uvicorn from a thread on a free local port."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = Store(f"sqlite:///{tmp_path / 'gpusched.db'}")
        self.store.migrate()
        self.log = io.StringIO()
        app = create_app(self.store, SimClock(NOW), Settings(_env_file=None, api_token=SecretStr(TOKEN)))
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "the API did not start"
            time.sleep(0.05)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        self.store.dispose()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    for name in list(os.environ):
        if name.startswith("GPUSCHED_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env
    # The daemon's log to a buffer of its own: in process, it would land in the CLI's captured stdout.
    configure_logging("json", "info", stream=(log := io.StringIO()))
    api = Served(tmp_path)
    api.log = log
    try:
        yield api
    finally:
        api.close()
        reset_logging()


def run(served: Served, token: str, *args: str):
    result = CliRunner().invoke(cli.app, list(args), env={"GPUSCHED_API_URL": served.url, "GPUSCHED_API_TOKEN": token,
                                                           "COLUMNS": "250"})
    assert "Traceback" not in result.output and (result.exception is None or isinstance(result.exception, SystemExit))
    return result


def create(served: Served, *args: str) -> str:
    r = run(served, TOKEN, "token", "create", *args)
    assert r.exit_code == 0, r.output
    return r.stdout.strip()


def test_token_create_prints_the_token_alone_on_stdout(served: Served) -> None:
    """As a script runs it: a real process, its stdout taken whole."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    env.update(GPUSCHED_API_URL=served.url, GPUSCHED_API_TOKEN=TOKEN)
    done = subprocess.run([sys.executable, "-m", "scheduler.app.cli", "token", "create", "--team", "vision-qa",
                           "--role", "member", "--name", "ci", "--expires", "30d"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    token = done.stdout.removesuffix("\n")
    assert "\n" not in token and token.startswith("gps_") and len(token) == 60
    assert "ci" in done.stderr and "member" in done.stderr and "2026-12-20" in done.stderr  # 30 days on
    me = run(served, token, "token", "whoami")
    assert me.exit_code == 0 and "ci: member of vision-qa" in me.stdout
    assert '"api_token_created"' in served.log.getvalue() and token not in served.log.getvalue()


def test_token_list_and_revoke(served: Served) -> None:
    token = create(served, "--team", "vision-qa", "--role", "viewer", "--name", "vic")
    listed = run(served, TOKEN, "token", "list", "--json")
    [entry] = json.loads(listed.stdout)
    assert (entry["name"], entry["role"], entry["teams"], entry["state"]) == ("vic", "viewer", ["vision-qa"], "live")
    table = run(served, TOKEN, "token", "list")
    assert entry["id"] in table.stdout and "vic" in table.stdout and token not in table.stdout
    revoked = run(served, TOKEN, "token", "revoke", entry["id"])
    assert revoked.exit_code == 0 and "revoked" in revoked.stdout
    refused = run(served, token, "status")
    assert refused.exit_code == 2 and "was revoked" in refused.stderr and "fix:" in refused.stderr


def test_a_member_submits_a_teamless_file_and_status_shows_who_sent_it(served: Served, tmp_path: Path) -> None:
    token = create(served, "--team", "vision-qa", "--name", "alice")  # --role member is the default
    job_file = tmp_path / "helmet.yaml"
    job_file.write_text(yaml.safe_dump({k: v for k, v in JOB.items() if k != "team"}))
    sent = run(served, token, "submit", str(job_file))
    assert sent.exit_code == 0, sent.output
    assert "team vision-qa" in sent.stdout
    listing = run(served, token, "status")
    assert listing.exit_code == 0 and "alice" in listing.stdout and "vision-qa" in listing.stdout


def test_a_viewer_is_refused_with_the_reason_in_one_line(served: Served, tmp_path: Path) -> None:
    token = create(served, "--team", "vision-qa", "--role", "viewer", "--name", "vic")
    job_file = tmp_path / "helmet.yaml"
    job_file.write_text(yaml.safe_dump(JOB))
    r = run(served, token, "submit", str(job_file))
    assert r.exit_code == 2
    [line] = [x for x in r.stderr.splitlines() if x.strip()]
    assert line.startswith("error: vic is a viewer") and "; fix: " in line


def test_audit_lists_the_entries(served: Served) -> None:
    create(served, "--team", "vision-qa", "--name", "alice")
    viewer = create(served, "--team", "vision-qa", "--role", "viewer", "--name", "vic")
    assert run(served, viewer, "token", "list").exit_code == 2  # refused, and audited
    as_json = run(served, TOKEN, "audit", "--json", "--since", "2026-11-01T00:00:00+08:00")
    assert as_json.exit_code == 0, as_json.output
    entries = json.loads(as_json.stdout)
    assert [(e["actor"], e["action"], e["outcome"]) for e in entries] == [
        ("api-token", "token.create", "allowed"), ("api-token", "token.create", "allowed"),
        ("vic", "token.list", "refused")]
    table = run(served, TOKEN, "audit")
    assert table.exit_code == 0 and "3 audit entries" in table.stdout and "refused 403" in table.stdout
    later = run(served, TOKEN, "audit", "--json", "--since", "2026-11-21T00:00:00Z")
    assert json.loads(later.stdout) == []
    assert run(served, TOKEN, "audit", "--since", "last week").exit_code == 2


def test_token_create_with_a_bad_role_or_expiry_is_a_usage_error(served: Served) -> None:
    for args in (["--role", "owner"], ["--expires", "soon"]):
        r = run(served, TOKEN, "token", "create", "--team", "a", *args)
        assert r.exit_code == 2 and r.stdout == "", args


@pytest.mark.parametrize("args, option, words", [
    (["token", "create", "--team", "Vision QA"], "--team", "is not a team name"),
    (["token", "create", "--team", "a", "--name", "ci bot"], "--name", "is not a token's name"),
    (["token", "create", "--team", "a", "--expires", "0h"], "--expires", "is no time"),
    (["token", "create", "--team", "a", "--expires", "99999w"], "--expires", "a token lives 1h to 3660d"),
    (["audit", "--team", "x" * 64], "--team", "at most 63 characters"),
    (["status", "--team", "Vision"], "--team", "is not a team name"),
    (["status", "--state", "done"], "--state", "use one of: queued, planned"),
])
def test_an_option_the_daemon_would_refuse_is_told_by_its_option(served: Served, args: list[str], option: str,
                                                                  words: str) -> None:
    """These were the daemon's 400 naming a body or query field ("body.expires_in_seconds: Input should be
    greater than or equal to 60"), with no fix; ``status --team Vision`` listed no jobs, silently."""
    r = run(served, TOKEN, *args)
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert f"'{option}'" in r.stderr and words in r.stderr and "fix:" in r.stderr, r.stderr
    assert "body." not in r.stderr and "query." not in r.stderr
