"""Who may do what through the API: one small function per question, each answering None (allowed) or
the reason it is not, in words the caller can act on.

A caller is a ``Principal``: the name, role and teams of the token it sent. ``GPUSCHED_API_TOKEN`` is
the principal ``api-token``, an admin, while no personal admin token is live (``app/access.py``).

| role       | read jobs    | submit, cancel | tokens                                  | audit log    |
|------------|--------------|----------------|-----------------------------------------|--------------|
| admin      | every team   | every team     | all                                     | all          |
| team-admin | its teams    | its teams      | member and viewer tokens of its teams   | its teams    |
| member     | its teams    | its teams      | -                                       | -            |
| viewer     | its teams    | -              | -                                       | -            |
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.models import Frozen
from scheduler.store.tokens import Role, TokenInfo

SHARED_NAME = "api-token"
_WRITERS = (Role.admin, Role.team_admin, Role.member)
# What a team-admin may hand out: never a role that could hand out more.
_TEAM_ADMIN_GIVES = (Role.member, Role.viewer)


class Principal(Frozen):
    name: str
    role: Role
    teams: tuple[str, ...]
    token_id: str | None  # None: GPUSCHED_API_TOKEN

    @property
    def is_admin(self) -> bool:
        return self.role is Role.admin

    def default_team(self) -> str | None:
        """The team a job file without ``team:`` is for: the token's only team (None: it has none, or several)."""
        return self.teams[0] if len(self.teams) == 1 else None

    def label(self) -> str:
        return f"{self.name} ({self.role.value}" + (f", teams {', '.join(self.teams)})" if self.teams else ")")


SHARED = Principal(name=SHARED_NAME, role=Role.admin, teams=(), token_id=None)


def _teams(p: Principal) -> str:
    if not p.teams:
        return "no team"
    return ("team " if len(p.teams) == 1 else "teams ") + ", ".join(p.teams)


def may_read(p: Principal, team: str) -> str | None:
    if p.is_admin or team in p.teams:
        return None
    return f"{p.name} reads only the jobs of {_teams(p)}, not team {team}'s"


def may_write(p: Principal) -> str | None:
    """Whether the role may change jobs at all (submit, cancel), whatever the team."""
    if p.role in _WRITERS:
        return None
    return f"{p.name} is a {p.role.value}: it reads jobs, it cannot submit or cancel them"


def may_act_for(p: Principal, team: str) -> str | None:
    """Submit for, or cancel a job of, ``team``."""
    refused = may_write(p)
    if refused is not None or p.is_admin or team in p.teams:
        return refused
    return f"{p.name} acts for {_teams(p)}, not for team {team}"


def may_issue(p: Principal, role: Role, teams: Sequence[str]) -> str | None:
    if p.is_admin:
        return None
    if p.role is not Role.team_admin:
        return f"{p.name} is a {p.role.value}: only an admin or a team-admin makes tokens"
    if role not in _TEAM_ADMIN_GIVES:
        return f"a team-admin makes member and viewer tokens only, not {role.value} tokens"
    outside = [t for t in teams if t not in p.teams]
    if outside or not teams:
        return f"{p.name} makes tokens for {_teams(p)} only" + (f", not for {', '.join(outside)}" if outside else "")
    return None


def may_see_token(p: Principal, token: TokenInfo) -> bool:
    """A team-admin sees the member and viewer tokens of its own teams; an admin sees all."""
    if p.is_admin:
        return True
    return (p.role is Role.team_admin and token.role in _TEAM_ADMIN_GIVES and bool(token.teams)
            and all(t in p.teams for t in token.teams))


def may_manage_tokens(p: Principal) -> str | None:
    if p.is_admin or p.role is Role.team_admin:
        return None
    return f"{p.name} is a {p.role.value}: only an admin or a team-admin lists and revokes tokens"


def may_revoke(p: Principal, token: TokenInfo) -> str | None:
    refused = may_manage_tokens(p)
    if refused is not None or may_see_token(p, token):
        return refused
    return f"{p.name} revokes member and viewer tokens of {_teams(p)} only; {token.id} is a {token.role.value} " \
           f"token of {', '.join(token.teams) or 'no team'}"


def audit_scope(p: Principal, team: str | None) -> tuple[tuple[str, ...] | None, str | None]:
    """The teams whose audit rows ``p`` may read (None: all), or why it may read none of those asked for."""
    if p.is_admin:
        return ((team,) if team else None), None
    if p.role is not Role.team_admin:
        return (), f"{p.name} is a {p.role.value}: only an admin or a team-admin reads the audit log"
    if team is not None and team not in p.teams:
        return (), f"{p.name} reads the audit log of {_teams(p)} only, not of team {team}"
    return ((team,) if team else p.teams), None
