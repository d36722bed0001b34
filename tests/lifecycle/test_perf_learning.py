"""Learning training rates from observed epochs: recording, outliers, medians, the perf table, planning.

Epoch times are derived from the real performance model (``scheduler.jobs.perf``),
so every expectation follows from the priors instead of hard-coded hours.
"""

from __future__ import annotations

import math
import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from providers.catalog import load_catalog
from scheduler.gpus import GPUS
from scheduler.jobs import perf, perf_memory, perf_rates
from scheduler.jobs.perf_priors import VARIANTS
from scheduler.lifecycle.perf_learning import (
    OUTLIER_FACTOR,
    OWN_KEPT,
    RatesMemo,
    catalog_vcpus,
    learn_from_progress,
    measured_rates,
    outlier,
    own_rates,
    perf_table,
    prior_rate,
    rebase_samples,
    record_epochs,
)
from scheduler.models import JobSpec, Offer, Price, Stock
from scheduler.money import Money
from scheduler.planner.inputs import PlanJob, PlannerPolicy
from scheduler.planner.plan import options_for
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow, PerfSampleRow

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=timezone.utc)
VCPUS = 8


def make_spec(*, model: str = "yolov9-s", gpus: tuple[str, ...] = ("A10G",), train_images: int = 12_000,
              val_images: int = 1_500, epochs: int = 20, img_size: int = 640, kind: str = "train") -> JobSpec:
    raw: dict = {"name": "helmet-v3", "team": "vision-qa", "kind": kind, "model": model,
                 "resources": {"gpus": list(gpus)}}
    if kind == "train":
        raw["data"] = {"uri": "s3://bucket/helmet", "train_images": train_images, "val_images": val_images}
        raw["train"] = {"epochs": epochs, "img_size": img_size, "batch": 64}
    else:
        raw["infer"] = {"source": "s3://bucket/images/", "images": 10_000,
                        "weights": "s3://bucket/runs/helmet-v3/best.pt"}
    return JobSpec.model_validate(raw)


def seed(s: Session, spec: JobSpec, *, job_id: str = "job-000000000001", gpu: str = "A10G", gpu_count: int = 1,
         instance_type: str = "test.gpu", attempt_no: int = 1, start_epoch: int = 0,
         started_at: datetime = T0) -> tuple[JobRow, AttemptRow]:
    """A running job on a running instance, as ``transitions.start_job_on`` leaves them."""
    inst = InstanceRow(
        id=f"inst-{job_id[-6:]}-{attempt_no}", provider="aws", region="us-east-1", zone="us-east-1a",
        instance_type=instance_type, gpu=gpu, gpu_count=gpu_count, capacity="on-demand",
        client_token=f"{job_id}-{attempt_no}", state="running", job_id=job_id, team="vision-qa",
        price_amount=Decimal(1), price_currency="USD", on_demand_amount=Decimal(1), created_at=started_at,
    )
    job = s.get(JobRow, job_id)
    if job is None:
        job = JobRow(id=job_id, name=spec.name, team=spec.team, kind=spec.kind.value, model=spec.model,
                     spec_json=spec.model_dump(mode="json"), state="running", submitted_at=started_at,
                     updated_at=started_at, epochs_done=start_epoch, attempt=attempt_no)
        s.add(job)
    job.updated_at = started_at
    s.add(inst)
    s.flush()  # the tables have foreign keys but no relationships: insert in their order
    attempt = AttemptRow(
        job_id=job_id, number=attempt_no, state="running", client_token=f"tok-{job_id}-{attempt_no}",
        provider="aws", region="us-east-1", zone="us-east-1a", instance_type=instance_type,
        capacity="on-demand", instance_id=inst.id, start_epoch=start_epoch, created_at=started_at,
        started_at=started_at,
    )
    s.add(attempt)
    s.flush()
    return job, attempt


def report(s: Session, job: JobRow, attempt: AttemptRow, epochs_done: int, now: datetime) -> PerfSampleRow | None:
    """What ``agent_reports.report_progress`` does with a new epoch, learning first."""
    row = learn_from_progress(s, job=job, attempt=attempt, epochs_done=epochs_done, now=now)
    job.epochs_done = epochs_done
    job.updated_at = now
    return row


def prior_epoch_seconds(spec: JobSpec, gpu: str, *, epochs_done: int = 0) -> float:
    est = perf.estimate(spec, gpu, 1, VCPUS, epochs_done=epochs_done)
    assert est.epoch_hours is not None
    return est.epoch_hours * 3600


def setup_seconds(spec: JobSpec, gpu: str, *, epochs_done: int = 0) -> float:
    return perf.estimate(spec, gpu, 1, VCPUS, epochs_done=epochs_done).setup_hours * 3600


def add_sample(s: Session, rate: float, at: datetime, *, model: str = "yolov9-s", gpu: str = "A10G",
               img_size: int = 640, source: str = "agent", job_id: str = "job-000000000009") -> None:
    s.add(PerfSampleRow(at=at, job_id=job_id, attempt=1, model=model, gpu=gpu, gpu_count=1, nodes=1,
                        img_size=img_size, batch=16, train_images=1000, val_images=0,
                        epoch_seconds=1000 / rate, rate_img_s=rate, source=source))


# --- recording ------------------------------------------------------------------------


def test_a_sequence_of_reports_gives_one_sample_each_with_the_true_epoch_time(store: Store) -> None:
    spec = make_spec()
    true_epoch = prior_epoch_seconds(spec, "A10G") * 1.25  # the job really runs 25% slower than the prior
    t_first = T0 + timedelta(seconds=setup_seconds(spec, "A10G") + true_epoch)
    with store.session() as s:
        job, attempt = seed(s, spec, instance_type="g5.2xlarge")  # 8 vCPUs in the bundled catalog
        rows = [
            report(s, job, attempt, 1, t_first),
            report(s, job, attempt, 2, t_first + timedelta(seconds=true_epoch)),
            report(s, job, attempt, 4, t_first + timedelta(seconds=3 * true_epoch)),  # one report, two epochs
        ]
        stored = s.scalars(select(PerfSampleRow).order_by(PerfSampleRow.at)).all()
    assert all(r is not None for r in rows)
    assert len(stored) == 3
    expected_rate = perf.observed_rate(true_epoch, 12_000, 1_500)
    for row in stored:
        assert row.epoch_seconds == pytest.approx(true_epoch, rel=1e-6)
        assert row.rate_img_s == pytest.approx(expected_rate, rel=1e-6)
        assert (row.model, row.gpu, row.img_size, row.attempt, row.source) == ("yolov9-s", "A10G", 640, 1, "agent")
        assert row.batch == perf_memory.physical_batch("yolov9-s", "A10G", 640, 64)
    # Fed back to the model, the learned rate reproduces the observed epoch.
    with store.session() as s:
        measured = measured_rates(s)
    est = perf.estimate(spec, "A10G", 1, VCPUS, measured=measured)
    assert est.epoch_hours is not None
    assert est.epoch_hours * 3600 == pytest.approx(true_epoch, rel=1e-6)


def test_first_report_of_a_resumed_attempt_takes_off_the_resume_setup(store: Store) -> None:
    spec = make_spec()
    true_epoch = prior_epoch_seconds(spec, "A10G")
    # A resume also downloads last.pt, so its setup is longer than a fresh start's.
    resume_setup = setup_seconds(spec, "A10G", epochs_done=7)
    assert resume_setup > setup_seconds(spec, "A10G")
    with store.session() as s:
        job, attempt = seed(s, spec, attempt_no=2, start_epoch=7)
        row = report(s, job, attempt, 8, T0 + timedelta(seconds=resume_setup + true_epoch))
    assert row is not None
    assert row.epoch_seconds == pytest.approx(true_epoch, rel=1e-6)
    assert row.attempt == 2


def test_multi_gpu_samples_are_stored_per_gpu(store: Store) -> None:
    spec = make_spec()
    with store.session() as s:
        job, attempt = seed(s, spec, gpu_count=4)
        since = T0 + timedelta(hours=1)
        inst = s.get(InstanceRow, attempt.instance_id)
        assert inst is not None
        row = record_epochs(s, job=job, attempt=attempt, instance=inst, epochs_before=3, epochs_after=4,
                            since=since, now=since + timedelta(seconds=120), vcpus=32)
    assert row is not None
    assert row.rate_img_s == pytest.approx(perf.observed_rate(120, 12_000, 1_500, gpu_count=4), rel=1e-9)
    assert row.rate_img_s < perf.observed_rate(120, 12_000, 1_500)


def test_a_sample_is_stored_as_the_gpus_rate_and_predicts_its_own_machine_and_a_bigger_one(store: Store) -> None:
    # yolov9-s on an A10G: 4 vCPUs feed less than the GPU takes (the prior is loader-bound), 32 feed it all.
    spec = make_spec()
    batch = perf.estimate(spec, "A10G").physical_batch
    assert batch is not None
    share = perf_rates.loader_share("yolov9-s", "A10G", 640, 4, 1, batch)
    assert share < 1 and perf_rates.loader_share("yolov9-s", "A10G", 640, 32, 1, batch) == 1
    small = perf.estimate(spec, "A10G", vcpus=4)
    assert small.epoch_hours is not None
    epoch = small.epoch_hours * 3600 * 1.3  # the job runs 30% slower than its prior on the 4-vCPU machine
    with store.session() as s:
        job, attempt = seed(s, spec, instance_type="g5.xlarge")
        inst = s.get(InstanceRow, attempt.instance_id)
        assert inst is not None
        row = record_epochs(s, job=job, attempt=attempt, instance=inst, epochs_before=2, epochs_after=3,
                            since=T0, now=T0 + timedelta(seconds=epoch), vcpus=4)
    assert row is not None
    observed = perf.observed_rate(epoch, 12_000, 1_500)
    assert row.rate_img_s == pytest.approx(observed / share)
    assert row.epoch_seconds == pytest.approx(epoch)  # what was seen stays as it was seen
    measured = {("yolov9-s", "A10G", 640): row.rate_img_s}
    again = perf.estimate(spec, "A10G", vcpus=4, measured=measured).epoch_hours
    assert again is not None and again * 3600 == pytest.approx(epoch)
    big = perf.estimate(spec, "A10G", vcpus=32, measured=measured).epoch_hours
    assert big is not None and big * 3600 == pytest.approx(epoch * share)


def test_samples_from_before_the_loader_share_are_divided_once_by_their_machines(store: Store) -> None:
    # Rows migration 0016 found (no loader_share) hold the machine's rate: a 4-vCPU g5.xlarge's is divided by
    # its share, a machine the catalog does not list keeps its rate (share 1), a new row is left alone.
    spec = make_spec()
    assert catalog_vcpus("g5.xlarge") == 4
    batch = perf.estimate(spec, "A10G").physical_batch
    assert batch is not None
    share = perf_rates.loader_share("yolov9-s", "A10G", 640, 4, 1, batch)
    assert share < 1
    with store.session() as s:
        for job_id, instance_type in (("job-000000000001", "g5.xlarge"), ("job-000000000002", "not.in.catalog")):
            seed(s, spec, job_id=job_id, instance_type=instance_type)
            s.add(PerfSampleRow(at=T0, job_id=job_id, attempt=1, model="yolov9-s", gpu="A10G", gpu_count=1,
                                nodes=1, img_size=640, batch=batch, train_images=12_000, val_images=1_500,
                                epoch_seconds=100.0, rate_img_s=80.0, source="agent", loader_share=None))
        add_sample(s, 90.0, T0, job_id="job-000000000003")  # no attempt behind it: share 1
        s.add(PerfSampleRow(at=T0, job_id="job-000000000001", attempt=1, model="yolov9-s", gpu="A10G",
                            gpu_count=1, nodes=1, img_size=640, batch=batch, train_images=12_000, val_images=1_500,
                            epoch_seconds=100.0, rate_img_s=70.0, source="agent", loader_share=0.5))
    with store.session() as s:
        assert rebase_samples(s) == 3
    with store.session() as s:
        assert rebase_samples(s) == 0  # once
        got = [(r.job_id, r.rate_img_s, r.loader_share) for r in s.scalars(select(PerfSampleRow).order_by(
            PerfSampleRow.id))]
    assert got == [("job-000000000001", pytest.approx(80.0 / share), pytest.approx(share)),
                   ("job-000000000002", 80.0, 1.0),
                   ("job-000000000003", 90.0, 1.0),
                   ("job-000000000001", 70.0, 0.5)]  # written with its share: not divided again


@pytest.mark.parametrize(
    ("slowdown", "kept"),
    [
        (1.0, True),
        (1 / (OUTLIER_FACTOR * 0.8), True),  # 8x faster than the prior: odd but believable
        (OUTLIER_FACTOR * 0.8, True),  # 8x slower
        (1 / (OUTLIER_FACTOR * 2), False),  # 20x faster: a clock or dataset error
        (OUTLIER_FACTOR * 2, False),  # 20x slower: stalled
    ],
)
def test_epochs_far_from_the_prior_are_dropped_as_outliers(store: Store, slowdown: float, kept: bool) -> None:
    spec = make_spec()
    epoch = prior_epoch_seconds(spec, "A10G") * slowdown
    with store.session() as s:
        job, attempt = seed(s, spec)
        job.epochs_done = 5  # not the first report: no setup to take off
        row = report(s, job, attempt, 6, T0 + timedelta(seconds=epoch))
        count = len(s.scalars(select(PerfSampleRow)).all())
    assert (row is not None) is kept
    assert count == (1 if kept else 0)


@pytest.mark.parametrize(
    ("epochs_before", "epochs_reported", "after_seconds"),
    [
        pytest.param(5, 6, 0.0, id="no time passed"),
        pytest.param(5, 5, 600.0, id="no new epoch"),
        pytest.param(0, 1, 30.0, id="first report before the estimated setup was over"),
    ],
)
def test_nonsense_reports_record_nothing(store: Store, epochs_before: int, epochs_reported: int,
                                         after_seconds: float) -> None:
    spec = make_spec()
    assert setup_seconds(spec, "A10G") > 30  # the last case relies on it
    with store.session() as s:
        job, attempt = seed(s, spec, start_epoch=0)
        job.epochs_done = epochs_before
        row = report(s, job, attempt, epochs_reported, T0 + timedelta(seconds=after_seconds))
        assert s.scalars(select(PerfSampleRow)).all() == []
    assert row is None


def test_outlier_band_uses_the_machines_data_loader_when_its_vcpus_are_known(store: Store) -> None:
    # gelan-t on an H100 is starved by a 4-vCPU loader: the GPU-bound prior is far above what it can do.
    spec = make_spec(model="gelan-t", gpus=("H100",), val_images=0)
    loader_rate = perf_rates.cpu_bound_rate(4, 1, 64)
    assert perf_rates.gpu_bound_rate("gelan-t", "H100") > OUTLIER_FACTOR * loader_rate
    epoch = 12_000 / (loader_rate * 0.9)  # a plausible data-starved epoch (no val images)
    results = {}
    with store.session() as s:
        for job_id, vcpus in (("job-000000000001", 4), ("job-000000000002", None)):
            job, attempt = seed(s, spec, job_id=job_id, gpu="H100", instance_type="not.in.catalog")
            inst = s.get(InstanceRow, attempt.instance_id)
            assert inst is not None
            results[vcpus] = record_epochs(s, job=job, attempt=attempt, instance=inst, epochs_before=2,
                                           epochs_after=3, since=T0, now=T0 + timedelta(seconds=epoch), vcpus=vcpus)
    assert results[4] is not None
    assert results[None] is None  # unknown machine: compared with the GPU-bound prior, it looks stalled


@pytest.mark.parametrize(
    ("job_state", "attempt_state", "kind"),
    [("running", "running", "infer"), ("cancelled", "running", "train"), ("running", "failed", "train")],
)
def test_only_running_train_jobs_learn(store: Store, job_state: str, attempt_state: str, kind: str) -> None:
    spec = make_spec(kind=kind)
    with store.session() as s:
        job, attempt = seed(s, spec)
        job.state, attempt.state = job_state, attempt_state
        job.epochs_done = 3
        row = learn_from_progress(s, job=job, attempt=attempt, epochs_done=4, now=T0 + timedelta(minutes=10))
        assert s.scalars(select(PerfSampleRow)).all() == []
    assert row is None


@pytest.mark.parametrize(("rate", "prior", "bad"), [(100, 100, False), (5, 100, True), (2000, 100, True),
                                                    (math.nan, 100, True), (0, 100, True), (-3, 100, True)])
def test_outlier_verdicts(rate: float, prior: float, bad: bool) -> None:
    assert (outlier(rate, prior) is not None) is bad


def test_prior_rate_is_capped_by_the_loader_only_when_vcpus_are_known() -> None:
    gpu_bound = perf_rates.gpu_bound_rate("gelan-t", "H100")
    assert prior_rate("gelan-t", "H100", 640) == gpu_bound
    assert prior_rate("gelan-t", "H100", 640, vcpus=4, batch=64) == perf_rates.cpu_bound_rate(4, 1, 64) < gpu_bound


def test_catalog_vcpus_agree_with_every_offer_of_the_type() -> None:
    offers = load_catalog()
    assert all(catalog_vcpus(o.instance_type) == o.vcpus for o in offers)
    assert catalog_vcpus("no.such.type") is None


# --- learning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rates", "min_samples", "expected"),
    [
        ([100.0, 110.0, 300.0], 2, 110.0),  # the median ignores one wild sample
        ([100.0, 120.0], 2, 110.0),
        ([100.0], 2, None),  # too few to trust
        ([100.0], 1, 100.0),
    ],
)
def test_measured_rates_median_and_min_samples(store: Store, rates: list[float], min_samples: int,
                                               expected: float | None) -> None:
    with store.session() as s:
        for i, rate in enumerate(rates):
            add_sample(s, rate, T0 + timedelta(minutes=i))
        add_sample(s, 50.0, T0, gpu="L4")  # another key: kept apart
        got = measured_rates(s, min_samples=min_samples)
    assert got.get(("yolov9-s", "A10G", 640)) == expected
    assert got.get(("yolov9-s", "L4", 640)) == (50.0 if min_samples == 1 else None)


def test_measured_rates_read_only_the_newest_samples(any_store: Store) -> None:
    # The window query is the one piece of SQL here that differs by backend: run it on both.
    with any_store.session() as s:
        for i in range(10):
            add_sample(s, 60.0, T0 + timedelta(minutes=i))  # an old driver
        for i in range(3):
            add_sample(s, 90.0, T0 + timedelta(days=1, minutes=i))
        newest = measured_rates(s, recent=3)
        all_of_them = measured_rates(s, recent=20)
        fresh = measured_rates(s, max_age=timedelta(hours=2), now=T0 + timedelta(days=1, hours=1))
    assert newest[("yolov9-s", "A10G", 640)] == 90.0
    assert all_of_them[("yolov9-s", "A10G", 640)] == 60.0
    assert fresh[("yolov9-s", "A10G", 640)] == 90.0


def test_rates_memo_reads_again_only_after_a_new_sample(store: Store) -> None:
    memo = RatesMemo()
    with store.session() as s:
        for i in range(3):
            add_sample(s, 60.0, T0 + timedelta(minutes=i))
    with store.session() as s:
        first = memo.get(s)
        assert memo.get(s) is first  # nothing new: the same answer, not a new query of every sample
    with store.session() as s:
        for i in range(4):
            add_sample(s, 90.0, T0 + timedelta(hours=1, minutes=i))
    with store.session() as s:
        again = memo.get(s)
    assert first[("yolov9-s", "A10G", 640)] == 60.0
    assert again[("yolov9-s", "A10G", 640)] == 90.0


def test_rates_memo_folding_in_new_samples_gives_what_reading_every_sample_gives(store: Store) -> None:
    # The memo reads only the samples added since its last look (SQLite); after every batch of random
    # samples (keys that pass the 20-sample window, ties on the time, samples that arrive older than
    # the newest) it must say exactly what measured_rates says from all of them.
    rng = random.Random(7)
    memo = RatesMemo()
    keys = [("yolov9-s", "A10G", 640), ("yolov9-s", "T4", 640), ("yolov9-c", "A10G", 1280), ("gelan-c", "L4", 640)]
    for batch in range(12):
        with store.session() as s:
            for _ in range(rng.choice((0, 1, 3, 9, 25))):
                model, gpu, img_size = rng.choice(keys)
                at = T0 + timedelta(minutes=rng.choice((0, 5, 5, 30)) + batch * rng.choice((0, 10, 10)))
                add_sample(s, round(rng.uniform(20, 200), rng.choice((0, 3))), at, model=model, gpu=gpu,
                           img_size=img_size)
        with store.session() as s:
            assert memo.get(s) == measured_rates(s), f"batch {batch}"
    assert len(memo.get(s)) >= 3


def test_rates_memo_looks_at_most_once_per_refresh_when_given_the_time(store: Store) -> None:
    memo = RatesMemo(refresh=timedelta(minutes=10))
    with store.session() as s:
        for i in range(3):
            add_sample(s, 60.0, T0 + timedelta(minutes=i))
    with store.session() as s:
        assert memo.get(s, T0)[("yolov9-s", "A10G", 640)] == 60.0
        for i in range(4):
            add_sample(s, 90.0, T0 + timedelta(minutes=5 + i))
    with store.session() as s:
        assert memo.get(s, T0 + timedelta(minutes=9))[("yolov9-s", "A10G", 640)] == 60.0  # not yet
        assert memo.get(s, T0 + timedelta(minutes=10))[("yolov9-s", "A10G", 640)] == 90.0


def test_measured_rates_can_leave_out_simulated_samples(store: Store) -> None:
    with store.session() as s:
        for i in range(3):
            add_sample(s, 70.0, T0 + timedelta(minutes=i), source="simulated")
        assert measured_rates(s, sources=("agent",)) == {}
        assert measured_rates(s)[("yolov9-s", "A10G", 640)] == 70.0


@pytest.mark.parametrize(
    "kwargs", [{"min_samples": 0}, {"min_samples": 5, "recent": 3}, {"max_age": timedelta(days=1)}]
)
def test_measured_rates_refuse_meaningless_arguments(store: Store, kwargs: dict) -> None:
    with store.session() as s, pytest.raises(ValueError):
        measured_rates(s, **kwargs)


# --- the perf table -------------------------------------------------------------------


def test_perf_table_marks_measured_and_prior_rows_with_counts(any_store: Store) -> None:
    with any_store.session() as s:
        for i, rate in enumerate((80.0, 85.0, 90.0)):
            add_sample(s, rate, T0 + timedelta(minutes=i))
        add_sample(s, 40.0, T0 + timedelta(hours=1), gpu="T4")  # one sample: not enough
        for i in range(2):
            add_sample(s, 30.0, T0 + timedelta(minutes=i), img_size=1280)  # a size with no listed prior
        table = perf_table(s)
    by_key = {(r.model, r.gpu, r.img_size): r for r in table}
    assert len(table) == len(VARIANTS) * len(GPUS) + 1

    measured = by_key[("yolov9-s", "A10G", 640)]
    assert (measured.source, measured.samples, measured.rate_img_s) == ("measured", 3, 85.0)
    assert measured.prior_rate == perf_rates.gpu_bound_rate("yolov9-s", "A10G", 640)
    assert measured.last_seen == T0 + timedelta(minutes=2)

    thin = by_key[("yolov9-s", "T4", 640)]
    assert (thin.source, thin.samples) == ("prior", 1)
    assert thin.rate_img_s == thin.prior_rate == perf_rates.gpu_bound_rate("yolov9-s", "T4", 640)
    assert thin.last_seen == T0 + timedelta(hours=1)

    big = by_key[("yolov9-s", "A10G", 1280)]
    assert (big.source, big.samples, big.rate_img_s) == ("measured", 2, 30.0)

    untouched = by_key[("gelan-e", "H100", 640)]
    assert (untouched.source, untouched.samples, untouched.last_seen) == ("prior", 0, None)


def test_perf_table_filters_by_model_and_gpu(store: Store) -> None:
    with store.session() as s:
        add_sample(s, 80.0, T0)
        add_sample(s, 82.0, T0)
        table = perf_table(s, models=["yolov9-s"], gpus=["A10G", "L4"])
    assert [(r.gpu, r.source) for r in table] == [("A10G", "measured"), ("L4", "prior")]
    assert {r.model for r in table} == {"yolov9-s"}


# --- planning with what was learned ---------------------------------------------------


def offer(instance_type: str, gpu: str, per_hour: Decimal) -> Offer:
    return Offer(provider="aws", region="us-east-1", zone="us-east-1a", instance_type=instance_type, gpu=gpu,
                 gpu_count=1, gpu_mem_gib=22.4, vcpus=VCPUS, mem_gib=32,
                 on_demand=Price(per_hour=Money(amount=per_hour, currency="USD"), source="test",
                                 as_of=date(2026, 11, 1)),
                 on_demand_stock=Stock.available)


def test_a_plan_with_measured_slow_epochs_estimates_more_hours_and_picks_another_gpu(store: Store) -> None:
    spec = make_spec(gpus=("L4", "A10G"), train_images=50_000, epochs=50)
    hours = {g: perf.estimate(spec, g, 1, VCPUS).hours for g in ("L4", "A10G")}
    # Priced so that, on the priors, the L4 is the cheaper way to run the job by 30%.
    l4_price = Decimal("1.00")
    a10g_price = (l4_price * Decimal(hours["L4"] / hours["A10G"] * 1.3)).quantize(Decimal("0.0001"))
    offers = [offer("g6.2xlarge", "L4", l4_price), offer("g5.2xlarge", "A10G", a10g_price)]

    # An earlier job saw the L4 run three times slower than its prior.
    slow_epoch = prior_epoch_seconds(spec, "L4") * 3
    with store.session() as s:
        job, attempt = seed(s, spec, gpu="L4", instance_type="g6.2xlarge")
        job.epochs_done = 2
        for n in range(3, 6):
            report(s, job, attempt, n, T0 + timedelta(seconds=slow_epoch * (n - 2)))
        measured = measured_rates(s)
    assert ("yolov9-s", "L4", 640) in measured

    plan_job = PlanJob(id="job-000000000002", spec=spec, submitted_at=T0, deadline_at=None)
    before = options_for(plan_job, offers, [], T0, PlannerPolicy())
    after = options_for(plan_job, offers, [], T0, PlannerPolicy(), measured=measured)
    assert before[0].gpu == "L4"
    assert after[0].gpu == "A10G"
    l4_hours = {o.gpu: o.est_hours for o in before}["L4"], {o.gpu: o.est_hours for o in after}["L4"]
    assert l4_hours[1] > 2.5 * l4_hours[0]


# --- the schema -----------------------------------------------------------------------


def test_migration_0002_adds_and_removes_only_perf_samples(store: Store) -> None:
    assert "perf_samples" in inspect(store.engine).get_table_names()
    store.downgrade("0001")
    tables = set(inspect(store.engine).get_table_names())
    assert "perf_samples" not in tables
    assert "jobs" in tables
    store.migrate()
    assert "perf_samples" in inspect(store.engine).get_table_names()


def test_rates_memo_gives_each_jobs_own_rates_as_reading_every_sample_does(store: Store) -> None:
    # ``RatesMemo.own`` folds each job's samples in with the keys' (SQLite): after every batch of random
    # samples of three jobs it must say what ``own_rates`` says from all of them.
    rng = random.Random(11)
    memo = RatesMemo()
    jobs = ["job-a", "job-b", "job-c"]
    keys = [("yolov9-s", "A10G", 640), ("yolov9-s", "T4", 640), ("yolov9-c", "A10G", 1280)]
    for batch in range(10):
        with store.session() as s:
            for _ in range(rng.choice((0, 1, 4, 15, 30))):
                model, gpu, img_size = rng.choice(keys)
                at = T0 + timedelta(minutes=rng.choice((0, 5, 5, 30)) + batch * rng.choice((0, 10, 10)))
                add_sample(s, round(rng.uniform(20, 200), 2), at, model=model, gpu=gpu, img_size=img_size,
                           job_id=rng.choice(jobs))
        with store.session() as s:
            assert memo.own(s, jobs) == own_rates(s, jobs), f"batch {batch}"
            assert memo.own(s, ["job-a"]) == own_rates(s, ["job-a"])
    assert len(memo.own(s, jobs)) == 3


def test_rates_memo_forgets_a_job_silent_for_two_weeks(store: Store) -> None:
    memo = RatesMemo()
    with store.session() as s:
        add_sample(s, 60.0, T0)
        add_sample(s, 60.0, T0 + timedelta(minutes=1))
    with store.session() as s:
        assert memo.own(s, ["job-000000000009"]) == {"job-000000000009": (("yolov9-s", "A10G", 640, 60.0),)}
        add_sample(s, 50.0, T0 + OWN_KEPT + timedelta(hours=1), gpu="T4", job_id="job-other")
    with store.session() as s:
        assert memo.own(s, ["job-000000000009"]) == {}  # its own rates forgotten
        assert memo.get(s)[("yolov9-s", "A10G", 640)] == 60.0  # its key's rate kept
