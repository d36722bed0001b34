"""How the command line prints: text from outside shown literally, and JSON for scripts (``--json``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.markup import escape

from scheduler.models import team_problem


def shown(value: object) -> str:
    """``value`` as Rich prints it literally: markup escaped, characters the terminal cannot encode as escapes."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return escape(text)


def print_json(data: Any) -> None:
    """``data`` as plain JSON on stdout (no colours, no wrapping): ``json.loads`` of it gives ``data`` back."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def team_option(team: str | None, option: str = "--team") -> str | None:
    """A team given as an option, checked here as a job file's team is, so that a typo is told by its option
    rather than by the daemon's 400 about a query or body field."""
    problem = None if team is None else team_problem(team)
    if problem:
        raise typer.BadParameter(problem, param_hint=f"'{option}'")
    return team
