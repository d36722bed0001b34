"""Resident memory of an idle `gpusched daemon` whose store holds N finished jobs.

Usage:  .venv/bin/python benchmarks/daemon_memory.py [--jobs 1000] [--seconds 20]

It fills a fresh SQLite store with N finished jobs, each with the rows a real run
leaves behind (an attempt, a terminated instance, a usage interval, a cost record,
three events), starts the real daemon on the sandbox backend as a subprocess,
lets it tick once a second with nothing to do, and samples its RSS (psutil).
Prints one JSON line. Target (issue 2): under 150 MB with 1,000 jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import httpx
import psutil

from scheduler.jobs.jobfile import load_job_file
from scheduler.store.database import Store, add_event, new_id
from scheduler.store.tables import AttemptRow, CostRecordRow, InstanceRow, JobRow, UsageIntervalRow

ROOT = Path(__file__).resolve().parent.parent


def fill(store: Store, jobs: int) -> None:
    spec = load_job_file(ROOT / "examples" / "helmet-s-train.yaml")
    spec_json = spec.model_dump(mode="json")
    rng = random.Random(1)
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with store.session() as s:
        for i in range(jobs):
            start = t0 + timedelta(minutes=30 * i)
            end = start + timedelta(hours=3)
            job_id, inst_id = new_id("job", rng), new_id("inst", rng)
            s.add(JobRow(id=job_id, name=f"bench-{i}", team=("vision-qa", "retail-ai", "traffic-ops")[i % 3],
                         project="bench", kind="train", model="yolov9-s", spec_json=spec_json, state="succeeded",
                         priority=50, submitted_at=start, deadline_at=start + timedelta(hours=36),
                         budget_amount=Decimal(800), budget_currency="CNY", attempt=1, epochs_done=100,
                         epochs_total=100, updated_at=end, finished_at=end))
            s.add(InstanceRow(id=inst_id, provider="alibaba", region="cn-hangzhou", zone="cn-hangzhou-h",
                              instance_type="ecs.gn7i-c8g1.2xlarge", gpu="A10", gpu_count=1, capacity="spot",
                              cloud_id=f"i-{i:08d}", client_token=f"gs-{job_id}-a1", state="terminated",
                              team="vision-qa", price_amount=Decimal("4.29"), price_currency="CNY",
                              on_demand_amount=Decimal("9.5326"), created_at=start, running_at=start,
                              terminated_at=end))
            s.flush()
            s.add(AttemptRow(job_id=job_id, number=1, state="succeeded", client_token=f"gs-{job_id}-a1",
                             provider="alibaba", region="cn-hangzhou", zone="cn-hangzhou-h",
                             instance_type="ecs.gn7i-c8g1.2xlarge", capacity="spot", instance_id=inst_id,
                             start_epoch=0, end_epoch=100, created_at=start, started_at=start, ended_at=end))
            interval = UsageIntervalRow(instance_id=inst_id, job_id=job_id, team="vision-qa", project="bench",
                                        kind="busy", provider="alibaba", region="cn-hangzhou", gpu="A10",
                                        instance_type="ecs.gn7i-c8g1.2xlarge", capacity="spot", start=start,
                                        end=end, accounted=True)
            s.add(interval)
            s.flush()
            s.add(CostRecordRow(usage_interval_id=interval.id, month=start.strftime("%Y-%m"), instance_id=inst_id,
                                job_id=job_id, team="vision-qa", project="bench", kind="busy", provider="alibaba",
                                region="cn-hangzhou", gpu="A10", instance_type="ecs.gn7i-c8g1.2xlarge",
                                capacity="spot", start=start, end=end, hours=Decimal(3),
                                amount=Decimal("12.87"), on_demand_amount=Decimal("28.5978"), currency="CNY"))
            for kind in ("submitted", "launched", "job_finished"):
                add_event(s, end, kind, "benchmark row", job_id=job_id, instance_id=inst_id)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        store = Store(f"sqlite:///{data / 'gpusched.db'}")
        store.migrate()
        fill(store, args.jobs)
        store.dispose()
        port, token = free_port(), "bench-token-0123456789abcdef"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
        env.update(GPUSCHED_DATA_DIR=str(data), GPUSCHED_API_PORT=str(port), GPUSCHED_API_TOKEN=token,
                   GPUSCHED_TICK_SECONDS="1", GPUSCHED_LOG_FORMAT="json", GPUSCHED_LOG_LEVEL="warning")
        proc = subprocess.Popen([sys.executable, "-m", "scheduler.app.cli", "daemon"], env=env, cwd=data,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            else:
                raise SystemExit(f"daemon did not come up: {proc.stderr.read().decode()[-2000:]}")
            listed = httpx.get(f"{base}/v1/jobs?limit=1000", headers={"Authorization": f"Bearer {token}"},
                               timeout=30).json()
            ps = psutil.Process(proc.pid)
            samples = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                samples.append(ps.memory_info().rss / 2**20)
                time.sleep(0.5)
            health = httpx.get(f"{base}/healthz", timeout=5).json()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps({
        "benchmark": "daemon_idle_rss",
        "finished_jobs_in_store": args.jobs,
        "jobs_listed_by_api": len(listed) if isinstance(listed, list) else len(listed.get("jobs", [])),
        "ticks_during_sampling": health.get("ticks") or health.get("tick_count"),
        "rss_mib_median": round(statistics.median(samples), 1),
        "rss_mib_max": round(max(samples), 1),
        "samples": len(samples),
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
