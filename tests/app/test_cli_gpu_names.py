"""GPU names as people type them, through the real command line: `validate` accepts A100 and `plan` prices it."""

from __future__ import annotations

from pathlib import Path

from tests.app.test_cli import gpusched

JOB = """\
name: coco-a100
team: vision-qa
kind: train
model: yolov9-c
data: {uri: s3://vision-qa-datasets/coco, train_images: 118000, val_images: 5000}
train: {epochs: 10, batch: 256}
resources: {gpus: [A100], gpu_count: 8}
where: {providers: [aws]}
policy: {capacity: on-demand, deadline: 7d, budget: 200000 CNY}
"""


def test_validate_accepts_a100_and_plan_shows_an_a100_offer(tmp_path: Path) -> None:
    job = tmp_path / "a100.yaml"
    job.write_text(JOB)
    r = gpusched("validate", str(job))
    assert r.returncode == 0, r.stderr
    r = gpusched("plan", str(job), "--at", "2026-11-02T09:00:00+00:00")
    assert r.returncode == 0, r.stderr
    assert "A100-40G" in r.stdout and "p4d.24xlarge" in r.stdout


def test_a_really_unknown_gpu_still_gets_the_did_you_mean_help(tmp_path: Path) -> None:
    job = tmp_path / "typo.yaml"
    job.write_text(JOB.replace("[A100]", "[H10]"))
    r = gpusched("validate", str(job))
    assert r.returncode == 2
    assert "resources.gpus[0]" in r.stderr and "did you mean 'H100'" in r.stderr and "Traceback" not in r.stderr


def test_offers_takes_the_names_job_files_take() -> None:
    r = gpusched("offers", "--gpu", "a100", "--provider", "aws")
    assert r.returncode == 0, r.stderr
    assert "A100-40G" in r.stdout and "A100-80G" not in r.stdout
