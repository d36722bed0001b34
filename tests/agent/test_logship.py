"""The job's output from the machine to the daemon: the agent ships its log file in batches while the job
runs and the rest before the outcome, each batch once even when sent again, through the daemon's real API."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from scheduler.agent.config import Work
from scheduler.agent.link import DaemonLink
from scheduler.agent.logship import OutputShipper
from scheduler.agent.runner import run_agent
from scheduler.app import cli
from scheduler.app.client import ApiClient
from scheduler.jobs.output_text import BATCH_BYTES
from tests.agent.harness import AUTH, TOKEN, Machine, example
from tests.agent.machines import machine_auth
from tests.app.test_client import ViaTestClient


def output(m: Machine, attempt: int | None = None) -> dict[str, Any]:
    params = {"attempt": attempt} if attempt else {}
    r = m.api.get(f"/v1/jobs/{m.job_id}/logs", headers=AUTH, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def shipper(m: Machine, log_name: str = "job.log") -> tuple[OutputShipper, Any]:
    log = m.workdir / "logs" / log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    work = Work(job_id=m.job_id, attempt=1, spec=m.spec)
    return OutputShipper(DaemonLink(m.cfg, m.http, m.clock), work, log, interval=3600), log


def test_a_training_attempts_output_reaches_the_daemon_before_its_outcome(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    at_finish: list[str] = []
    m.http.on_report = lambda path, body: path == "/finished" and at_finish.append(output(m)["text"])
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True

    page = output(m)
    on_machine = m.log
    assert "epoch 0 done" in on_machine and "3 epochs completed" in on_machine  # the stand-in's own lines
    assert page["text"] == on_machine  # every line, once, in order (the stand-in writes plain lines)
    assert at_finish == [on_machine]  # all of it was there when the outcome was reported
    assert page["attempt"] == 1 and page["done"] and page["state"] == "succeeded"
    assert page["end"] == page["next_offset"] == len(on_machine.encode())
    assert m.http.bodies("/logs")  # shipped by the agent, not read from the machine


def test_gpusched_logs_shows_what_the_machine_wrote(store, sim_clock, tmp_path, monkeypatch):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=2))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    monkeypatch.setattr(cli, "_client", lambda _settings: ApiClient("http://daemon", TOKEN,
                                                                    transport=ViaTestClient(m.api)))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli.app, ["logs", m.job_id])
    assert r.exit_code == 0, r.stderr
    assert r.stdout == m.log and "2 epochs completed" in r.stdout


def test_a_failed_runs_last_words_are_shipped(store, sim_clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DIE_AFTER", "1")
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=5))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    text = output(m)["text"]
    assert text == m.log and "epoch 1 done" in text
    assert output(m)["state"] == "failed"


def test_progress_bars_and_colours_are_shipped_as_a_terminal_shows_them(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    ship, log = shipper(m)
    log.write_bytes(b"\x1b[34m\x1b[1mtrain: \x1b[0mScanning images\n"
                    b"\r  1/3 [=>  ]\r  2/3 [==> ]\r  3/3 [===>]\n"
                    b"not ended yet")
    assert ship.ship()
    assert output(m)["text"] == "train: Scanning images\n  3/3 [===>]\n"  # the unended line waits
    with open(log, "ab") as f:
        f.write(b", now ended\nlast words without a newline")
    ship.finish(must_arrive=True)
    assert output(m)["text"].endswith("not ended yet, now ended\nlast words without a newline\n")


class Flaky(httpx.Client):
    """The machine's network: the first ``drop_answers`` log reports reach the daemon but their answer is
    lost; then ``down`` reports never leave."""

    def __init__(self, inner: Any, *, drop_answers: int = 0, down: int = 0) -> None:
        self.inner, self.drop_answers, self.down, self.sent = inner, drop_answers, down, []

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:  # type: ignore[override]
        if url.endswith("/logs") and self.down > 0:
            self.down -= 1
            raise httpx.ConnectError("network is unreachable")
        r = self.inner.request(method, url, **kw)
        if url.endswith("/logs"):
            self.sent.append(kw["json"]["offset"])
            if self.drop_answers > 0:
                self.drop_answers -= 1
                raise httpx.ReadTimeout("the answer was lost")
        return r


def test_a_batch_whose_answer_was_lost_is_sent_again_and_stored_once(store, sim_clock, tmp_path):
    """Sent again from the same offset, with what the job wrote since: the daemon keeps each line once."""
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    ship, log = shipper(m)
    net = Flaky(m.http, drop_answers=1, down=1)
    ship.link = DaemonLink(m.cfg, net, m.clock)
    log.write_text("one\ntwo\n")
    assert not ship.ship()  # stored, but the agent never heard so
    assert not ship.ship()  # the network is down
    log.write_text("one\ntwo\nthree\n")
    assert ship.ship()
    assert output(m)["text"] == "one\ntwo\nthree\n"
    assert net.sent == [0, 0]  # the lost one, then again from the same offset with the new line


def test_a_lot_of_output_goes_in_batches_under_the_limit(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    ship, log = shipper(m)
    text = "".join(f"{n:06d} " + "x" * 200 + "\n" for n in range(2000))  # ~400 KiB
    log.write_text(text)
    ship.finish(must_arrive=True)
    bodies = m.http.bodies("/logs")
    assert len(bodies) >= 3 and all(len(b["text"].encode()) <= BATCH_BYTES for b in bodies)
    sizes = [len(b["text"].encode()) for b in bodies]
    assert [b["offset"] for b in bodies] == [sum(sizes[:i]) for i in range(len(bodies))]  # one after another
    r = m.api.get(f"/v1/jobs/{m.job_id}/logs", headers=AUTH)
    assert r.json()["text"] == text


def test_a_report_on_another_machines_attempt_is_refused_and_ends_the_shipping(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    ship, log = shipper(m)
    ship.work = Work(job_id=m.job_id, attempt=2, spec=m.spec)  # not this machine's attempt
    log.write_text("one\n")
    assert not ship.ship()
    assert [status for path, _, status in m.http.reports if path == "/logs"] == [409]
    log.write_text("one\ntwo\n")
    assert not ship.ship() and len(m.http.reports) == 1  # nothing more is sent
    assert output(m)["text"] == ""


@pytest.mark.parametrize("body", [
    {"offset": -1, "text": "x\n"},
    {"offset": 0, "text": "x" * (BATCH_BYTES + 1)},
    {"offset": 0, "text": 5},
])
def test_a_malformed_batch_is_refused(store, sim_clock, tmp_path, body):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    r = m.api.post("/v1/agent/logs", headers=machine_auth(TOKEN, m.instance, sim_clock),
                   json={"job_id": m.job_id, "attempt": 1, **body})
    assert r.status_code in (400, 413)
    assert output(m)["text"] == ""


def test_the_api_token_cannot_ship_output_and_a_machine_token_cannot_read_it(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    r = m.api.post("/v1/agent/logs", headers=AUTH, json={"job_id": m.job_id, "attempt": 1, "offset": 0, "text": "x\n"})
    assert r.status_code == 401
    r = m.api.get(f"/v1/jobs/{m.job_id}/logs", headers=machine_auth(TOKEN, m.instance, sim_clock))
    assert r.status_code == 401
