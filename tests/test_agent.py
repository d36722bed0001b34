"""The on-instance agent against the daemon's real API: epochs from results.csv become resume points."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from scheduler import agent_token, yolo
from scheduler.agent import AgentConfig, run_agent
from scheduler.api import create_app
from scheduler.jobfile import load_job_file
from scheduler.settings import Settings
from scheduler.tables import AttemptRow, JobRow

TOKEN = "agent-test-api-token-0123456789"
ROOT = Path(__file__).resolve().parent.parent


def test_agent_runs_the_job_reports_epochs_and_success(store, sim_clock, tmp_path):
    from scheduler import service

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
        script = (
            "import time,sys\n"
            f"p={str(results)!r}\n"
            "open(p,'w').write('epoch,train/box_loss,metrics/precision,metrics/recall,metrics/mAP_0.5,metrics/mAP_0.5:0.95\\n')\n"
            "for e in range(3):\n"
            "    time.sleep(0.1)\n"
            "    open(p,'a').write(f'{e},1.0,0.5,0.5,0.4,0.3\\n')\n"
        )
        return subprocess.Popen([sys.executable, "-c", script])

    assert run_agent(cfg, http, launch=fake_training) is True
    assert launched and "train_dual.py" in " ".join(launched[0]) and "--epochs" in launched[0]
    detail = http.get(f"/v1/jobs/{job.id}", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert detail["state"] == "succeeded" and detail["epochs_done"] == 3
    assert detail["checkpoint_uri"].endswith("weights/last.pt")


def test_agent_without_its_settings_says_what_is_missing():
    import pytest

    from scheduler.errors import SettingsError

    with pytest.raises(SettingsError, match="GPUSCHED_AGENT_TOKEN"):
        AgentConfig.from_env({"GPUSCHED_AGENT_API": "http://x", "GPUSCHED_AGENT_JOB": "j", "GPUSCHED_AGENT_ATTEMPT": "1"})
