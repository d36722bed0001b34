"""Spot reclaim notices, read from the cloud's instance metadata service on the machine itself.

Each cloud warns a spot machine before it takes it back, and says so only on the machine:

| cloud | where | what | notice |
|---|---|---|---|
| aws | ``/latest/meta-data/spot/instance-action`` (IMDSv2 token first) | JSON action, time; UTC | 2 min |
| alibaba | ``/latest/meta-data/instance/spot/termination-time`` | ``2026-12-04T10:05:00Z``, UTC | 5 min |
| tencent | ``/latest/meta-data/spot/termination-time`` | ``2026-12-04 18:05:00``, UTC+8 with no marker | 2 min |

All three answer 404 while there is no notice (docs/gpus-and-clouds.md, "Spot"). The agent polls
``reclaim_notice`` every few seconds; on a notice it tells the daemon at once, so the job is requeued
and its next attempt planned before the machine is gone.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import httpx

from scheduler.models import Frozen

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
