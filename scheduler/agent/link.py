"""The agent's line to the daemon: requests with the machine token (renewed in place), reports that must
arrive (retried through a daemon restart or a network blip), and the heartbeat thread.

Every report names the job and attempt; a 409 (``Stale``) says they are no longer this machine's
work, a 401 (``Refused``) that the daemon refuses the machine's token."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import structlog

from scheduler.agent import machine
from scheduler.agent import tokens as agent_token
from scheduler.agent.config import AgentConfig, Work
from scheduler.clock import Clock

log = structlog.get_logger("gpusched.agent")


class Stale(Exception):
    """409: the job and attempt named are not this machine's work any more (or the machine is going)."""


class Refused(Exception):
    """401: the daemon refuses this machine's token (expired, or not ours): nothing left to do."""


# Renew the machine token this long before it expires (it lives at least a day: ``bootstrap.machine_ttl``).
RENEW_BEFORE = timedelta(hours=12)


class DaemonLink:
    """The agent's line to the daemon: requests with the machine token (renewed in place), and
    ``deliver`` for what must arrive (a report is retried through a daemon restart or a network blip)."""

    def __init__(self, cfg: AgentConfig, http: httpx.Client, clock: Clock,
                 on_renew: Callable[[datetime], None] | None = None) -> None:
        self.cfg, self.http, self.clock, self.on_renew = cfg, http, clock, on_renew
        self._token = cfg.token
        self._lock = threading.Lock()

    @property
    def token(self) -> str:
        with self._lock:
            return self._token

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        r = self.http.request(method, f"{self.cfg.api}/v1/agent{path}", json=body,
                              headers={"Authorization": f"Bearer {self.token}"})
        if r.status_code == 401:
            raise Refused(_error_of(r))
        if r.status_code == 409:
            raise Stale(_error_of(r))
        r.raise_for_status()
        return r

    def deliver(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """``request``, retried every ``poll_seconds`` while the daemon cannot be reached or fails (5xx)."""
        while True:
            try:
                return self.request(method, path, body)
            except httpx.TransportError as exc:
                log.warning("daemon_unreachable", path=path, error=str(exc))
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code < 500:
                    raise
                log.warning("daemon_failed", path=path, status=exc.response.status_code)
            self.clock.sleep(self.cfg.poll_seconds)

    def renew_if_due(self) -> bool:
        """Renew the machine token when it has less than ``RENEW_BEFORE`` left; True if it did."""
        try:
            left = agent_token.expires_at(self.token) - self.clock.now()
        except agent_token.AgentTokenError:
            return False
        if left > RENEW_BEFORE:
            return False
        answer = self.request("POST", "/token").json()
        with self._lock:
            self._token = answer["token"]
        if self.on_renew is not None:
            self.on_renew(agent_token.expires_at(answer["token"]))
        log.info("agent_token_renewed", expires_at=answer.get("expires_at"))
        return True


def _error_of(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error") or r.status_code)
    except ValueError:
        return str(r.status_code)


class Heartbeat:
    """Tells the daemon every ``interval`` seconds that the agent lives and what it runs, from a thread
    of its own, so that a long download or a retried report never silences the machine. It renews
    the machine token when due. A 409 for the attempt it names marks that attempt stale: the loop
    running it stops the job's process."""

    def __init__(self, link: DaemonLink, interval: float,
                 gpu_util: Callable[[], float | None] = machine.utilization) -> None:
        self.link, self.interval, self.gpu_util = link, interval, gpu_util
        self.refused = threading.Event()
        self._lock = threading.Lock()
        self._work: tuple[str, int] | None = None
        self._progress: tuple[str, int | None] = ("", None)
        self._stale: set[tuple[str, int]] = set()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpusched-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def working(self, work: Work) -> None:
        with self._lock:
            self._work, self._progress = work.key, ("", None)

    def idle(self) -> None:
        with self._lock:
            self._work, self._progress = None, ("", None)

    def progress(self, text: str, epochs_done: int | None = None) -> None:
        with self._lock:
            self._progress = (text[:200], epochs_done)

    def is_stale(self, work: Work) -> bool:
        with self._lock:
            return work.key in self._stale

    def mark_stale(self, work: Work) -> None:
        with self._lock:
            self._stale.add(work.key)

    def beat(self) -> None:
        """One heartbeat now (the thread sends one every ``interval``)."""
        with self._lock:
            work, (text, epochs) = self._work, self._progress
        try:
            self.link.renew_if_due()
            self.link.request("POST", "/heartbeat", {
                "job_id": work[0] if work else None, "attempt": work[1] if work else None,
                "progress": text, "epochs_done": epochs, "gpu_util": self.gpu_util()})
        except Stale:
            if work is not None:
                with self._lock:
                    self._stale.add(work)
        except Refused:
            self.refused.set()
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            log.warning("heartbeat_failed", error=str(exc))

    def _run(self) -> None:
        while not self._halt.wait(self.interval):
            self.beat()


def send_progress(link: DaemonLink, work: Work, done: int, uri: str | None, *, must_arrive: bool,
                  physical_batch: int | None = None) -> bool:
    """Report ``done`` epochs (or shards) and their resume point; whether it was reported. Units add up,
    so a report lost to a network blip is sent with the next one, except one that ``must_arrive``
    before the exit does (the last), which is retried until it does. ``physical_batch``: the images
    per GPU that trained this run's first epoch here (said once per run, for the memory model)."""
    body: dict[str, Any] = {"job_id": work.job_id, "attempt": work.attempt, "epochs_done": done,
                            "checkpoint_uri": uri}
    if physical_batch is not None:
        body["physical_batch"] = physical_batch
    if must_arrive:
        link.deliver("POST", "/progress", body)
        return True
    try:
        link.request("POST", "/progress", body)
        return True
    except (httpx.TransportError, httpx.HTTPStatusError) as exc:
        log.warning("progress_not_reported", job_id=work.job_id, done=done, error=str(exc))
        return False


def send_finished(link: DaemonLink, work: Work, ok: bool, message: str, outputs: str | None = None) -> None:
    """The attempt's outcome, once: retried until the daemon has it (a 409 means it is not ours to report).
    ``outputs``: the object-store prefix the job's outputs were uploaded to."""
    body: dict[str, Any] = {"job_id": work.job_id, "attempt": work.attempt, "ok": ok, "message": message[:2000]}
    if outputs:
        body["outputs"] = outputs
    link.deliver("POST", "/finished", body)


def send_reclaiming(link: DaemonLink, work: Work, at: datetime) -> None:
    """Pass the cloud's reclaim notice on: the daemon requeues the job now (retried until it has it)."""
    link.deliver("POST", "/reclaiming", {"job_id": work.job_id, "attempt": work.attempt, "at": at.isoformat()})
