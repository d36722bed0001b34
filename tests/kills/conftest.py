"""The kill tier: the real daemon SIGKILLed hundreds of times against the cloud emulators. ``scripts/test-kills``.

The main suite collects these tests and skips them, saying why: a campaign takes minutes.
``scripts/test-kills`` sets GPUSCHED_KILLS_TIER=1 and the campaign's size and seed:

  GPUSCHED_KILLS              kills in the SQLite campaign (default 200); the PostgreSQL campaign
                              makes a tenth of them (at least 10)
  GPUSCHED_KILLS_SEED         seed of the kill schedule and the jobs (default 1); a failing seed replays
                              the same schedule (the instants a random kill lands on still vary)
  GPUSCHED_KILLS_FAULT_SHARE  share of cloud calls the emulators fail on their own (default 0; needs
                              their fault switch, see tests/kills/world.py ``emulator_faults``)

What was measured (kills by kind, billed hours with and without kills) is printed at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIER = os.environ.get("GPUSCHED_KILLS_TIER") == "1"
HERE = Path(__file__).resolve().parent
SKIP_REASON = ("kill tier: SIGKILLs the real daemon hundreds of times against the emulators (minutes); "
               "run scripts/test-kills, which sets GPUSCHED_KILLS_TIER=1")
KILLS = int(os.environ.get("GPUSCHED_KILLS", "200"))
SEED = int(os.environ.get("GPUSCHED_KILLS_SEED", "1"))
FAULT_SHARE = float(os.environ.get("GPUSCHED_KILLS_FAULT_SHARE", "0"))
_MEASURES = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in item.path.parents]
    if not TIER:
        skip = pytest.mark.skip(reason=SKIP_REASON)
        for item in mine:
            item.add_marker(skip)
        return
    # A campaign runs inside its first test's time limit (module fixtures): about 3 s a kill on a busy
    # two-core machine, the run without kills and the drain on top.
    for item in mine:
        item.add_marker(pytest.mark.timeout(600 + 6 * KILLS))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    measures = config.stash.get(_MEASURES, [])
    if measures:
        terminalreporter.section("kill tier, measured")
        for line in measures:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def measures(pytestconfig: pytest.Config) -> list[str]:
    """Append a line of what was measured: printed at the end of the run."""
    return pytestconfig.stash.setdefault(_MEASURES, [])
