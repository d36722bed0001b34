"""The store: one SQLAlchemy engine, transactional sessions, Alembic migrations.

SQLite is the default (one daemon); PostgreSQL (``postgresql+psycopg://``) serves
several daemons that share one database.

SQLite is set up for crash safety, not speed: WAL journal, ``synchronous=FULL``
(NORMAL can lose the last commits on power loss), foreign keys on, a busy
timeout, and every write transaction opens with ``BEGIN IMMEDIATE`` so two
writers queue at the start instead of failing halfway with "database is locked".

Times. Every time column is ``tables.UtcDateTime``: values go in as UTC and come
back aware UTC on both backends (PostgreSQL sessions are also set to UTC), whether
loaded as rows, selected column by column or used as query parameters.

Statements built once. A query the tick asks every round is a module-level statement with
``bindparam``s (``expanding=True`` for ``IN`` lists), not built at each call: building a statement
and its cache key costs about 70 µs, more than SQLite takes to answer most of them (BENCHMARKS.md,
"statements built once").
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from scheduler.errors import SettingsError, install_hint
from scheduler.store.tables import EventRow
from scheduler.times import utc

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
MIGRATE_LOCK = "gpusched:migrate"
_ID_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")


class Store:
    """Owns the engine. ``Store(url)``, then ``migrate()``, then ``session()`` as needed."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 10_000, echo: bool = False,
                 durable: bool = True) -> None:
        """``durable=False`` (simulations, whose store is thrown away) skips the fsync per commit."""
        self.url = parse_url(url)
        self.busy_timeout_ms = busy_timeout_ms
        self.durable = durable
        try:
            if self.url.get_backend_name() == "sqlite":
                self.engine = self._sqlite_engine(echo)
            else:
                self.engine = create_engine(self.url, echo=echo, pool_pre_ping=True)
        except (ArgumentError, NoSuchModuleError) as exc:
            raise SettingsError(
                f"cannot use database URL {self.url.render_as_string(hide_password=True)}: {exc}",
                fix="set GPUSCHED_DATABASE_URL to sqlite:///path/to.db or postgresql+psycopg://user@host/db "
                f"(PostgreSQL needs the postgres extra: {install_hint('postgres')})",
            ) from None
        if self.is_postgres:
            event.listen(self.engine, "connect", _postgres_session_utc)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._fence: Callable[[Session], None] | None = None

    # --- engine set-up

    def _sqlite_engine(self, echo: bool) -> Engine:
        database = self.url.database or ""
        in_memory = database in ("", ":memory:") or "mode=memory" in database
        kwargs: dict[str, Any] = {"echo": echo}
        if in_memory:
            # One shared connection, or every session would see its own empty database.
            kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
        elif not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(self.url, **kwargs)
        busy_timeout_ms = self.busy_timeout_ms
        synchronous = "FULL" if self.durable else "OFF"

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            # Take BEGIN away from pysqlite so the "begin" hook below decides its kind.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # IMMEDIATE takes the write lock up front: a second writer waits
            # (busy_timeout) at BEGIN instead of failing at its first write.
            write = conn.get_execution_options().get("gpusched_write", True)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    # --- sessions

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """A Session that commits on success and rolls back on any error.

        The transaction starts on entry. On SQLite, ``write=True`` (the default)
        opens it with BEGIN IMMEDIATE; ``write=False`` takes no lock and may read
        while another connection writes. Objects stay usable after the block
        (no expiry on commit). On a ``fenced`` store the fence runs first, inside the transaction.
        """
        with self._sessions() as session:
            session.connection(execution_options={"gpusched_write": write})
            try:
                if self._fence is not None:
                    self._fence(session)
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def fenced(self, fence: Callable[[Session], None]) -> Store:
        """This store (the same engine) whose every session first calls ``fence(session)`` in its transaction.

        The daemon's tick gets one fenced by the leader lease (``scheduler/lifecycle/leadership.py``): the
        fence reads the lease row under a share lock and raises when this daemon no longer holds it, so a
        deposed leader's writes roll back instead of racing the new leader's.
        """
        other = copy.copy(self)
        other._fence = fence
        return other

    def try_lock(self, session: Session, name: str) -> bool:
        """``advisory_lock`` as a method, for callers holding only the store."""
        return advisory_lock(session, name)

    @contextmanager
    def held_lock(self, name: str) -> Iterator[bool]:
        """Hold the lock ``name`` for the whole ``with`` block (many transactions); yields whether we got it.

        PostgreSQL: a session-level ``pg_try_advisory_lock`` on a connection of its own, released
        at the end (or when the connection dies with the process). SQLite: always True (one file,
        one daemon). Several daemons on one PostgreSQL thus never run a tick at the same time.
        """
        if not self.is_postgres:
            yield True
            return
        with self.engine.connect() as conn:
            key = lock_key(name)
            # The server frees the lock when this connection dies. A peer that vanished without closing it
            # (a frozen VM, a cut network) is found by TCP keepalives: within about 25 s, not the OS's hours.
            conn.execute(text("SET tcp_keepalives_idle = 10"))
            conn.execute(text("SET tcp_keepalives_interval = 5"))
            conn.execute(text("SET tcp_keepalives_count = 3"))
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one())
            conn.commit()
            try:
                yield got
            finally:
                if got:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()

    # --- migrations

    def alembic_config(self) -> Config:
        """An Alembic config pointing at the migrations bundled in the package."""
        config = Config()
        # configparser interpolation would choke on a literal '%' in the path.
        config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
        config.set_main_option(
            "sqlalchemy.url", self.url.render_as_string(hide_password=False).replace("%", "%%")
        )
        return config

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to ``revision`` (``alembic upgrade``); safe to repeat."""
        config = self.alembic_config()
        with self.engine.begin() as conn:
            if self.is_postgres:
                # Two daemons starting together must not both create the tables.
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(MIGRATE_LOCK)})
            config.attributes["connection"] = conn
            command.upgrade(config, revision)

    def downgrade(self, revision: str) -> None:
        config = self.alembic_config()
        with self.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, revision)

    def revision(self) -> str | None:
        """The schema revision the database is at; None before the first migration."""
        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def head(self) -> str | None:
        """The newest revision bundled with this code."""
        return ScriptDirectory.from_config(self.alembic_config()).get_current_head()

    def dispose(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({self.url.render_as_string(hide_password=True)!r})"


def store_reason(exc: SQLAlchemyError) -> str:
    """The driver's own first line (``database is locked``, ``connection refused``), without the SQL and
    SQLAlchemy's background link: what a person is shown of a store that failed."""
    orig = getattr(exc, "orig", None)
    first = (str(orig) if orig is not None else str(exc)).strip().splitlines()
    return first[0] if first else type(exc).__name__


def store_trouble(exc: SQLAlchemyError) -> str:
    """A store error as a log line, a health field or a held job's reason say it."""
    return f"the store: {store_reason(exc)}"


def parse_url(url: str) -> URL:
    """Parse a database URL; plain ``postgresql://`` means psycopg 3. Bad URLs are SettingsError."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise SettingsError(
            f"{url!r} is not a database URL: {exc}",
            fix="set GPUSCHED_DATABASE_URL to sqlite:///path/to.db or postgresql+psycopg://user@host/db",
        ) from None
    # psycopg 3 is the driver we ship for; plain postgresql:// would pick psycopg2.
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _postgres_session_utc(dbapi_connection: Any, _record: Any) -> None:
    # SQL-side time functions (date_trunc, ::date) then agree with the ledger's UTC months.
    cursor = dbapi_connection.cursor()
    cursor.execute("SET TIME ZONE 'UTC'")
    cursor.close()
    dbapi_connection.commit()


# --- small helpers used across the scheduler


def new_id(prefix: str, rng: random.Random | None = None) -> str:
    """``new_id("job")`` -> ``"job-3f9c0a1b2d4e"``; the same ``rng`` seed gives the same ids."""
    prefix = prefix.removesuffix("-")
    if not _ID_PREFIX_RE.match(prefix):
        raise ValueError(f"id prefix {prefix!r} must be a short lower-case word such as 'job' or 'inst'")
    bits = rng.getrandbits(48) if rng is not None else int.from_bytes(secrets.token_bytes(6), "big")
    return f"{prefix}-{bits:012x}"


def add_event(
    session: Session,
    at: datetime,
    kind: str,
    message: str,
    *,
    job_id: str | None = None,
    instance_id: str | None = None,
) -> EventRow:
    """Append one line to the audit trail (flushed with the caller's transaction)."""
    if len(kind) > 32:
        raise ValueError(f"event kind {kind!r} is longer than 32 characters")
    row = EventRow(at=utc(at), kind=kind, message=message, job_id=job_id, instance_id=instance_id)
    session.add(row)
    return row


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for PostgreSQL advisory locks (Python's hash() is salted)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


def advisory_lock(session: Session, name: str) -> bool:
    """Try to take the lock ``name`` until the session's transaction ends; never waits.

    PostgreSQL: ``pg_try_advisory_xact_lock``, so of several daemons on one
    database only one runs a tick at a time. SQLite: always True, because one
    file has one daemon and BEGIN IMMEDIATE already serialises writers.
    """
    if session.get_bind().dialect.name != "postgresql":
        return True
    got = session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": lock_key(name)}).scalar_one()
    return bool(got)
