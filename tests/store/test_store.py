"""The store: SQLite durability settings, transactions, UTC times, migrations, locks, ids."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm.exc import StaleDataError

from scheduler.errors import SettingsError
from scheduler.states import JOB_OPEN
from scheduler.store.database import Store, add_event, advisory_lock, lock_key, new_id
from scheduler.store.tables import AttemptRow, Base, EventRow, JobRow, UsageIntervalRow

T0 = datetime(2026, 11, 30, 23, 0, tzinfo=timezone.utc)
BEIJING = timezone(timedelta(hours=8))


def make_job(job_id: str = "job-000000000001", at: datetime = T0) -> JobRow:
    return JobRow(
        id=job_id,
        name="helmet-v3",
        team="vision-qa",
        project="safety-helmet",
        kind="train",
        model="yolov9-s",
        spec_json={"name": "helmet-v3"},
        state="queued",
        submitted_at=at,
        updated_at=at,
        budget_amount=Decimal("800.12345678"),
        budget_currency="CNY",
    )


# --- SQLite set-up


@pytest.mark.parametrize(
    ("pragma", "expected"),
    [("journal_mode", "wal"), ("synchronous", 2), ("foreign_keys", 1), ("busy_timeout", 10_000)],
)
def test_sqlite_connections_are_set_up_for_durability(store: Store, pragma: str, expected: object) -> None:
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql(f"PRAGMA {pragma}").scalar_one() == expected


def test_sqlite_file_is_created_with_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "gpusched.db"
    s = Store(f"sqlite:///{path}")
    s.migrate()
    s.dispose()
    assert path.is_file()


def test_in_memory_sqlite_keeps_one_database_across_sessions() -> None:
    s = Store("sqlite://")
    s.migrate()
    with s.session() as session:
        session.add(make_job())
    with s.session() as session:
        assert session.get(JobRow, "job-000000000001") is not None
    s.dispose()


def test_foreign_keys_are_enforced(store: Store) -> None:
    with pytest.raises(IntegrityError), store.session() as session:
        session.add(
            AttemptRow(
                job_id="job-doesnotexist", number=1, state="launching", client_token="tok-1",
                provider="sandbox", region="r", zone="z", instance_type="t", capacity="spot", created_at=T0,
            )
        )


def test_a_write_session_takes_the_write_lock_up_front(store: Store) -> None:
    other = Store(str(store.url.render_as_string(hide_password=False)), busy_timeout_ms=50)
    try:
        with store.session() as writer:
            writer.add(make_job())
            writer.flush()
            # BEGIN IMMEDIATE: a second writer is refused at the start, not halfway through.
            with pytest.raises(OperationalError, match="locked"), other.session():
                pass
            # WAL: a reader proceeds meanwhile and sees only committed data.
            with other.session(write=False) as reader:
                assert reader.scalars(select(JobRow)).all() == []
        with other.session(write=False) as reader:
            assert len(reader.scalars(select(JobRow)).all()) == 1
    finally:
        other.dispose()


# --- transactions, on both backends


def test_session_commits_on_success(any_store: Store) -> None:
    with any_store.session() as session:
        session.add(make_job())
    with any_store.session(write=False) as session:
        job = session.get(JobRow, "job-000000000001")
        assert job is not None and job.budget_amount == Decimal("800.12345678")


def test_session_rolls_back_on_error(any_store: Store) -> None:
    with pytest.raises(RuntimeError, match="boom"), any_store.session() as session:
        session.add(make_job())
        session.flush()
        raise RuntimeError("boom")
    with any_store.session(write=False) as session:
        assert session.scalars(select(JobRow)).all() == []


def test_rows_stay_readable_after_the_session(any_store: Store) -> None:
    with any_store.session() as session:
        job = make_job()
        session.add(job)
    assert job.state == "queued" and job.version == 1


def test_a_stale_write_is_refused_on_postgres(pg_store: Store) -> None:
    # On SQLite BEGIN IMMEDIATE rules this race out; PostgreSQL relies on the version column.
    with pg_store.session() as session:
        session.add(make_job())
    with pytest.raises(StaleDataError), pg_store.session() as stale:
        job = stale.get(JobRow, "job-000000000001")
        assert job is not None
        with pg_store.engine.begin() as conn:  # another daemon moves the row on
            conn.execute(text("UPDATE jobs SET state = 'planned', version = version + 1"))
        job.state = "cancelled"
        stale.flush()
    with pg_store.session(write=False) as session:
        assert session.get(JobRow, "job-000000000001").state == "planned"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "written",
    [
        T0,
        T0.astimezone(BEIJING),  # 2026-12-01 07:00 +08:00: another month locally
        datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_datetimes_come_back_as_the_same_instant_in_utc(any_store: Store, written: datetime) -> None:
    with any_store.session() as session:
        session.add(make_job(at=written))
    with any_store.session(write=False) as session:
        job = session.get(JobRow, "job-000000000001")
        assert job is not None
        assert job.submitted_at == written
        assert job.submitted_at.tzinfo is timezone.utc
    with any_store.session() as session:  # also after an update and a refresh
        job = session.get(JobRow, "job-000000000001")
        assert job is not None
        job.updated_at = written + timedelta(hours=1)
        session.flush()
        session.refresh(job)
        assert job.updated_at == written + timedelta(hours=1)
        assert job.updated_at.tzinfo is timezone.utc


# --- migrations


def test_migration_creates_exactly_the_tables_of_tables_py(any_store: Store) -> None:
    with any_store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(context, Base.metadata) == []


def test_migrate_is_at_head_and_repeatable(any_store: Store) -> None:
    assert any_store.head() == "0016"
    any_store.migrate()
    assert any_store.revision() == any_store.head()


def test_downgrade_to_base_removes_every_table_and_upgrade_restores_them(any_store: Store) -> None:
    any_store.downgrade("base")
    assert any_store.revision() is None
    assert set(inspect(any_store.engine).get_table_names()) - {"alembic_version"} == set()
    any_store.migrate()
    assert set(Base.metadata.tables) <= set(inspect(any_store.engine).get_table_names())


# --- URLs


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@db.example/gpusched", "postgresql+psycopg"),
        ("postgres://u@db.example/gpusched", "postgresql+psycopg"),
        ("postgresql+psycopg://u@db.example/gpusched", "postgresql+psycopg"),
        ("sqlite://", "sqlite"),
    ],
)
def test_urls_pick_the_shipped_driver(url: str, driver: str) -> None:
    s = Store(url)
    try:
        assert s.url.drivername == driver
    finally:
        s.dispose()


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://x/y"])
def test_a_bad_url_is_a_settings_error_with_a_fix(url: str) -> None:
    with pytest.raises(SettingsError) as info:
        Store(url)
    assert info.value.fix and "GPUSCHED_DATABASE_URL" in info.value.fix


def test_repr_hides_the_password() -> None:
    s = Store("postgresql://u:hunter2@db.example/gpusched")
    assert "hunter2" not in repr(s)
    s.dispose()


# --- helpers


def test_new_id_has_a_prefix_and_12_hex_digits() -> None:
    for prefix, expected in [("job", "job-"), ("inst", "inst-"), ("job-", "job-")]:
        value = new_id(prefix)
        assert re.fullmatch(re.escape(expected) + r"[0-9a-f]{12}", value), value


def test_new_id_is_deterministic_with_a_seeded_rng_and_varies_without() -> None:
    a = [new_id("job", random.Random(7)) for _ in range(2)]
    assert a[0] == a[1]
    rng = random.Random(7)
    assert new_id("job", rng) != new_id("job", rng)
    assert len({new_id("inst") for _ in range(100)}) == 100


@pytest.mark.parametrize("prefix", ["", "Job", "job_x", "a" * 17, "9job"])
def test_new_id_refuses_odd_prefixes(prefix: str) -> None:
    with pytest.raises(ValueError):
        new_id(prefix)


def test_add_event_joins_the_callers_transaction(store: Store) -> None:
    with store.session() as session:
        add_event(session, T0.astimezone(BEIJING), "job.submitted", "queued", job_id="job-1")
    with pytest.raises(RuntimeError), store.session() as session:
        add_event(session, T0, "job.planned", "never committed", job_id="job-1")
        raise RuntimeError
    with store.session(write=False) as session:
        events = session.scalars(select(EventRow)).all()
    assert [(e.kind, e.at, e.job_id, e.instance_id) for e in events] == [("job.submitted", T0, "job-1", None)]


def test_add_event_refuses_a_kind_the_column_cannot_hold(store: Store) -> None:
    with store.session() as session, pytest.raises(ValueError):
        add_event(session, T0, "k" * 33, "too long")


# --- advisory locks


def test_lock_key_is_stable_and_fits_a_bigint() -> None:
    key = lock_key("tick")
    assert key == lock_key("tick") != lock_key("report")
    assert -(2**63) <= key < 2**63


def test_advisory_lock_is_a_no_op_on_sqlite(store: Store) -> None:
    with store.session() as one:
        assert advisory_lock(one, "tick")
        assert advisory_lock(one, "tick")


def test_advisory_lock_admits_one_holder_at_a_time_on_postgres(pg_store: Store) -> None:
    with pg_store.session() as first:
        assert advisory_lock(first, "tick")
        with pg_store.session() as second:
            assert not advisory_lock(second, "tick")
            assert not pg_store.try_lock(second, "tick")
            assert advisory_lock(second, "report")  # other names are independent
    with pg_store.session() as third:  # released when the first transaction ended
        assert pg_store.try_lock(third, "tick")


def test_held_lock_lets_one_daemon_tick_at_a_time_on_postgresql(pg_store):
    with pg_store.held_lock("gpusched-tick") as first:
        assert first is True
        other = Store(str(pg_store.url.render_as_string(hide_password=False)))
        try:
            with other.held_lock("gpusched-tick") as second:
                assert second is False  # the other daemon's tick is running
        finally:
            other.dispose()
    with pg_store.held_lock("gpusched-tick") as again:
        assert again is True  # released when the first tick ended


def test_held_lock_is_always_granted_on_sqlite(store):
    with store.held_lock("gpusched-tick") as got:
        assert got is True


def test_jobs_stored_before_0008_keep_their_losses_as_restarts(tmp_path: Path) -> None:
    """Before 0008 every loss spent max_restarts: a job migrated mid-run keeps the count it had."""
    store = Store(f"sqlite:///{tmp_path / 'old.db'}")
    store.migrate("0007")
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO jobs (id, name, team, kind, model, spec_json, state, priority, submitted_at, "
                          "attempt, preemptions, epochs_done, updated_at, version) VALUES ('j1', 'n', 't', 'train', "
                          "'yolov9-s', '{}', 'queued', 50, '2026-11-01 00:00:00', 3, 3, 2, '2026-11-01 00:00:00', 1)"))
    store.migrate()
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT restarts FROM jobs WHERE id = 'j1'")).scalar_one() == 3
    store.dispose()


def test_budget_alerts_sent_before_0011_stay_the_teams_and_a_downgrade_keeps_them(tmp_path: Path) -> None:
    """0011 gives each sent alert a scope: the rows before it were teams' alerts, and stay sent (not sent twice)."""
    store = Store(f"sqlite:///{tmp_path / 'old.db'}")
    store.migrate("0008")
    insert = ("INSERT INTO budget_alerts ({who}, month, threshold_pct, at, actual_amount, budget_amount, currency, "
              "delivered) VALUES ('vision', '2026-11', 50, '2026-11-10 00:00:00', 60, 100, 'CNY', 'mail')")
    with store.engine.begin() as conn:
        conn.execute(text(insert.format(who="team")))
    store.migrate()
    with store.engine.begin() as conn:
        assert conn.execute(text("SELECT scope, name FROM budget_alerts")).one() == ("team", "vision")
        # A project of the same name is alerted apart; the same team twice is refused by the unique key.
        conn.execute(text(insert.format(who="scope, name").replace("('vision'", "('project', 'vision'")))
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(text(insert.format(who="scope, name").replace("('vision'", "('team', 'vision'")))
    store.downgrade("0008")
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT team, threshold_pct FROM budget_alerts")).all() == [("vision", 50)]
    store.dispose()
def test_perf_samples_before_0016_get_no_loader_share_and_a_downgrade_gives_back_the_machines_rate(
        tmp_path: Path) -> None:
    """0016 adds the share a sample's rate was divided by; rows before it have none (the daemon's start divides
    them, ``perf_learning.rebase_samples``), and a downgrade multiplies the divided ones back."""
    store = Store(f"sqlite:///{tmp_path / 'old.db'}")
    store.migrate("0015")
    insert = ("INSERT INTO perf_samples (at, job_id, attempt, model, gpu, gpu_count, nodes, img_size, batch, "
              "train_images, val_images, epoch_seconds, rate_img_s, source{share}) VALUES ('2026-11-01 00:00:00', "
              "'j1', 1, 'yolov9-s', 'A10G', 1, 1, 640, 16, 1000, 0, 10, {rate}, 'agent'{value})")
    with store.engine.begin() as conn:
        conn.execute(text(insert.format(share="", rate=100, value="")))
    store.migrate()
    with store.engine.begin() as conn:
        assert conn.execute(text("SELECT rate_img_s, loader_share FROM perf_samples")).one() == (100, None)
        conn.execute(text(insert.format(share=", loader_share", rate=120, value=", 0.5")))
    store.downgrade("0015")
    with store.engine.connect() as conn:
        assert sorted(conn.execute(text("SELECT rate_img_s FROM perf_samples")).scalars()) == [60, 100]
    store.dispose()


def test_the_ledgers_search_for_unaccounted_intervals_uses_their_index(store: Store) -> None:
    # ledger.account runs every tick; without the partial index (migration 0013) SQLite scans every
    # interval the store ever kept.
    now = datetime(2026, 11, 5, tzinfo=timezone.utc)
    stmt = (select(UsageIntervalRow.id)
            .where(UsageIntervalRow.accounted.is_(False), UsageIntervalRow.end.is_not(None),
                   UsageIntervalRow.end <= now))
    plan = _query_plan(store, stmt)
    assert "ix_usage_intervals_unaccounted" in plan, plan


def test_the_warm_memos_search_for_last_weeks_attempts_uses_their_index(store: Store) -> None:
    # idle_window.verdicts runs every ten minutes; without the index (migration 0014) SQLite scans every
    # attempt the store ever kept.
    since = datetime(2026, 11, 5, tzinfo=timezone.utc)
    stmt = select(AttemptRow.provider, AttemptRow.created_at).where(AttemptRow.created_at >= since)
    plan = _query_plan(store, stmt)
    assert "ix_attempts_created_at" in plan, plan


def test_the_open_jobs_are_found_by_the_state_index(store: Store) -> None:
    # screen_stored_specs asks every tick; NOT IN (terminal) scanned every job the store ever kept.
    stmt = select(JobRow.id).where(JobRow.state.in_(JOB_OPEN))
    plan = _query_plan(store, stmt)
    assert "ix_jobs_state" in plan, plan


def _query_plan(store: Store, stmt) -> str:
    """SQLite's ``EXPLAIN QUERY PLAN`` of ``stmt``, its steps joined."""
    compiled = stmt.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True})
    with store.engine.connect() as conn:
        return " ".join(str(step[-1]) for step in conn.execute(text(f"EXPLAIN QUERY PLAN {compiled}")))
