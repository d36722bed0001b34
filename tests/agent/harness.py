"""Tests' shorthand for one machine's agent against the daemon's real API (TestClient): a job from
examples/ running on a machine, the bucket it reads and writes (an in-memory object store), a YOLOv9
checkout of stand-in scripts, and an http client that records what the agent reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from scheduler.agent.runner import AgentConfig
from scheduler.app.api import create_app
from scheduler.jobs.jobfile import load_job_file
from scheduler.models import JobSpec
from scheduler.settings import Settings
from tests.agent.machines import machine_token, put_on_machine
from tests.fakes.objectstore import MemoryStore
from tests.fakes.yolov9 import checkpoint_bytes, dataset_files, fake_checkout

TOKEN = "agent-harness-api-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]


def example(name: str, **train: Any) -> JobSpec:
    """A job file from examples/, its train: section changed by ``train`` (e.g. fewer epochs)."""
    spec = load_job_file(ROOT / "examples" / name)
    if train:
        spec = spec.model_copy(update={"train": spec.train.model_copy(update=train)})
    return spec


class Recording:
    """The agent's http client: the daemon's API, with every agent report kept (path, body, answer)."""

    def __init__(self, client: TestClient, on_report=None) -> None:
        self.client, self.reports, self.on_report = client, [], on_report

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        if self.on_report is not None and method == "POST":
            self.on_report(url.split("/v1/agent", 1)[-1], kw.get("json"))
        r = self.client.request(method, url, **kw)
        if method == "POST":
            self.reports.append((url.split("/v1/agent", 1)[-1], kw.get("json"), r.status_code))
        return r

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body, status in self.reports if p == path and status < 300]

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.client.get(url, **kw)


class Machine:
    """Attempt ``attempt`` of ``spec`` running on a machine; its agent's config, the API, the bucket."""

    def __init__(self, store, clock, tmp_path: Path, spec: JobSpec, *, attempt: int = 1, epochs_done: int = 0,
                 checkpoint_uri: str | None = None, gpu: str = "A10", gpu_count: int = 1, capacity: str = "on-demand",
                 on_report=None, **cfg: Any) -> None:
        from scheduler.lifecycle import service
        from scheduler.lifecycle.agent_reports import report_progress

        self.store, self.clock, self.spec = store, clock, spec
        self.job_id = service.submit(store, clock, spec, source="job.yaml").id
        self.instance = put_on_machine(store, clock, self.job_id, attempt, gpu=gpu, gpu_count=gpu_count,
                                       capacity=capacity)
        if epochs_done:
            with store.session() as s:
                report_progress(s, self.job_id, attempt, epochs_done, checkpoint_uri, clock.now())
        self.api = TestClient(create_app(store, clock, Settings(_env_file=None, api_token=TOKEN)))
        self.http = Recording(self.api, on_report)
        self.workdir = tmp_path / "work"
        self.checkout = fake_checkout(tmp_path / "yolov9")
        self.cfg = AgentConfig(api="http://testserver", instance_id=self.instance,
                               token=machine_token(TOKEN, self.instance, clock, hours=4), workdir=str(self.workdir),
                               yolov9_dir=str(self.checkout), python=sys.executable, poll_seconds=0.02, gpu=gpu,
                               gpu_count=gpu_count, **cfg)
        self.bucket = bucket_for(spec)

    def detail(self) -> dict[str, Any]:
        return self.api.get(f"/v1/jobs/{self.job_id}", headers=AUTH).json()

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.detail()["events"] if e["kind"] == kind]

    @property
    def log(self) -> str:
        path = self.workdir / "logs" / f"{self.spec.name}-a{self.detail()['attempt']}.log"
        return path.read_text() if path.exists() else ""


def bucket_for(spec: JobSpec) -> MemoryStore:
    """The job's inputs where its file says they are: the dataset folder and the weights."""
    bucket = MemoryStore()
    if spec.data is not None:
        bucket.put_tree(spec.data.uri, dataset_files())
    for section in (spec.train, spec.val, spec.export, spec.infer):
        weights = getattr(section, "weights", "") if section is not None else ""
        if weights and "://" in weights:
            bucket.put(weights, checkpoint_bytes(-1))
    return bucket
