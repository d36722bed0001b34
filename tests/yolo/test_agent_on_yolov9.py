"""The agent layer of the YOLOv9 tier: the on-instance agent runs the official train_dual.py on CPU,
end to end, through the daemon's real API and an in-memory bucket.

Machine 1 (spot) stages the dataset as a user writes it (data.yaml with relative splits and no
``path:``), trains, uploads a checkpoint after each epoch only once last.pt holds it, and is reclaimed
after the first reported epoch. Machine 2 (another work directory: other paths) fetches last.pt and
opt.yaml, rewrites opt.yaml for itself, resumes with ``--resume``, and uploads the outputs. This is
what the fake scripts of tests/agent stand in for; here the real ones check the same story.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from scheduler.agent.checkpoints import FINAL, checkpoint_epoch
from scheduler.agent.reclaim import ReclaimNotice
from scheduler.agent.runner import AgentConfig, run_agent
from scheduler.app.api import create_app
from scheduler.jobs import yolo
from scheduler.lifecycle import service
from scheduler.models import DataSpec, JobSpec, Kind, TrainSpec
from scheduler.settings import Settings
from tests.agent.machines import machine_token, put_on_machine
from tests.fakes.objectstore import MemoryStore
from tests.yolo.dataset import write_dataset

pytestmark = pytest.mark.timeout(900)

TOKEN = "yolo-tier-agent-api-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DATA = "s3://ci-bucket/datasets/boxes"
PREFIX = f"{DATA}/runs/agent-train/"


def spec() -> JobSpec:
    return JobSpec(name="agent-train", team="ci", kind=Kind.train, model="yolov9-t", data=DataSpec(uri=DATA),
                   train=TrainSpec(epochs=3, img_size=128, batch=4, weights="", hyp="hyp.scratch-high.yaml",
                                   close_mosaic=1))


def test_the_agent_trains_is_reclaimed_and_resumes_on_another_machine(
        store, sim_clock, tmp_path: Path, yolov9_dir: Path, yolo_python: str, yolo_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("YOLOV5_CONFIG_DIR", "YOLOv5_AUTOINSTALL", "PYTHONUNBUFFERED", "MPLBACKEND"):
        monkeypatch.setenv(key, yolo_env[key])  # the job image's font and settings: offline
    bucket = MemoryStore()
    folder = write_dataset(tmp_path / "dataset").parent  # the user's data.yaml: relative splits, no path:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        bucket.put_file(f"{DATA}/{path.relative_to(folder).as_posix()}", path)
    api = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=TOKEN)))
    job = service.submit(store, sim_clock, spec(), source="agent-train.yaml").id

    def machine(n: int, attempt: int, capacity: str) -> AgentConfig:
        inst = put_on_machine(store, sim_clock, job, attempt, instance_id=f"inst-00000000000{n}", capacity=capacity)
        return AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(TOKEN, inst, sim_clock, 4),
                           workdir=str(tmp_path / f"machine{n}"), yolov9_dir=str(yolov9_dir), python=yolo_python,
                           gpu="T4", gpu_count=0, workers=0, poll_seconds=0.2, reclaim_poll_seconds=0.2)

    def detail() -> dict:
        return api.get(f"/v1/jobs/{job}", headers=AUTH).json()

    # Machine 1: reclaimed once the first epoch is reported.
    notice = ReclaimNotice(cloud="aws", action="terminate", at=sim_clock.now() + timedelta(minutes=2))
    first = machine(1, 1, "spot")
    assert run_agent(first, api, stores=bucket,
                     reclaim_check=lambda: notice if detail()["epochs_done"] >= 1 else None) is False
    after = detail()
    assert after["state"] == "queued" and after["preemptions"] == 1, after["reason"]
    done = after["epochs_done"]
    assert 1 <= done < 3
    saved = tmp_path / "saved-last.pt"
    saved.write_bytes(bucket.objects[PREFIX + "weights/last.pt"])
    assert checkpoint_epoch(saved) == done - 1  # the checkpoint reported is the one uploaded
    assert PREFIX + "opt.yaml" in bucket.objects

    # Machine 2: other paths; it resumes from that checkpoint and finishes.
    second = machine(2, 2, "on-demand")
    assert run_agent(second, api, stores=bucket) is True, detail()["reason"]
    final = detail()
    assert final["state"] == "succeeded" and final["epochs_done"] == 3 and final["outputs"] == PREFIX
    log = (tmp_path / "machine2" / "logs" / "agent-train-a2.log").read_text()
    assert f"Resuming training from {yolo.checkpoint_path(second.workdir, 'agent-train')} from epoch {done}" in log
    opt = yaml.safe_load(bucket.objects[PREFIX + "opt.yaml"])
    assert opt["data"] == yolo.data_yaml_path(second.workdir) and opt["device"] == "cpu" and opt["workers"] == 0
    assert opt["save_dir"] == yolo.run_dir(second.workdir, "train", "agent-train")
    saved.write_bytes(bucket.objects[PREFIX + "weights/last.pt"])
    assert checkpoint_epoch(saved) == FINAL
    assert PREFIX + "weights/best.pt" in bucket.objects
    epochs = [r.epoch for r in yolo.parse_results_csv(bucket.objects[PREFIX + "results.csv"].decode())]
    assert epochs == [0, 1, 2]
