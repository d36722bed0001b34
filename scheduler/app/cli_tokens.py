"""``gpusched token ...`` and ``gpusched audit``: people's and services' tokens, and the audit log, through
the daemon's API (``app/access.py``). Registered on the root command by ``cli.py``, whose error handling
turns every failure here into one line and an exit status.

``token create`` prints the token alone on stdout, so a script can take it
(``TOKEN=$(gpusched token create --team vision --role member --name ci)``); what was made goes to stderr.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scheduler.app.cli_text import team_option

if TYPE_CHECKING:
    from pydantic import ValidationError

    from scheduler.app.client import ApiClient

token_app = typer.Typer(help="API tokens of people and services: roles, teams, expiry.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

ROLES = ("member", "team-admin", "viewer", "admin")
_DURATION_RE = re.compile(r"^\s*(\d{1,5})\s*([hdw])\s*$")
_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def _shown(value: object) -> str:
    return escape(str(value).encode("utf-8", "backslashreplace").decode("utf-8"))


def _client() -> ApiClient:
    from scheduler.app.client import ApiClient
    from scheduler.settings import load_settings

    settings = load_settings()
    token = settings.api_token.get_secret_value() if settings.api_token else None
    return ApiClient(settings.base_url, token)


def duration_seconds(text: str, option: str) -> int:
    """``12h``, ``30d``, ``2w`` in seconds."""
    match = _DURATION_RE.match(text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a duration; e.g. 12h, 30d or 2w", param_hint=f"'{option}'")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _since(text: str) -> datetime:
    """``--since``: a duration back from now (``7d``) or an ISO 8601 time (no offset: UTC)."""
    if _DURATION_RE.match(text):
        from scheduler.clock import SystemClock

        return SystemClock().now() - timedelta(seconds=duration_seconds(text, "--since"))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is neither a duration (7d) nor an ISO 8601 time "
                                 "(2026-11-01T00:00:00+08:00)", param_hint="'--since'") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at else "never"


@token_app.command("create")
def token_create(
    team: Optional[list[str]] = typer.Option(None, "--team", help="a team the token acts for (repeat for several; "
                                             "an admin token needs none)"),
    role: str = typer.Option("member", help="member | team-admin | viewer | admin"),
    name: Optional[str] = typer.Option(None, help="the person or service it is for, as jobs and the audit log "
                                       "name it (default: TEAM-ROLE)"),
    expires: str = typer.Option("90d", help="how long it lives: 12h, 30d, 2w ... or never"),
) -> None:
    """Make a token and print it, alone, on stdout (it is shown once: the daemon keeps only its hash)."""
    if role not in ROLES:
        raise typer.BadParameter(f"{role!r} is not a role; use one of: {', '.join(ROLES)}", param_hint="'--role'")
    from pydantic import ValidationError

    from scheduler.store.tokens import TokenRequest

    teams = list(team or [])
    seconds = None if expires.strip().lower() == "never" else duration_seconds(expires, "--expires")
    if name is None:
        name = f"{teams[0]}-{role}" if teams else role
    try:  # the API's own body model: what it would refuse is told here by its option
        TokenRequest.model_validate({"name": name, "role": role, "teams": teams, "expires_in_seconds": seconds})
    except ValidationError as exc:
        raise _option_problem(exc, teams, name, expires, seconds) from None
    with _client() as client:
        made = client.create_token(name=name, role=role, teams=teams, expires_in_seconds=seconds)
    sys.stdout.write(made.token + "\n")
    err.print(f"made {_shown(made.id)} for {_shown(made.name)}: {made.role.value}, "
              f"teams {_shown(', '.join(made.teams) or 'all')}, expires {_when(made.expires_at)}. "
              "It is not shown again.", highlight=False, soft_wrap=True)


def _option_problem(exc: ValidationError, teams: list[str], name: str, expires: str,
                    seconds: int | None) -> typer.BadParameter:
    """``token create``'s option at fault in ``TokenRequest``'s refusal, in words: a team first (a bad team makes
    the default name bad too), then the name, then the lifetime."""
    from scheduler.models import MAX_NAME_CHARS, team_problem
    from scheduler.store.tokens import MAX_EXPIRY_SECONDS, MAX_TOKEN_TEAMS

    faults = {str(e["loc"][0]): e["loc"][1:] for e in reversed(exc.errors())}
    if "teams" in faults:
        at = faults["teams"]
        problem = team_problem(teams[int(at[0])]) if at else f"at most {MAX_TOKEN_TEAMS} teams a token"
        return typer.BadParameter(problem or "", param_hint="'--team'")
    if "name" in faults:
        return typer.BadParameter(f"{name!r} is not a token's name: letters, digits, '.', '_', '@', '+' and '-', "
                                  f"starting with a letter or digit, at most {MAX_NAME_CHARS} characters",
                                  param_hint="'--name'")
    longest = MAX_EXPIRY_SECONDS // 86400
    return typer.BadParameter(f"{expires.strip()!r} is {'no time' if not seconds else 'too long'}: a token lives "
                              f"1h to {longest}d (about {longest // 366} years), or never", param_hint="'--expires'")


@token_app.command("list")
def token_list(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """The tokens you may manage (an admin: all), with their state; never their secrets."""
    with _client() as client:
        found = client.list_tokens()
    if as_json:
        sys.stdout.write(json.dumps([t.model_dump(mode="json") for t in found], indent=2) + "\n")
        return
    table = Table(title=f"{len(found)} token(s)")
    for col in ("id", "name", "role", "teams", "state", "expires", "made by"):
        table.add_column(col, overflow="fold")
    for t in found:
        style = "" if t.state == "live" else "dim"
        table.add_row(*(_shown(v) for v in (t.id, t.name, t.role.value, ", ".join(t.teams) or "all", t.state,
                                             _when(t.expires_at), t.created_by)), style=style)
    out.print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: str = typer.Argument(..., help="the token's id (tok-...), as `gpusched token list` shows"),
) -> None:
    """Revoke a token: the daemon refuses it (401) from now on."""
    with _client() as client:
        t = client.revoke_token(token_id)
    out.print(f"{_shown(t.id)} ({_shown(t.name)}): revoked", highlight=False)


@token_app.command("whoami")
def token_whoami() -> None:
    """The name, role and teams of the token this shell sends (GPUSCHED_API_TOKEN)."""
    with _client() as client:
        me = client.whoami()
    teams = ", ".join(me.teams) or "every team"
    out.print(f"{_shown(me.name)}: {me.role.value} of {_shown(teams)}", highlight=False)


def audit(
    since: Optional[str] = typer.Option(None, help="from this time on: 7d, 12h (back from now) or an ISO 8601 time"),
    team: Optional[str] = typer.Option(None, help="only entries about this team"),
    limit: int = typer.Option(1000, min=1, max=10_000, help="at most this many (the newest)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """The audit log: who changed what, when, from where, and every refused call (admin; team-admin: its teams)."""
    with _client() as client:
        entries = client.audit(since=_since(since) if since else None, team=team_option(team), limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([e.model_dump(mode="json") for e in entries], indent=2) + "\n")
        return
    table = Table(title=f"{len(entries)} audit entr{'y' if len(entries) == 1 else 'ies'}")
    for col in ("at (UTC)", "who", "action", "target", "team", "from", "outcome", "detail"):
        table.add_column(col, overflow="fold")
    for e in entries:
        who = e.actor + (f" ({e.role})" if e.role else "")
        outcome = e.outcome if e.outcome == "allowed" else f"[red]{e.outcome} {e.status}[/red]"
        table.add_row(f"{e.at:%Y-%m-%d %H:%M:%S}", *(_shown(v) for v in (who, e.action, e.target or "",
                                                                          e.team or "", e.client or "")),
                      outcome, _shown(e.detail))
    out.print(table)


def register(app: typer.Typer) -> None:
    """Add ``token`` and ``audit`` to the root command."""
    app.add_typer(token_app, name="token")
    app.command("audit")(audit)
