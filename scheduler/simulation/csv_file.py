"""A simulation's per-job listings (``--explain``, ``--gaps``) as CSV: one row per dataclass, its fields the columns."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scheduler.errors import UserError


def write_rows(path: Path, columns: Sequence[str], items: Iterable[Any],
               cell: Callable[[Any], Any] = lambda value: value) -> None:
    """Each dataclass in ``items`` as a row of ``columns``, every value through ``cell`` (dates, None)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            for item in items:
                w.writerow({key: cell(value) for key, value in asdict(item).items()})
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}", fix="check the path") from None
