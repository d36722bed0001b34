"""How each simulated job ended, and why a failed or late one did: read from what the lifecycle wrote.

Nothing here is guessed from the policy or re-simulated: the cause of a failure or a miss comes
from the job's own record (its state, deadline and finish time), the events the tick and the
agents' reports wrote for it (``job_preempted``, ``job_refused``, ``launch_refused``,
``job_waiting``, ``job_finished``) and its attempts (estimated against actual hours), with one
verdict from outside: the lower bound's, for jobs that no schedule could finish in time.

The order of the rules is the order of blame. A job the bound calls infeasible is infeasible,
whatever else went wrong. A failure is what ended the job (the reclaim past ``max_restarts``,
the planner's refusal, the job's own error), and a refusal is blamed on what left the planner
nothing: reclaims before it, else clouds that had no capacity, else the team's monthly budget,
else the planner's own margins. A job that launched met its deadline on the planner's estimate
when it launched (the planner launches nothing else but a job already late, which it finishes
on on-demand), so a late finish is blamed on reclaims, else on the job running slower than
estimated (an attempt slower than its own estimate, or the job slower than the first attempt's when
later attempts were planned on a revised one), else on the waits before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

Outcome = Literal["on-time", "late", "failed", "unfinished", "cancelled"]

# Every cause, as the summary counts it and the per-job listing names it.
REASONS: dict[str, str] = {
    "infeasible": "infeasible from submission: no schedule meets the deadline and budget",
    "restart_budget": "restart budget exhausted: lost its machine without progress more than max_restarts times "
                      "in a row",
    "preempted": "preempted too late to finish: reclaims left too little time",
    "budget_exhausted": "budget exhausted: interrupted attempts spent it",
    "stock_out": "stock-out: the clouds had no capacity for it in time",
    "team_budget": "team's monthly budget: it waited or was refused for budget",
    "refused": "refused by the planner at submission (its margins or estimate)",
    "slower_than_estimated": "ran slower than estimated",
    "job_error": "the job itself failed on its machine",
    "unfinished": "unfinished when the simulation ended",
    "other": "no cause recorded",
}
# Events that end a job.
_ENDING = frozenset({"job_refused", "job_preempted", "job_finished"})
_SLOWER = 1.01  # an attempt this much longer than its estimate ran slow (not rounding)


@dataclass(frozen=True, slots=True)
class Event:
    at: datetime
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    est_hours: float | None


@dataclass(frozen=True, slots=True)
class JobHistory:
    """One job's record at the end of a run: what ``why`` reads."""

    state: str
    deadline_at: datetime | None
    finished_at: datetime | None
    preemptions: int = 0
    events: tuple[Event, ...] = ()  # in the order written
    attempts: tuple[Attempt, ...] = ()  # by number


@dataclass(frozen=True, slots=True)
class Cause:
    reason: str  # a key of REASONS
    detail: str  # what the record says, in words


def outcome_of(state: str, deadline_at: datetime | None, finished_at: datetime | None) -> Outcome:
    if state == "succeeded":
        late = deadline_at is not None and (finished_at is None or finished_at > deadline_at)
        return "late" if late else "on-time"
    if state in ("failed", "cancelled"):
        return state  # type: ignore[return-value]
    return "unfinished"


def missed(deadline_at: datetime | None, outcome: Outcome) -> bool:
    """A deadline miss, as the summary has always counted one: a job with a deadline not done on time."""
    return deadline_at is not None and outcome != "on-time"


def why(h: JobHistory, infeasible: str | None = None) -> Cause | None:
    """Why the job failed, finished late or never finished; None for a job done on time or cancelled.

    ``infeasible``: the lower bound's word that nothing could run the job in time and on budget.
    """
    outcome = outcome_of(h.state, h.deadline_at, h.finished_at)
    if outcome in ("on-time", "cancelled"):
        return None
    if infeasible is not None:
        return Cause("infeasible", infeasible)
    if outcome == "unfinished":
        return Cause("unfinished", f"still {h.state}")
    reclaims = [e for e in h.events if e.kind == "job_preempted"]
    stock = [e for e in h.events if e.kind == "launch_refused"
             or (e.kind == "job_waiting" and _is_stock(e.message))]
    team = [e for e in h.events if e.kind in ("job_waiting", "job_refused") and _is_team_budget(e.message)]
    if outcome == "failed":
        return _why_failed(h, reclaims, stock, team)
    late_by = _hours(h.finished_at - h.deadline_at) if h.finished_at and h.deadline_at else "?"
    if reclaims:
        return Cause("preempted", f"{len(reclaims)} reclaim(s); finished {late_by} after the deadline")
    slow = _slowest(h.attempts)
    if slow is not None:
        return Cause("slower_than_estimated", f"attempt {slow[0]} ran {slow[1]:.1f} h against "
                                              f"{slow[2]:.1f} h estimated; finished {late_by} late")
    first = _slower_than_first(h)
    if first is not None:
        number, took, est = first
        return Cause("slower_than_estimated", f"attempt {number} estimated the run at {est:.1f} h; its attempts "
                                              f"ran {took:.1f} h in all (the estimate revised on the way); "
                                              f"finished {late_by} late")
    if stock:
        return Cause("stock_out", f"{_stock_words(stock)}; finished {late_by} late")
    if team:
        return Cause("team_budget", f"{team[-1].message}; finished {late_by} late")
    return Cause("other", f"finished {late_by} after the deadline")


def _why_failed(h: JobHistory, reclaims: list[Event], stock: list[Event], team: list[Event]) -> Cause:
    ending = next((e for e in reversed(h.events) if e.kind in _ENDING), None)
    if ending is None:
        return Cause("other", "failed with no event saying why")
    if ending.kind == "job_preempted":
        return Cause("restart_budget", ending.message)
    if ending.kind == "job_finished":
        return Cause("job_error", ending.message)
    refusal = ending.message
    if _is_team_budget(refusal):
        return Cause("team_budget", refusal)
    if reclaims:
        reason = "budget_exhausted" if _is_budget(refusal) else "preempted"
        return Cause(reason, f"{len(reclaims)} reclaim(s), then refused: {refusal}")
    if stock:
        return Cause("stock_out", f"{_stock_words(stock)}, then refused: {refusal}")
    if team:
        return Cause("team_budget", f"{team[-1].message}, then refused: {refusal}")
    return Cause("refused", refusal)


def _is_stock(message: str) -> bool:
    # The planner's wait reasons (plan._wait_reason) for capacity the clouds did not have.
    return "sold out" in message or "out of capacity" in message


def _is_team_budget(message: str) -> bool:
    return "monthly budget" in message


def _is_budget(message: str) -> bool:
    # The planner's budget refusal (plan._budget_refusal): "... costs X, over the Y budget: ...".
    return "budget" in message and "over the" in message


def _stock_words(stock: list[Event]) -> str:
    refused = sum(e.kind == "launch_refused" for e in stock)
    waits = len(stock) - refused
    parts = ([f"{refused} launch(es) refused by the cloud"] if refused else []) + \
            ([f"{waits} wait(s) for sold-out capacity"] if waits else [])
    return " and ".join(parts)


def _slowest(attempts: Sequence[Attempt]) -> tuple[int, float, float] | None:
    """The finished attempt that ran longest past its estimate: (number, hours run, hours estimated)."""
    worst = None
    for a in attempts:
        if a.started_at is None or a.ended_at is None or not a.est_hours or a.state != "succeeded":
            continue
        ran = (a.ended_at - a.started_at).total_seconds() / 3600
        if ran > a.est_hours * _SLOWER and (worst is None or ran / a.est_hours > worst[1] / worst[2]):
            worst = (a.number, ran, a.est_hours)
    return worst


def _slower_than_first(h: JobHistory) -> tuple[int, float, float] | None:
    """The job's attempts together ran longer than the first one estimated for the whole run: (the first's
    number, hours run in all, hours it estimated). Catches a job whose estimate was revised on the way, as
    when steering moves it because its own epochs run slow: the later attempts then meet their revised
    estimates. Hours run, not the wall time since: waits between attempts are not slowness."""
    ran = [a for a in h.attempts if a.started_at is not None and a.ended_at is not None]
    if not ran or not ran[0].est_hours:
        return None
    took = sum((a.ended_at - a.started_at).total_seconds() for a in ran) / 3600  # type: ignore[operator]
    return (ran[0].number, took, ran[0].est_hours) if took > ran[0].est_hours * _SLOWER else None


def _hours(d: timedelta) -> str:
    h = d.total_seconds() / 3600
    return f"{h:.1f} h" if h >= 0.1 else f"{d.total_seconds() / 60:.0f} min"


def count_reasons(reasons: Iterable[str]) -> dict[str, int]:
    """How many jobs had each reason, in the order of ``REASONS`` (reasons nobody had are left out)."""
    counts = {r: 0 for r in REASONS}
    for r in reasons:
        counts[r] += 1
    return {r: n for r, n in counts.items() if n}
