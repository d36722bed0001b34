"""Spot reclaim notices, read from the cloud's instance metadata service on the machine itself.

Each cloud warns a spot machine before it takes it back, and says so only on the machine:

| cloud | where | what | notice |
|---|---|---|---|
| aws | ``/latest/meta-data/spot/instance-action`` (IMDSv2 token first) | JSON action, time; UTC | 2 min |
| alibaba | ``/latest/meta-data/instance/spot/termination-time`` | ``2026-12-04T10:05:00Z``, UTC | 5 min |
| tencent | ``/latest/meta-data/spot/termination-time`` | ``2026-12-04 18:05:00``, UTC+8 with no marker | 2 min |

All three answer 404 while there is no notice (docs/gpus-and-clouds.md, "Spot"). While a spot
machine runs a job, ``ReclaimWatch`` asks ``reclaim_notice`` every few seconds from a thread of its
own; on a notice the agent uploads the job's last complete checkpoint and tells the daemon at once
(``POST /v1/agent/reclaiming``), so the job is requeued and its next attempt planned before the
machine is gone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import httpx
import structlog

from scheduler.models import Frozen

log = structlog.get_logger("gpusched.agent")

METADATA_URLS = {
    "aws": "http://169.254.169.254",
    "alibaba": "http://100.100.100.200",
    "tencent": "http://metadata.tencentyun.com",
}
_PATHS = {
    "aws": "/latest/meta-data/spot/instance-action",
    "alibaba": "/latest/meta-data/instance/spot/termination-time",
    "tencent": "/latest/meta-data/spot/termination-time",
}
_AWS_TOKEN_PATH = "/latest/api/token"
_AWS_TOKEN_TTL = "300"
_TENCENT_ZONE = timezone(timedelta(hours=8))  # Tencent writes Beijing time and does not say so


class ReclaimNotice(Frozen):
    cloud: str
    action: str  # "terminate" or "stop" (AWS says which; the others only terminate)
    at: datetime  # when the cloud takes the machine, aware UTC


class MetadataError(Exception):
    """The metadata service answered something that is neither a notice nor "no notice"."""


def parse_aws(body: str) -> ReclaimNotice:
    try:
        doc = json.loads(body)
        return ReclaimNotice(cloud="aws", action=str(doc["action"]), at=_aware(doc["time"], timezone.utc))
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataError(f"aws spot/instance-action: unreadable {body[:100]!r}") from exc


def parse_alibaba(body: str) -> ReclaimNotice:
    return ReclaimNotice(cloud="alibaba", action="terminate", at=_aware(body, timezone.utc, "alibaba"))


def parse_tencent(body: str) -> ReclaimNotice:
    return ReclaimNotice(cloud="tencent", action="terminate", at=_aware(body, _TENCENT_ZONE, "tencent"))


_PARSERS = {"aws": parse_aws, "alibaba": parse_alibaba, "tencent": parse_tencent}


def _aware(text: object, zone: timezone, cloud: str = "aws") -> datetime:
    """An ISO-ish time; one without an offset is in ``zone``. Always returned in UTC."""
    if not isinstance(text, str):
        raise MetadataError(f"{cloud} termination time: not text: {text!r}")
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise MetadataError(f"{cloud} termination time: unreadable {text.strip()[:60]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return when.astimezone(timezone.utc)


def reclaim_notice(cloud: str, http: httpx.Client, base_url: str | None = None) -> ReclaimNotice | None:
    """The cloud's reclaim notice for this machine, or None while there is none.

    ``base_url`` replaces the cloud's metadata address (tests, a proxy). Raises MetadataError for an
    answer that is neither, and httpx's errors when the service cannot be reached (an on-demand
    machine of a cloud without the service is simply never asked: the caller decides)."""
    if cloud not in _PATHS:
        raise ValueError(f"no reclaim notices for cloud {cloud!r}")
    base = (base_url or METADATA_URLS[cloud]).rstrip("/")
    headers: dict[str, str] = {}
    if cloud == "aws":  # IMDSv2: a session token first; instances may refuse the token-less v1 calls
        token = http.put(base + _AWS_TOKEN_PATH, headers={"X-aws-ec2-metadata-token-ttl-seconds": _AWS_TOKEN_TTL})
        token.raise_for_status()
        headers["X-aws-ec2-metadata-token"] = token.text
    r = http.get(base + _PATHS[cloud], headers=headers)
    if r.status_code == 404:
        return None
    if r.status_code != 200:
        raise MetadataError(f"{cloud} metadata answered {r.status_code} for {_PATHS[cloud]}")
    return _PARSERS[cloud](r.text)


def notice_reader(cloud: str, base_url: str | None = None, timeout: float = 2.0) -> Callable[[], ReclaimNotice | None]:
    """``reclaim_notice`` for this machine's cloud, over a client of its own: short timeouts, and no proxy
    (the metadata service answers on the instance's own link only)."""
    if cloud not in _PATHS:
        raise ValueError(f"no reclaim notices for cloud {cloud!r}")
    http = httpx.Client(timeout=timeout, trust_env=False)
    return lambda: reclaim_notice(cloud, http, base_url)


class ReclaimWatch:
    """Asks ``check`` (``notice_reader``) every ``interval`` seconds from a thread of its own, until it
    answers with a notice. A metadata service that fails is logged and asked again: it never ends a job.
    The job's loop waits on ``wait``, which returns at once when the notice comes."""

    def __init__(self, check: Callable[[], ReclaimNotice | None], interval: float = 5.0) -> None:
        self.check, self.interval = check, interval
        self._noticed = threading.Event()
        self._halt = threading.Event()
        self._notice: ReclaimNotice | None = None
        self._thread = threading.Thread(target=self._run, name="gpusched-reclaim-watch", daemon=True)

    def start(self) -> ReclaimWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    @property
    def notice(self) -> ReclaimNotice | None:
        return self._notice if self._noticed.is_set() else None

    def wait(self, seconds: float) -> ReclaimNotice | None:
        """Wait up to ``seconds``, less if the notice comes; the notice, or None."""
        self._noticed.wait(seconds)
        return self.notice

    def _run(self) -> None:
        failures = 0
        while not self._halt.is_set():
            try:
                notice = self.check()
            except (MetadataError, httpx.HTTPError, OSError) as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("reclaim_watch_failed", error=str(exc), failures=failures)
                notice = None
            if notice is not None:
                self._notice = notice
                self._noticed.set()
                log.warning("reclaim_notice", cloud=notice.cloud, action=notice.action, at=notice.at.isoformat())
                return
            self._halt.wait(self.interval)
