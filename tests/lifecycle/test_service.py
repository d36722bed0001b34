"""The job service: submit, list, show and cancel on a real store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

from scheduler.clock import SimClock
from scheduler.errors import JobFileError, NotFoundError, UserError
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import service
from scheduler.models import JobSpec
from scheduler.money import Money
from scheduler.states import InstanceRowState, JobState
from scheduler.store.database import Store, add_event
from scheduler.store.tables import AttemptRow, EventRow, InstanceRow, JobRow

NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def job_doc(**policy: Any) -> dict[str, Any]:
    return {
        "name": "helmet-v3",
        "team": "vision-qa",
        "project": "safety-helmet",
        "kind": "train",
        "model": "yolov9-s",
        "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000, "val_images": 1500},
        "train": {"epochs": 30, "batch": 32},
        "policy": {"budget": "800 CNY", **policy},
    }


def spec(**policy: Any) -> JobSpec:
    return parse_job(job_doc(**policy), "helmet.yaml")


@pytest.fixture
def clock() -> SimClock:
    return SimClock(NOW)


def set_state(store: Store, job_id: str, state: JobState) -> None:
    with store.session() as s:
        s.get(JobRow, job_id).state = state.value  # type: ignore[union-attr]


# --- submit


def test_submit_stores_a_queued_job_with_its_budget_epochs_and_event(any_store: Store, clock: SimClock) -> None:
    view = service.submit(any_store, clock, spec(), source="helmet.yaml")

    assert view.id.startswith("job-")
    assert view.state is JobState.queued
    assert view.budget == Money(amount=Decimal(800), currency="CNY")
    assert (view.epochs_total, view.epochs_done, view.attempt) == (30, 0, 0)
    assert view.submitted_at == NOW
    with any_store.session(write=False) as s:
        row = s.get(JobRow, view.id)
        assert row is not None
        assert (row.team, row.project, row.kind, row.model) == ("vision-qa", "safety-helmet", "train", "yolov9-s")
        assert row.budget_amount == Decimal(800) and row.budget_currency == "CNY"
        events = s.scalars(select(EventRow).where(EventRow.job_id == view.id)).all()
    assert [e.kind for e in events] == ["submitted"]
    assert "helmet.yaml" in events[0].message


def test_a_relative_deadline_is_resolved_from_now_and_stored_absolute(store: Store, clock: SimClock) -> None:
    view = service.submit(store, clock, spec(deadline="36h"), source="helmet.yaml")

    assert view.deadline_at == NOW + timedelta(hours=36)
    with store.session(write=False) as s:
        stored = s.get(JobRow, view.id).spec_json  # type: ignore[union-attr]
    # Read back a day later, the stored spec still means the same moment.
    again = JobSpec.model_validate(stored)
    assert again.policy.deadline == NOW + timedelta(hours=36)
    assert again.deadline_at(NOW + timedelta(days=1)) == NOW + timedelta(hours=36)


def test_an_absolute_deadline_is_kept_as_given(store: Store, clock: SimClock) -> None:
    view = service.submit(store, clock, spec(deadline="2026-12-10T18:00:00+08:00"), source="helmet.yaml")
    assert view.deadline_at == datetime(2026, 12, 10, 10, 0, tzinfo=timezone.utc)


def test_a_deadline_already_past_is_refused_and_nothing_is_stored(store: Store, clock: SimClock) -> None:
    with pytest.raises(JobFileError) as caught:
        service.submit(store, clock, spec(deadline="2026-11-19T08:00:00+00:00"), source="late.yaml")

    assert caught.value.path == "late.yaml"
    assert [p.field for p in caught.value.problems] == ["policy.deadline"]
    assert service.list_jobs(store) == []


@pytest.mark.parametrize(
    ("kind", "section", "epochs_total"),
    [
        ("train", {"train": {"epochs": 7}}, 7),
        ("infer", {"infer": {"source": "s3://b/imgs/", "images": 1000, "weights": "s3://b/best.pt"}}, 1),  # shards
        ("infer", {"infer": {"source": "s3://b/imgs/", "images": 90_000, "weights": "s3://b/best.pt"}}, 5),
        ("export", {"export": {"weights": "s3://b/best.pt", "formats": ["onnx"]}}, None),
    ],
)
def test_train_jobs_count_epochs_and_inference_jobs_shards(
    store: Store, clock: SimClock, kind: str, section: dict[str, Any], epochs_total: int | None
) -> None:
    doc = {k: v for k, v in job_doc().items() if k != "train"} | {"kind": kind} | section
    view = service.submit(store, clock, parse_job(doc, "j.yaml"), source="j.yaml")
    assert view.kind == kind
    assert view.epochs_total == epochs_total


# --- list and show


def test_list_is_newest_first_and_filters_by_state_and_team(store: Store, clock: SimClock) -> None:
    a = service.submit(store, clock, spec(), source="a.yaml")
    clock.advance(timedelta(minutes=1))
    other_team = parse_job(job_doc() | {"team": "retail"}, "b.yaml")
    b = service.submit(store, clock, other_team, source="b.yaml")
    clock.advance(timedelta(minutes=1))
    c = service.submit(store, clock, spec(), source="c.yaml")
    set_state(store, a.id, JobState.planned)

    assert [j.id for j in service.list_jobs(store)] == [c.id, b.id, a.id]
    assert [j.id for j in service.list_jobs(store, state="planned")] == [a.id]
    assert [j.id for j in service.list_jobs(store, state=JobState.queued, team="vision-qa")] == [c.id]
    assert [j.id for j in service.list_jobs(store, team="retail")] == [b.id]
    assert [j.id for j in service.list_jobs(store, limit=2)] == [c.id, b.id]


@pytest.mark.parametrize("kwargs", [{"state": "sleeping"}, {"limit": 0}, {"limit": service.MAX_LIST + 1}])
def test_list_rejects_bad_filters(store: Store, kwargs: dict[str, Any]) -> None:
    with pytest.raises(UserError):
        service.list_jobs(store, **kwargs)


def test_get_job_shows_attempts_in_order_and_the_latest_events_oldest_first(store: Store, clock: SimClock) -> None:
    view = service.submit(store, clock, spec(), source="helmet.yaml")
    with store.session() as s:
        for number in (2, 1):
            s.add(AttemptRow(
                job_id=view.id, number=number, state="launch_failed" if number == 1 else "running",
                client_token=f"{view.id}-{number}", provider="sandbox", region="cn-hangzhou",
                zone="cn-hangzhou-h", instance_type="gn7i-c8g1.2xlarge", capacity="spot",
                est_cost_amount=Decimal("12.5"), est_cost_currency="CNY", created_at=NOW,
            ))
        for minute in range(1, 6):
            add_event(s, NOW + timedelta(minutes=minute), "note", f"step {minute}", job_id=view.id)

    detail = service.get_job(store, view.id, events=3)

    assert detail.id == view.id and detail.state is JobState.queued
    assert [a.number for a in detail.attempts] == [1, 2]
    assert detail.attempts[0].est_cost == Money(amount=Decimal("12.5"), currency="CNY")
    assert [e.message for e in detail.events] == ["step 3", "step 4", "step 5"]
    assert detail.spec["name"] == "helmet-v3"


def test_unknown_job_is_not_found(store: Store, clock: SimClock) -> None:
    with pytest.raises(NotFoundError) as caught:
        service.get_job(store, "job-000000000000")
    assert caught.value.fix
    with pytest.raises(NotFoundError):
        service.cancel(store, clock, "job-000000000000")


# --- cancel


@pytest.mark.parametrize(
    ("state", "releases"),
    [
        (JobState.queued, False),
        (JobState.planned, False),
        (JobState.provisioning, True),
        (JobState.running, True),
        (JobState.preempted, True),
    ],
)
def test_cancel_ends_any_unfinished_job(store: Store, clock: SimClock, state: JobState, releases: bool) -> None:
    view = service.submit(store, clock, spec(), source="helmet.yaml")
    set_state(store, view.id, state)
    clock.advance(timedelta(minutes=5))

    cancelled = service.cancel(store, clock, view.id)

    assert cancelled.state is JobState.cancelled
    assert cancelled.finished_at == NOW + timedelta(minutes=5)
    assert service.get_job(store, view.id).state is JobState.cancelled
    last = service.get_job(store, view.id).events[-1]
    assert last.kind == "cancelled" and state.value in last.message
    assert ("released on the next tick" in last.message) is releases


@pytest.mark.parametrize("state", [JobState.succeeded, JobState.failed])
def test_cancel_of_a_finished_job_is_a_user_error(store: Store, clock: SimClock, state: JobState) -> None:
    view = service.submit(store, clock, spec(), source="helmet.yaml")
    set_state(store, view.id, state)

    with pytest.raises(UserError, match=f"already {state.value}"):
        service.cancel(store, clock, view.id)
    assert service.get_job(store, view.id).state is state


def test_cancelling_twice_returns_the_job_unchanged(store: Store, clock: SimClock) -> None:
    view = service.submit(store, clock, spec(), source="helmet.yaml")
    first = service.cancel(store, clock, view.id)
    clock.advance(timedelta(hours=1))

    second = service.cancel(store, clock, view.id)

    assert second == first
    assert [e.kind for e in service.get_job(store, view.id).events].count("cancelled") == 1


def test_cancel_retries_when_the_tick_changed_the_job_meanwhile(any_store: Store, clock: SimClock) -> None:
    view = service.submit(any_store, clock, spec(), source="helmet.yaml")
    set_state(any_store, view.id, JobState.running)
    raced: list[bool] = []

    def tick_writes_first(session: Session, _ctx: object, _objs: object) -> None:
        # Another writer (the tick) commits a new version of the row between our read and our write.
        if not raced and any(isinstance(o, JobRow) for o in session.dirty):
            raced.append(True)
            session.execute(
                update(JobRow).where(JobRow.id == view.id)
                .values(version=JobRow.version + 1, epochs_done=4)
                .execution_options(synchronize_session=False)
            )

    event.listen(Session, "before_flush", tick_writes_first)
    try:
        cancelled = service.cancel(any_store, clock, view.id)
    finally:
        event.remove(Session, "before_flush", tick_writes_first)

    assert raced == [True]
    assert cancelled.state is JobState.cancelled


# --- counts for /metrics


def test_counts_list_every_state(store: Store, clock: SimClock) -> None:
    a = service.submit(store, clock, spec(), source="a.yaml")
    service.submit(store, clock, spec(), source="b.yaml")
    service.cancel(store, clock, a.id)
    with store.session() as s:
        s.add(InstanceRow(
            id="inst-1", provider="sandbox", region="r", zone="z", instance_type="t", gpu="L4", gpu_count=1,
            capacity="spot", client_token="tok-1", state="running", team="vision-qa",
            price_amount=Decimal("3"), price_currency="CNY", on_demand_amount=Decimal("9"), created_at=NOW,
        ))

    jobs = service.job_counts(store)
    instances = service.instance_counts(store)

    assert set(jobs) == set(JobState) and set(instances) == set(InstanceRowState)
    assert jobs[JobState.queued] == 1 and jobs[JobState.cancelled] == 1 and sum(jobs.values()) == 2
    assert instances[InstanceRowState.running] == 1 and sum(instances.values()) == 1
