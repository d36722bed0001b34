"""One attempt on this machine, as the agent's parts share it: the work, the daemon, the clock, how the
job's process starts, the object stores, the heartbeat and the reclaim watch; and how an attempt ends
early (``AttemptFailed``: reported as its failure; ``Reclaimed``: the cloud takes the machine)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar

import structlog

from scheduler.agent.config import AgentConfig, Work
from scheduler.agent.link import DaemonLink, Heartbeat, Stale
from scheduler.agent.process import Launch, stop_process
from scheduler.agent.reclaim import ReclaimNotice, ReclaimWatch
from scheduler.agent.storage.base import ObjectStore, parse_uri
from scheduler.clock import Clock
from scheduler.errors import GpuschedError, ProviderError
from scheduler.models import JobSpec

log = structlog.get_logger("gpusched.agent")

StoreFor = Callable[[str], ObjectStore]  # the store for a URI (``storage.store_for``)
T = TypeVar("T")

STORE_TRIES = 3  # a throttled or unavailable object store is asked again, this many times in all


class Outcome(NamedTuple):
    """How an attempt ended, as it is reported: ``outputs`` is where what it made was uploaded."""

    ok: bool
    message: str
    outputs: str | None = None


class AttemptFailed(Exception):
    """The attempt cannot go on (its inputs cannot be staged, its outputs not uploaded): reported as its
    failure, with ``message`` for the user."""

    def __init__(self, message: str, outputs: str | None = None) -> None:
        super().__init__(message)
        self.message, self.outputs = message, outputs


class Reclaimed(Exception):
    """The cloud gave notice that it takes this (spot) machine back; ``proc`` is the job's process, still
    running: the agent tells the daemon, then stops it."""

    def __init__(self, notice: ReclaimNotice, proc: subprocess.Popen | None = None) -> None:
        super().__init__(f"the cloud takes the machine at {notice.at.isoformat()}")
        self.notice, self.proc = notice, proc


@dataclass
class Attempt:
    cfg: AgentConfig
    link: DaemonLink
    work: Work
    clock: Clock
    launch: Launch
    stores: StoreFor
    log_path: Path
    beat: Heartbeat | None = None
    watch: ReclaimWatch | None = None
    _stores: dict[str, ObjectStore] = field(default_factory=dict)

    @property
    def spec(self) -> JobSpec:
        return self.work.spec

    @property
    def speaks(self) -> bool:
        """In a multi-node job only rank 0 reports (and uploads) for the gang."""
        return self.work.node_rank == 0

    def store(self, uri: str) -> ObjectStore:
        """The object store for ``uri``: one per scheme for the whole attempt."""
        scheme = parse_uri(uri)[0]
        if scheme not in self._stores:
            self._stores[scheme] = self.stores(uri)
        return self._stores[scheme]

    def stored(self, what: str, action: Callable[[], T]) -> T:
        """``action`` (an object-store call), tried again while the store says it is throttled or out of reach."""
        for tries in range(1, STORE_TRIES + 1):
            try:
                return action()
            except ProviderError as exc:
                if not exc.retryable or tries == STORE_TRIES:
                    raise
                log.warning("store_retry", what=what, error=exc.message, tries=tries)
                self.clock.sleep(min(self.cfg.poll_seconds, 10.0) * tries)
        raise AssertionError("unreachable")

    def progress(self, text: str, done: int | None = None) -> None:
        if self.beat is not None:
            self.beat.progress(text, done)

    def notice(self) -> ReclaimNotice | None:
        return self.watch.notice if self.watch is not None else None

    def stale(self) -> bool:
        return self.beat is not None and self.beat.is_stale(self.work)

    def check(self, proc: subprocess.Popen | None) -> None:
        """Between polls: a 409 on the heartbeat stops the job (``Stale``); a reclaim notice ends it (``Reclaimed``)."""
        if self.stale():
            stop_process(proc)
            raise Stale("the heartbeat was answered 409")
        notice = self.notice()
        if notice is not None:
            raise Reclaimed(notice, proc)

    def pause(self) -> None:
        """Wait one poll; a reclaim notice cuts it short."""
        if self.watch is not None:
            self.watch.wait(self.cfg.poll_seconds)
        else:
            self.clock.sleep(self.cfg.poll_seconds)

    def wait(self, proc: subprocess.Popen) -> int:
        """Wait for the job's process to exit (watching for a 409 and a reclaim notice); its exit status."""
        while proc.poll() is None:
            self.check(proc)
            self.pause()
        return proc.returncode


def store_error(what: str, exc: BaseException) -> str:
    """An object-store or file error as one line for the user (with the fix ours carry)."""
    if isinstance(exc, GpuschedError):
        return f"{what}: {exc}"
    if isinstance(exc, OSError):
        return f"{what}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{what}: {exc}"
