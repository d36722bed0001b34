"""What checking an API token costs per request (issue 19): the daemon's own token (one read: is an admin
token live?) and a personal token (one read by key and a SHA-256), against one job listing for scale.

    .venv/bin/python benchmarks/auth_check.py [--checks 3000] [--rounds 5]

On a SQLite file store in a temporary folder; prints the median microseconds per call over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from scheduler.app.access import Access
from scheduler.clock import SimClock
from scheduler.lifecycle import service
from scheduler.store import tokens
from scheduler.store.database import Store
from scheduler.store.tokens import Role

SHARED = "benchmark-api-token-0123456789"


def per_call_us(call: Callable[[], object], n: int, rounds: int) -> float:
    for _ in range(min(n, 200)):
        call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            call()
        times.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{Path(folder) / 'gpusched.db'}")
        store.migrate()
        clock = SimClock(datetime(2026, 11, 20, tzinfo=timezone.utc))
        access = Access(store, clock, SHARED)
        with store.session() as s:
            personal, _ = tokens.issue(s, clock.now(), name="alice", role=Role.member, teams=("vision",),
                                       created_by="benchmark", expires_at=None)
        scope = {"client": ("127.0.0.1", 1), "method": "GET", "path": "/v1/jobs"}
        rows = [
            ("GPUSCHED_API_TOKEN check", lambda: access.check(SHARED, scope)),
            ("personal token check", lambda: access.check(personal, scope)),
            ("for scale: list_jobs, empty store", lambda: service.list_jobs(store)),
        ]
        for label, call in rows:
            print(f"{label}: {per_call_us(call, args.checks, args.rounds):.0f} us per call")
        store.dispose()


if __name__ == "__main__":
    main()
