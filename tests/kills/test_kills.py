"""Crash safety, tested: the daemon SIGKILLed at the points that matter, then the clouds compared with the store.

The SQLite campaign (GPUSCHED_KILLS kills, default 200) is judged invariant by invariant, then its
billed hours are compared with a run of the same jobs without kills. A smaller campaign runs on
PostgreSQL, one starts the installed ``gpusched`` script for every life instead of forking it, and one
plants the bug docs/reliability.md names (a random client token per launch call): the same checks
must catch it, or they prove nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from providers.base import TAG_INSTANCE, TAG_MANAGED, InstanceState
from tests.kills.campaign import KINDS, TARGETED, Campaign, Outcome, Plan
from tests.kills.conftest import FAULT_SHARE, KILLS, SEED
from tests.kills.invariants import JobView, RowView, StoreView, check
from tests.kills.world import CloudInstance

MAX_BILLED_RATIO = 1.5  # billed hours with kills / without: the margin this tier holds the daemon to
S = InstanceState


def describe(out: Outcome, label: str) -> list[str]:
    kinds = ", ".join(f"{kind} {n}" for kind, n in out.kills_by_kind().items())
    f, ev = out.findings, out.store.events
    return [
        f"{label}: {len(out.kills)} kills in {out.wall_s:.0f} s over {out.lives} daemon lives ({kinds}; "
        f"{out.fallbacks()} of the random ones were meant for a call that did not come in time)",
        f"{label}: {len(out.submitted)} jobs ({_states(out)}), {len(_launched(out))} instances launched, "
        f"{out.orphans_planted} tagged orphans and {out.foreign_planted} foreign machines planted",
        f"{label}: paths taken: {_deduped(out)} launches re-sent and answered with the instance their token "
        f"had made, {ev.get('instance_found', 0)} instances found by their tags, {ev.get('orphan_terminated', 0)} "
        f"orphans terminated by the sweep, {ev.get('instance_leaving', 0)} unrecorded stops or terminates "
        f"found in progress, {ev.get('job_preempted', 0)} jobs requeued after losing their machine, "
        f"{ev.get('job_reused_instance', 0)} warm machines reused",
        f"{label}: leaked {len(f.leaked)}, double launches {len(f.doubled)}, unowned {len(f.unowned)}, "
        f"lost {len(f.lost)}, stuck {len(f.stuck)}, failed without reason {len(f.unexplained)}, "
        f"foreign touched {len(f.foreign_touched)}, orphans left {len(f.orphans_left)}, "
        f"rows astray {len(f.rows_astray)}; billed {out.billed_hours:.2f} h",
        f"{label}: a daemon life served its API {_spread(out.serving_after)} after its start ({out.plan.mode} mode)",
    ]


def _spread(seconds: list[float]) -> str:
    if not seconds:
        return "(never asked)"
    ordered = sorted(seconds)
    return f"{ordered[len(ordered) // 2]:.2f} s (median; max {ordered[-1]:.2f} s, {len(ordered)} lives)"


def _states(out: Outcome) -> str:
    counts: dict[str, int] = {}
    for job in out.store.jobs.values():
        counts[job.state] = counts.get(job.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def _deduped(out: Outcome) -> int:
    """Launch calls the clouds answered with an instance they had already made for that token."""
    return out.launches_answered - len(_launched(out))


def _launched(out: Outcome) -> list[CloudInstance]:
    return [i for i in out.instances
            if i.tags.get(TAG_MANAGED) == "kills" and not i.client_token.startswith("planted")]


def _run(plan: Plan, label: str, measures: list[str]) -> Outcome:
    out = Campaign(plan).run()
    measures.extend(describe(out, label))
    return out


@pytest.fixture(scope="module")
def sqlite_campaign(tmp_path_factory: pytest.TempPathFactory, measures: list[str]) -> Outcome:
    plan = Plan(kills=KILLS, seed=SEED, folder=tmp_path_factory.mktemp("kills-sqlite"), fault_share=FAULT_SHARE)
    return _run(plan, "SQLite", measures)


@pytest.fixture(scope="module")
def no_kill_run(sqlite_campaign: Outcome, tmp_path_factory: pytest.TempPathFactory,
                measures: list[str]) -> Outcome:
    """The same jobs, all submitted at once to a daemon nobody kills, on fresh clouds and a fresh store."""
    plan = Plan(kills=0, seed=SEED, folder=tmp_path_factory.mktemp("kills-none"), fault_share=FAULT_SHARE,
                jobs_upfront=sqlite_campaign.specs, orphan_every=0, foreign=False)
    return _run(plan, "no kills", measures)


# --- the SQLite campaign ------------------------------------------------------------------------------


def test_the_daemon_was_killed_at_every_point_that_matters(sqlite_campaign: Outcome) -> None:
    out = sqlite_campaign
    assert len(out.kills) == KILLS
    assert out.unexpected_exits == []
    by_kind = out.kills_by_kind()
    if KILLS >= 40:  # enough draws that every kind comes up, most of them many times
        for kind in TARGETED:
            assert by_kind[kind] >= KILLS // 20, by_kind
        assert by_kind["random"] >= KILLS // 20, by_kind
    assert all(k.kind in KINDS for k in out.kills)
    clouds = {k.cloud for k in out.kills if k.cloud}
    assert clouds == {"alibaba", "tencent"} or KILLS < 40, clouds
    assert out.orphans_planted >= 1 and out.foreign_planted == 4


def test_the_recovery_paths_that_matter_ran(sqlite_campaign: Outcome) -> None:
    """Kills after the cloud made an instance end in a re-sent launch the cloud answers from its token (the
    listing shows a new instance 90 s late) or in reconcile finding it by its tags; the orphan sweep runs
    (that every planted orphan ended is checked on the clouds' side; a kill right after the sweep's
    terminate can take that one's event with it)."""
    out = sqlite_campaign
    events = out.store.events
    after = out.kills_by_kind()["launch_after"]
    assert _deduped(out) + events.get("instance_found", 0) >= min(after, 1), (after, events)
    if KILLS >= 40:
        assert _deduped(out) >= 1, events
    assert events.get("orphan_terminated", 0) >= 1, events
    assert out.findings.orphans_left == []


def test_the_daemon_drained_and_stopped_cleanly_after_the_last_kill(sqlite_campaign: Outcome) -> None:
    assert sqlite_campaign.drained, "jobs or machines were still busy when the drain timed out"
    assert sqlite_campaign.stop_status == 0


def test_no_instance_is_left_running_or_stopped(sqlite_campaign: Outcome) -> None:
    assert sqlite_campaign.findings.leaked == []
    assert sqlite_campaign.findings.rows_astray == []


def test_no_launch_intent_made_two_instances(sqlite_campaign: Outcome) -> None:
    assert _launched(sqlite_campaign), "the campaign launched nothing"
    assert sqlite_campaign.findings.doubled == []
    assert sqlite_campaign.findings.unowned == []


def test_every_job_submitted_ended_and_none_failed_without_a_reason(sqlite_campaign: Outcome) -> None:
    f = sqlite_campaign.findings
    assert sqlite_campaign.submitted, "the campaign submitted nothing"
    assert (f.lost, f.stuck, f.unexplained) == ([], [], [])


def test_tagged_orphans_are_terminated_and_other_peoples_machines_left_alone(sqlite_campaign: Outcome) -> None:
    f = sqlite_campaign.findings
    assert f.orphans_left == []
    assert f.foreign_touched == []


def test_billed_hours_stay_within_the_margin_of_a_run_without_kills(sqlite_campaign: Outcome, no_kill_run: Outcome,
                                                                    measures: list[str]) -> None:
    assert no_kill_run.findings.problems() == {}
    assert no_kill_run.drained
    assert set(no_kill_run.submitted.values()) == set(sqlite_campaign.submitted.values())
    ratio = sqlite_campaign.billed_hours / no_kill_run.billed_hours
    measures.append(f"billed hours with {KILLS} kills / without: {sqlite_campaign.billed_hours:.2f} / "
                    f"{no_kill_run.billed_hours:.2f} = {ratio:.2f}x (margin {MAX_BILLED_RATIO}x)")
    assert ratio <= MAX_BILLED_RATIO


# --- the other campaigns ----------------------------------------------------------------------------------


def test_a_campaign_on_postgresql_keeps_every_invariant(pg_url: str, tmp_path: Path, measures: list[str]) -> None:
    plan = Plan(kills=max(10, KILLS // 10), seed=SEED + 100, folder=tmp_path, database_url=pg_url,
                fault_share=FAULT_SHARE, orphan_every=5)
    out = _run(plan, "PostgreSQL", measures)
    assert out.drained and out.stop_status == 0
    assert out.findings.problems() == {}


def test_a_campaign_that_starts_the_installed_script_every_life_keeps_every_invariant(
        tmp_path: Path, measures: list[str]) -> None:
    """No zygote: each life is `gpusched daemon` in a fresh interpreter, as systemd would start it."""
    schedule = ("launch_before", "launch_after", "random", "stop_after")
    plan = Plan(kills=4, seed=SEED + 200, folder=tmp_path, mode="exec", fault_share=FAULT_SHARE, orphan_every=2,
                schedule=schedule)
    out = _run(plan, "exec", measures)
    assert [k.meant or k.kind for k in out.kills] == list(schedule)
    assert out.drained and out.stop_status == 0
    assert out.findings.problems() == {}


def test_the_checks_catch_a_planted_random_client_token(tmp_path: Path, measures: list[str]) -> None:
    """docs/reliability.md's planted bug: a fresh token on every launch call. Killed after the cloud made an
    instance, the daemon launches the same intent again; the checks must say so."""
    plan = Plan(kills=3, seed=SEED + 300, folder=tmp_path, plant="random-token", mix={"launch_after": 1},
                orphan_every=0, foreign=False, drain_timeout=15)
    out = _run(plan, "planted bug", measures)
    assert [k.kind for k in out.kills] == ["launch_after"] * 3
    assert out.findings.doubled, out.findings.problems()
    assert out.findings.leaked, out.findings.problems()  # the second instance of an intent nobody tracks


# --- the checks themselves, on records made by hand -------------------------------------------------------


def _inst(cloud: str, iid: str, tags: dict[str, str], *states: S, token: str = "") -> CloudInstance:
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    return CloudInstance(cloud, iid, token or f"tok-{iid}", tags, states[-1],
                         tuple((t0 + timedelta(hours=n), s) for n, s in enumerate(states)))


def _ours(row: str, job: str = "job-1", attempt: str = "1") -> dict[str, str]:
    return {TAG_MANAGED: "kills", TAG_INSTANCE: row, "gpusched:job": job, "gpusched:attempt": attempt}


def _store(rows: dict[str, str], jobs: dict[str, tuple[str, str | None]]) -> StoreView:
    return StoreView(jobs={j: JobView(j, j, state, reason, 1) for j, (state, reason) in jobs.items()},
                     rows={r: RowView(r, "alibaba", f"c-{r}", state, None) for r, state in rows.items()})


CheckCase = Callable[[], tuple[list[CloudInstance], StoreView, dict[str, str], set, set]]


@pytest.mark.parametrize(("case", "fields"), [
    (lambda: ([_inst("alibaba", "a1", _ours("inst-1"), S.pending, S.running, S.terminated),
               _inst("alibaba", "a2", _ours("inst-1"), S.pending, S.running, S.terminated)],
              _store({"inst-1": "terminated"}, {"job-1": ("succeeded", None)}), {"job-1": "j"}, set(), set()),
     {"doubled"}),
    (lambda: ([_inst("tencent", "t1", _ours("inst-1"), S.pending, S.running, S.stopped)],
              _store({"inst-1": "terminated"}, {"job-1": ("succeeded", None)}), {"job-1": "j"}, set(), set()),
     {"leaked", "rows_astray"}),
    (lambda: ([_inst("tencent", "t1", _ours("inst-9"), S.pending, S.terminated)],
              _store({}, {"job-1": ("succeeded", None)}), {"job-1": "j"}, set(), set()),
     {"unowned"}),
    (lambda: ([], _store({}, {}), {"job-1": "j"}, set(), set()), {"lost"}),
    (lambda: ([], _store({}, {"job-1": ("provisioning", None)}), {"job-1": "j"}, set(), set()), {"stuck"}),
    (lambda: ([], _store({}, {"job-1": ("failed", " ")}), {"job-1": "j"}, set(), set()), {"unexplained"}),
    (lambda: ([_inst("alibaba", "x1", {"owner": "ml-ops"}, S.pending, S.running, S.stopping, S.stopped)],
              _store({}, {}), {}, set(), {("alibaba", "x1")}), {"foreign_touched"}),
    (lambda: ([_inst("alibaba", "o1", _ours("inst-orphan"), S.pending, S.running)],
              _store({}, {}), {}, {("alibaba", "o1")}, set()), {"orphans_left"}),
    (lambda: ([], _store({"inst-1": "stopped"}, {}), {}, set(), set()), {"rows_astray"}),
])
def test_each_check_fails_on_the_fault_it_names(case: CheckCase, fields: set[str]) -> None:
    instances, store, submitted, tagged, foreign = case()
    found = check(instances, store, cluster="kills", submitted=submitted, planted_tagged=tagged,
                  planted_foreign=foreign).problems()
    assert set(found) == fields, found


def test_a_clean_record_has_no_findings_and_bills_only_running_time() -> None:
    one = _inst("alibaba", "a1", _ours("inst-1"), S.pending, S.running, S.stopping, S.stopped, S.terminated)
    theirs = _inst("tencent", "x1", {"owner": "ml-ops"}, S.pending, S.running)
    found = check([one, theirs], _store({"inst-1": "terminated"}, {"job-1": ("succeeded", None)}), cluster="kills",
                  submitted={"job-1": "j"}, planted_tagged=set(), planted_foreign={("tencent", "x1")})
    assert found.problems() == {}
    assert one.billed_hours(one.history[-1][0]) == 2.0  # pending 1 h + running 1 h
