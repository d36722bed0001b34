"""The Huawei adapter under faults: throttling with Retry-After, flow control answered with HTTP 202,
the emulator's fault plan (by ECS's call names and by the other clouds'), lost answers, failed jobs.

Everything goes through the real huaweicloudsdkecs over real HTTP to the emulator on 127.0.0.1,
except the failed-job table (``job_error`` is a plain function).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

pytest.importorskip("huaweicloudsdkecs.v2", reason="the Huawei SDK is optional: pip install '.[huawei]'")

from providers.base import (  # noqa: E402
    TAG_JOB,
    TAG_MANAGED,
    BillingStopped,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.emulators.faults import FaultPlan  # noqa: E402
from providers.huawei.errors import job_error  # noqa: E402
from providers.retry import call_with_retry  # noqa: E402
from scheduler.models import Capacity, Offer  # noqa: E402
from tests.contract.harness_huawei import HuaweiHarness  # noqa: E402

S = InstanceState


@pytest.fixture
def h() -> Iterator[HuaweiHarness]:
    made = HuaweiHarness()
    try:
        yield made
    finally:
        made.close()


def faulty(plan: FaultPlan) -> HuaweiHarness:
    return HuaweiHarness(emulator={"faults": plan})


def offer_in(h: HuaweiHarness) -> Offer:
    return next(o for o in h.provider.offers() if o.zone == "cn-north-4a" and o.instance_type == "pi2.2xlarge.4")


def req(h: HuaweiHarness, offer: Offer, purpose: str) -> InstanceRequest:
    return InstanceRequest(offer=offer, capacity=Capacity.on_demand, client_token=f"t-{purpose}",
                           tags={TAG_MANAGED: h.cluster, TAG_JOB: purpose}, name=f"gpusched-{purpose}")


def test_a_throttling_answer_keeps_its_retry_after_for_the_retry_helper(h: HuaweiHarness) -> None:
    h.emulator.script_error("ListServersDetails", 429, "APIGW.0308", "policy user over ratelimit", gateway=True,
                            retry_after=7)
    with pytest.raises(Throttled) as caught:
        h.provider.instances({TAG_MANAGED: h.cluster})
    h.emulator.script_error("ListServersDetails", 429, "APIGW.0308", "policy user over ratelimit", gateway=True,
                            retry_after=7)
    before = h.clock.now()

    listed = call_with_retry(lambda: h.provider.instances({TAG_MANAGED: h.cluster}), clock=h.clock,
                             rng=random.Random(1), base_seconds=0.1, cap_seconds=20)

    assert (caught.value.code, caught.value.retry_after) == ("APIGW.0308", 7)
    assert listed == []
    # Waited what the cloud asked; the back-off alone (base 0.1 s) would have waited at most 0.1 s.
    assert h.clock.now() - before >= timedelta(seconds=7)


def test_flow_control_answered_with_http_202_is_throttling_not_an_empty_listing(h: HuaweiHarness) -> None:
    made = h.provider.launch(req(h, offer_in(h), "flow"))
    h.advance(120)
    assert [i.state for i in h.provider.instances({TAG_MANAGED: h.cluster})] == [S.running]
    h.emulator.script_error("ListServersDetails", 202, "Common.0024", "exceeds flow over limit")

    with pytest.raises(Throttled) as caught:
        h.provider.instances({TAG_MANAGED: h.cluster})
    again = h.provider.instances({TAG_MANAGED: h.cluster})

    assert caught.value.code == "Common.0024" and caught.value.retryable
    # Read as a success, the 202 would have been an empty listing and the server buried as gone.
    assert [(i.ref.instance_id, i.state, i.preempted) for i in again] == [(made.ref.instance_id, S.running, False)]


def test_a_plan_naming_run_instances_fails_huaweis_creates_and_nothing_else() -> None:
    harness = faulty(FaultPlan(rate=1.0, kinds=("5xx",), actions=("RunInstances",)))
    try:
        with pytest.raises(ProviderUnavailable) as caught:
            harness.provider.launch(req(harness, offer_in(harness), "gateway"))
        listed = harness.provider.instances({TAG_MANAGED: harness.cluster})
        creates = [(c.status, c.code) for c in harness.emulator.calls_of("CreatePostPaidServers")]
        machines, dealt = harness.machines(), harness.faults_dealt()
    finally:
        harness.close()

    assert (caught.value.code, caught.value.retryable) == ("APIGW.0201", True)
    assert creates == [(502, "APIGW.0201")] and listed == [] and machines == []
    assert dealt == {"5xx": 1}  # the listings (DescribeInstances' work) were left alone


def test_a_create_whose_answer_is_lost_is_found_by_its_intent_and_never_made_twice() -> None:
    harness = faulty(FaultPlan(rate=1.0, kinds=("lost",), actions=("CreatePostPaidServers",)))
    try:
        request = req(harness, offer_in(harness), "lost")
        with pytest.raises(ProviderUnavailable) as caught:
            harness.provider.launch(request)
        again = harness.provider.launch(request)
        creates = len(harness.emulator.calls_of("CreatePostPaidServers"))
        machines = harness.cloud.all_instances()
        sandbox_id = harness.emulator.sandbox_id(again.ref.instance_id)
    finally:
        harness.close()

    assert caught.value.retryable
    assert creates == 1  # the retry looked the intent up by its tag and created nothing
    assert [m.instance_id for m in machines] == [sandbox_id]


@pytest.mark.parametrize("kind", ["throttle", "5xx", "timeout"])
def test_a_delete_failed_before_it_reached_ecs_did_nothing_and_the_retry_deletes(kind: str) -> None:
    harness = faulty(FaultPlan(rate=1.0, kinds=(kind,), actions=("TerminateInstances",), retry_after_seconds=3))
    try:
        made = harness.provider.launch(req(harness, offer_in(harness), f"delete-{kind}"))
        with pytest.raises(ProviderError) as caught:
            harness.provider.terminate(made.ref)
        untouched = harness.cloud.get(harness.emulator.sandbox_id(made.ref.instance_id)).state
    finally:
        harness.close()

    assert caught.value.retryable
    assert caught.value.retry_after == (3 if kind == "throttle" else None)
    assert untouched is not S.terminating and untouched is not S.terminated


@pytest.mark.parametrize(
    ("code", "kind"),
    [("Ecs.0319", NoCapacity), ("Ecs.0204", NoCapacity), ("Ecs.0403", NoCapacity), ("Ecs.0001", QuotaExceeded),
     ("Ecs.0067", BillingStopped), ("Ecs.0031", InvalidRequest),
     # Codes of other classes inside a failed create job: still refused, never re-issued.
     ("Common.0001", NoCapacity), ("Ecs.1002", NoCapacity), ("Ecs.0003", NoCapacity), ("", NoCapacity)],
)
def test_a_failed_create_job_is_a_refusal_whatever_its_code(code: str, kind: type[ProviderError]) -> None:
    error = job_error(code, "rolled back", job_id="job-1", region="cn-north-4")

    assert type(error) is kind and not error.retryable
    assert (error.code, error.request_id) == (code, "job-1") and "rolled back" in error.message
