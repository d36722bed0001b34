"""Why a job failed or was late, from its record: one row per cause, and the order of blame between causes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scheduler.simulation.outcomes import (
    REASONS,
    Attempt,
    Event,
    JobHistory,
    count_reasons,
    missed,
    outcome_of,
    why,
)

T0 = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)
DEADLINE = T0 + timedelta(hours=10)


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def ev(hours: float, kind: str, message: str = "") -> Event:
    return Event(h(hours), kind, message)


PREEMPTED = ev(2, "job_preempted", "spot-interruption on aws us-east-1a g4dn.xlarge; resumes from epoch 3")
SOLD_OUT = ev(0, "job_waiting", "waiting: every option that meets the deadline and budget is sold out (4); best ...")
NO_STOCK = ev(0, "launch_refused", "NoCapacity: no stock in this zone")
TEAM_WAIT = ev(0, "job_waiting", "team vision-qa has 0.00 CNY left of its 500.00 CNY monthly budget and ...")
DEADLINE_REFUSAL = ev(5, "job_refused", "fastest option (aws g5.xlarge) finishes 11-02 14:00, 3.0 h after the deadline")
BUDGET_REFUSAL = ev(5, "job_refused", "cheapest option costs 8.77 CNY plus 33.71 CNY already spent, over the "
                                      "40.00 CNY budget: raise policy.budget to at least 43 CNY")
ON_TIME_RUN = Attempt(1, "succeeded", h(0), h(4), 4.0)


def failed(*events: Event, preemptions: int = 0) -> JobHistory:
    return JobHistory("failed", DEADLINE, h(5), preemptions, events)


def late(*events: Event, attempts: tuple[Attempt, ...] = (ON_TIME_RUN,)) -> JobHistory:
    return JobHistory("succeeded", DEADLINE, h(12), 0, events, attempts)


CASES = [
    # (what happened, history, the bound's verdict, reason, words in the detail)
    ("restart budget", failed(PREEMPTED, ev(3, "job_preempted", "lost its machine 6 times (max_restarts 5)")),
     None, "restart_budget", "max_restarts 5"),
    ("refused after reclaims, deadline", failed(PREEMPTED, DEADLINE_REFUSAL), None, "preempted", "1 reclaim"),
    ("refused after reclaims, budget", failed(PREEMPTED, BUDGET_REFUSAL), None, "budget_exhausted", "already spent"),
    ("refused after waiting for stock", failed(SOLD_OUT, NO_STOCK, DEADLINE_REFUSAL), None, "stock_out",
     "1 launch(es) refused by the cloud and 1 wait(s)"),
    ("refused after waiting for the team's budget", failed(TEAM_WAIT, DEADLINE_REFUSAL), None, "team_budget",
     "monthly budget"),
    ("refused for the team's budget", failed(ev(0, "job_refused", "team x's monthly budget is 5 CNY and this job "
                                                                  "alone is expected to cost 9 CNY")),
     None, "team_budget", "monthly budget"),
    ("refused at once", failed(DEADLINE_REFUSAL), None, "refused", "after the deadline"),
    ("the job's own error", failed(ev(4, "job_finished", "failed exit 1: CUDA error")), None, "job_error", "CUDA"),
    ("failed with no event", failed(), None, "other", "no event"),
    ("infeasible beats everything", failed(PREEMPTED, DEADLINE_REFUSAL), "even uninterrupted the fastest ...",
     "infeasible", "even uninterrupted"),
    ("late after a reclaim", late(PREEMPTED), None, "preempted", "2.0 h after the deadline"),
    ("late, ran slow", late(attempts=(Attempt(1, "succeeded", h(1), h(12), 8.0),)), None, "slower_than_estimated",
     "ran 11.0 h against 8.0 h"),
    # Moved to on-demand when its own epochs showed it slow (a capacity move, not a reclaim): the second attempt
    # met its revised estimate, the run as a whole did not meet the first one's.
    ("late, ran slow, estimate revised", late(ev(1, "capacity_move", "spot -> on-demand: slack -2.59 h ..."),
                                              attempts=(Attempt(1, "preempted", h(0), h(1), 8.0),
                                                        Attempt(2, "succeeded", h(1.05), h(12), 11.0))),
     None, "slower_than_estimated", "attempt 1 estimated the run at 8.0 h; its attempts ran 11.9 h in all"),
    ("late after a stock-out, between attempts", late(SOLD_OUT, attempts=(
        Attempt(1, "preempted", h(0), h(1), 4.0), Attempt(2, "succeeded", h(9), h(12), 3.0))),
     None, "stock_out", "sold-out"),
    ("late after a stock-out", late(SOLD_OUT), None, "stock_out", "sold-out"),
    ("late after waiting for the team's budget", late(TEAM_WAIT), None, "team_budget", "2.0 h late"),
    ("late, nothing recorded", late(), None, "other", "2.0 h after"),
    ("unfinished", JobHistory("running", DEADLINE, None, 0, (PREEMPTED,)), None, "unfinished", "still running"),
    ("unfinished and infeasible", JobHistory("queued", DEADLINE, None), "over budget", "infeasible", "over budget"),
]


@pytest.mark.parametrize(("history", "infeasible", "reason", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_cause_is_read_from_the_record(history, infeasible, reason, words):
    cause = why(history, infeasible)
    assert cause is not None and cause.reason == reason
    assert reason in REASONS
    assert words in cause.detail


@pytest.mark.parametrize(("state", "finished", "outcome", "is_miss"), [
    ("succeeded", h(9), "on-time", False),
    ("succeeded", DEADLINE, "on-time", False),
    ("succeeded", h(11), "late", True),
    ("failed", h(3), "failed", True),
    ("cancelled", h(3), "cancelled", True),
    ("running", None, "unfinished", True),
    ("queued", None, "unfinished", True),
])
def test_outcomes_and_misses(state, finished, outcome, is_miss):
    assert outcome_of(state, DEADLINE, finished) == outcome
    assert missed(DEADLINE, outcome) is is_miss
    assert not missed(None, outcome)  # no deadline, no miss


def test_jobs_done_on_time_or_cancelled_need_no_explaining():
    assert why(JobHistory("succeeded", DEADLINE, h(9), 0, (PREEMPTED,))) is None
    assert why(JobHistory("succeeded", None, h(90))) is None
    assert why(JobHistory("cancelled", DEADLINE, h(3)), "infeasible anyway") is None


def test_reasons_are_counted_in_a_fixed_order_without_empty_ones():
    counts = count_reasons(["stock_out", "infeasible", "stock_out"])
    assert counts == {"infeasible": 1, "stock_out": 2}
    assert list(counts) == ["infeasible", "stock_out"]
    with pytest.raises(KeyError):
        count_reasons(["a reason nobody defined"])
