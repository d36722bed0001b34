"""Inference in shards: split, commands, and the agent resuming at the first unfinished shard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from scheduler.agent.runner import AgentConfig, run_agent
from scheduler.app.api import create_app
from scheduler.jobs import infer_shards
from scheduler.jobs.jobfile import parse_job
from scheduler.jobs.yolo import infer_command
from scheduler.lifecycle import service
from scheduler.lifecycle.agent_reports import report_progress
from scheduler.lifecycle.transitions import current_attempt
from scheduler.settings import Settings
from tests.agent.machines import machine_token, put_on_machine
from tests.fakes.objectstore import MemoryStore

TOKEN = "agent-test-api-token-0123456789"


@pytest.mark.parametrize("images, shards", [
    (1, 1), (19_999, 1), (20_000, 1), (20_001, 2), (45_000, 3), (200_000, 10), (5_000_000, 20),
])
def test_shard_count(images, shards):
    assert infer_shards.shard_count(images) == shards


@pytest.mark.parametrize("files, shards", [(0, 3), (2, 3), (7, 3), (10, 1), (200_001, 10)])
def test_shards_cover_every_file_once_in_order(files, shards):
    bounds = [infer_shards.shard_bounds(files, shards, i) for i in range(shards)]
    assert bounds[0][0] == 0 and bounds[-1][1] == files
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [end - start for start, end in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_a_shard_that_does_not_exist_is_an_error():
    with pytest.raises(ValueError):
        infer_shards.shard_bounds(10, 3, 3)


def _spec(images: int = 45_000, **infer):
    return parse_job({
        "name": "junction-nightly", "team": "traffic-ops", "kind": "infer", "model": "yolov9-s",
        "infer": {"source": "s3://frames/junction/latest/", "images": images,
                  "weights": "s3://models/junction/best.pt", **infer},
    }, "t.yaml")


def test_labels_go_to_the_output_or_to_runs_in_the_source_bucket():
    assert infer_shards.output_uri(_spec()) == "s3://frames/runs/junction-nightly/"
    assert infer_shards.output_uri(_spec(output="oss://out/labels/x")) == "oss://out/labels/x/"


def test_the_job_counts_its_shards_as_units_of_work(store, sim_clock):
    job = service.submit(store, sim_clock, _spec(200_000), source="t.yaml")
    assert job.epochs_total == 10


def test_a_shard_command_reads_the_shard_folder_and_writes_under_the_run():
    argv = infer_command(_spec(), run_name="junction-nightly", workdir="/w", source="/w/shards/shard-001",
                         shard="shard-001")
    assert argv[argv.index("--source") + 1] == "/w/shards/shard-001"
    assert argv[argv.index("--project") + 1] == "/w/runs/detect/junction-nightly"
    assert argv[argv.index("--name") + 1] == "shard-001"


# --- the agent, against the daemon's real API -------------------------------------------


def _running_attempt(store, sim_clock, spec, attempt: int, shards_done: int = 0) -> str:
    job = service.submit(store, sim_clock, spec, source="t.yaml")
    put_on_machine(store, sim_clock, job.id, attempt, instance_type="g4dn.xlarge", gpu="T4", capacity="spot")
    if shards_done:
        with store.session() as s:
            report_progress(s, job.id, attempt, shards_done, infer_shards.output_uri(spec), sim_clock.now())
    return job.id


# Stands in for detect.py: a label file for every image of --source, under --project/--name/labels.
_FAKE_DETECT = (
    "import os,sys\n"
    "a=sys.argv; src=a[a.index('--source')+1]; "
    "out=os.path.join(a[a.index('--project')+1], a[a.index('--name')+1], 'labels')\n"
    "os.makedirs(out, exist_ok=True)\n"
    "for f in sorted(os.listdir(src)):\n"
    "    open(os.path.join(out, f.rsplit('.',1)[0]+'.txt'),'a').write('0 0.5 0.5 0.1 0.1 0.9\\n')\n"
    "raise SystemExit(int(os.environ.get('FAIL_SHARD','-1'))==int(a[a.index('--name')+1][-3:]) and 4 or 0)\n"
)


class _Machine:
    """The machine's side: the bucket holding the source images and the weights (the agent stages
    them), and a stand-in detect.py."""

    def __init__(self, tmp_path: Path, images: int) -> None:
        self.workdir = tmp_path / "work"
        self.bucket = _Bucket()
        for i in range(images):
            self.bucket.put(f"s3://frames/junction/latest/frame-{i:04d}.jpg", b"jpg")
        self.bucket.put("s3://frames/junction/latest/notes.md", "not an image")
        self.bucket.put("s3://models/junction/best.pt", b"pt")
        self.sources: list[list[str]] = []

    @property
    def uploads(self) -> list[tuple[str, list[str]]]:
        return self.bucket.uploads

    def launch(self, argv):
        self.sources.append(sorted(p.name for p in Path(argv[argv.index("--source") + 1]).iterdir()))
        return subprocess.Popen([sys.executable, "-c", _FAKE_DETECT, *argv[2:]])


class _Bucket(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.uploads: list[tuple[str, list[str]]] = []

    def upload_tree(self, local_dir, prefix_uri):
        self.uploads.append((prefix_uri, sorted(p.name for p in Path(local_dir).iterdir())))
        return super().upload_tree(local_dir, prefix_uri)


def _agent(store, sim_clock, job_id: str, attempt: int, workdir: Path):
    """The daemon's API, and the agent of the machine the job's attempt runs on."""
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=TOKEN)))
    with store.session(write=False) as s:
        inst = current_attempt(s, job_id).instance_id
    assert inst is not None
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(TOKEN, inst, sim_clock),
                      workdir=str(workdir), poll_seconds=0.02)
    return http, cfg


def _detail(http, job_id: str) -> dict:
    return http.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {TOKEN}"}).json()


def test_the_agent_runs_every_shard_uploads_its_labels_then_reports_it(store, sim_clock, tmp_path):
    spec = _spec(45_000)  # 3 shards
    job_id = _running_attempt(store, sim_clock, spec, attempt=1)
    m = _Machine(tmp_path, images=7)
    http, cfg = _agent(store, sim_clock, job_id, 1, m.workdir)
    assert run_agent(cfg, http, launch=m.launch, stores=m.bucket) is True
    assert [len(s) for s in m.sources] == [2, 2, 3]
    assert sorted(f for s in m.sources for f in s) == [f"frame-{i:04d}.jpg" for i in range(7)]
    assert all(dst == "s3://frames/runs/junction-nightly/labels/" for dst, _ in m.uploads)
    assert [len(files) for _, files in m.uploads] == [2, 2, 3]  # each shard's own labels, once
    detail = _detail(http, job_id)
    assert detail["state"] == "succeeded" and detail["epochs_done"] == 3 and detail["epochs_total"] == 3
    assert detail["checkpoint_uri"] == detail["outputs"] == "s3://frames/runs/junction-nightly/"
    assert len(m.bucket.under("s3://frames/runs/junction-nightly/labels")) == 7
    assert (m.workdir / "weights" / "best.pt").read_bytes() == b"pt"  # the weights, staged from their URI


def test_a_resumed_attempt_starts_at_the_first_unfinished_shard(store, sim_clock, tmp_path):
    spec = _spec(45_000)
    job_id = _running_attempt(store, sim_clock, spec, attempt=2, shards_done=2)
    m = _Machine(tmp_path, images=7)
    http, cfg = _agent(store, sim_clock, job_id, 2, m.workdir)
    assert run_agent(cfg, http, launch=m.launch, stores=m.bucket) is True
    assert m.sources == [["frame-0004.jpg", "frame-0005.jpg", "frame-0006.jpg"]]  # shard 2 only
    assert _detail(http, job_id)["epochs_done"] == 3


def test_a_failing_shard_fails_the_job_and_keeps_the_shards_before_it(store, sim_clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_SHARD", "1")
    spec = _spec(45_000)
    job_id = _running_attempt(store, sim_clock, spec, attempt=1)
    m = _Machine(tmp_path, images=7)
    http, cfg = _agent(store, sim_clock, job_id, 1, m.workdir)
    assert run_agent(cfg, http, launch=m.launch, stores=m.bucket) is False
    assert len(m.uploads) == 1  # shard 0's labels; shard 1 failed before its upload
    detail = _detail(http, job_id)
    assert detail["state"] == "failed" and detail["epochs_done"] == 1
    assert "exit status 4 in shard-001" in (detail["reason"] or "")


# --- the estimate: shards are the resumable unit ------------------------------------------


def test_an_inference_estimate_counts_the_shards_left():
    from scheduler.jobs import perf
    spec = _spec(200_000)  # 10 shards
    fresh = perf.estimate(spec, "T4")
    assert fresh.epochs_left == 10
    assert fresh.epoch_hours == pytest.approx((fresh.hours - fresh.setup_hours) / 10)
    resumed = perf.estimate(spec, "T4", epochs_done=7)
    assert resumed.epochs_left == 3 and resumed.setup_hours == fresh.setup_hours
    assert resumed.hours == pytest.approx(fresh.setup_hours + 3 * fresh.epoch_hours)
    assert perf.estimate(spec, "T4", epochs_done=10).hours == pytest.approx(fresh.setup_hours)
