"""Short-lived, machine-scoped tokens for the on-instance agent.

A machine must be able to report on the work the daemon gives it, and nothing else: its agent
gets a token bound to one instance row (``inst-...``, the ``gpusched:instance`` tag) that expires,
signed with a key derived from the daemon's API token. The token is not bound to a job: one
agent runs every job the daemon puts on its machine (a warm machine's next job needs no new
boot and no new token), and the daemon checks on every report that the job and attempt named
are the ones assigned to that instance. The agent renews the token while its instance is live
(``POST /v1/agent/token``). The API token itself, and any cloud credential, never travel to an
instance (instances read cloud credentials from their role).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime, timedelta, timezone

from scheduler.errors import UserError

_LABEL = b"gpusched-agent-token-v1"
_SCOPE = "machine"  # the first claim: a token for a whole machine (the older per-attempt tokens had none)


class AgentTokenError(UserError):
    """A token that is malformed, forged, not a machine token, or expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signing_key(api_token: str) -> bytes:
    """A key of its own for agent tokens, so an agent token never reveals or equals the API token."""
    return hmac.new(api_token.encode(), _LABEL, hashlib.sha256).digest()


def issue(key: bytes, instance_id: str, now: datetime, ttl: timedelta) -> str:
    """A token for the agent of instance row ``instance_id``, valid until ``now + ttl``."""
    if not instance_id or "|" in instance_id:
        raise ValueError(f"not an instance id: {instance_id!r}")
    claims = f"{_SCOPE}|{instance_id}|{int((now + ttl).timestamp())}".encode()
    sig = hmac.new(key, claims, hashlib.sha256).digest()
    return f"{_b64(claims)}.{_b64(sig)}"


def _claims(token: str) -> tuple[bytes, bytes, str, int]:
    try:
        claims_b64, sig_b64 = token.split(".", 1)
        claims, sig = _unb64(claims_b64), _unb64(sig_b64)
        scope, instance_id, expires = claims.decode().split("|")
        expires_at = int(expires)
    except (ValueError, UnicodeDecodeError):
        raise AgentTokenError("malformed agent token") from None
    if scope != _SCOPE or not instance_id:
        raise AgentTokenError("not a machine token")
    return claims, sig, instance_id, expires_at


def verify(key: bytes, token: str, now: datetime) -> str:
    """Return the instance id the token is for, or raise AgentTokenError."""
    claims, sig, instance_id, expires_at = _claims(token)
    if not hmac.compare_digest(sig, hmac.new(key, claims, hashlib.sha256).digest()):
        raise AgentTokenError("agent token signature does not match")
    if now.timestamp() >= expires_at:
        raise AgentTokenError("agent token expired")
    return instance_id


def expires_at(token: str) -> datetime:
    """When a token expires, read without the key: the agent plans its renewal (and its machine's
    shutdown backstop) by it. Says nothing about whether the token is genuine."""
    return datetime.fromtimestamp(_claims(token)[3], tz=timezone.utc)
