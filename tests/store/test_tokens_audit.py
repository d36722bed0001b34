"""API tokens and the audit log in the store (migration 0009), on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import inspect, select, text

from scheduler.store import audit, tokens
from scheduler.store.database import Store
from scheduler.store.tables import ApiTokenRow, Base
from scheduler.store.tokens import Role

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def _issue(store: Store, role: Role = Role.member, teams: tuple[str, ...] = ("vision",),
           expires: datetime | None = None) -> tuple[str, tokens.TokenInfo]:
    with store.session() as s:
        return tokens.issue(s, T0, name="alice", role=role, teams=teams, created_by="api-token", expires_at=expires)


def test_a_token_is_kept_only_as_its_sha256(any_store: Store) -> None:
    token, info = _issue(any_store)
    assert token.startswith("gps_") and len(token) == 4 + 12 + 1 + 43
    with any_store.session(write=False) as s:
        row = s.get(ApiTokenRow, info.id)
        assert row is not None and row.secret_sha256 == hashlib.sha256(token.encode()).hexdigest()
        # Nothing of the token's secret part is in any column of any table.
        secret = token[len("gps_") + 13:]  # all 43 characters: the secret may hold "_" itself
        for table in Base.metadata.sorted_tables:
            for values in s.execute(select(table)).all():
                assert all(secret not in str(v) for v in values), table.name


def test_check_accepts_the_token_and_says_why_it_refuses_others(any_store: Store) -> None:
    token, info = _issue(any_store, expires=T0 + timedelta(hours=1))
    with any_store.session(write=False) as s:
        assert tokens.check(s, token, T0) == (info, None)
        wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
        assert tokens.check(s, wrong, T0)[1] == "wrong-secret"
        assert tokens.check(s, "gps_000000000000_" + "a" * 43, T0) == (None, "unknown")
        assert tokens.check(s, "not-a-token", T0) == (None, "unknown")
        found, why = tokens.check(s, token, T0 + timedelta(hours=1))
        assert why == "expired" and found is not None and found.state == "expired"
    with any_store.session() as s:
        revoked = tokens.revoke(s, info.id, T0, by="root")
        assert revoked is not None and revoked.state == "revoked" and revoked.revoked_by == "root"
        assert tokens.revoke(s, "tok-000000000000", T0, by="root") is None
    with any_store.session(write=False) as s:
        assert tokens.check(s, token, T0)[1] == "revoked"


def test_a_live_admin_token_is_one_neither_revoked_nor_expired(any_store: Store) -> None:
    with any_store.session(write=False) as s:
        assert not tokens.live_admin_exists(s, T0)
    _issue(any_store, role=Role.member)
    _, admin = _issue(any_store, role=Role.admin, teams=(), expires=T0 + timedelta(days=1))
    with any_store.session(write=False) as s:
        assert tokens.live_admin_exists(s, T0)
        assert not tokens.live_admin_exists(s, T0 + timedelta(days=1))
    with any_store.session() as s:
        tokens.revoke(s, admin.id, T0, by="root")
    with any_store.session(write=False) as s:
        assert not tokens.live_admin_exists(s, T0)


def test_audit_entries_come_back_in_order_by_window_and_team(any_store: Store) -> None:
    with any_store.session() as s:
        for i, team in enumerate(("a", "b", "a", None)):
            audit.record(s, T0 + timedelta(minutes=i), actor="alice", action="job.submit", outcome="allowed",
                         status=201, team=team, target=f"job-{i}", client="10.0.0.7", detail="x" * 3000)
    with any_store.session(write=False) as s:
        every = audit.entries(s)
        assert [e.target for e in every] == ["job-0", "job-1", "job-2", "job-3"]
        assert len(every[0].detail) == audit.MAX_DETAIL_CHARS  # clipped, not refused
        assert [e.target for e in audit.entries(s, teams=["a"])] == ["job-0", "job-2"]
        assert [e.target for e in audit.entries(s, since=T0 + timedelta(minutes=1),
                                                until=T0 + timedelta(minutes=3))] == ["job-1", "job-2"]
        assert [e.target for e in audit.entries(s, limit=2)] == ["job-2", "job-3"]  # the newest, oldest first
        assert every[0].at == T0 and every[0].client == "10.0.0.7"


def test_0009_adds_the_tables_and_keeps_jobs_stored_before(any_store: Store) -> None:
    any_store.downgrade("0008")
    assert not {"api_tokens", "audit_log"} & set(inspect(any_store.engine).get_table_names())
    with any_store.engine.begin() as conn:
        conn.execute(text("INSERT INTO jobs (id, name, team, kind, model, spec_json, state, priority, submitted_at, "
                          "attempt, preemptions, restarts, epochs_done, updated_at, version) VALUES ('j1', 'n', 't', "
                          "'train', 'yolov9-s', '{}', 'queued', 50, '2026-11-01 00:00:00+00', 0, 0, 0, 0, "
                          "'2026-11-01 00:00:00+00', 1)"))
    any_store.migrate("0009")
    assert any_store.revision() == "0009"
    with any_store.engine.connect() as conn:
        assert conn.execute(text("SELECT name, submitted_by FROM jobs WHERE id = 'j1'")).one() == ("n", None)
    _issue(any_store)  # the new tables take rows
    with any_store.session() as s:
        audit.record(s, T0, actor="alice", action="job.cancel", outcome="refused", status=403)
    any_store.downgrade("0008")
    with any_store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 1
    assert "submitted_by" not in {c["name"] for c in inspect(any_store.engine).get_columns("jobs")}


@pytest.mark.parametrize("action", ["x" * 33])
def test_an_audit_action_the_column_cannot_hold_is_a_bug(store: Store, action: str) -> None:
    with store.session() as s, pytest.raises(ValueError, match="longer than 32"):
        audit.record(s, T0, actor="a", action=action, outcome="allowed", status=200)
