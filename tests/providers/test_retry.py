"""providers.retry: which errors are retried, how long it waits (on a SimClock), when it gives up."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.retry import backoff_ceiling, call_with_retry
from scheduler.clock import SimClock
from scheduler.errors import (
    AuthFailed,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


class Script:
    """A callable that raises the scripted errors in turn, then returns ``result``."""

    def __init__(self, errors: list[Exception], result: str = "done") -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


Retry = tuple[int, ProviderError, float]


def run(
    fn: Callable[[], str], clock: SimClock, *, seed: int = 1, attempts: int = 5,
    base_seconds: float = 0.5, cap_seconds: float = 20.0,
) -> tuple[str, list[Retry]]:
    seen: list[Retry] = []
    result = call_with_retry(
        fn, clock=clock, rng=random.Random(seed), attempts=attempts, base_seconds=base_seconds,
        cap_seconds=cap_seconds, on_retry=lambda attempt, error, delay: seen.append((attempt, error, delay)),
    )
    return result, seen


def test_success_at_once_calls_once_and_does_not_sleep() -> None:
    clock = SimClock(T0)
    fn = Script([])

    result, seen = run(fn, clock)

    assert (result, fn.calls, seen, clock.now()) == ("done", 1, [], T0)


@pytest.mark.parametrize("error", [Throttled("slow down"), ProviderUnavailable("502 from the API")])
def test_retryable_errors_are_retried_until_success(error: ProviderError) -> None:
    clock = SimClock(T0)
    fn = Script([error, error])

    result, seen = run(fn, clock)

    assert result == "done"
    assert fn.calls == 3
    assert [attempt for attempt, _, _ in seen] == [1, 2]
    assert all(err is error for _, err, _ in seen)


@pytest.mark.parametrize(
    "error",
    [NoCapacity("sold out"), QuotaExceeded("gpu quota"), AuthFailed("bad key"), NotFound("gone"),
     InvalidRequest("bad type"), ProviderError("unknown vendor error")],
)
def test_errors_that_are_not_retryable_propagate_at_once(error: ProviderError) -> None:
    clock = SimClock(T0)
    fn = Script([error])

    with pytest.raises(type(error)) as caught:
        run(fn, clock)

    assert caught.value is error
    assert fn.calls == 1
    assert clock.now() == T0


def test_foreign_exceptions_are_not_ours_to_retry() -> None:
    clock = SimClock(T0)
    fn = Script([KeyError("bug")])

    with pytest.raises(KeyError):
        run(fn, clock)

    assert fn.calls == 1


def test_gives_up_after_the_last_attempt_and_raises_the_last_error() -> None:
    clock = SimClock(T0)
    errors = [Throttled(f"throttled #{n}") for n in range(1, 5)]
    fn = Script(list(errors))

    with pytest.raises(Throttled) as caught:
        run(fn, clock, attempts=4)

    assert caught.value is errors[-1]
    assert fn.calls == 4


def test_the_clock_moves_by_exactly_the_announced_delays_within_the_ceilings() -> None:
    clock = SimClock(T0)
    fn = Script([ProviderUnavailable("down")] * 6)

    _, seen = run(fn, clock, attempts=7, base_seconds=0.5, cap_seconds=4.0)

    delays = [delay for _, _, delay in seen]
    assert len(delays) == 6
    assert clock.now() - T0 == sum((timedelta(seconds=d) for d in delays), timedelta(0))
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings))


def test_delays_are_full_jitter_drawn_from_the_given_rng() -> None:
    """Same seed, same waits; another seed, other waits; the waits spread below the ceiling."""

    def delays(seed: int) -> list[float]:
        clock = SimClock(T0)
        _, seen = run(Script([Throttled("x")] * 9), clock, seed=seed, attempts=10, base_seconds=1.0, cap_seconds=1.0)
        return [d for _, _, d in seen]

    assert delays(5) == delays(5)
    assert delays(5) != delays(6)
    spread = [d for seed in range(30) for d in delays(seed)]
    # Full jitter: uniform on [0, 1], so both halves of the range get used.
    assert min(spread) < 0.25 and max(spread) > 0.75


@pytest.mark.parametrize(
    ("retry", "base", "cap", "ceiling"),
    [(1, 0.5, 20.0, 0.5), (2, 0.5, 20.0, 1.0), (3, 0.5, 20.0, 2.0), (6, 0.5, 20.0, 16.0),
     (7, 0.5, 20.0, 20.0), (500, 0.5, 20.0, 20.0), (3, 0.0, 20.0, 0.0)],
)
def test_backoff_ceiling_doubles_then_caps(retry: int, base: float, cap: float, ceiling: float) -> None:
    assert backoff_ceiling(retry, base, cap) == ceiling


@settings(max_examples=60, deadline=None, database=None)  # no example store in the tree
@given(
    attempts=st.integers(min_value=1, max_value=12),
    failures=st.integers(min_value=0, max_value=15),
    base=st.floats(min_value=0, max_value=5),
    cap=st.floats(min_value=0, max_value=30),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_retry_properties(attempts: int, failures: int, base: float, cap: float, seed: int) -> None:
    clock = SimClock(T0)
    fn = Script([Throttled("x")] * failures)
    seen: list[float] = []

    try:
        result: str | None = call_with_retry(
            fn, clock=clock, rng=random.Random(seed), attempts=attempts, base_seconds=base, cap_seconds=cap,
            on_retry=lambda _a, _e, d: seen.append(d),
        )
    except Throttled:
        result = None

    assert fn.calls == min(attempts, failures + 1)
    assert (result == "done") == (failures < attempts)
    assert len(seen) == fn.calls - 1
    assert all(0 <= d <= cap for d in seen)
    assert abs((clock.now() - T0).total_seconds() - sum(seen)) < 1e-3


@pytest.mark.parametrize(("attempts", "base", "cap"), [(0, 0.5, 20.0), (3, -1.0, 20.0), (3, 0.5, -0.1)])
def test_nonsense_settings_are_refused(attempts: int, base: float, cap: float) -> None:
    fn = Script([])
    with pytest.raises(ValueError):
        run(fn, SimClock(T0), attempts=attempts, base_seconds=base, cap_seconds=cap)
    assert fn.calls == 0


# --- the wait the cloud asks for (Retry-After) ---------------------------------------------------


def test_a_named_wait_is_waited_at_least() -> None:
    clock = SimClock(T0)
    script = Script([Throttled("slow down", retry_after=4.0), Throttled("slow down", retry_after=0.0)])

    result, seen = run(script, clock, base_seconds=0.01, cap_seconds=20)

    assert result == "done"
    assert seen[0][2] >= 4.0  # the first wait honours Retry-After
    assert seen[1][2] <= 0.02  # a zero Retry-After changes nothing: the back-off decides
    assert clock.now() - T0 >= timedelta(seconds=4)


def test_a_named_wait_longer_than_the_cap_ends_the_retries_at_once() -> None:
    clock = SimClock(T0)
    script = Script([Throttled("come back in ten minutes", retry_after=600.0)])

    with pytest.raises(Throttled):
        run(script, clock, cap_seconds=20)

    assert script.calls == 1
    assert clock.now() == T0  # nothing slept: the caller's next round comes back


def test_a_busy_resource_is_retried() -> None:
    from scheduler.errors import ResourceBusy

    clock = SimClock(T0)
    result, seen = run(Script([ResourceBusy("another operation"), ResourceBusy("another operation")]), clock)

    assert result == "done" and [a for a, _, _ in seen] == [1, 2]


@pytest.mark.parametrize(("header", "seconds"), [("7", 7.0), (" 1.5 ", 1.5), ("0", 0.0), (None, None),
                                                  ("soon", None), ("-3", None), ("nan", None), ("inf", None),
                                                  ("Wed, 21 Oct 2026 07:28:00 GMT", None)])
def test_retry_after_headers_are_read_as_seconds(header: str | None, seconds: float | None) -> None:
    from providers.retry import parse_retry_after

    assert parse_retry_after(header) == seconds
