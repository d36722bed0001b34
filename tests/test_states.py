"""The job, attempt and instance state machines, checked move by move."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from itertools import pairwise, product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.errors import IllegalTransition
from scheduler.states import (
    ATTEMPT_MOVES,
    INSTANCE_BILLING,
    INSTANCE_LIVE,
    INSTANCE_MOVES,
    JOB_MOVES,
    JOB_TERMINAL,
    AttemptState,
    InstanceRowState,
    JobState,
    can_move,
    move,
)

Table = Mapping[StrEnum, frozenset[StrEnum]]
MACHINES: dict[str, tuple[type[StrEnum], Table, StrEnum]] = {
    "job": (JobState, JOB_MOVES, JobState.queued),
    "attempt": (AttemptState, ATTEMPT_MOVES, AttemptState.launching),
    "instance": (InstanceRowState, INSTANCE_MOVES, InstanceRowState.requested),
}


def _matrix(allowed: bool) -> list[tuple[str, StrEnum, StrEnum]]:
    cases = []
    for name, (states, table, _) in MACHINES.items():
        for src, dst in product(states, states):
            if (src == dst or dst in table[src]) == allowed:
                cases.append((name, src, dst))
    return cases


def _id(case: object) -> str:
    return str(case)


@pytest.mark.parametrize(("machine", "src", "dst"), _matrix(allowed=True), ids=_id)
def test_every_allowed_move_passes(machine: str, src: StrEnum, dst: StrEnum) -> None:
    table = MACHINES[machine][1]
    assert can_move(table, src, dst)
    assert move(table, src, dst, machine) == dst


@pytest.mark.parametrize(("machine", "src", "dst"), _matrix(allowed=False), ids=_id)
def test_every_other_move_raises(machine: str, src: StrEnum, dst: StrEnum) -> None:
    table = MACHINES[machine][1]
    assert not can_move(table, src, dst)
    with pytest.raises(IllegalTransition) as info:
        move(table, src, dst, machine)
    assert f"{machine} transition {src} -> {dst}" in str(info.value)


def test_the_matrix_covers_every_pair() -> None:
    pairs = sum(len(states) ** 2 for states, _, _ in MACHINES.values())
    assert len(_matrix(allowed=True)) + len(_matrix(allowed=False)) == pairs
    assert _matrix(allowed=False), "a machine that allows every move checks nothing"


@pytest.mark.parametrize("machine", MACHINES)
def test_every_state_has_a_row_and_every_target_is_a_state(machine: str) -> None:
    states, table, _ = MACHINES[machine]
    assert set(table) == set(states)
    assert all(set(targets) <= set(states) for targets in table.values())
    assert all(src not in targets for src, targets in table.items())  # staying put is implicit


def _reachable(table: Table, start: StrEnum) -> set[StrEnum]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in table[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("machine", MACHINES)
def test_every_state_is_reachable_from_the_start(machine: str) -> None:
    states, table, start = MACHINES[machine]
    assert _reachable(table, start) == set(states)


@pytest.mark.parametrize("machine", MACHINES)
def test_every_state_can_still_finish(machine: str) -> None:
    # No trap: from anywhere, some terminal state stays reachable.
    states, table, _ = MACHINES[machine]
    terminal = {s for s in states if not table[s]}
    assert terminal
    for state in states:
        assert _reachable(table, state) & terminal, f"{machine} state {state} can never finish"


@pytest.mark.parametrize(
    ("machine", "terminal"),
    [
        ("job", {"succeeded", "failed", "cancelled"}),
        ("attempt", {"preempted", "launch_failed", "succeeded", "failed", "cancelled"}),
        ("instance", {"terminated"}),
    ],
)
def test_terminal_states_have_no_exits(machine: str, terminal: set[str]) -> None:
    states, table, _ = MACHINES[machine]
    assert {s for s in states if not table[s]} == terminal
    for src, dst in product(terminal, states):
        if dst != src:
            with pytest.raises(IllegalTransition):
                move(table, states(src), dst)


def test_named_state_sets_agree_with_the_tables() -> None:
    assert JOB_TERMINAL == {s for s in JobState if not JOB_MOVES[s]}
    assert INSTANCE_LIVE == set(InstanceRowState) - {InstanceRowState.terminated}
    assert INSTANCE_BILLING <= INSTANCE_LIVE
    assert InstanceRowState.stopped not in INSTANCE_BILLING  # stop-charging is the point of stopping
    assert InstanceRowState.requested not in INSTANCE_BILLING  # only an intent so far


@pytest.mark.parametrize(
    ("machine", "path"),
    [
        ("job", "queued planned provisioning running succeeded"),
        ("job", "queued planned provisioning running preempted queued planned running failed"),
        ("job", "queued cancelled"),
        ("attempt", "launching running succeeded"),
        ("attempt", "launching launch_failed"),
        ("attempt", "launching running preempted"),
        ("instance", "requested pending running stopping stopped terminating terminated"),
        ("instance", "requested pending running stopping stopped pending running terminated"),
        ("instance", "requested terminated"),
    ],
)
def test_the_documented_lifecycles_are_legal(machine: str, path: str) -> None:
    states, table, _ = MACHINES[machine]
    for src, dst in pairwise(states(s) for s in path.split()):
        assert move(table, src, dst, machine) == dst


@st.composite
def walks(draw: st.DrawFn) -> tuple[str, list[StrEnum]]:
    machine = draw(st.sampled_from(sorted(MACHINES)))
    _, table, state = MACHINES[machine]
    path = [state]
    for _ in range(draw(st.integers(min_value=0, max_value=30))):
        options = sorted(table[state])
        if not options:
            break
        state = draw(st.sampled_from(options))
        path.append(state)
    return machine, path


@given(walks())
def test_random_walks_through_allowed_moves_stay_legal(walk: tuple[str, list[StrEnum]]) -> None:
    machine, path = walk
    states, table, _ = MACHINES[machine]
    state = path[0]
    for nxt in path[1:]:
        state = move(table, state, nxt, machine)
        assert state in states and state in table
    # Wherever the walk stopped, staying put is legal and a terminal state is final.
    assert move(table, state, state) == state
    if not table[state]:
        assert all(not can_move(table, state, other) for other in states if other != state)
