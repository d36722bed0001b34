"""The agent on a fresh machine: it makes its work directory, runs the job's scripts in the YOLOv9
checkout with the image's Python, keeps the job's output, and says why a job failed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from scheduler.agent.runner import (
    MESSAGE_TAIL_CHARS,
    AgentConfig,
    failure_message,
    job_environment,
    machine_problem,
    run_agent,
)
from scheduler.app.api import create_app
from scheduler.jobs import yolo
from scheduler.jobs.jobfile import load_job_file
from scheduler.settings import Settings
from tests.agent.harness import bucket_for
from tests.agent.machines import machine_token, put_on_machine

TOKEN = "agent-machine-test-api-token-0123"
ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _running(store, clock, example: str) -> tuple[str, TestClient, dict]:
    """A job from examples/ with attempt 1 running on a machine, the daemon's API, and what the
    machine's agent is configured with (its instance and its machine token)."""
    from scheduler.lifecycle import service

    spec = load_job_file(ROOT / "examples" / example)
    job = service.submit(store, clock, spec, source=example)
    inst = put_on_machine(store, clock, job.id, 1, instance_type="g4dn.xlarge", gpu="T4")
    http = TestClient(create_app(store, clock, Settings(_env_file=None, api_token=TOKEN)))
    return job.id, http, {"api": "http://testserver", "instance_id": inst, "token": machine_token(TOKEN, inst, clock)}


def _fake_yolov9(folder: Path, export_py: str) -> Path:
    """A stand-in checkout: the scripts the agent looks for, export.py doing what ``export_py`` says."""
    folder.mkdir(parents=True)
    (folder / "train_dual.py").write_text("")
    (folder / "export.py").write_text(export_py)
    return folder


def test_a_fresh_machine_without_yolov9_fails_the_attempt_with_the_fix(store, sim_clock, tmp_path):
    job_id, http, machine = _running(store, sim_clock, "helmet-export.yaml")
    workdir = tmp_path / "opt" / "gpusched" / "work"  # nothing creates it but the agent
    cfg = AgentConfig(**machine, workdir=str(workdir), yolov9_dir=str(tmp_path / "no-such-checkout"),
                      poll_seconds=0.01)
    assert run_agent(cfg, http) is False
    assert workdir.is_dir()
    detail = http.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
    assert detail["state"] == "failed"
    assert "no YOLOv9 checkout" in detail["reason"] and "GPUSCHED_AGENT_YOLOV9_DIR" in detail["reason"]


def test_the_job_runs_in_the_checkout_with_the_image_python_and_an_export_that_wrote_nothing_fails(
        store, sim_clock, tmp_path):
    # export.py exits 0 after every format failed (measured on the real script): the agent must not believe it.
    checkout = _fake_yolov9(tmp_path / "yolov9", (
        "import os, sys\n"
        "print('cwd', os.getcwd())\n"
        "print('weights_only_off', os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'))\n"
        "print('token_seen', 'GPUSCHED_AGENT_TOKEN' in os.environ)\n"
        "print('ONNX: export failure: No module named onnxscript')\n"
    ))
    job_id, http, machine = _running(store, sim_clock, "helmet-export.yaml")
    cfg = AgentConfig(**machine, workdir=str(tmp_path / "w"), yolov9_dir=str(checkout), python=sys.executable,
                      poll_seconds=0.01)
    assert run_agent(cfg, http, stores=bucket_for(load_job_file(ROOT / "examples" / "helmet-export.yaml"))) is False
    reason = http.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["reason"]
    assert "export wrote no onnx, engine files" in reason
    assert "No module named onnxscript" in reason  # the job's own output says why
    log = (tmp_path / "w" / "logs" / "helmet-s-v3-export-a1.log").read_text()
    assert f"cwd {checkout}" in log and "weights_only_off 1" in log and "token_seen False" in log


def test_an_export_that_wrote_every_format_succeeds(store, sim_clock, tmp_path):
    spec = load_job_file(ROOT / "examples" / "helmet-export.yaml")
    outputs = yolo.export_outputs(spec, str(tmp_path / "w"))
    assert sorted(outputs) == ["engine", "onnx"] and outputs["onnx"].endswith("/weights/best.onnx")
    writes = "".join(f"open({p!r}, 'w').write('model')\n" for p in outputs.values())
    checkout = _fake_yolov9(tmp_path / "yolov9", f"import os\nos.makedirs({str(tmp_path / 'w' / 'weights')!r}, "
                                                 f"exist_ok=True)\n{writes}")
    job_id, http, machine = _running(store, sim_clock, "helmet-export.yaml")
    cfg = AgentConfig(**machine, workdir=str(tmp_path / "w"), yolov9_dir=str(checkout), python=sys.executable,
                      poll_seconds=0.01)
    bucket = bucket_for(spec)
    assert run_agent(cfg, http, stores=bucket) is True
    detail = http.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
    assert detail["state"] == "succeeded"
    # Each format next to the weights it came from, and the job says where.
    folder = "s3://vision-qa-models/safety-helmet/helmet-s-v3/"
    assert bucket.objects[folder + "best.onnx"] == bucket.objects[folder + "best.engine"] == b"model"
    assert detail["outputs"] == folder and f"to {folder}: {folder}best.onnx, {folder}best.engine" in detail["reason"]


def test_an_export_rerun_on_a_warm_machine_does_not_take_the_last_runs_files_for_its_own(store, sim_clock, tmp_path):
    spec = load_job_file(ROOT / "examples" / "helmet-export.yaml")
    for path in yolo.export_outputs(spec, str(tmp_path / "w")).values():  # a previous export's files
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("old")
    checkout = _fake_yolov9(tmp_path / "yolov9", "print('TensorRT: export failure')\n")
    job_id, http, machine = _running(store, sim_clock, "helmet-export.yaml")
    cfg = AgentConfig(**machine, workdir=str(tmp_path / "w"), yolov9_dir=str(checkout), python=sys.executable,
                      poll_seconds=0.01)
    assert run_agent(cfg, http, stores=bucket_for(spec)) is False
    assert "export wrote no onnx, engine files" in http.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["reason"]


def test_a_failure_message_is_the_status_and_the_end_of_the_output_within_the_api_limit(tmp_path):
    log = tmp_path / "job.log"
    assert failure_message(2, log) == "exit status 2"  # no output at all
    log.write_text("\n".join(f"line {i} " + "x" * 300 for i in range(40)) + "\n\n")
    message = failure_message(2, log)
    assert message.startswith("exit status 2; the job's last output:")
    assert message.endswith("line 39 " + "x" * 300)
    assert len(message) <= MESSAGE_TAIL_CHARS + 100 < 2000


def test_the_job_environment_keeps_the_machine_and_drops_the_agent_token(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCHED_AGENT_TOKEN", "secret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("YOLOV5_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = AgentConfig(api="http://x", instance_id="inst-1", token="secret", workdir=str(tmp_path))
    env = job_environment(cfg)
    assert "GPUSCHED_AGENT_TOKEN" not in env and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"  # YOLOv9's checkpoints load under torch >= 2.6
    assert env["YOLOV5_CONFIG_DIR"] == str(tmp_path / "yolo-config")
    assert env["YOLOv5_AUTOINSTALL"] == "false"  # a job never pip-installs into the image's Python
    monkeypatch.setenv("YOLOV5_CONFIG_DIR", "/image/fonts")  # the image's own wins
    assert job_environment(cfg)["YOLOV5_CONFIG_DIR"] == "/image/fonts"


def test_the_work_dir_gets_the_images_yolo_fonts(monkeypatch, tmp_path):
    home = tmp_path / "root"
    (home / ".config" / "Ultralytics").mkdir(parents=True)
    (home / ".config" / "Ultralytics" / "Arial.ttf").write_bytes(b"a font")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("YOLOV5_CONFIG_DIR", raising=False)
    yolov9 = tmp_path / "yolov9"
    yolov9.mkdir()
    (yolov9 / "train_dual.py").write_text("")
    cfg = AgentConfig(api="http://x", instance_id="inst-1", token="t", workdir=str(tmp_path / "work"),
                      yolov9_dir=str(yolov9))
    assert machine_problem(cfg) is None
    config = Path(job_environment(cfg)["YOLOV5_CONFIG_DIR"])
    assert (config / "Arial.ttf").read_bytes() == b"a font"  # YOLOv9 would download it otherwise
    assert not (config / "Arial.Unicode.ttf").exists()  # the image has none: nothing is made up


@pytest.mark.parametrize("value, python", [(None, "python3"), ("/opt/conda/bin/python", "/opt/conda/bin/python")])
def test_the_agent_reads_its_machine_settings(value, python):
    env = {"GPUSCHED_AGENT_API": "http://d", "GPUSCHED_AGENT_INSTANCE": "inst-2",
           "GPUSCHED_AGENT_TOKEN": "t", "GPUSCHED_AGENT_YOLOV9_DIR": "/srv/yolov9"}
    if value:
        env["GPUSCHED_AGENT_PYTHON"] = value
    cfg = AgentConfig.from_env(env)
    assert cfg.python == python and cfg.yolov9_dir == "/srv/yolov9" and cfg.instance_id == "inst-2"
