"""The YOLOv9 time and memory model against the priors in docs/yolov9-model.md."""

from __future__ import annotations

import math
from typing import Any

import pytest

from scheduler.errors import GpuschedError, UserError
from scheduler.gpus import GPUS
from scheduler.jobs.perf import Estimate, estimate, figures_for, needs_gpu, observed_rate
from scheduler.jobs.perf_memory import infer_memory_gib, physical_batch, train_memory_gib, usable_memory_gib
from scheduler.jobs.perf_rates import cpu_bound_rate, gpu_bound_rate, loader_share, scaling_efficiency, speed_factor
from scheduler.models import JobSpec

# GPUs ordered from slowest to fastest by the S(g) column of docs/yolov9-model.md.
BY_SPEED = ["T4", "L4", "A10G", "A10", "L20", "V100", "A100-40G", "A100-80G", "H100"]


def job(kind: str = "train", model: str = "yolov9-s", **sections: Any) -> JobSpec:
    body: dict[str, Any] = {
        "name": "helmet-v3",
        "team": "vision-qa",
        "kind": kind,
        "model": model,
        "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000, "val_images": 1500},
    }
    if kind == "train":
        body["train"] = {"epochs": 100, "img_size": 640, "batch": 64}
    if kind == "infer":
        body["infer"] = {"source": "s3://bucket/images/", "images": 200_000, "weights": "s3://bucket/best.pt"}
    if kind == "val":
        body["val"] = {"weights": "s3://bucket/best.pt"}
    if kind == "export":
        body["export"] = {"weights": "s3://bucket/best.pt", "formats": ["onnx", "engine"]}
    body.update(sections)
    return JobSpec.model_validate(body)


# --- the priors reproduce the tables of docs/yolov9-model.md ------------------------------


@pytest.mark.parametrize(
    "gpu, s",
    [("T4", 0.34), ("L4", 0.74), ("A10G", 0.79), ("A10", 1.06), ("L20", 1.25), ("V100", 1.30),
     ("A100-40G", 2.70), ("A100-80G", 3.09), ("H100", 7.06)],
)
def test_speed_factor_matches_the_reference(gpu: str, s: float) -> None:
    assert speed_factor(gpu) == pytest.approx(s, rel=0.02)


@pytest.mark.parametrize(
    "gpu, model, img_s",
    [
        ("T4", "yolov9-s", 41), ("T4", "gelan-c", 21), ("T4", "yolov9-c", 12),
        ("L4", "yolov9-s", 91), ("A10G", "gelan-c", 50), ("A10", "yolov9-c", 37),
        ("V100", "yolov9-s", 160), ("A100-40G", "gelan-c", 170), ("A100-80G", "yolov9-c", 108),
        ("H100", "yolov9-s", 867), ("H100", "yolov9-c", 247), ("L20", "gelan-c", 79),
    ],
)
def test_gpu_bound_training_rate_reproduces_the_reference_table(gpu: str, model: str, img_s: float) -> None:
    assert gpu_bound_rate(model, gpu, 640) == pytest.approx(img_s, rel=0.05)


def test_rate_falls_with_the_square_of_image_size() -> None:
    assert gpu_bound_rate("yolov9-s", "A10", 1280) == pytest.approx(gpu_bound_rate("yolov9-s", "A10", 640) / 4)


@pytest.mark.parametrize(
    "model, gib_at_16_32_64",
    [
        ("yolov9-t", (5.4, 8.9, 15.8)),
        ("gelan-s", (6.7, 11.4, 20.7)),
        ("yolov9-c", (21.1, 40.2, 78.4)),
        ("gelan-e", (22.6, 43.1, 84.2)),
    ],
)
def test_training_memory_reproduces_the_reference_table(model: str, gib_at_16_32_64: tuple[float, ...]) -> None:
    for batch, gib in zip((16, 32, 64), gib_at_16_32_64):
        assert train_memory_gib(model, batch, 640) == pytest.approx(gib, rel=0.02)  # a_v is rounded there


@pytest.mark.parametrize("gpu, batch", [("T4", 8), ("A10", 8), ("A100-40G", 16), ("A100-80G", 32)])
def test_physical_batch_for_yolov9_c(gpu: str, batch: int) -> None:
    got = physical_batch("yolov9-c", gpu, 640, 64)
    assert got == batch
    # The largest power of two that fits: the next one up would not.
    assert train_memory_gib("yolov9-c", got, 640) <= 0.9 * GPUS[gpu].mem_gib
    assert train_memory_gib("yolov9-c", got * 2, 640) > 0.9 * GPUS[gpu].mem_gib


@pytest.mark.parametrize("effective", [16, 48, 100])
def test_an_effective_batch_that_fits_is_used_as_it_is(effective: int) -> None:
    assert physical_batch("yolov9-t", "H100", 640, effective) == effective


def test_physical_batch_is_none_when_batch_1_does_not_fit() -> None:
    assert train_memory_gib("yolov9-e", 1, 2048) > usable_memory_gib("T4")
    assert physical_batch("yolov9-e", "T4", 2048, 64) is None
    assert physical_batch("yolov9-e", "H100", 2048, 64) is not None


# --- training estimates ------------------------------------------------------------------


def test_train_hours_are_setup_plus_epochs_times_epoch_hours() -> None:
    e = estimate(job(), "A10")
    assert e.fits and e.why_not is None
    assert e.epochs_left == 100
    assert e.hours == pytest.approx(e.setup_hours + 100 * e.epoch_hours)  # type: ignore[operator]
    assert e.epoch_hours == pytest.approx((12000 / e.throughput_img_s + 1500 / (3.5 * e.throughput_img_s)) / 3600)
    assert e.mem_gib == pytest.approx(train_memory_gib("yolov9-s", e.physical_batch, 640))  # type: ignore[arg-type]
    assert 0 < e.setup_hours < 0.5


@pytest.mark.parametrize(
    "vcpus, bound",
    [(4, "cpu"), (8, "gpu"), (48, "gpu")],
)
def test_training_rate_is_the_slower_of_gpu_and_data_loading(vcpus: int, bound: str) -> None:
    # yolov9-s on an A10G: ~98 img/s from the GPU; 4 vCPUs feed only 80.
    e = estimate(job(), "A10G", vcpus=vcpus)
    expected = cpu_bound_rate(vcpus, 1, e.physical_batch) if bound == "cpu" else gpu_bound_rate("yolov9-s", "A10G")  # type: ignore[arg-type]
    assert e.throughput_img_s == pytest.approx(expected)
    assert e.throughput_img_s <= gpu_bound_rate("yolov9-s", "A10G")


@pytest.mark.parametrize("gpus, nodes", [(2, 1), (4, 1), (8, 1), (4, 2)])
def test_more_gpus_train_faster_but_not_linearly(gpus: int, nodes: int) -> None:
    one = estimate(job(model="yolov9-c"), "A100-80G", 1, vcpus=96)
    many = estimate(job(model="yolov9-c"), "A100-80G", gpus, vcpus=96, nodes=nodes)
    n = gpus * nodes
    assert one.throughput_img_s < many.throughput_img_s < n * one.throughput_img_s
    assert many.throughput_img_s == pytest.approx(one.throughput_img_s * n * scaling_efficiency(n))
    assert scaling_efficiency(n) == pytest.approx(0.9 ** math.log2(n))
    assert any("[EST]" in note for note in many.notes)


@pytest.mark.parametrize("done", [10, 50, 99])
def test_resuming_shortens_the_job(done: int) -> None:
    fresh = estimate(job(), "L4")
    resumed = estimate(job(), "L4", epochs_done=done)
    assert resumed.epochs_left == 100 - done
    assert resumed.hours < fresh.hours
    assert resumed.epoch_hours == pytest.approx(fresh.epoch_hours)
    # Resuming downloads the last checkpoint on top of the dataset.
    assert resumed.setup_hours > fresh.setup_hours


def test_a_finished_run_has_only_setup_left() -> None:
    e = estimate(job(), "L4", epochs_done=100)
    assert e.epochs_left == 0
    assert e.hours == pytest.approx(e.setup_hours)


def test_a_measured_rate_replaces_the_prior() -> None:
    spec = job(model="gelan-c")
    prior = estimate(spec, "A10")
    measured = estimate(spec, "A10", measured={("gelan-c", "A10", 640): 20.0})
    assert prior.throughput_img_s != pytest.approx(20.0)
    assert measured.throughput_img_s == pytest.approx(20.0)
    assert measured.hours > prior.hours
    # A measurement for another GPU or image size is not used.
    other = estimate(spec, "A10", measured={("gelan-c", "L4", 640): 20.0, ("gelan-c", "A10", 1280): 20.0})
    assert other.throughput_img_s == pytest.approx(prior.throughput_img_s)


@pytest.mark.parametrize("gpus, nodes", [(1, 1), (4, 1), (8, 2)])
def test_an_observed_epoch_fed_back_reproduces_itself(gpus: int, nodes: int) -> None:
    epoch_seconds = 1234.0
    rate = observed_rate(epoch_seconds, 12000, 1500, gpu_count=gpus, nodes=nodes)
    batch = estimate(job(), "V100", gpus, vcpus=64, nodes=nodes).physical_batch
    assert batch is not None
    # Learned rates are kept GPU-bound: the observed one over the share the machine's loader let through.
    share = loader_share("yolov9-s", "V100", 640, 64, gpus, batch)
    e = estimate(job(), "V100", gpus, vcpus=64, nodes=nodes, measured={("yolov9-s", "V100", 640): rate / share})
    assert e.epoch_hours * 3600 == pytest.approx(epoch_seconds)  # type: ignore[operator]


def test_a_measured_rate_is_scaled_by_each_machines_data_loader() -> None:
    # yolov9-s on an A10G is GPU-bound on 32 vCPUs and loader-bound on 4: a rate learned as the GPU's speed
    # is what 32 vCPUs feed, and 4 feed the loader's share of it.
    spec = job(model="yolov9-s")
    gpu_rate = gpu_bound_rate("yolov9-s", "A10G") * 0.9
    measured = {("yolov9-s", "A10G", 640): gpu_rate}
    big = estimate(spec, "A10G", vcpus=32, measured=measured)
    small = estimate(spec, "A10G", vcpus=4, measured=measured)
    assert big.physical_batch is not None
    assert loader_share("yolov9-s", "A10G", 640, 32, 1, big.physical_batch) == 1.0
    share = cpu_bound_rate(4, 1, big.physical_batch) / gpu_bound_rate("yolov9-s", "A10G")
    assert share < 0.9  # the case the rule is for: a machine whose loader starves the GPU
    assert big.throughput_img_s == pytest.approx(gpu_rate)
    assert small.throughput_img_s == pytest.approx(gpu_rate * share)
    assert any("data loader" in n for n in small.notes) and not any("data loader" in n for n in big.notes)


def test_an_epoch_without_duration_is_refused() -> None:
    with pytest.raises(GpuschedError, match="observed epoch"):
        observed_rate(0, 12000)


def test_a_job_that_does_not_fit_says_what_to_change() -> None:
    spec = job(model="yolov9-e", train={"epochs": 10, "img_size": 2048, "batch": 16})
    e = estimate(spec, "T4")
    assert not e.fits
    assert e.physical_batch is None
    assert math.isinf(e.hours)
    assert e.mem_gib == pytest.approx(train_memory_gib("yolov9-e", 1, 2048))
    for part in ("yolov9-e", "2048 px", "T4 has 15 GiB", "more memory", "lower img_size"):
        assert part in e.why_not  # type: ignore[operator]
    assert estimate(spec, "H100").fits


def test_multi_gpu_training_splits_the_batch_across_gpus() -> None:
    spec = job(model="yolov9-c", train={"epochs": 10, "batch": 64})
    assert estimate(spec, "A100-80G", 1).physical_batch == 32
    assert estimate(spec, "A100-80G", 8).physical_batch == 8


# --- inference, validation, export ------------------------------------------------------


@pytest.mark.parametrize("kind", ["infer", "val", "export"])
@pytest.mark.parametrize("model", ["yolov9-e", "gelan-s"])
def test_other_kinds_are_positive_and_faster_on_faster_gpus(kind: str, model: str) -> None:
    hours = [estimate(job(kind, model=model), gpu).hours for gpu in BY_SPEED]
    assert all(h > 0 for h in hours)
    if kind == "val" and model == "gelan-s":
        # A small model validates faster than 8 loader workers decode: the fast GPUs tie.
        assert all(a >= b for a, b in zip(hours, hours[1:])), list(zip(BY_SPEED, hours))
        assert hours[0] > hours[-1]
    else:
        assert all(a > b for a, b in zip(hours, hours[1:])), list(zip(BY_SPEED, hours))
    for gpu in BY_SPEED:
        e = estimate(job(kind, model=model), gpu)
        assert e.fits
        if kind == "infer":  # shards are its resumable unit (infer_shards)
            assert e.epochs_left == 10 and e.epoch_hours == pytest.approx((e.hours - e.setup_hours) / 10)
        else:
            assert e.epoch_hours is None and e.epochs_left is None
        assert e.hours > e.setup_hours > 0


def test_inference_is_per_image_and_uses_one_gpu() -> None:
    one = estimate(job("infer"), "L4")
    assert one.physical_batch is None
    assert one.hours == pytest.approx(one.setup_hours + 200_000 / one.throughput_img_s / 3600)
    # detect.py runs batch 1: slower than training throughput's GPU bound on a big GPU, and more GPUs do not help.
    assert estimate(job("infer"), "L4", 4).hours == pytest.approx(one.hours)
    assert one.notes


def test_bigger_models_infer_slower() -> None:
    rates = [estimate(job("infer", model=m), "A10").throughput_img_s
             for m in ("yolov9-t", "yolov9-s", "yolov9-m", "yolov9-c", "yolov9-e")]
    assert all(a > b for a, b in zip(rates, rates[1:]))


def test_validation_rate_is_a_multiple_of_the_training_rate() -> None:
    e = estimate(job("val"), "A10", vcpus=32)
    assert e.throughput_img_s == pytest.approx(3.5 * gpu_bound_rate("yolov9-s", "A10"))
    # On a fast GPU the loader (8 workers, no mosaic) is the ceiling.
    assert estimate(job("val"), "H100", vcpus=32).throughput_img_s < 3.5 * gpu_bound_rate("yolov9-s", "H100")
    assert e.physical_batch == 32
    assert e.mem_gib == pytest.approx(infer_memory_gib("yolov9-s", 32, 640))


def test_export_engine_is_marked_and_needs_a_gpu() -> None:
    engine = estimate(job("export"), "A10")
    onnx_only = estimate(job("export", export={"weights": "s3://bucket/best.pt", "formats": ["onnx"]}), "A10")
    assert engine.hours > onnx_only.hours > onnx_only.setup_hours
    assert any("A10" in n and "TensorRT" in n for n in engine.notes)
    assert not onnx_only.notes
    assert needs_gpu(job("export"))
    assert not needs_gpu(job("export", export={"weights": "s3://bucket/best.pt", "formats": ["onnx"]}))
    assert needs_gpu(job("train")) and needs_gpu(job("infer"))


# --- bad input ---------------------------------------------------------------------------


def test_an_unknown_gpu_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown GPU 'K80'"):
        estimate(job(), "K80")
    with pytest.raises(UserError, match="unknown GPU"):
        speed_factor("RTX 5090")


def test_a_train_job_without_an_image_count_is_a_user_error() -> None:
    spec = job(data={"uri": "s3://bucket/datasets/helmet"})
    with pytest.raises(UserError, match="data.train_images"):
        estimate(spec, "A10")


# --- one job, many GPU setups (what the planner asks) -------------------------------------


@pytest.mark.parametrize("kind", ["train", "infer", "val", "export"])
@pytest.mark.parametrize("done", [0, 3])
def test_figures_for_one_job_match_estimates_setup_by_setup(kind: str, done: int) -> None:
    spec = job(kind)
    on = figures_for(spec, epochs_done=done, nodes=2)
    for gpu, count, vcpus in [("T4", 1, 8), ("H100", 8, 96), ("T4", 1, 8), ("A10", 4, 4)]:  # T4 again: nothing kept
        assert Estimate(**on(gpu, count, vcpus)._asdict()) == estimate(spec, gpu, count, vcpus, epochs_done=done,
                                                                      nodes=2)


def test_figures_for_a_job_it_cannot_size_names_an_unknown_gpu_first() -> None:
    on = figures_for(job(data={"uri": "s3://bucket/datasets/helmet"}))
    with pytest.raises(UserError, match="unknown GPU 'K80'"):
        on("K80", 1, 8)
    with pytest.raises(UserError, match="data.train_images"):
        on("A10", 1, 8)
