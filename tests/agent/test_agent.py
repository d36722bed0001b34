"""One training attempt on a machine, through the daemon's real API: inputs staged from the bucket,
a checkpoint you can trust after every epoch, a resume on another machine, the outputs at the end,
and half the batch when CUDA runs out of memory.

The bucket is an in-memory object store (tests/fakes/objectstore.py; test_storage.py checks the real
stores against moto and fakes of the SDKs), and train_dual.py is a stand-in that writes what the real
script writes in the order it writes it (tests/fakes/yolov9.py), launched by the agent's own launcher.
"""

from __future__ import annotations

import io
import pickle
import zipfile

import pytest
import yaml

from scheduler.agent.checkpoints import FINAL
from scheduler.agent.runner import AgentConfig, run_agent
from scheduler.agent.training import initial_total
from scheduler.errors import AuthFailed, SettingsError, Throttled
from scheduler.jobs import yolo
from tests.agent.harness import Machine, example
from tests.fakes.yolov9 import RESULTS_HEADER, checkpoint_bytes


def held(data: bytes) -> int:
    """The epoch a checkpoint's bytes hold."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        name = next(n for n in z.namelist() if n.endswith("data.pkl"))
        return pickle.loads(z.read(name))["epoch"]


def results_csv(epochs: range) -> str:
    return RESULTS_HEADER + "".join(f"{e:20d},{1.0:20.5g},{0.5:20.5g},{0.5:20.5g},{0.4:20.5g},{0.3:20.5g}\n"
                                    for e in epochs)


PREFIX = "s3://vision-qa-datasets/safety-helmet/v3/runs/helmet-s-v3/"


# --- a fresh run -------------------------------------------------------------------------------


def test_a_training_attempt_stages_its_inputs_checkpoints_every_epoch_and_uploads_its_outputs(
        store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    seen: list[tuple[int, int]] = []  # (epochs reported, epoch the uploaded last.pt held at that moment)

    def on_report(path, body):
        if path == "/progress":
            seen.append((body["epochs_done"], held(m.bucket.objects[body["checkpoint_uri"]])))

    m.http.on_report = on_report
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True

    # Inputs: the dataset folder with its data.yaml pointed here, the weights from their URI.
    data_yaml = yaml.safe_load((m.workdir / "data" / "data.yaml").read_text())
    assert data_yaml["path"] == str((m.workdir / "data").resolve()) and data_yaml["train"] == "images/train"
    assert (m.workdir / "weights" / "yolov9-s.pt").read_bytes() == \
        m.bucket.objects["s3://vision-qa-models/pretrained/yolov9-s.pt"]
    # A checkpoint per epoch, reported only once the uploaded last.pt held it. The last report's file is the
    # stripped final one, or (when the agent's poll came between YOLOv9 writing epoch 3 and stripping it, as on
    # a loaded machine) epoch 3's own: both let a resume skip every finished epoch.
    assert seen[:-1] == [(e + 1, e) for e in range(len(seen) - 1)] and seen[-1] in ((3, FINAL), (3, 2))
    uploads = [uri for op, uri in m.bucket.calls if op == "upload"]
    assert uploads.index(PREFIX + "opt.yaml") < uploads.index(PREFIX + "weights/last.pt")  # a resume needs both
    # The outputs, last.pt last.
    run = m.bucket.under(PREFIX)
    assert {"weights/best.pt", "weights/last.pt", "results.csv", "opt.yaml", "results.png"} <= set(run)
    assert held(run["weights/last.pt"]) == held(run["weights/best.pt"]) == FINAL
    assert uploads[-1] == PREFIX + "weights/last.pt"
    assert len(yolo.parse_results_csv(run["results.csv"].decode())) == 3
    detail = m.detail()
    assert detail["state"] == "succeeded" and detail["epochs_done"] == 3
    assert detail["checkpoint_uri"] == PREFIX + "weights/last.pt" and detail["outputs"] == PREFIX
    assert f"outputs in {PREFIX}" in detail["reason"]
    # What trained here, for the memory model: the batch per GPU the model gave an A10, once.
    [fitted] = m.events("batch_fitted")
    assert fitted["message"] == "attempt 1: a batch of 32 per GPU trains yolov9-s, img 640 on 1 x A10"
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False  # nothing more to run: "wait"


def test_last_pt_is_not_uploaded_until_it_holds_the_epoch_results_csv_shows(store, sim_clock, tmp_path, monkeypatch):
    # YOLOv9 writes the row, then saves last.pt: here a long pause between the two for epoch 1.
    monkeypatch.setenv("FAKE_HANG_AFTER", "1")
    monkeypatch.setenv("FAKE_HANG_SECONDS", "0.6")
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    seen: list[tuple[int, int]] = []
    m.http.on_report = lambda path, body: path == "/progress" and seen.append(
        (body["epochs_done"], held(m.bucket.objects[body["checkpoint_uri"]])))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    assert seen[0] == (1, 0) and all(epoch in (done - 1, FINAL) for done, epoch in seen)
    assert [done for done, _ in seen] == sorted({done for done, _ in seen})


# --- resuming on another machine ---------------------------------------------------------------


OTHER_MACHINE_OPT = """weights: /srv/other/weights/yolov9-s.pt
cfg: models/detect/yolov9-s.yaml
data: /srv/other/data/data.yaml
hyp:
  lr0: 0.01
  batch_size: 999
epochs: 5
batch_size: 64
imgsz: 640
device: 0,1,2,3
workers: 16
project: /srv/other/runs/train
name: helmet-s-v3
save_dir: /srv/other/runs/train/helmet-s-v3
"""


def resumable(store, sim_clock, tmp_path, *, epoch: int = 1, **kw) -> Machine:
    """Attempt 2 of a 5-epoch run that a 4-GPU machine elsewhere took to ``epoch`` (0-based)."""
    spec = example("helmet-s-train.yaml", epochs=5)
    m = Machine(store, sim_clock, tmp_path, spec, attempt=2, epochs_done=epoch + 1,
                checkpoint_uri=PREFIX + "weights/last.pt", **kw)
    m.bucket.put(PREFIX + "weights/last.pt", checkpoint_bytes(epoch))
    m.bucket.put(PREFIX + "weights/best.pt", checkpoint_bytes(0))
    m.bucket.put(PREFIX + "opt.yaml", OTHER_MACHINE_OPT)
    m.bucket.put(PREFIX + "results.csv", results_csv(range(epoch + 1)))
    return m


def test_a_resumed_attempt_fetches_last_pt_and_opt_yaml_and_rewrites_opt_yaml_for_this_machine(
        store, sim_clock, tmp_path):
    m = resumable(store, sim_clock, tmp_path, gpu="T4", workers=2)
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    run_dir = m.workdir / "runs" / "train" / "helmet-s-v3"
    log = m.log
    assert f"Resuming training from {run_dir}/weights/last.pt from epoch 2 to 5" in log
    # opt.yaml as this machine needs it: a T4's batch, its one GPU, its paths, its workers.
    opt = yaml.safe_load(m.bucket.objects[PREFIX + "opt.yaml"])
    assert opt["batch_size"] == initial_total(m.spec, m.cfg) == 16
    assert (opt["device"], opt["workers"]) == ("0", 2)
    assert opt["data"] == yolo.data_yaml_path(str(m.workdir)) and opt["save_dir"] == str(run_dir)
    assert opt["hyp"] == {"lr0": 0.01, "batch_size": 999}  # the rest as the first machine wrote it
    # The run went on from epoch 2; results.csv has every epoch, the earlier attempt's included.
    rows = yolo.parse_results_csv(m.bucket.objects[PREFIX + "results.csv"].decode())
    assert [r.epoch for r in rows] == [0, 1, 2, 3, 4]
    detail = m.detail()
    assert detail["state"] == "succeeded" and detail["epochs_done"] == 5 and detail["outputs"] == PREFIX


def test_a_final_checkpoint_means_an_earlier_attempt_finished_the_training(store, sim_clock, tmp_path):
    m = resumable(store, sim_clock, tmp_path, epoch=4)
    m.bucket.put(PREFIX + "weights/last.pt", checkpoint_bytes(FINAL))  # stripped: training ended
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    assert m.log == ""  # nothing ran
    detail = m.detail()
    assert detail["state"] == "succeeded" and detail["outputs"] == PREFIX
    assert "had finished on an earlier attempt" in detail["reason"]


def test_a_resume_without_opt_yaml_fails_saying_why(store, sim_clock, tmp_path):
    m = resumable(store, sim_clock, tmp_path)
    del m.bucket.objects[PREFIX + "opt.yaml"]
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    reason = m.detail()["reason"]
    assert "no opt.yaml beside the checkpoint" in reason and PREFIX in reason


# --- inputs that cannot be staged ------------------------------------------------------------


def test_a_dataset_the_role_may_not_read_fails_the_attempt_with_the_fix(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3))
    data = m.spec.data.uri
    m.bucket.fail("download_tree", data, AuthFailed(f"S3 list {data}: AccessDenied (HTTP 403)", provider="aws",
                                                    fix="give the instance profile's role s3:ListBucket"))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    detail = m.detail()
    assert detail["state"] == "failed"
    assert f"cannot stage {data}" in detail["reason"] and "AccessDenied" in detail["reason"]
    assert "s3:ListBucket" in detail["reason"]
    assert m.log == ""  # nothing was launched


def test_a_throttled_bucket_is_asked_again(store, sim_clock, tmp_path):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=1))
    m.bucket.fail("download", "s3://vision-qa-models/", Throttled("S3 SlowDown", provider="aws"), times=2)
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True


@pytest.mark.parametrize("in_checkout", [True, False])
def test_bare_weights_come_from_the_yolov9_checkout_or_the_job_must_name_a_uri(store, sim_clock, tmp_path,
                                                                               in_checkout):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=1, weights="yolov9-s.pt"))
    if in_checkout:
        (m.checkout / "weights").mkdir()
        (m.checkout / "weights" / "yolov9-s.pt").write_bytes(b"pretrained")
    assert run_agent(m.cfg, m.http, stores=m.bucket) is in_checkout
    if in_checkout:
        assert (m.workdir / "weights" / "yolov9-s.pt").read_bytes() == b"pretrained"
    else:
        reason = m.detail()["reason"]
        assert "'yolov9-s.pt' are not an object-store URI" in reason and str(m.checkout) in reason
        assert "or '' to train from scratch" in reason


# --- CUDA out of memory ---------------------------------------------------------------------------


def test_cuda_out_of_memory_halves_the_batch_until_it_fits_and_says_so(store, sim_clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_OOM_ABOVE", "8")
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=2))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    log = m.log
    assert log.count("CUDA out of memory") == 2 and "batch 32 on 0" in log and "batch 8 on 0" in log
    detail = m.detail()
    assert detail["state"] == "succeeded"
    assert "CUDA ran out of memory, so the batch was halved: 32 -> 16 -> 8 (8 per GPU)" in detail["reason"]
    [fitted] = m.events("batch_fitted")
    assert "a batch of 8 per GPU" in fitted["message"]
    assert m.http.bodies("/progress")[0]["physical_batch"] == 8


def test_cuda_out_of_memory_on_a_resumed_run_rewrites_opt_yaml(store, sim_clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_OOM_ABOVE", "10")
    m = resumable(store, sim_clock, tmp_path, gpu="T4")  # the model says 16 for a T4: it does not fit here
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    assert m.log.count("Resuming training from") == 2
    assert yaml.safe_load(m.bucket.objects[PREFIX + "opt.yaml"])["batch_size"] == 8
    assert "16 -> 8" in m.detail()["reason"]


def test_out_of_memory_at_one_image_per_gpu_fails(store, sim_clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_OOM_ABOVE", "0")
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=2), gpu="T4")
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    reason = m.detail()["reason"]
    assert reason.startswith("CUDA ran out of memory even at one image per GPU; exit status 1")
    assert "16 -> 8 -> 4 -> 2 -> 1 (1 per GPU)" in reason


def test_a_crash_that_is_not_out_of_memory_is_reported_with_the_epochs_it_finished(store, sim_clock, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("FAKE_DIE_AFTER", "1")
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=4))
    assert run_agent(m.cfg, m.http, stores=m.bucket) is False
    detail = m.detail()
    assert detail["state"] == "failed" and detail["epochs_done"] == 2
    assert "exit status 1" in detail["reason"] and "illegal memory access" in detail["reason"]
    assert "halved" not in detail["reason"] and m.log.count("batch 32") == 1


# --- the machine's settings --------------------------------------------------------------------


def test_agent_without_its_settings_says_what_is_missing():
    with pytest.raises(SettingsError, match="GPUSCHED_AGENT_TOKEN"):
        AgentConfig.from_env({"GPUSCHED_AGENT_API": "http://x", "GPUSCHED_AGENT_INSTANCE": "inst-1"})
    with pytest.raises(SettingsError, match="GPUSCHED_AGENT_INSTANCE"):
        AgentConfig.from_env({"GPUSCHED_AGENT_API": "http://x", "GPUSCHED_AGENT_TOKEN": "t"})


def test_the_agent_reads_its_cloud_and_metadata_address():
    env = {"GPUSCHED_AGENT_API": "http://d", "GPUSCHED_AGENT_INSTANCE": "inst-2", "GPUSCHED_AGENT_TOKEN": "t"}
    cfg = AgentConfig.from_env(env)
    assert (cfg.cloud, cfg.metadata_url, cfg.workers) == (None, None, 8)
    cfg = AgentConfig.from_env({**env, "GPUSCHED_AGENT_CLOUD": "tencent", "GPUSCHED_AGENT_WORKERS": "4",
                                "GPUSCHED_AGENT_METADATA_URL": "http://127.0.0.1:9999"})
    assert (cfg.cloud, cfg.metadata_url, cfg.workers) == ("tencent", "http://127.0.0.1:9999", 4)
