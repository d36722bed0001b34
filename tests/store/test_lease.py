"""The leader lease row: compare-and-set on SQLite and PostgreSQL, terms, expiry, release and the fence."""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event, text

from scheduler.errors import LeadershipLost
from scheduler.store.database import Store
from scheduler.store.lease import Holder, Lease, acquire, check_fence, holder_id, parse_holder, read, release, take_over

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
LEASE = timedelta(seconds=30)


def take(store: Store, holder: str, at: datetime, name: str = "tick") -> Lease:
    with store.session() as s:
        return acquire(s, name, holder, at, LEASE)


def row(store: Store, name: str = "tick") -> Lease | None:
    with store.session(write=False) as s:
        return read(s, name)


def test_nobody_holds_a_lease_before_it_is_first_asked_for(any_store: Store) -> None:
    assert row(any_store) is None


def test_the_first_contender_takes_it_in_term_1(any_store: Store) -> None:
    lease = take(any_store, "a", T0)
    assert (lease.holder, lease.term) == ("a", 1)
    assert lease.acquired_at == lease.renewed_at == T0 and lease.expires_at == T0 + LEASE
    assert lease.held_by("a", T0) and not lease.held_by("b", T0) and lease.live(T0)
    assert row(any_store) == lease


def test_a_second_contender_cannot_take_a_live_lease_and_changes_nothing(any_store: Store) -> None:
    mine = take(any_store, "a", T0)
    seen = take(any_store, "b", T0 + LEASE - timedelta(microseconds=1))
    assert seen == mine  # b reads a's lease, untouched: same term, same expiry
    assert row(any_store) == mine


def test_renewal_keeps_the_term_and_acquired_at_and_pushes_expiry(any_store: Store) -> None:
    take(any_store, "a", T0)
    renewed = take(any_store, "a", T0 + timedelta(seconds=10))
    assert renewed.term == 1 and renewed.acquired_at == T0
    assert renewed.renewed_at == T0 + timedelta(seconds=10)
    assert renewed.expires_at == T0 + timedelta(seconds=40)


def test_an_expired_lease_goes_to_the_next_contender_in_the_next_term(any_store: Store) -> None:
    take(any_store, "a", T0)
    taken = take(any_store, "b", T0 + LEASE)  # at the expiry instant it is free
    assert (taken.holder, taken.term, taken.acquired_at) == ("b", 2, T0 + LEASE)
    assert taken.expires_at == T0 + 2 * LEASE


def test_a_stale_holder_cannot_renew_after_another_took_it(any_store: Store) -> None:
    take(any_store, "a", T0)
    taken = take(any_store, "b", T0 + LEASE + timedelta(seconds=1))
    late = take(any_store, "a", T0 + LEASE + timedelta(seconds=2))  # a wakes up and renews as if nothing happened
    assert late == taken and late.holder == "b" and late.term == 2


def test_a_holder_whose_lease_lapsed_unclaimed_keeps_its_term(any_store: Store) -> None:
    take(any_store, "a", T0)
    again = take(any_store, "a", T0 + 3 * LEASE)  # nobody else asked meanwhile
    assert (again.holder, again.term, again.acquired_at) == ("a", 1, T0)


def test_terms_count_every_change_of_hands(any_store: Store) -> None:
    at, holders = T0, ["a", "b", "a", "c", "c", "b"]
    terms = []
    for holder in holders:
        terms.append(take(any_store, holder, at).term)
        at += LEASE  # each lease runs out before the next contender asks
    assert terms == [1, 2, 3, 4, 4, 5]


def test_leases_of_different_names_are_apart(any_store: Store) -> None:
    assert take(any_store, "a", T0, name="tick").holder == "a"
    assert take(any_store, "b", T0, name="other").holder == "b"


def test_release_frees_the_lease_at_once_for_the_next_term(any_store: Store) -> None:
    take(any_store, "a", T0)
    with any_store.session() as s:
        assert not release(s, "tick", "b", T0 + timedelta(seconds=1))  # not b's to release
    with any_store.session() as s:
        assert release(s, "tick", "a", T0 + timedelta(seconds=1))
    with any_store.session() as s:
        assert not release(s, "tick", "a", T0 + timedelta(seconds=2))  # already released
    taken = take(any_store, "b", T0 + timedelta(seconds=2))
    assert (taken.holder, taken.term) == ("b", 2)


def test_the_fence_passes_the_holder_in_its_term_and_refuses_everyone_else(any_store: Store) -> None:
    take(any_store, "a", T0)
    with any_store.session() as s:
        assert check_fence(s, "tick", "a", 1, T0 + timedelta(seconds=5)).holder == "a"
    refusals = [
        ("b", 1, T0 + timedelta(seconds=5), "now held by a"),  # another daemon
        ("a", 2, T0 + timedelta(seconds=5), "term 2 is lost"),  # a term this holder never had
        ("a", 1, T0 + LEASE, "expired"),  # its own lease, run out
    ]
    for holder, term, at, words in refusals:
        with any_store.session() as s, pytest.raises(LeadershipLost, match=words):
            check_fence(s, "tick", holder, term, at)


def test_the_fence_refuses_a_lease_that_never_existed(any_store: Store) -> None:
    with any_store.session() as s, pytest.raises(LeadershipLost, match="held by nobody"):
        check_fence(s, "tick", "a", 1, T0)


def test_a_deposed_holder_is_fenced_out_by_term(any_store: Store) -> None:
    take(any_store, "a", T0)
    take(any_store, "b", T0 + LEASE)
    with any_store.session() as s, pytest.raises(LeadershipLost, match=r"now held by b \(term 2\)"):
        check_fence(s, "tick", "a", 1, T0 + LEASE)


def test_contenders_racing_for_a_free_lease_elect_exactly_one(any_store: Store) -> None:
    take(any_store, "old", T0)
    n = 6
    start = threading.Barrier(n)
    won: list[str] = []
    errors: list[BaseException] = []

    def contend(holder: str) -> None:
        try:
            start.wait()
            if take(any_store, holder, T0 + LEASE + timedelta(seconds=1)).holder == holder:
                won.append(holder)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=contend, args=(f"d{i}",)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert len(won) == 1
    lease = row(any_store)
    assert lease is not None and lease.holder == won[0] and lease.term == 2  # one change of hands, not six


def test_a_takeover_waits_for_a_fenced_transaction_to_commit(any_store: Store) -> None:
    """The fence's share lock (PostgreSQL) or the write lock (SQLite): a write the old leader checked
    commits before the new term begins, never after."""
    take(any_store, "a", T0)
    done = threading.Event()
    result: list[Lease] = []

    def takeover() -> None:
        result.append(take(any_store, "b", T0 + LEASE + timedelta(seconds=1)))
        done.set()

    with any_store.session() as s:
        check_fence(s, "tick", "a", 1, T0 + timedelta(seconds=29))
        contender = threading.Thread(target=takeover)
        contender.start()
        assert not done.wait(0.5), "the takeover did not wait for the fenced transaction"
    contender.join(timeout=15)
    assert done.is_set() and result[0].holder == "b" and result[0].term == 2


def test_the_fence_locks_the_lease_and_limits_its_idle_time_in_one_statement(pg_store: Store) -> None:
    """A leader frozen after the fence's lock must not hold it past its lease: the statement that takes
    the share lock also sets the transaction's idle limit to the lease's time left, so there is no moment
    between the two (a SET after the SELECT left one: a SIGSTOP there blocked every takeover for ever)."""
    take(pg_store, "a", T0)
    sent: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        sent.append(statement)

    event.listen(pg_store.engine, "before_cursor_execute", record)
    try:
        with pg_store.session() as s:
            check_fence(s, "tick", "a", 1, T0 + timedelta(seconds=10))
            fence = list(sent)
            limit = s.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one()
        with pg_store.session() as s:
            check_fence(s, "tick", "a", 1, T0 + LEASE - timedelta(milliseconds=200))
            floor = s.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one()
        with pg_store.session() as s:
            after = s.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one()
    finally:
        event.remove(pg_store.engine, "before_cursor_execute", record)
    locking = [q for q in fence if "FOR SHARE" in q.upper()]
    assert len(locking) == 1 and "set_config" in locking[0] and "idle_in_transaction_session_timeout" not in "".join(
        q for q in fence if q is not locking[0])
    assert limit == "20s"  # the lease's 20 s left
    assert floor == "1s"  # never less than a second
    assert after == "0"  # transaction-local: the next transaction has no limit


def test_holder_ids_name_the_host_and_process_and_differ_per_call() -> None:
    a, b = holder_id(), holder_id()
    assert a != b
    assert re.fullmatch(r".+:\d+:[0-9a-f]{8}:(\d+|-)", a)
    assert len(a) <= 160
    parsed = parse_holder(a)
    assert parsed is not None and parsed.host and parsed.pid > 0


@pytest.mark.parametrize(("holder", "parsed"), [
    ("gpu-box:4242:0a1b2c3d:4026531836", Holder("gpu-box", 4242, "4026531836")),
    ("fe80::1:77:0a1b2c3d:-", Holder("fe80::1", 77, "-")),  # a host name with colons keeps them
    ("daemon-a", None),  # a test's or an operator's name
    ("gpu-box:4242:0a1b2c3d", None),  # the older form, without the pid namespace
    ("gpu-box:pid:0a1b2c3d:1", None),
    ("gpu-box:12:NOTHEX00:1", None),
])
def test_holder_ids_parse_back_to_host_pid_and_namespace(holder: str, parsed: Holder | None) -> None:
    assert parse_holder(holder) == parsed


def test_a_takeover_from_a_dead_holder_starts_the_next_term_before_expiry(any_store: Store) -> None:
    dead = take(any_store, "a", T0)
    with any_store.session() as s:
        lease = take_over(s, "tick", dead, "b", T0 + timedelta(seconds=5), LEASE)
    assert (lease.holder, lease.term) == ("b", 2)
    assert lease.acquired_at == T0 + timedelta(seconds=5) and lease.expires_at == T0 + timedelta(seconds=5) + LEASE
    assert row(any_store) == lease


def test_a_takeover_changes_nothing_once_the_lease_moved_on(any_store: Store) -> None:
    seen = take(any_store, "a", T0)
    renewed = take(any_store, "a", T0 + timedelta(seconds=10))  # renewed since: same term, so compare the holder
    other = take(any_store, "c", T0 + timedelta(seconds=50))  # expired and taken by c in term 2
    with any_store.session() as s:
        lease = take_over(s, "tick", seen, "b", T0 + timedelta(seconds=51), LEASE)
    assert renewed.term == 1 and lease == other and (lease.holder, lease.term) == ("c", 2)


@pytest.mark.parametrize(("holder", "duration"), [("", LEASE), ("x" * 161, LEASE), ("a", timedelta(0))])
def test_acquire_refuses_an_empty_holder_or_an_empty_lease(store: Store, holder: str, duration: timedelta) -> None:
    with store.session() as s, pytest.raises(ValueError):
        acquire(s, "tick", holder, T0, duration)
