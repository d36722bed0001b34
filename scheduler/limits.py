"""The bounds on what a job may say, defined once: the job file's validator, the HTTP API and the CLI
all refuse with these words.

Why bounds at all: one job with a budget of ``1e999999999`` or a deadline ``999999999d`` away used to
be accepted, and then every tick (every team's scheduling) failed on it. A value outside these
bounds is a typo or an attack, never a real job, so it is refused where it enters.

=====================  ==========================  ===============================================
what                   bound                       why
=====================  ==========================  ===============================================
job file size          64 KiB                      a job file is a few hundred bytes
nesting depth          12 levels                   a job file needs 3
values in a file       5,000 (keys, items, ...)    a job file has a few dozen
text value             1,024 characters            the longest object-store key
list                   64 items
whole numbers          18 digits                   every count has a smaller bound of its own
budget                 > 0 and <= 1,000,000        in the job's currency (CNY or USD);
                       8 decimal places            the store keeps 8
relative deadline      <= 366 days ("8784h")
absolute deadline      <= 366 days after submit;   and always between 2000 and 2200, so every time
                       years 2000-2200             computed from it fits the clock
a trace's submissions  years 2000-2200;            the simulator steps through the quiet hours
                       a span of <= 366 days       between them too: years would take hours
a job's estimated run  <= 366 days on a setup      a longer one is no option: 10,000 epochs of 100
                       (one GPU model, count,      million images at 2048 px planned a finish past
                       nodes)                      the clock's last year
a reservation's count  <= 1,000 machines           the planner holds a slot per free machine, every
                       (``GPUSCHED_RESERVED``)     tick: a typo's billion stopped the daemon
=====================  ==========================  ===============================================
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

__all__ = [
    "EARLIEST_TIME", "LATEST_TIME", "MAX_BUDGET", "MAX_BUDGET_PLACES", "MAX_DEADLINE_AHEAD", "MAX_DEPTH",
    "MAX_FILE_BYTES", "MAX_INT_DIGITS", "MAX_LIST_ITEMS", "MAX_NODES", "MAX_RESERVED_COUNT", "MAX_RUN",
    "MAX_RUN_HOURS", "MAX_TEXT_CHARS",
    "budget_problem", "deadline_time_problem", "duration_problem", "run_too_long",
]

MAX_FILE_BYTES = 64 * 1024
MAX_DEPTH = 12
MAX_NODES = 5_000
MAX_TEXT_CHARS = 1024
MAX_LIST_ITEMS = 64
MAX_INT_DIGITS = 18
MAX_BUDGET = Decimal(1_000_000)
MAX_BUDGET_PLACES = 8
MAX_DEADLINE_AHEAD = timedelta(days=366)
MAX_RESERVED_COUNT = 1_000
MAX_RUN = timedelta(days=366)
MAX_RUN_HOURS = MAX_RUN.total_seconds() / 3600  # what an estimate's hours are compared with, on hot paths
EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)
LATEST_TIME = datetime(2200, 1, 1, tzinfo=timezone.utc)


def budget_problem(amount: Decimal, currency: str) -> str | None:
    """Why ``amount`` cannot be a job's budget, or None."""
    if not amount.is_finite():
        return f"{amount} is not a number of {currency}"
    if amount <= 0:
        return "must be more than zero; omit it for no budget"
    if amount > MAX_BUDGET:
        return (f"must be at most {MAX_BUDGET:,} {currency} per job, not {_short(amount)}; "
                "a larger budget is almost certainly a typo")
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > MAX_BUDGET_PLACES:
        return f"may have at most {MAX_BUDGET_PLACES} decimal places"
    return None


def duration_problem(days: str, hours: str, minutes: str) -> str | None:
    """Why a relative deadline of these digit strings is too long, or None (checked before any arithmetic)."""
    if any(len(part) > 9 for part in (days, hours, minutes)):
        return f"is too long: a deadline may be at most {MAX_DEADLINE_AHEAD.days} days after submission"
    total = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0))
    if total > MAX_DEADLINE_AHEAD:
        return (f"is {total.days} days away; a deadline may be at most {MAX_DEADLINE_AHEAD.days} days "
                "after submission")
    return None


def deadline_time_problem(when: datetime) -> str | None:
    """Why an absolute deadline is outside the times gpusched computes with, or None.

    Checked on the written fields first: converting year 9999 with a negative offset to UTC overflows.
    """
    if not EARLIEST_TIME.year <= when.year < LATEST_TIME.year:
        return (f"the year {when.year} is outside {EARLIEST_TIME.year}-{LATEST_TIME.year - 1}; a deadline may be "
                f"at most {MAX_DEADLINE_AHEAD.days} days after submission")
    return None


def run_too_long(hours: float, gpu: str, gpu_count: int, nodes: int = 1) -> str:
    """Why an estimated run of ``hours`` (over ``MAX_RUN_HOURS``: the caller compares) on this setup is no option:
    the planner's and the lower bound's words."""
    setup = f"{gpu_count}x {gpu}" + (f" x {nodes} nodes" if nodes > 1 else "")
    return f"would run ~{hours / 24:,.0f} days on {setup}; a job may run at most {MAX_RUN.days} days"


def _short(amount: Decimal) -> str:
    text = str(amount)
    return text if len(text) <= 24 else f"{amount:.3E}"
