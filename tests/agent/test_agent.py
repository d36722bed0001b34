"""The on-instance agent against the daemon's real API: epochs from results.csv become resume points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from scheduler.agent.runner import AgentConfig, run_agent
from scheduler.app.api import create_app
from scheduler.jobs import yolo
from scheduler.jobs.jobfile import load_job_file
from scheduler.settings import Settings
from scheduler.store.tables import InstanceRow
from tests.agent.machines import machine_token, put_on_machine

TOKEN = "agent-test-api-token-0123456789"
ROOT = Path(__file__).resolve().parents[2]


def test_agent_runs_the_job_reports_epochs_and_success(store, sim_clock, tmp_path):
    from scheduler.lifecycle import service
    spec = load_job_file(ROOT / "examples" / "helmet-s-train.yaml")
    job = service.submit(store, sim_clock, spec, source="helmet.yaml")
    inst = put_on_machine(store, sim_clock, job.id, 1)  # as the tick would: attempt 1 running on a machine
    settings = Settings(_env_file=None, api_token=TOKEN)
    http = TestClient(create_app(store, sim_clock, settings))
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(TOKEN, inst, sim_clock),
                      workdir=str(tmp_path), poll_seconds=0.05)
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
    with store.session(write=False) as s:  # the machine is free (warm) for its next job, and was heard
        row = s.get(InstanceRow, inst)
        assert row.job_id is None and row.idle_since is not None and row.last_heartbeat_at == sim_clock.now()
    assert run_agent(cfg, http, launch=fake_training) is False  # nothing more to run: "wait"
    assert len(launched) == 1


def test_agent_without_its_settings_says_what_is_missing():
    import pytest

    from scheduler.errors import SettingsError

    with pytest.raises(SettingsError, match="GPUSCHED_AGENT_TOKEN"):
        AgentConfig.from_env({"GPUSCHED_AGENT_API": "http://x", "GPUSCHED_AGENT_INSTANCE": "inst-1"})
    with pytest.raises(SettingsError, match="GPUSCHED_AGENT_INSTANCE"):
        AgentConfig.from_env({"GPUSCHED_AGENT_API": "http://x", "GPUSCHED_AGENT_TOKEN": "t"})


def test_a_resumed_attempt_fetches_the_checkpoint_and_passes_resume(store, sim_clock, tmp_path):
    from scheduler.lifecycle import service
    from scheduler.lifecycle.agent_reports import report_progress

    spec = load_job_file(ROOT / "examples" / "helmet-s-train.yaml")
    job = service.submit(store, sim_clock, spec, source="helmet.yaml")
    remote = "s3://bucket/datasets/helmet/runs/helmet-s-v3/weights/last.pt"
    inst = put_on_machine(store, sim_clock, job.id, 2)
    with store.session() as s:
        report_progress(s, job.id, 2, 40, remote, sim_clock.now())
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=TOKEN)))
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(TOKEN, inst, sim_clock),
                      workdir=str(tmp_path), poll_seconds=0.05)
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
