"""Start-up checks shared by the daemon and the CLI: the data folder and the store, each failing with one line.

A daemon that cannot write its data folder or read its database should say so before it serves anything,
in words a user can act on ("the data folder .gpusched is a file"), not with the driver's traceback.
Each check raises ``SettingsError`` (the setting is wrong) or ``StoreUnavailable`` (the database is down,
refused or damaged); the CLI turns both into one line and an exit status.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from alembic.util import CommandError
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError, OperationalError, SQLAlchemyError

from scheduler.errors import SettingsError, StoreUnavailable
from scheduler.settings import Settings
from scheduler.store.database import Store, parse_url, store_reason

DATA_DIR_FIX = "set GPUSCHED_DATA_DIR to a folder this user can write (it is created if missing)"


def prepare_data_dir(settings: Settings) -> Path:
    """The data folder, created if missing; SettingsError if it is a file or cannot be written."""
    return _writable_folder(settings.data_dir, "the data folder", "GPUSCHED_DATA_DIR", DATA_DIR_FIX)


def prepare_report_dir(settings: Settings) -> Path:
    """The monthly reports' folder, checked at the daemon's start: one that cannot be written was found only
    when the month's report failed, on the 1st."""
    fix = "set GPUSCHED_REPORT_DIR to a folder this user can write, or leave it empty for <GPUSCHED_DATA_DIR>/reports"
    return _writable_folder(settings.reports_path, "the reports folder", "GPUSCHED_REPORT_DIR", fix)


def _writable_folder(folder: Path, what: str, setting: str, fix: str) -> Path:
    if folder.exists() and not folder.is_dir():
        raise SettingsError(f"{what} {folder} ({setting}) is a file, not a folder", fix=fix)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass  # what the daemon keeps is written here
    except OSError as exc:
        raise SettingsError(f"{what} {folder} ({setting}) cannot be written: {exc.strerror or type(exc).__name__}",
                            fix=fix) from None
    return folder


def open_store(settings: Settings, *, check: bool = False) -> Store:
    """The store at ``settings.db_url``, migrated to the newest schema.

    ``check`` (the daemon's start) also asks SQLite to verify the file (``PRAGMA quick_check``), so a
    truncated or damaged store is refused at start rather than failing a tick later.
    """
    prepare_data_dir(settings)
    where = parse_url(settings.db_url).render_as_string(hide_password=True)
    store = Store(settings.db_url)
    try:
        store.migrate()
        if check and store.is_sqlite:
            with store.engine.connect() as conn:
                verdict = [row[0] for row in conn.execute(text("PRAGMA quick_check"))]
            if verdict != ["ok"]:
                raise StoreUnavailable(f"the store {where} is damaged (SQLite: {'; '.join(verdict[:3])})",
                                       fix=_DAMAGED_FIX)
    except StoreUnavailable:
        store.dispose()
        raise
    except OperationalError as exc:
        store.dispose()
        raise StoreUnavailable(f"cannot open the store {where}: {store_reason(exc)}",
                               fix=store_fix(store, exc)) from None
    except DatabaseError as exc:  # SQLite: "file is not a database", "database disk image is malformed"
        store.dispose()
        raise StoreUnavailable(f"the store {where} is not a sound gpusched database: {store_reason(exc)}",
                               fix=_DAMAGED_FIX) from None
    except CommandError as exc:  # alembic: a revision this code does not know (a newer gpusched wrote it)
        store.dispose()
        raise StoreUnavailable(f"the store {where} has a schema this gpusched does not know: {exc}",
                               fix="run the gpusched version that wrote it, or upgrade gpusched") from None
    except SQLAlchemyError as exc:
        store.dispose()
        raise StoreUnavailable(f"cannot use the store {where}: {store_reason(exc)}",
                               fix=store_fix(store, exc)) from None
    return store


_DAMAGED_FIX = ("restore it from a backup, or move the file aside and run `gpusched db upgrade` "
                "to start an empty store")


def store_fix(store: Store, exc: SQLAlchemyError) -> str:
    """What to do about a store that could not be opened or used: at start, or in a daemon's tick."""
    reason = store_reason(exc)
    if store.is_sqlite and "locked" in reason:
        return ("another program holds the SQLite file's write lock (an open transaction in a sqlite3 shell, a "
                "backup tool, or a second daemon on the same file): close it, and gpusched goes on; for several "
                "daemons use PostgreSQL (GPUSCHED_DATABASE_URL)")
    if store.is_sqlite and ("full" in reason or "disk I/O" in reason):
        database = store.url.database or ""
        folder = Path(database).expanduser().parent if database and not database.startswith(("file:", ":")) else None
        free = shutil.disk_usage(folder).free if folder is not None and folder.is_dir() else None
        room = f" ({free // 1024:,} KiB free)" if free is not None else ""
        return (f"free space on the disk that holds the store{room}, or move GPUSCHED_DATA_DIR to a larger one; "
                "gpusched goes on once SQLite can write")
    if store.is_sqlite:
        return "check that the SQLite file and its folder can be read and written (GPUSCHED_DATA_DIR)"
    return ("start PostgreSQL or correct GPUSCHED_DATABASE_URL (host, port, user, database); "
            "`pg_isready -h HOST -p PORT` tells whether it accepts connections")
