"""Our own retry loop for cloud calls.

The vendor SDKs' retryers are not trusted (see docs/gpus-and-clouds.md): Alibaba's
retries ``RunInstances`` without the client token, Tencent's re-raises a stale
error after a later success. Adapters switch them off and wrap calls here.

Only errors that say they are ``retryable`` (Throttled, ProviderUnavailable,
ResourceBusy) are retried, with exponential back-off and full jitter (a uniform
draw between 0 and the capped exponential step), sleeping on the injected Clock
so a SimClock makes the waits instant and exact. A cloud that names its own wait
(``Retry-After``, kept on the error as ``retry_after``) gets at least that wait;
one longer than the back-off cap ends the retries at once, so the caller comes
back on its next round instead of blocking a whole tick. A call retried here must be idempotent:
launches carry their client token, so a retry after a lost response finds the
instance the first try created.
"""

from __future__ import annotations

import math
import random
from typing import Callable, TypeVar

from scheduler.clock import Clock
from scheduler.errors import ProviderError

__all__ = ["backoff_ceiling", "call_with_retry", "parse_retry_after"]

T = TypeVar("T")

_MAX_RETRY_AFTER = 24 * 3600.0


def parse_retry_after(value: object) -> float | None:
    """An HTTP ``Retry-After`` in seconds; None when absent or not a plain number of seconds (the
    HTTP-date form is not used by the clouds' APIs and is ignored rather than guessed at)."""
    if value is None:
        return None
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= _MAX_RETRY_AFTER else None


def backoff_ceiling(retry: int, base_seconds: float, cap_seconds: float) -> float:
    """The longest wait before retry number ``retry`` (1 = the first retry)."""
    # Past ~60 doublings the float overflows long after the cap has taken over.
    return min(cap_seconds, base_seconds * 2.0 ** min(retry - 1, 60))


def call_with_retry(
    fn: Callable[[], T],
    *,
    clock: Clock,
    rng: random.Random,
    attempts: int = 5,
    base_seconds: float = 0.5,
    cap_seconds: float = 20.0,
    on_retry: Callable[[int, ProviderError, float], None] | None = None,
) -> T:
    """Call ``fn`` up to ``attempts`` times; return its first result.

    A ProviderError that is not retryable, and any other exception, propagates
    at once. After the last attempt the last error is re-raised, and so is an
    error whose ``retry_after`` exceeds ``cap_seconds``. Before each retry
    ``on_retry(attempt_that_failed, error, delay_seconds)`` is called (for
    logging), then ``clock.sleep(delay_seconds)``.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    if base_seconds < 0 or cap_seconds < 0:
        raise ValueError("back-off seconds must not be negative")
    attempt = 1
    while True:
        try:
            return fn()
        except ProviderError as exc:
            if not exc.retryable or attempt >= attempts:
                raise
            asked = exc.retry_after if exc.retry_after is not None and exc.retry_after > 0 else 0.0
            if asked > cap_seconds:
                raise
            delay = max(asked, rng.uniform(0.0, backoff_ceiling(attempt, base_seconds, cap_seconds)))
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            clock.sleep(delay)
            attempt += 1
