"""Fixtures of the report tests: a fresh SQLite store, and the helper that writes ledger rows into it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from scheduler.store.tables import Base
from tests.accounting.test_reports import Ledger


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    engine = create_engine(f"sqlite:///{tmp_path / 'report.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        yield s
    engine.dispose()


@pytest.fixture
def ledger(session: Session) -> Ledger:
    return Ledger(session)
