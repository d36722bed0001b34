"""Shared fixtures: a migrated SQLite store, a PostgreSQL store, a simulated clock.

PostgreSQL: set GPUSCHED_TEST_PG_URL (default: the local ``test`` database).
The tests never touch that database's contents: each test session creates its
own database beside it and drops it at the end. Without a server the
PostgreSQL tests skip, unless GPUSCHED_REQUIRE_PG is set (CI), where they fail.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import NoSuchModuleError, OperationalError

from scheduler.clock import SimClock
from scheduler.store.database import Store, parse_url
from scheduler.store.tables import Base

# pytest-xdist's workers start with COLUMNS=80 set, and the CLI's consoles (made at import) would fix that width
# before a test's CliRunner sets its own COLUMNS: without it they read the width when they print, as in one process.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

PG_URL = os.environ.get("GPUSCHED_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SIM_START = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)  # a Monday, 09:00 in Beijing


@pytest.fixture
def sim_clock() -> SimClock:
    return SimClock(SIM_START)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite store in a folder that does not exist yet (the store makes it)."""
    s = Store(f"sqlite:///{tmp_path / 'data' / 'gpusched.db'}")
    s.migrate()
    yield s
    s.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a PostgreSQL database made for this test session; dropped afterwards."""
    server = parse_url(PG_URL)
    shown = server.render_as_string(hide_password=True)
    try:
        admin = create_engine(server, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except (OperationalError, NoSuchModuleError, ImportError) as exc:
        reason = f"PostgreSQL not reachable at {shown}; set GPUSCHED_TEST_PG_URL ({type(exc).__name__})"
        if os.environ.get("GPUSCHED_REQUIRE_PG"):  # CI sets it: there a missing server is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    name = f"gpusched_test_{os.getpid()}_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """A migrated store on this session's PostgreSQL database, emptied after each test."""
    s = Store(pg_url)
    s.migrate()
    yield s
    s.migrate()  # a test may have downgraded
    # DELETE, not TRUNCATE: on a handful of rows it is several times faster.
    with s.engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(table.delete())
        sequences = conn.execute(text("SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()"))
        for name in sequences.scalars().all():
            conn.execute(text(f'ALTER SEQUENCE "{name}" RESTART'))
    s.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest) -> Store:
    """The test runs once on each backend."""
    return request.getfixturevalue("store" if request.param == "sqlite" else "pg_store")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """In CI (GPUSCHED_REQUIRE_DEPS) a test module that skipped whole at import (``importorskip``: a
    cloud SDK or moto missing) fails instead: an install step that went missing must not turn green."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("GPUSCHED_REQUIRE_DEPS") and isinstance(collector, pytest.Module):
        report.outcome = "failed"
        report.longrepr = f"required in CI, skipped at import: {report.longrepr}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test id per schemathesis operation. ``schema.parametrize()`` names each item after its operation
    (``test_x[GET /v1/jobs]``), but pytest 9 builds an item's id from its parametrization, which these items
    lack, so all 23 had the function's id; pytest-xdist tells tests apart by id, and under ``--dist loadfile``
    (scripts/test) one of them ran for all. The operation goes into the id's brackets, where pytest keeps it."""
    for item in items:
        label = getattr(item, "operation_label", None)
        if type(item).__name__ == "SchemathesisFunction" and label and not item.nodeid.endswith("]"):
            item._id = item._id.with_params(label)  # pytest's NodeId (no public setter)
    # Two tests with one id would run as one under xdist, silently: refuse to run rather than lose tests.
    shared = sorted(nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1)
    if shared:
        raise pytest.UsageError(f"tests share an id (give each its own; xdist would run one): {shared[:5]}")
