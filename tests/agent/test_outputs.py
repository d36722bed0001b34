"""What validation, export and inference attempts leave in object storage, and where the job says it is."""

from __future__ import annotations

import json
from pathlib import Path

from scheduler.agent.checkpoints import complete_copy
from scheduler.agent.outputs import export_prefix, prefix_of_checkpoint, remote_checkpoint, run_prefix, upload_export
from scheduler.agent.runner import run_agent
from scheduler.jobs import yolo
from scheduler.jobs.jobfile import parse_job
from tests.agent.harness import Machine, example
from tests.fakes.objectstore import MemoryStore
from tests.fakes.yolov9 import checkpoint_bytes


def test_where_a_jobs_files_live():
    train = example("helmet-s-train.yaml")
    assert run_prefix(train) == "s3://vision-qa-datasets/safety-helmet/v3/runs/helmet-s-v3/"
    assert remote_checkpoint(train) == run_prefix(train) + "weights/last.pt"
    assert prefix_of_checkpoint(remote_checkpoint(train)) == run_prefix(train)
    assert prefix_of_checkpoint("oss://b/elsewhere/ckpt.pt") == "oss://b/elsewhere/"
    assert export_prefix(example("helmet-export.yaml")) == "s3://vision-qa-models/safety-helmet/helmet-s-v3/"


def test_a_val_job_uploads_its_run_folder_and_metrics_and_says_them(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-val.yaml"))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    prefix = "s3://vision-qa-datasets/safety-helmet/v3/runs/helmet-s-v3-val/"
    run = m.bucket.under(prefix)
    assert {"metrics.json", "PR_curve.png", "confusion_matrix.png"} <= set(run)
    metrics = json.loads(run["metrics.json"])
    assert metrics == {"images": 500, "instances": 1234, "precision": 0.812, "recall": 0.743, "map50": 0.801,
                       "map50_95": 0.552}
    detail = m.detail()
    assert detail["state"] == "succeeded" and detail["outputs"] == prefix
    assert detail["reason"] == (f"P 0.812, R 0.743, mAP50 0.801, mAP50-95 0.552 on 500 images (1234 objects); "
                                f"metrics.json and the run folder in {prefix}")
    # The weights came from their URI, the dataset was staged for --data.
    assert (m.workdir / "weights" / "best.pt").read_bytes() == checkpoint_bytes(-1)


def test_a_val_run_that_printed_no_metrics_fails(store, sim_clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VAL_SILENT", "1")
    m = Machine(store, sim_clock, tmp_path, example("helmet-val.yaml"))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    assert m.detail()["reason"].startswith("val.py printed no metrics")
    assert not m.bucket.under("s3://vision-qa-datasets/safety-helmet/v3/runs")


def test_an_export_uploads_files_and_folders_next_to_the_weights(tmp_path):
    spec = parse_job({"name": "edge-export", "team": "vision-qa", "kind": "export", "model": "yolov9-s",
                      "export": {"weights": "cos://models-1250000000/helmet/best.pt",
                                 "formats": ["onnx", "openvino"]}}, "x.yaml")
    made = yolo.export_outputs(spec, str(tmp_path))
    Path(made["onnx"]).parent.mkdir(parents=True)
    Path(made["onnx"]).write_bytes(b"onnx")
    Path(made["openvino"], "sub").mkdir(parents=True)
    Path(made["openvino"], "best.xml").write_text("xml")
    Path(made["openvino"], "sub", "best.bin").write_bytes(b"bin")
    bucket = MemoryStore()
    prefix = export_prefix(spec)
    assert upload_export(bucket, spec, str(tmp_path), prefix) == [prefix + "best.onnx", prefix + "best_openvino_model/"]
    assert set(bucket.under(prefix)) == {"best.onnx", "best_openvino_model/best.xml",
                                         "best_openvino_model/sub/best.bin"}


def test_an_export_whose_weights_are_not_in_a_bucket_has_nowhere_to_go(store, sim_clock, tmp_path):
    spec = example("helmet-export.yaml")
    spec = spec.model_copy(update={"export": spec.export.model_copy(update={"weights": "yolov9-s.pt"})})
    m = Machine(store, sim_clock, tmp_path, spec)
    (m.checkout / "yolov9-s.pt").write_bytes(b"pt")
    (m.checkout / "export.py").write_text("raise SystemExit(0)")
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    assert "nowhere to go" in m.detail()["reason"] and m.log == ""


def test_images_that_cannot_be_staged_fail_the_inference_attempt(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("nightly-infer.yaml"))
    launched: list[list[str]] = []
    assert run_agent(m.cfg, m.http, stores=m.bucket, launch=launched.append) is False  # nothing is in the bucket
    assert launched == []
    reason = m.detail()["reason"]
    source = m.spec.infer.source
    assert reason.startswith(f"cannot stage {source} to {m.workdir / 'source'}: nothing under {source}")


def test_a_checkpoint_copy_says_the_epoch_it_holds_or_nothing(tmp_path):
    (tmp_path / "last.pt").write_bytes(checkpoint_bytes(4))
    assert complete_copy(tmp_path / "last.pt", tmp_path / "copy" / "last.pt") == 4
    (tmp_path / "torn.pt").write_bytes(checkpoint_bytes(5)[:40])
    assert complete_copy(tmp_path / "torn.pt", tmp_path / "copy" / "torn.pt") is None
    assert not (tmp_path / "copy" / "torn.pt").exists() and not list((tmp_path / "copy").glob("*.partial"))
    assert complete_copy(tmp_path / "missing.pt", tmp_path / "copy" / "x.pt") is None
