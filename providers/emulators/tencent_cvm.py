"""Tencent Cloud CVM (API 3.0, version 2017-03-12) over real HTTP, backed by the sandbox cloud.

One file on purpose: it is one cloud's wire protocol (signing, parameters,
answers and error shapes of every action) in one place, to be read side by side
with that cloud's API reference.

``TencentCvmEmulator`` listens on 127.0.0.1 (port 0: the OS picks) and answers
what ``tencentcloud-sdk-python`` sends: ``POST /`` with a JSON body, the action
in ``X-TC-Action``, the region in ``X-TC-Region``, and an ``Authorization``
header signed with TC3-HMAC-SHA256, which is verified exactly (canonical
request, hashed payload, the key chain HMAC("TC3" + secret, date) -> service ->
"tc3_request"). Every answer is HTTP 200 with ``Content-Type: application/json``
and nothing after it: the SDK only recognises an error body under exactly that
type (docs/gpus-and-clouds.md, "SDK behaviour").

The market behind it (stock, boot and stop delays, spot reclaims, scripted
faults, ClientToken dedupe) is a ``providers.sandbox.provider.SandboxCloud``; this module
only translates the wire format and the vendor's codes.

Where CVM's public documentation is silent, the emulator picks one behaviour
and the adapter must cope with it:

* Destroyed instances. The documented InstanceState values stop at
  TERMINATING; there is no TERMINATED. A destroyed instance (terminated, timed
  out by its ActionTimer, or a reclaimed spot instance) is shown as SHUTDOWN
  for as long as the sandbox keeps it (its ``forget_terminated_seconds``), then
  it is gone from DescribeInstances and lookups answer InvalidInstanceId.NotFound.
* Spot reclaims. CVM announces a reclaim only inside the instance (metadata
  ``spot/termination-time``). Through the API the instance turns SHUTDOWN with
  its ``LatestOperation`` left at what the owner last did; only an owner's (or
  ActionTimer's) destruction says ``TerminateInstances`` there.
* ClientToken. The documentation promises idempotency and names no error for a
  reused token: a token seen before answers with the instance it first made,
  whatever the other parameters say (the adapter checks what it got back).
* The recycle bin. The first TerminateInstances of an instance moves it to the
  recycle bin: TERMINATING, then SHUTDOWN (no longer billed) for the sandbox's
  retention; a second TerminateInstances of a SHUTDOWN instance destroys it for
  good (it leaves the list at once), as CVM documents. A TerminateInstances of
  a TERMINATING or LAUNCH_FAILED instance answers
  ``UnsupportedOperation.InstanceStateTerminating`` / ``...LaunchFailed``.
* LAUNCH_FAILED. ``fail_launch`` makes a launched instance fail to be created:
  it shows LAUNCH_FAILED until the retention ends, and never runs.
* Faults. ``faults`` (``providers.emulators.faults.FaultPlan``) fails a seeded
  share of calls: ``RequestLimitExceeded`` with ``Retry-After``, an HTTP 503
  gateway page, no answer, or no answer after acting.
* One instance per RunInstances (``InstanceCount`` 1); gpusched never asks for more.
* ActionTimer (TerminateInstances only) fires at the first API call at or after
  its time, which then starts the destruction; the sandbox has no timers.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import re
import string
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping

from tencentcloud.cvm.v20170312 import models as cvm_models

from providers.base import (
    AuthFailed,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.emulators.faults import FaultPlan
from providers.emulators.tencent_tc3 import (
    JSON_TYPE,
    Api3Reply,
    Api3Server,
    ApiError,
    DropConnection,
    Tc3Verifier,
    api3_handler,
    canonical_request,
    string_to_sign,
    tc3_signature,
)
from providers.sandbox.provider import SandboxCloud, SandboxInstance
from scheduler.clock import Clock
from scheduler.models import Capacity, Offer, Stock

__all__ = [
    "API_VERSION",
    "CvmError",
    "RawRequest",
    "TencentCvmEmulator",
    "canonical_request",
    "string_to_sign",
    "tc3_signature",
]

API_VERSION = "2017-03-12"
SERVICE = "cvm"
MAX_USER_DATA_BYTES = 16 * 1024
MAX_TOKEN_CHARS = 64
MAX_IDS = 100
MAX_FILTERS = 10
MAX_FILTER_VALUES = 5
DEFAULT_LIMIT = 20

_INSTANCE_ID = re.compile(r"^ins-[a-z0-9]{8}$")
_ID_ALPHABET = string.ascii_lowercase + string.digits
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# Sandbox state -> CVM InstanceState. A pending machine that was started again is STARTING.
_STATE = {
    InstanceState.pending: "PENDING",
    InstanceState.running: "RUNNING",
    InstanceState.stopping: "STOPPING",
    InstanceState.stopped: "STOPPED",
    InstanceState.terminating: "TERMINATING",
    InstanceState.terminated: "SHUTDOWN",
}
_CHARGE = {Capacity.spot: "SPOTPAID", Capacity.on_demand: "POSTPAID_BY_HOUR"}
_CAPACITY = {v: k for k, v in _CHARGE.items()}


# CVM's errors are API 3.0's; the names stay for readers of this module.
CvmError = ApiError
_DropConnection = DropConnection


_Reply = Api3Reply  # status, body, content type and any extra headers (``Retry-After``)


@dataclass(frozen=True)
class RawRequest:
    """One request as it arrived, for tests that replay or tamper with it."""

    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes


@dataclass
class _Extra:
    """What CVM keeps about an instance that the sandbox does not."""

    charge_type: str
    cam_role_name: str = ""
    latest_operation: str = "RunInstances"
    latest_request_id: str = ""
    stop_charging: bool = False
    restarted: bool = False
    destroy_at: datetime | None = None
    launch_failed: bool = False  # never created: LAUNCH_FAILED
    purged: bool = False  # destroyed for good out of the recycle bin: gone from every answer


# --- the emulator --------------------------------------------------------------------


class TencentCvmEmulator:
    """CVM API 3.0 on 127.0.0.1 over one SandboxCloud. Use as a context manager, or call ``close()``.

    ``clock`` is the clock the cloud runs on (ActionTimer destroys by it).
    ``credentials`` maps SecretId -> SecretKey. ``signing_clock`` judges request
    timestamps (the SDK stamps them with the real time, whatever clock the
    sandbox runs on). ``record_requests`` keeps every raw request in ``requests``.
    """

    def __init__(
        self,
        cloud: SandboxCloud,
        clock: Clock,
        credentials: Mapping[str, str],
        *,
        seed: int = 0,
        signing_clock: Clock | None = None,
        record_requests: bool = False,
        port: int = 0,
        faults: FaultPlan | None = None,
        content_type: str = JSON_TYPE,
    ) -> None:
        self._verifier = Tc3Verifier(credentials, SERVICE, signing_clock=signing_clock)
        self.cloud = cloud
        self._clock = clock
        self._rng = random.Random(f"{seed}:tencent-cvm")
        self._lock = threading.Lock()
        self._to_tencent: dict[str, str] = {}
        self._to_sandbox: dict[str, str] = {}
        self._extra: dict[str, _Extra] = {}
        self._by_token: dict[str, str] = {}
        self._scripted: dict[str, list[CvmError]] = {}
        self._regions = frozenset(o.region for o in cloud.offers())
        self._record = record_requests
        self.faults = (faults or FaultPlan()).dice()
        self._content_type = content_type
        self.requests: list[RawRequest] = []
        self.action_counts: dict[str, int] = {}
        self._actions: dict[str, Callable[[str, dict[str, Any], str], dict[str, Any]]] = {
            "RunInstances": self._run_instances,
            "DescribeInstances": self._describe_instances,
            "StopInstances": self._stop_instances,
            "StartInstances": self._start_instances,
            "TerminateInstances": self._terminate_instances,
            "InquiryPriceRunInstances": self._inquiry_price,
            "DescribeZoneInstanceConfigInfos": self._zone_configs,
        }
        # Parameter names per action, as the SDK's request models declare them.
        self._parameters = {
            action: frozenset(
                name[1:] for name in vars(getattr(cvm_models, f"{action}Request")()) if name != "_headers"
            )
            for action in self._actions
        }
        self._server = Api3Server(("127.0.0.1", port), api3_handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="tencent-cvm-emulator", daemon=True
        )
        self._thread.start()

    # --- lifetime -------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """``host:port`` for the SDK's ``HttpProfile(endpoint=...)``."""
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> TencentCvmEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- scripting, for tests -------------------------------------------------

    def sell_out(self, offer: Offer | str, capacity: Capacity) -> None:
        self.cloud.sell_out(offer, capacity)

    def preempt(self, instance_id: str) -> None:
        """Reclaim this spot instance (a CVM id) now."""
        with self._lock:
            self.cloud.preempt(self._sandbox_id(instance_id))

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        """Fault a sandbox operation (``providers.sandbox.provider.OPERATIONS``); it reaches the wire as CVM's code."""
        self.cloud.fail_next(operation, error, times)

    def lose_next_launch_response(self) -> None:
        """The next RunInstances creates its instance, then the connection closes without an answer."""
        self.cloud.lose_next_launch_response()

    def script_error(self, action: str, code: str, message: str = "scripted", times: int = 1,
                     retry_after: float | None = None) -> None:
        """The next ``times`` calls of ``action`` answer with this exact CVM error, after authentication;
        ``retry_after`` adds a ``Retry-After`` header (throttling answers)."""
        if action not in self._actions:
            raise ValueError(f"unknown action {action!r}; the emulator speaks {', '.join(sorted(self._actions))}")
        with self._lock:
            self._scripted.setdefault(action, []).extend([CvmError(code, message, retry_after)] * times)

    def fail_launch(self, instance_id: str) -> None:
        """The creation of this instance (a CVM id) failed: LAUNCH_FAILED from now on, never running."""
        with self._lock:
            sandbox_id = self._sandbox_id(instance_id)
            self.cloud.terminate(sandbox_id)
            self._extra[sandbox_id].launch_failed = True

    def sandbox_id(self, instance_id: str) -> str:
        with self._lock:
            return self._sandbox_id(instance_id)

    def tencent_id(self, sandbox_id: str) -> str:
        """The CVM id this emulator shows for a sandbox instance (what its bill names it by)."""
        with self._lock:
            return self._tencent_id(sandbox_id)

    def cam_role_of(self, instance_id: str) -> str:
        with self._lock:
            return self._extra[self._sandbox_id(instance_id)].cam_role_name

    def destroy_at(self, instance_id: str) -> datetime | None:
        with self._lock:
            return self._extra[self._sandbox_id(instance_id)].destroy_at

    # --- one request ------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> _Reply:
        """The answer to one HTTP request (raises _DropConnection to close the connection without one)."""
        lower = {k.lower(): v for k, v in headers.items()}
        extra_headers: dict[str, str] = {}
        with self._lock:
            if self._record:
                self.requests.append(RawRequest(method, path, lower, body))
            request_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            try:
                action = lower.get("x-tc-action", "")
                self.action_counts[action] = self.action_counts.get(action, 0) + 1
                self._verifier.check(method, path, lower, body)
                params = self._parse(action, lower, body)
                region = lower.get("x-tc-region", "")
                if region not in self._regions:
                    raise CvmError("UnsupportedRegion", f"region {region!r} is not served here")
                scripted = self._scripted.get(action)
                if scripted:
                    raise scripted.pop(0)
                fault = self.faults.draw(action)
                if fault == "throttle":
                    raise CvmError("RequestLimitExceeded", "your requests exceed the frequency limit",
                                   self.faults.plan.retry_after_seconds)
                if fault == "5xx":
                    return _Reply(503, b"<html><body>503 Service Temporarily Unavailable</body></html>",
                                  "text/html", {})
                if fault == "timeout":
                    raise _DropConnection()
                self._fire_timers()
                answer = self._actions[action](region, params, request_id)
                if fault == "lost":
                    raise _DropConnection()
            except CvmError as exc:
                answer = {"Error": {"Code": exc.code, "Message": exc.message}}
                if exc.retry_after is not None:
                    extra_headers["Retry-After"] = f"{exc.retry_after:g}"
            except _DropConnection:
                raise
            except Exception as exc:  # noqa: BLE001 - an emulator bug reaches the test as CVM's InternalError
                answer = {"Error": {"Code": "InternalError", "Message": f"emulator fault: {exc!r}"}}
            answer["RequestId"] = request_id
            payload = json.dumps({"Response": answer}).encode("utf-8")
            return _Reply(200, payload, self._content_type, extra_headers)

    def _parse(self, action: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        if headers.get("content-type", "").split(";")[0].strip() != JSON_TYPE:
            raise CvmError("UnsupportedProtocol", "the body must be application/json")
        if headers.get("x-tc-version") != API_VERSION:
            raise CvmError("NoSuchVersion", f"CVM speaks version {API_VERSION}")
        if action not in self._actions:
            raise CvmError("InvalidAction", f"the action {action!r} does not exist here")
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            raise CvmError("InvalidParameter", "the body is not JSON") from None
        if not isinstance(params, dict):
            raise CvmError("InvalidParameter", "the body must be a JSON object")
        unknown = sorted(set(params) - self._parameters[action])
        if unknown:
            raise CvmError("UnknownParameter", f"{action} has no parameter {unknown[0]!r}")
        return params

    # --- actions -------------------------------------------------------------------

    def _run_instances(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        zone = _get(p, "Placement", dict).get("Zone")
        instance_type = p.get("InstanceType")
        image = p.get("ImageId")
        for name, value in (("Placement.Zone", zone), ("InstanceType", instance_type), ("ImageId", image)):
            if not isinstance(value, str) or not value:
                raise CvmError("MissingParameter", f"the request is missing {name}")
        if not zone.startswith(f"{region}-"):
            raise CvmError("InvalidZone.MismatchRegion", f"zone {zone} is not in region {region}")
        charge = p.get("InstanceChargeType", "POSTPAID_BY_HOUR")
        if charge not in _CAPACITY:
            raise CvmError("InvalidParameterValue", f"InstanceChargeType {charge!r} is not sold here")
        capacity = _CAPACITY[charge]
        max_price = _spot_max_price(p, capacity)
        if p.get("InstanceCount", 1) != 1:
            raise CvmError("InvalidParameterValue", "the emulator launches one instance per call")
        token = p.get("ClientToken")
        if token is not None:
            if not isinstance(token, str) or not token.isascii():
                raise CvmError("InvalidParameterValue", "ClientToken must be an ASCII string")
            if len(token) > MAX_TOKEN_CHARS:
                raise CvmError("InvalidClientToken.TooLong", "ClientToken must be at most 64 bytes")
            if token in self._by_token:
                return {"InstanceIdSet": [self._tencent_id(self._by_token[token])]}
        tags = _instance_tags(p)
        user_data = _user_data(p)
        destroy_at = self._action_timer(p)
        extra = _Extra(charge_type=charge, cam_role_name=str(p.get("CamRoleName", "")),
                       latest_request_id=request_id, destroy_at=destroy_at)
        try:
            made = self.cloud.launch(
                region=region, zone=zone, instance_type=instance_type, capacity=capacity, client_token=token,
                tags=tags, name=str(p.get("InstanceName", "")), image=image, user_data=user_data, max_price=max_price,
            )
        except ProviderUnavailable as exc:
            if exc.code != "RequestTimeout" or token is None:
                raise _vendor_error(exc, "RunInstances", capacity) from None
            # Created at the cloud, answer lost: remember it so the retry finds it.
            lost = next(i for i in self.cloud.all_instances() if i.client_token == token)
            self._remember(lost.instance_id, token, extra)
            raise _DropConnection() from None
        except ProviderError as exc:
            raise _vendor_error(exc, "RunInstances", capacity) from None
        self._remember(made.instance_id, token, extra)
        return {"InstanceIdSet": [self._tencent_id(made.instance_id)]}

    def _describe_instances(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        ids = p.get("InstanceIds")
        filters = p.get("Filters")
        if ids and filters:
            raise CvmError("InvalidParameterCombination", "InstanceIds and Filters cannot be given together")
        offset = p.get("Offset", 0)
        limit = p.get("Limit", DEFAULT_LIMIT)
        if not isinstance(offset, int) or offset < 0:
            raise CvmError("InvalidParameterValueOffset", "Offset must be a non-negative integer")
        if not isinstance(limit, int) or not 1 <= limit <= MAX_IDS:
            raise CvmError("InvalidParameterValueLimit", f"Limit must be between 1 and {MAX_IDS}")
        if ids:
            found = self._by_ids(region, _id_list(ids))
        else:
            try:
                everything, _ = self.cloud.instances(regions=[region])
            except ProviderError as exc:
                raise _vendor_error(exc, "DescribeInstances", None) from None
            match = _instance_filter(filters or [])
            found = [i for i in everything if match(i, self._charge(i)) and not self._extra_of(i).purged]
        return {
            "TotalCount": len(found),
            "InstanceSet": [self._instance_json(i) for i in found[offset:offset + limit]],
        }

    def _stop_instances(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        mode = p.get("StoppedMode", "KEEP_CHARGING")
        if mode not in ("KEEP_CHARGING", "STOP_CHARGING"):
            raise CvmError("InvalidParameterValue", f"StoppedMode {mode!r} is not KEEP_CHARGING or STOP_CHARGING")
        if p.get("StopType", "SOFT") not in ("SOFT", "HARD", "SOFT_FIRST"):
            raise CvmError("InvalidParameterValue", "StopType is SOFT, HARD or SOFT_FIRST")
        machines = self._targets(region, p)
        for machine in machines:
            self._require_state(machine, {"RUNNING"})
        for machine in machines:
            extra = self._extra_of(machine)
            try:
                self.cloud.stop(machine.instance_id, region=region)
            except ProviderError as exc:
                raise _vendor_error(exc, "StopInstances", machine.capacity) from None
            self._touch(extra, "StopInstances", request_id)
            extra.stop_charging = mode == "STOP_CHARGING"
        return {}

    def _start_instances(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        machines = self._targets(region, p)
        for machine in machines:
            self._require_state(machine, {"STOPPED"})
        for machine in machines:
            extra = self._extra_of(machine)
            try:
                self.cloud.start(machine.instance_id, region=region)
            except ProviderError as exc:
                raise _vendor_error(exc, "StartInstances", machine.capacity) from None
            self._touch(extra, "StartInstances", request_id)
            extra.stop_charging = False
            extra.restarted = True
        return {}

    def _terminate_instances(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        machines = self._targets(region, p)
        for machine in machines:
            if self._extra_of(machine).launch_failed:
                raise CvmError("UnsupportedOperation.InstanceStateLaunchFailed",
                               f"instance {self._tencent_id(machine.instance_id)} failed to be created")
            if machine.state is InstanceState.terminating:
                raise CvmError("UnsupportedOperation.InstanceStateTerminating",
                               f"instance {self._tencent_id(machine.instance_id)} is already being destroyed")
        for machine in machines:
            if machine.state is InstanceState.terminated:
                # SHUTDOWN, in the recycle bin: a second TerminateInstances destroys it for good.
                extra = self._extra_of(machine)
                extra.purged = True
                self._touch(extra, "TerminateInstances", request_id)
                continue
            try:
                self.cloud.terminate(machine.instance_id, region=region)
            except ProviderError as exc:
                raise _vendor_error(exc, "TerminateInstances", machine.capacity) from None
            self._touch(self._extra_of(machine), "TerminateInstances", request_id)
        return {}

    def _inquiry_price(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        zone = _get(p, "Placement", dict).get("Zone")
        instance_type = p.get("InstanceType")
        for name, value in (("Placement.Zone", zone), ("InstanceType", instance_type), ("ImageId", p.get("ImageId"))):
            if not isinstance(value, str) or not value:
                raise CvmError("MissingParameter", f"the request is missing {name}")
        charge = p.get("InstanceChargeType", "POSTPAID_BY_HOUR")
        if charge not in _CAPACITY:
            raise CvmError("InvalidParameterValue", f"InstanceChargeType {charge!r} is not sold here")
        offer = next((o for o in self._offers(region) if o.zone == zone and o.instance_type == instance_type), None)
        if offer is None:
            raise CvmError("ResourceNotFound.InvalidZoneInstanceType", f"{zone} does not offer {instance_type}")
        price = _item_price(offer, _CAPACITY[charge])
        if price is None:
            raise CvmError("UnsupportedOperation.NoInstanceTypeSupportSpot", f"{instance_type} is not sold as spot")
        return {"Price": {"InstancePrice": price}}

    def _zone_configs(self, region: str, p: dict[str, Any], request_id: str) -> dict[str, Any]:
        wanted: dict[str, set[str]] = {}
        for f in _filters(p.get("Filters") or [], limit_values=100):
            if f[0] not in ("zone", "instance-family", "instance-type", "instance-charge-type"):
                raise CvmError("InvalidFilter", f"unknown filter {f[0]!r}")
            wanted[f[0]] = set(f[1])
        charges = wanted.get("instance-charge-type", {"POSTPAID_BY_HOUR"})
        items = []
        for offer in self._offers(region):
            family = offer.instance_type.split(".")[0]
            if not _keep(wanted, "zone", offer.zone) or not _keep(wanted, "instance-type", offer.instance_type) \
                    or not _keep(wanted, "instance-family", family):
                continue
            for capacity in (Capacity.on_demand, Capacity.spot):
                price = _item_price(offer, capacity)
                if _CHARGE[capacity] not in charges or price is None:
                    continue
                stock = offer.stock(capacity)
                items.append({
                    "Zone": offer.zone,
                    "InstanceType": offer.instance_type,
                    "InstanceChargeType": _CHARGE[capacity],
                    "NetworkCard": 25,
                    "Cpu": offer.vcpus,
                    "Memory": int(offer.mem_gib),
                    "InstanceFamily": family,
                    "TypeName": f"GPU {family}",
                    "Status": "SOLD_OUT" if stock is Stock.sold_out else "SELL",
                    "StatusCategory": _STOCK_CATEGORY[stock],
                    "SoldOutReason": "sold out" if stock is Stock.sold_out else "",
                    "Price": price,
                    "Gpu": offer.gpu_count,
                    "GpuCount": float(offer.gpu_count),
                    "Fpga": 0,
                    "Remark": f"{offer.gpu_count} x NVIDIA {offer.gpu}",
                })
        return {"InstanceTypeQuotaSet": items}

    # --- inside ----------------------------------------------------------------------

    def _offers(self, region: str) -> list[Offer]:
        try:
            return self.cloud.offers([region])
        except ProviderError as exc:
            raise _vendor_error(exc, "offers", None) from None

    def _remember(self, sandbox_id: str, token: str | None, extra: _Extra) -> None:
        self._tencent_id(sandbox_id)
        self._extra[sandbox_id] = extra
        if token is not None:
            self._by_token[token] = sandbox_id

    def _tencent_id(self, sandbox_id: str) -> str:
        """The CVM-style id (``ins-`` + 8 characters) of a sandbox id, made on first sight."""
        known = self._to_tencent.get(sandbox_id)
        if known is not None:
            return known
        while True:
            candidate = "ins-" + "".join(self._rng.choice(_ID_ALPHABET) for _ in range(8))
            if candidate not in self._to_sandbox:
                break
        self._to_tencent[sandbox_id] = candidate
        self._to_sandbox[candidate] = sandbox_id
        return candidate

    def _sandbox_id(self, instance_id: str) -> str:
        try:
            return self._to_sandbox[instance_id]
        except KeyError:
            raise KeyError(f"no instance {instance_id} in this emulator") from None

    def _extra_of(self, machine: SandboxInstance) -> _Extra:
        extra = self._extra.get(machine.instance_id)
        if extra is None:  # launched on the sandbox directly, not through this face
            extra = self._extra[machine.instance_id] = _Extra(
                charge_type=_CHARGE.get(machine.capacity, "POSTPAID_BY_HOUR"))
        return extra

    def _charge(self, machine: SandboxInstance) -> str:
        return self._extra_of(machine).charge_type

    @staticmethod
    def _touch(extra: _Extra, operation: str, request_id: str) -> None:
        extra.latest_operation = operation
        extra.latest_request_id = request_id

    def _by_ids(self, region: str, ids: list[str]) -> list[SandboxInstance]:
        found = []
        for instance_id in ids:
            if not _INSTANCE_ID.match(instance_id):
                raise CvmError("InvalidInstanceId.Malformed",
                               f"{instance_id!r} is not an instance id like ins-xxxxxxxx")
            sandbox_id = self._to_sandbox.get(instance_id)
            if sandbox_id is None or self._extra_of_id(sandbox_id).purged:
                continue
            try:
                found.append(self.cloud.get(sandbox_id, region))
            except NotFound:
                continue
        return found

    def _targets(self, region: str, p: dict[str, Any]) -> list[SandboxInstance]:
        ids = _id_list(p.get("InstanceIds"))
        if not ids:
            raise CvmError("MissingParameter", "the request is missing InstanceIds")
        found = self._by_ids(region, ids)
        if len(found) != len(ids):
            known = {self._tencent_id(m.instance_id) for m in found}
            missing = next(i for i in ids if i not in known)
            raise CvmError("InvalidInstanceId.NotFound", f"instance {missing} does not exist in {region}")
        return found

    def _extra_of_id(self, sandbox_id: str) -> _Extra:
        return self._extra.get(sandbox_id) or _Extra(charge_type="POSTPAID_BY_HOUR")

    def _state(self, machine: SandboxInstance) -> str:
        if self._extra_of(machine).launch_failed:
            return "LAUNCH_FAILED"
        if machine.state is InstanceState.pending and self._extra_of(machine).restarted:
            return "STARTING"
        return _STATE[machine.state]

    def _require_state(self, machine: SandboxInstance, allowed: set[str]) -> None:
        state = self._state(machine)
        if state not in allowed:
            camel = "".join(word.capitalize() for word in state.split("_"))  # LAUNCH_FAILED -> LaunchFailed
            raise CvmError(f"UnsupportedOperation.InstanceState{camel}",
                           f"instance {self._tencent_id(machine.instance_id)} is {state}")

    def _action_timer(self, p: dict[str, Any]) -> datetime | None:
        timer = p.get("ActionTimer")
        if timer is None:
            return None
        if not isinstance(timer, dict) or timer.get("TimerAction") != "TerminateInstances":
            raise CvmError("InvalidParameterValue", "ActionTimer.TimerAction must be TerminateInstances")
        try:
            when = datetime.strptime(str(timer.get("ActionTime")), _TIME_FORMAT).replace(tzinfo=timezone.utc)
        except ValueError:
            raise CvmError("InvalidParameterValue.InvalidTimeFormat", "ActionTime is YYYY-MM-DDThh:mm:ssZ") from None
        if when <= self._clock.now():
            raise CvmError("InvalidParameterValue", "ActionTime must be in the future")
        return when

    def _fire_timers(self) -> None:
        now = self._clock.now()
        for sandbox_id, extra in self._extra.items():
            if extra.destroy_at is None or extra.destroy_at > now:
                continue
            extra.destroy_at = None
            try:
                if self.cloud.get(sandbox_id).state in (InstanceState.terminating, InstanceState.terminated):
                    continue  # already destroyed (by its owner or a reclaim): the timer has nothing to do
                self.cloud.terminate(sandbox_id)
            except NotFound:
                continue
            extra.latest_operation = "TerminateInstances"

    def _instance_json(self, machine: SandboxInstance) -> dict[str, Any]:
        extra = self._extra_of(machine)
        state = self._state(machine)
        return {
            "InstanceId": self._tencent_id(machine.instance_id),
            "Uuid": str(uuid.uuid5(uuid.NAMESPACE_OID, machine.instance_id)),
            "InstanceName": machine.name or "Unnamed",
            "InstanceType": machine.instance_type,
            "InstanceChargeType": extra.charge_type,
            "InstanceState": state,
            "RestrictState": "NORMAL",
            "Placement": {"Zone": machine.zone, "ProjectId": 0},
            "CPU": machine.offer.vcpus,
            "Memory": int(machine.offer.mem_gib),
            "GPUInfo": {"GPUCount": float(machine.offer.gpu_count), "GPUType": machine.offer.gpu},
            "ImageId": machine.image,
            "CreatedTime": machine.launched_at.astimezone(timezone.utc).strftime(_TIME_FORMAT),
            "ExpiredTime": None,
            "Tags": [{"Key": k, "Value": v} for k, v in machine.tags.items()],
            "StopChargingMode": ("NOT_APPLICABLE" if state != "STOPPED"
                                 else "STOP_CHARGING" if extra.stop_charging else "KEEP_CHARGING"),
            "LatestOperation": extra.latest_operation,
            "LatestOperationState": "SUCCESS",
            "LatestOperationRequestId": extra.latest_request_id,
            "CamRoleName": extra.cam_role_name or None,
            "IsolatedSource": "NOTISOLATED",
        }


# --- request pieces ------------------------------------------------------------------


def _get(p: Mapping[str, Any], name: str, kind: type) -> Any:
    value = p.get(name, kind())
    if not isinstance(value, kind):
        raise CvmError("InvalidParameter", f"{name} has the wrong type")
    return value


def _id_list(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CvmError("InvalidParameter", "InstanceIds must be a list of strings")
    if len(value) > MAX_IDS:
        raise CvmError("InvalidParameterValue.LimitExceeded", f"at most {MAX_IDS} instance ids per request")
    return value


def _spot_max_price(p: Mapping[str, Any], capacity: Capacity) -> Decimal | None:
    market = p.get("InstanceMarketOptions")
    if market is None:
        return None  # SPOTPAID without options bids the current price
    if capacity is not Capacity.spot:
        raise CvmError("InvalidParameterCombination", "InstanceMarketOptions goes with InstanceChargeType SPOTPAID")
    if not isinstance(market, dict) or market.get("MarketType") != "spot":
        raise CvmError("InvalidParameterValue", "InstanceMarketOptions.MarketType must be spot")
    options = market.get("SpotOptions") or {}
    if options.get("SpotInstanceType", "one-time") != "one-time":
        raise CvmError("InvalidParameterValue", "SpotInstanceType must be one-time")
    try:
        price = Decimal(str(options["MaxPrice"]))
    except (KeyError, InvalidOperation):
        raise CvmError("MissingParameter", "SpotOptions.MaxPrice is required and must be a number") from None
    if price <= 0:
        raise CvmError("InvalidParameterValue", "SpotOptions.MaxPrice must be positive")
    return price


def _instance_tags(p: Mapping[str, Any]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for spec in p.get("TagSpecification") or []:
        if not isinstance(spec, dict) or spec.get("ResourceType") != "instance":
            continue
        for tag in spec.get("Tags") or []:
            key, value = tag.get("Key"), tag.get("Value")
            if not isinstance(key, str) or not key or not isinstance(value, str):
                raise CvmError("InvalidParameterValue", "every tag needs a non-empty Key and a Value")
            tags[key] = value
    return tags


def _user_data(p: Mapping[str, Any]) -> str:
    encoded = p.get("UserData")
    if encoded is None:
        return ""
    try:
        raw = base64.b64decode(str(encoded), validate=True)
    except (binascii.Error, ValueError):
        raise CvmError("InvalidParameterValue.InvalidUserDataFormat", "UserData must be base64") from None
    if len(raw) > MAX_USER_DATA_BYTES:
        raise CvmError("InvalidParameterValue.InvalidUserDataFormat", "UserData is larger than 16 KB")
    return raw.decode("utf-8", errors="replace")


def _filters(raw: object, *, limit_values: int = MAX_FILTER_VALUES) -> list[tuple[str, list[str]]]:
    if not isinstance(raw, list):
        raise CvmError("InvalidParameter", "Filters must be a list")
    if len(raw) > MAX_FILTERS:
        raise CvmError("InvalidFilterValue.LimitExceeded", f"at most {MAX_FILTERS} filters per request")
    out = []
    for f in raw:
        name, values = (f.get("Name"), f.get("Values")) if isinstance(f, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(values, list) or not values:
            raise CvmError("InvalidFilter", "every filter needs a Name and at least one value")
        if len(values) > limit_values:
            raise CvmError("InvalidFilterValue.LimitExceeded", f"at most {limit_values} values per filter")
        out.append((name, [str(v) for v in values]))
    return out


def _instance_filter(raw: object) -> Callable[[SandboxInstance, str], bool]:
    """Filters AND together, the values of one filter OR together (CVM's rule)."""
    tests: list[Callable[[SandboxInstance, str], bool]] = []
    for name, values in _filters(raw):
        wanted = set(values)
        if name.startswith("tag:") and len(name) > 4:
            key = name[4:]
            tests.append(lambda m, c, key=key, wanted=wanted: m.tags.get(key) in wanted)
        elif name == "tag-key":
            tests.append(lambda m, c, wanted=wanted: bool(wanted & set(m.tags)))
        elif name == "zone":
            tests.append(lambda m, c, wanted=wanted: m.zone in wanted)
        elif name == "instance-charge-type":
            tests.append(lambda m, c, wanted=wanted: c in wanted)
        elif name == "instance-name":
            tests.append(lambda m, c, wanted=wanted: m.name in wanted)
        else:
            raise CvmError("InvalidFilter", f"the emulator does not filter by {name!r}")
    return lambda machine, charge: all(t(machine, charge) for t in tests)


def _keep(wanted: Mapping[str, set[str]], name: str, value: str) -> bool:
    return name not in wanted or value in wanted[name]


_STOCK_CATEGORY = {
    Stock.available: "EnoughStock",
    Stock.unknown: "NormalStock",
    Stock.low: "UnderStock",
    Stock.sold_out: "WithoutStock",
}


def _item_price(offer: Offer, capacity: Capacity) -> dict[str, Any] | None:
    """CVM's ItemPrice for one hour: UnitPrice is the list price, UnitPriceDiscount what is paid."""
    paid = offer.price(capacity)
    if paid is None:
        return None
    listed = offer.on_demand or paid
    amount, base = paid.per_hour.amount, listed.per_hour.amount
    discount = (amount / base * 100).quantize(Decimal("0.1")) if base else Decimal(100)
    return {"UnitPrice": float(base), "UnitPriceDiscount": float(amount), "ChargeUnit": "HOUR",
            "Discount": float(discount)}


def _vendor_error(exc: ProviderError, action: str, capacity: Capacity | None) -> CvmError:
    """A sandbox refusal as the code CVM gives for it."""
    spot = capacity is Capacity.spot
    if isinstance(exc, Throttled):
        return CvmError("RequestLimitExceeded", "your requests exceed the frequency limit", exc.retry_after)
    if isinstance(exc, NoCapacity):
        if exc.code == "SpotMaxPriceTooLow":
            return CvmError("InvalidParameterValue.InsufficientPrice", exc.message)
        code = "ResourceInsufficient.SpecifiedInstanceType" if spot else "ResourcesSoldOut.SpecifiedInstanceType"
        return CvmError(code, exc.message)
    if isinstance(exc, QuotaExceeded):
        return CvmError("LimitExceeded.SpotQuota" if spot else "LimitExceeded.InstanceQuota", exc.message)
    if isinstance(exc, AuthFailed):
        return CvmError("AuthFailure.UnauthorizedOperation", exc.message)
    if isinstance(exc, NotFound):
        return CvmError("InvalidInstanceId.NotFound", exc.message)
    if isinstance(exc, InvalidRequest):
        code = {
            "UnsupportedOperation": "UnsupportedOperation.InstanceChargeType",
            "InvalidInstanceType": "InvalidParameterValue.InstanceTypeNotFound",
            "InvalidCapacityType": "UnsupportedOperation.NoInstanceTypeSupportSpot",
            "IncorrectInstanceState": "InvalidInstanceState",
        }.get(exc.code, "InvalidParameterValue")
        return CvmError(code, exc.message)
    return CvmError("InternalError", f"{action} failed inside the cloud: {exc.message}")
