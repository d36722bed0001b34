"""The monthly report is sent once however many daemons try: the month's delivery row is claimed first."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select
from structlog.testing import capture_logs

from scheduler.accounting.delivery import Delivered
from scheduler.accounting.report_delivery import SentReport
from scheduler.accounting.report_once import claim, send_once
from scheduler.store.database import Store
from scheduler.store.tables import ReportDeliveryRow

AT = datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)


class Sender:
    def __init__(self, fail: bool = False) -> None:
        self.sent = 0
        self.fail = fail

    def __call__(self) -> SentReport:
        self.sent += 1
        if self.fail:
            raise OSError("report dir is read-only")
        return SentReport({}, [Delivered(channel="mail", ok=True, detail="ops@example.com"),
                               Delivered(channel="slack", ok=False, detail="503")])


def deliveries(store: Store) -> list[ReportDeliveryRow]:
    with store.session(write=False) as s:
        return list(s.scalars(select(ReportDeliveryRow).order_by(ReportDeliveryRow.month)))


def test_the_first_daemon_sends_and_the_second_sends_nothing(any_store: Store) -> None:
    first, second = Sender(), Sender()
    assert send_once(any_store, "2026-11", holder="a", term=1, now=lambda: AT, send=first) is not None
    with capture_logs() as logs:
        assert send_once(any_store, "2026-11", holder="b", term=1, now=lambda: AT, send=second) is None
    assert (first.sent, second.sent) == (1, 0)
    [skipped] = [e for e in logs if e["event"] == "monthly_report_skipped"]
    assert skipped["by"] == "a" and skipped["delivered_at"] == AT.isoformat()
    [row] = deliveries(any_store)
    assert (row.month, row.holder, row.term, row.delivered_at) == ("2026-11", "a", 1, AT)
    assert row.outcome == "mail: sent; slack: failed"


def test_a_later_leader_does_not_send_a_month_already_delivered(any_store: Store) -> None:
    send_once(any_store, "2026-11", holder="a", term=1, now=lambda: AT, send=Sender())
    late = Sender()
    assert send_once(any_store, "2026-11", holder="b", term=2, now=lambda: AT, send=late) is None
    assert late.sent == 0


def test_each_month_is_its_own(any_store: Store) -> None:
    for month in ("2026-10", "2026-11"):
        assert send_once(any_store, month, holder="a", term=1, now=lambda: AT, send=Sender()) is not None
    assert [r.month for r in deliveries(any_store)] == ["2026-10", "2026-11"]


def test_a_claim_left_unsent_by_a_deposed_leader_goes_to_a_later_term_only(any_store: Store) -> None:
    assert claim(any_store, "2026-11", "a", 1, AT)  # a claims, then dies before sending
    assert not claim(any_store, "2026-11", "b", 1, AT)  # the same term: a may still be sending
    assert claim(any_store, "2026-11", "a", 1, AT)  # a's own claim stays a's
    taken = Sender()
    assert send_once(any_store, "2026-11", holder="b", term=2, now=lambda: AT + timedelta(minutes=1),
                     send=taken) is not None
    assert taken.sent == 1
    [row] = deliveries(any_store)
    assert (row.holder, row.term) == ("b", 2)


def test_a_send_that_fails_gives_the_claim_back(any_store: Store) -> None:
    with pytest.raises(OSError):
        send_once(any_store, "2026-11", holder="a", term=1, now=lambda: AT, send=Sender(fail=True))
    assert deliveries(any_store) == []
    retry = Sender()
    assert send_once(any_store, "2026-11", holder="b", term=1, now=lambda: AT, send=retry) is not None
    assert retry.sent == 1


def test_daemons_claiming_the_same_month_at_once_send_it_once(any_store: Store) -> None:
    n = 5
    start = threading.Barrier(n)
    senders = [Sender() for _ in range(n)]
    errors: list[BaseException] = []

    def deliver(i: int) -> None:
        try:
            start.wait()
            send_once(any_store, "2026-11", holder=f"d{i}", term=1, now=lambda: AT, send=senders[i])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sum(s.sent for s in senders) == 1
