"""`gpusched status JOB`, `status --json` and `gpusched logs JOB [-f] [--attempt N]` against the real app:
a sandbox daemon (the tick, the simulated agents as the daemon wires them, the HTTP API) in simulated time,
and the command line (Typer's CliRunner) talking to its API through the CLI's own client."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from providers.registry import build_sandbox
from scheduler.app import cli, cli_jobs
from scheduler.app.api import create_app
from scheduler.app.client import ApiClient
from scheduler.app.wiring import sim_agents
from scheduler.clock import SimClock
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.logs import forget_secrets
from scheduler.settings import Settings
from scheduler.store.database import Store
from tests.app.test_client import ViaTestClient

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)
TOKEN = "cli-jobs-test-token-0123456789"
BASE = "http://127.0.0.1:8642"


class SandboxDaemon:
    """The daemon's parts on the sandbox clouds and a SimClock: ``step`` is one tick (agents, then the tick)."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.clock = SimClock(START)
        self.settings = Settings(_env_file=None, backend="sandbox", providers=["aws", "alibaba"], cluster="cli",
                                 api_token=TOKEN, data_dir=tmp_path / "daemon", sandbox_seed=3, **settings)
        self.providers, _ = build_sandbox(self.settings, self.clock)
        self.store = Store(self.settings.db_url)
        self.store.migrate()
        self.ctx = TickContext.build(self.store, self.providers, self.clock, self.settings, seed=3)
        agents = sim_agents(self.settings, self.store, self.providers)  # as `gpusched daemon` makes them
        assert agents is not None
        self.agents = agents
        self.api = TestClient(create_app(self.store, self.clock, self.settings))

    def step(self, minutes: float = 5) -> None:
        self.agents.step(self.clock.now())
        lifecycle.tick(self.ctx)
        self.clock.advance(timedelta(minutes=minutes))

    def get(self, path: str, **params: Any) -> Any:
        r = self.api.get(path, headers={"Authorization": f"Bearer {TOKEN}"}, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    def run_until(self, job_id: str, done: Any, limit: int = 2000) -> dict[str, Any]:
        for _ in range(limit):
            detail = self.get(f"/v1/jobs/{job_id}")
            if done(detail):
                return detail
            self.step()
        raise AssertionError(f"job {job_id} never got there: {detail['state']}")

    def close(self) -> None:
        self.api.close()
        self.store.dispose()
        forget_secrets()


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxDaemon]:
    for name in list(os.environ):
        if name.startswith("GPUSCHED_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env
    world = SandboxDaemon(tmp_path)
    monkeypatch.setattr(cli, "_client", lambda _settings: ApiClient(BASE, TOKEN, transport=ViaTestClient(world.api)))
    yield world
    world.close()


def job_file(tmp_path: Path, epochs: int = 6, **changes: Any) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "helmet-s-train.yaml").read_text())
    doc["train"]["epochs"] = epochs
    doc["train"]["close_mosaic"] = 0
    doc["policy"] = {"capacity": "on-demand"}
    doc.update(changes)
    path = tmp_path / f"job-{epochs}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def gpusched(*args: str, columns: int = 100):
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": str(columns)})
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def submit(daemon: SandboxDaemon, path: Path) -> str:
    r = gpusched("submit", str(path))
    assert r.exit_code == 0, r.stderr
    [job_id] = [j["id"] for j in daemon.get("/v1/jobs")]
    return job_id


# --- status


def test_status_of_a_running_job_fits_a_screen_and_says_what_matters(daemon, tmp_path):
    job_id = submit(daemon, job_file(tmp_path, epochs=40))
    detail = daemon.run_until(job_id, lambda d: d["state"] == "running" and d["epochs_done"] >= 3)
    [attempt] = detail["attempts"]
    r = gpusched("status", job_id)
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    lines = text.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 100  # one screen
    assert job_id in lines[0] and "helmet-s-v3" in lines[0]
    assert "running (attempt 1)" in text
    assert f"{attempt['provider']} / {attempt['region']} ({attempt['zone']}) / {attempt['instance_type']}" in text
    assert "on-demand" in text and f"{attempt['gpu_count']}x {attempt['gpu']}" in text
    assert f"{detail['epochs_done']}/40 epochs" in text
    cost = detail["cost"]
    assert cost is not None and float(cost["amount"]) > 0 and cost["currency"] == "CNY"
    assert "so far" in text and cost["currency"] in text
    assert "plan" in text and "why:" in text and detail["plan"]["choice"]["instance_type"] in text
    assert f"last {min(5, len(detail['events']))} events" in text
    assert all(e["kind"] in text for e in detail["events"][-5:])  # each whole, not cut to fit
    assert f"gpusched logs {job_id}" in text


def test_status_json_is_the_daemons_answer_as_it_came(daemon, tmp_path):
    job_id = submit(daemon, job_file(tmp_path, epochs=4))
    daemon.run_until(job_id, lambda d: d["state"] == "running")
    r = gpusched("status", job_id, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == daemon.get(f"/v1/jobs/{job_id}")
    listed = gpusched("status", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout) == daemon.get("/v1/jobs")
    only = gpusched("status", "--json", "--state", "succeeded")
    assert json.loads(only.stdout) == []


def test_status_of_a_finished_job_says_where_it_ran_and_what_it_cost(daemon, tmp_path):
    job_id = submit(daemon, job_file(tmp_path, epochs=3))
    detail = daemon.run_until(job_id, lambda d: d["state"] == "succeeded")
    text = gpusched("status", job_id).stdout
    assert "succeeded" in text and "ran on" in text and "runs on" not in text
    assert str(detail["cost"]["amount"])[:3] in text.replace(",", "")


def test_status_of_a_queued_job_says_it_has_cost_nothing(daemon, tmp_path):
    job_id = submit(daemon, job_file(tmp_path))
    text = gpusched("status", job_id).stdout
    assert "queued" in text and "nothing yet" in text and "runs on" not in text


# --- logs


def test_logs_of_a_sandbox_job_show_its_simulated_output(daemon, tmp_path):
    job_id = submit(daemon, job_file(tmp_path, epochs=5))
    daemon.run_until(job_id, lambda d: d["epochs_done"] >= 2)
    r = gpusched("logs", job_id)
    assert r.exit_code == 0, r.stderr
    assert "[sandbox] no real machine runs this job" in r.stdout
    assert "would run: python3 train_dual.py" in r.stdout and "--epochs 5" in r.stdout
    assert "epoch 1/5 done" in r.stdout and "epoch 2/5 done" in r.stdout
    daemon.run_until(job_id, lambda d: d["state"] == "succeeded")
    out = gpusched("logs", job_id).stdout
    epochs = [int(m.group(1)) for m in re.finditer(r"^\[sandbox\] epoch (\d+)/5 done", out, re.M)]
    assert epochs == [1, 2, 3, 4, 5]  # each once, in order
    assert out.rstrip().endswith("the job succeeded")
    assert out == daemon.get(f"/v1/jobs/{job_id}/logs")["text"]


def test_logs_follow_prints_everything_once_until_the_job_ends(daemon, tmp_path, monkeypatch):
    job_id = submit(daemon, job_file(tmp_path, epochs=4))
    daemon.run_until(job_id, lambda d: d["state"] == "running")

    class TickWhileWaiting:  # `logs -f` waits between its reads: the daemon goes on meanwhile
        waits = 0

        def now(self) -> datetime:
            return daemon.clock.now()

        def sleep(self, _seconds: float) -> None:
            self.waits += 1
            daemon.step()

    clock = TickWhileWaiting()
    monkeypatch.setattr(cli_jobs, "_clock", clock)
    r = gpusched("logs", job_id, "-f")
    assert r.exit_code == 0, r.stderr
    assert clock.waits > 0
    assert daemon.get(f"/v1/jobs/{job_id}")["state"] == "succeeded"
    assert r.stdout == daemon.get(f"/v1/jobs/{job_id}/logs")["text"]  # all of it, each line once
    assert r.stdout.count("epoch 4/4 done") == 1 and r.stdout.rstrip().endswith("the job succeeded")


def test_logs_of_a_job_that_never_ran_and_of_an_attempt_it_never_had(daemon, tmp_path):
    job_id = submit(daemon, job_file(tmp_path))
    r = gpusched("logs", job_id)
    assert r.exit_code == 0 and r.stdout == ""
    assert "has no output: it never ran (queued)" in r.stderr
    daemon.run_until(job_id, lambda d: d["state"] == "running")
    r = gpusched("logs", job_id, "--attempt", "7")
    assert r.exit_code == 2
    assert "has no attempt 7" in r.stderr and "its attempts: 1" in r.stderr
    r = gpusched("logs", "job-000000000000")
    assert r.exit_code == 2 and "no job" in r.stderr


def test_logs_say_where_the_daemon_dropped_the_oldest_lines(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("GPUSCHED_"):
            monkeypatch.delenv(name)
    world = SandboxDaemon(tmp_path, job_log_bytes=4096)
    monkeypatch.setattr(cli, "_client", lambda _settings: ApiClient(BASE, TOKEN, transport=ViaTestClient(world.api)))
    try:
        job_id = submit(world, job_file(tmp_path, epochs=80))
        world.run_until(job_id, lambda d: d["state"] == "succeeded", limit=5000)
        out = gpusched("logs", job_id).stdout
        first, *rest = out.splitlines()
        assert first.startswith("[gpusched: ") and "bytes of earlier output are not kept" in first
        assert "the last 4,096 bytes of each attempt" in first
        assert len("\n".join(rest).encode()) <= 4096
        assert "epoch 80/80 done" in out and "epoch 1/80 done" not in out
    finally:
        world.close()


def test_logs_without_a_daemon_is_status_3(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli.app, ["logs", "job-1"], env={"GPUSCHED_API_URL": "http://127.0.0.1:9",
                                                             "GPUSCHED_API_TOKEN": "x" * 24})
    assert r.exit_code == 3 and "cannot reach the gpusched daemon" in r.stderr
