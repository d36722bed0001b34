"""Short-lived, job-scoped tokens for the on-instance agent.

An instance must be able to report its job's progress, and nothing else: it gets
a token bound to one (job, attempt) that expires, signed with a key derived from
the daemon's API token. The API token itself, and any cloud credential, never
travel to an instance (instances read cloud credentials from their role).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime, timedelta

from scheduler.errors import UserError

_LABEL = b"gpusched-agent-token-v1"


class AgentTokenError(UserError):
    """A token that is malformed, forged, for another job or attempt, or expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signing_key(api_token: str) -> bytes:
    """A key of its own for agent tokens, so an agent token never reveals or equals the API token."""
    return hmac.new(api_token.encode(), _LABEL, hashlib.sha256).digest()


def issue(key: bytes, job_id: str, attempt: int, now: datetime, ttl: timedelta) -> str:
    claims = f"{job_id}|{attempt}|{int((now + ttl).timestamp())}".encode()
    sig = hmac.new(key, claims, hashlib.sha256).digest()
    return f"{_b64(claims)}.{_b64(sig)}"


def verify(key: bytes, token: str, now: datetime) -> tuple[str, int]:
    """Return (job id, attempt) the token is for, or raise AgentTokenError."""
    try:
        claims_b64, sig_b64 = token.split(".", 1)
        claims, sig = _unb64(claims_b64), _unb64(sig_b64)
        job_id, attempt, expires = claims.decode().split("|")
        attempt_no, expires_at = int(attempt), int(expires)
    except (ValueError, UnicodeDecodeError):
        raise AgentTokenError("malformed agent token") from None
    if not hmac.compare_digest(sig, hmac.new(key, claims, hashlib.sha256).digest()):
        raise AgentTokenError("agent token signature does not match")
    if now.timestamp() >= expires_at:
        raise AgentTokenError("agent token expired")
    return job_id, attempt_no
