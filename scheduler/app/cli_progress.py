"""Progress bars for the commands that take a while (demo, report, trace generate; simulate has its own).

On stderr, and only when it is a terminal unless ``--progress`` / ``--no-progress`` says otherwise, so a
pipe or a log never gets the bar's redraws. A command that prints as it goes prints on ``Bar.console``:
above the bar when stdout is a terminal too (Rich draws both), straight to stdout when it is a pipe or a file.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console


def progress_option() -> Optional[bool]:
    return typer.Option(None, "--progress/--no-progress",
                        help="a progress bar on stderr [default: when stderr is a terminal]")


def wanted(flag: bool | None, err: Console) -> bool:
    return err.is_terminal if flag is None else flag


class Bar:
    """One task's bar: ``done`` of ``total`` steps and a line of status; nothing at all when disabled."""

    def __init__(self, err: Console, description: str, total: int, *, enabled: bool,
                 out: Console | None = None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=err,
                             disable=not enabled, refresh_per_second=4, transient=False)
        self._task = self._bar.add_task(description, total=total, status="")
        drawn = enabled and err.is_terminal
        # What the command prints meanwhile: through the bar's console when both go to the terminal (a line
        # written past Rich would land inside the bar), else where it was going.
        self.console = err if drawn and out is not None and out.is_terminal else (out or err)

    def __enter__(self) -> Bar:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def update(self, done: int, total: int | None = None, status: str = "") -> None:
        self._bar.update(self._task, completed=done, total=total, status=status)
