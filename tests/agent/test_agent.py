"""The on-instance agent against the daemon's real API: epochs from results.csv become resume points."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from scheduler.agent import tokens as agent_token
from scheduler.agent.runner import AgentConfig, run_agent
from scheduler.app.api import create_app
from scheduler.jobs import yolo
from scheduler.jobs.jobfile import load_job_file
from scheduler.settings import Settings
from scheduler.store.tables import AttemptRow, JobRow

TOKEN = "agent-test-api-token-0123456789"
ROOT = Path(__file__).resolve().parents[2]


def test_agent_runs_the_job_reports_epochs_and_success(store, sim_clock, tmp_path):
    from scheduler.lifecycle import service
    spec = load_job_file(ROOT / "examples" / "helmet-s-train.yaml")
    job = service.submit(store, sim_clock, spec, source="helmet.yaml")
    with store.session() as s:  # as the tick would: attempt 1 running on a machine
        row = s.get(JobRow, job.id)
        row.state, row.attempt = "running", 1
        s.add(AttemptRow(job_id=job.id, number=1, state="running", client_token=f"gs-{job.id}-a1",
                         provider="alibaba", region="cn-hangzhou", zone="cn-hangzhou-h",
                         instance_type="ecs.gn7i-c8g1.2xlarge", capacity="spot", start_epoch=0,
                         created_at=sim_clock.now(), started_at=sim_clock.now()))
    settings = Settings(_env_file=None, api_token=TOKEN)
    http = TestClient(create_app(store, sim_clock, settings))
    token = agent_token.issue(agent_token.signing_key(TOKEN), job.id, 1, sim_clock.now(), timedelta(hours=2))
    cfg = AgentConfig(api="http://testserver", job_id=job.id, attempt=1, token=token, workdir=str(tmp_path),
                      poll_seconds=0.05)
    results = Path(yolo.run_dir(str(tmp_path), "train", spec.name)) / "results.csv"
    results.parent.mkdir(parents=True)
    launched: list[list[str]] = []

    def fake_training(argv):
        launched.append(list(argv))
        # Stands in for train_dual.py: writes three epochs' rows the way YOLOv9 does, then exits 0.
        ckpt = results.parent / "weights" / "last.pt"
        script = (
            "import time,sys,os\n"
            f"p={str(results)!r}\n"
            f"os.makedirs({str(ckpt.parent)!r}, exist_ok=True)\n"
            "open(p,'w').write('epoch,train/box_loss,metrics/precision,metrics/recall,metrics/mAP_0.5,metrics/mAP_0.5:0.95\\n')\n"
            "for e in range(3):\n"
            "    time.sleep(0.1)\n"
            f"    open({str(ckpt)!r},'w').write(str(e))\n"
            "    open(p,'a').write(f'{e},1.0,0.5,0.5,0.4,0.3\\n')\n"
        )
        return subprocess.Popen([sys.executable, "-c", script])

    copies: list[tuple[str, str]] = []
    assert run_agent(cfg, http, launch=fake_training, copy=lambda src, dst: copies.append((src, dst))) is True
    assert copies and all(dst.startswith("s3://") and dst.endswith("/weights/last.pt") for _, dst in copies)
    assert launched and "train_dual.py" in " ".join(launched[0]) and "--epochs" in launched[0]
    detail = http.get(f"/v1/jobs/{job.id}", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert detail["state"] == "succeeded" and detail["epochs_done"] == 3
    assert detail["checkpoint_uri"] == copies[-1][1]  # the resume point is the uploaded copy


def test_agent_without_its_settings_says_what_is_missing():
    import pytest

    from scheduler.errors import SettingsError

    with pytest.raises(SettingsError, match="GPUSCHED_AGENT_TOKEN"):
        AgentConfig.from_env({"GPUSCHED_AGENT_API": "http://x", "GPUSCHED_AGENT_JOB": "j",
                              "GPUSCHED_AGENT_ATTEMPT": "1"})


def test_a_resumed_attempt_fetches_the_checkpoint_and_passes_resume(store, sim_clock, tmp_path):
    from scheduler.lifecycle import service
    from scheduler.lifecycle.agent_reports import report_progress

    spec = load_job_file(ROOT / "examples" / "helmet-s-train.yaml")
    job = service.submit(store, sim_clock, spec, source="helmet.yaml")
    remote = "s3://bucket/datasets/helmet/runs/helmet-s-v3/weights/last.pt"
    with store.session() as s:
        row = s.get(JobRow, job.id)
        row.state, row.attempt = "running", 2
        s.add(AttemptRow(job_id=job.id, number=2, state="running", client_token=f"gs-{job.id}-a2",
                         provider="aws", region="us-east-1", zone="us-east-1a", instance_type="g5.xlarge",
                         capacity="on-demand", start_epoch=0, created_at=sim_clock.now(), started_at=sim_clock.now()))
        s.flush()
        report_progress(s, job.id, 2, 40, remote, sim_clock.now())
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=TOKEN)))
    token = agent_token.issue(agent_token.signing_key(TOKEN), job.id, 2, sim_clock.now(), timedelta(hours=2))
    cfg = AgentConfig(api="http://testserver", job_id=job.id, attempt=2, token=token, workdir=str(tmp_path),
                      poll_seconds=0.05)
    copies: list[tuple[str, str]] = []
    argvs: list[list[str]] = []

    def launch(argv):
        argvs.append(list(argv))
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])  # training fails this time

    assert run_agent(cfg, http, launch=launch, copy=lambda a, b: copies.append((a, b))) is False
    assert copies[0][0] == remote and copies[0][1].endswith("weights/last.pt")
    assert "--resume" in argvs[0]
    detail = http.get(f"/v1/jobs/{job.id}", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert detail["state"] == "failed" and "exit status 3" in (detail["reason"] or "")
