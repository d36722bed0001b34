"""The daemon's HTTP API: jobs for the CLI, plus health and metrics for ops.

Auth: every ``/v1`` route wants ``Authorization: Bearer <token>``: GPUSCHED_API_TOKEN (compared in
constant time; an admin while no personal admin token is live) or a person's or service's own token,
whose role and teams say what it may read and change (``app/access.py``, ``app/roles.py``). A daemon
without GPUSCHED_API_TOKEN does not start. Changes and refused calls go to the audit log.

``/healthz`` and ``/metrics`` need no token, on purpose: liveness probes and
Prometheus scrapers rarely carry one. Both answer with counts, times and money
(``/metrics`` labels them with team, cloud, zone and GPU; never job names, ids or
settings; see ``scheduler.app.metrics``). Keep the port off the public internet
(the default host is 127.0.0.1; in a cluster, a NetworkPolicy).

Every error is JSON ``{"error": ..., "fix": ...}``; a job that cannot be
accepted is 422 and adds ``problems``: ``[{field, message, example}]``.

Limits before work: the token is checked from the headers before any body is read
(``guard.AuthFirst``), and bodies are limited while they stream in (413): a job file
``MAX_BODY_BYTES``, an agent's report ``AGENT_BODY_BYTES``, anything else ``OTHER_BODY_BYTES``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, IPvAnyAddress, field_validator
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler.agent import tokens as agent_token
from scheduler.agent.bootstrap import machine_ttl
from scheduler.agent.package import AgentPackage
from scheduler.app.access import Access, access_router, install_access_errors
from scheduler.app.guard import AuthFirst, bearer
from scheduler.app.metrics import CONTENT_TYPE as PROMETHEUS_TYPE
from scheduler.app.metrics import render, store_registry
from scheduler.app.openapi import install_openapi
from scheduler.app.roles import Principal, may_act_for, may_read, may_write
from scheduler.app.startup import store_fix
from scheduler.clock import Clock
from scheduler.errors import (
    GpuschedError,
    JobFileError,
    NotFoundError,
    SettingsError,
    UserError,
)
from scheduler.jobs.jobfile import parse_job, parse_job_text, too_deep
from scheduler.jobs.jobfile_limits import has_lone_surrogate
from scheduler.jobs.output_text import BATCH_BYTES
from scheduler.lifecycle import service
from scheduler.lifecycle.agent_reports import (
    WORK_POLL_SECONDS,
    Assigned,
    Refusal,
    assigned_attempt,
    finished_refusal,
    machine_refusal,
    progress_refusal,
    reclaim_refusal,
    rendezvous_refusal,
    report_finished,
    report_heartbeat,
    report_hello,
    report_progress,
    report_reclaiming,
    report_rendezvous,
    work_estimate,
    work_for,
)
from scheduler.lifecycle.job_logs import JobLogs, append_output
from scheduler.lifecycle.service import JobDetail, JobView
from scheduler.limits import MAX_TEXT_CHARS
from scheduler.logs import get_logger, register_secret
from scheduler.models import JobSpec
from scheduler.settings import Settings
from scheduler.states import JobState
from scheduler.store.database import Store, store_reason, store_trouble

log = get_logger(__name__)

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
JSON_TYPES = frozenset({"application/json", ""})
MAX_BODY_BYTES = 2 << 20  # a job file is a few hundred bytes; anything near this is a mistake
AGENT_BODY_BYTES = 1 << 20  # an agent's report is a few hundred bytes (a finish message at most 2,000 characters)
OTHER_BODY_BYTES = 64 << 10  # the other routes take no body
MAX_SOURCE_CHARS = MAX_TEXT_CHARS  # a file name or path, as the CLI sends it
MIN_TOKEN_CHARS = 16
TOKEN_FIX = (
    "set GPUSCHED_API_TOKEN in the daemon's environment or .env, e.g. "
    "GPUSCHED_API_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))'), "
    "and give the CLI the same value"
)


def require_token(settings: Settings) -> str:
    """The API token, or SettingsError: an API without one would accept jobs from anyone."""
    token = settings.api_token.get_secret_value().strip() if settings.api_token else ""
    if not token:
        raise SettingsError("no API token is configured, so the daemon will not start", fix=TOKEN_FIX)
    if len(token) < MIN_TOKEN_CHARS:
        raise SettingsError(
            f"GPUSCHED_API_TOKEN has {len(token)} characters; a guessable token is no protection",
            fix=f"use at least {MIN_TOKEN_CHARS} random characters: " + TOKEN_FIX,
        )
    return token


class _Unauthorized(Exception):
    pass


def _unauthorized() -> JSONResponse:
    resp = _error(401, "missing or wrong API token", "send `Authorization: Bearer <token>`; "
                  "the CLI sends GPUSCHED_API_TOKEN, which must equal the daemon's")
    resp.headers["WWW-Authenticate"] = "Bearer"
    return resp


def _too_large(method: str, path: str) -> JSONResponse:
    limit, fix = _body_limit(method, path)
    return _error(413, f"request body over {limit} bytes", fix)


def _announced_too_large(method: str, path: str, content_length: int) -> JSONResponse | None:
    """The 413 for a body whose Content-Length is over its route's limit, before it is read."""
    return _too_large(method, path) if content_length > _body_limit(method, path)[0] else None


def _body_limit(method: str, path: str) -> tuple[int, str]:
    """The body limit of a route and what to do about a body over it (the 413's fix)."""
    if path.startswith("/v1/agent/"):
        return AGENT_BODY_BYTES, "an agent's report is a few hundred bytes; send one report per request"
    if path == "/v1/jobs" and method == "POST":
        return MAX_BODY_BYTES, "send one job file per request"
    return OTHER_BODY_BYTES, "this route takes no request body"


class _BadRequest(Exception):
    def __init__(self, status: int, error: str, fix: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.fix = status, error, fix


def machine_of(key: bytes, clock: Clock, given: str | None) -> str | None:
    """The instance a genuine, unexpired machine token names, or None (its row is not looked at here)."""
    if not given:
        return None
    try:
        return agent_token.verify(key, given, clock.now())
    except agent_token.AgentTokenError:
        return None


def _error(status: int, error: str, fix: str | None, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "fix": fix, **extra}, status_code=status)


def _install_error_handlers(app: FastAPI, store: Store) -> None:
    @app.exception_handler(_Unauthorized)
    async def _refused(_r: Request, _e: _Unauthorized) -> JSONResponse:
        return _unauthorized()

    install_access_errors(app, _unauthorized)

    @app.exception_handler(_BadRequest)
    async def _bad_request(_r: Request, e: _BadRequest) -> JSONResponse:
        return _error(e.status, e.error, e.fix)

    @app.exception_handler(JobFileError)
    async def _job_file(_r: Request, e: JobFileError) -> JSONResponse:
        problems = [{"field": p.field, "message": p.message, "example": p.example} for p in e.problems]
        return _error(422, e.message.splitlines()[0], "correct the fields below; "
                      "`gpusched validate <file>` checks a file without the daemon",
                      path=e.path, problems=problems)

    @app.exception_handler(NotFoundError)
    async def _not_found(_r: Request, e: NotFoundError) -> JSONResponse:
        return _error(404, e.message, e.fix)

    @app.exception_handler(UserError)
    async def _user(_r: Request, e: UserError) -> JSONResponse:
        return _error(400, e.message, e.fix)

    @app.exception_handler(GpuschedError)
    async def _ours(_r: Request, e: GpuschedError) -> JSONResponse:
        log.error("api_error", error=type(e).__name__, message=e.message)
        return _error(500, e.message, e.fix or "see the daemon's log")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        where = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        return _error(400, f"bad request: {where}", "the fields each request takes, and their bounds: "
                      "GET /openapi.json")

    @app.exception_handler(StarletteHTTPException)
    async def _http(r: Request, e: StarletteHTTPException) -> JSONResponse:
        if e.status_code == 413:  # FastAPI's body limit (max_body_size), while the body streamed in
            return _too_large(r.method, r.url.path)
        resp = _error(e.status_code, str(e.detail), None)
        for k, v in (e.headers or {}).items():
            resp.headers[k] = v
        return resp

    @app.exception_handler(OperationalError)
    async def _store_trouble(r: Request, e: OperationalError) -> JSONResponse:
        # The store locked, full or out of reach: nothing was written (the transaction rolled back), the
        # caller may try again, and the operator has a fix, not a traceback.
        log.error("api_store_unavailable", path=r.url.path, error=store_trouble(e))
        return _error(503, f"the daemon's store cannot be used now: {store_reason(e)}; nothing was changed",
                      store_fix(store, e))

    @app.exception_handler(Exception)
    async def _crash(r: Request, e: Exception) -> JSONResponse:
        log.error("api_crash", path=r.url.path, exc_info=e)
        return _error(500, "internal error", "see the daemon's log")


async def _job_from_request(request: Request, default_team: str | None = None) -> tuple[JobSpec, str]:
    """A JobSpec from ``{"spec": {...}, "source": "x.yaml"}`` or from raw YAML (``?source=x.yaml``); a job
    without ``team:`` is ``default_team``'s. The route's ``max_body_size`` stops the read with a 413 once
    the body is over ``MAX_BODY_BYTES``."""
    body = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in YAML_TYPES:
        source = _file_name(request.query_params.get("source") or "job.yaml")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise _BadRequest(400, "the job file is not UTF-8 text", "save it as UTF-8") from None
        return await run_in_threadpool(lambda: parse_job_text(text, source, default_team=default_team)), source
    if ctype not in JSON_TYPES:
        raise _BadRequest(415, f"cannot read a job from {ctype!r}",
                          "send application/json {\"spec\": ..., \"source\": ...} or application/yaml")
    try:
        envelope = json.loads(body)
    except RecursionError:  # nested deeper than the decoder goes: the job file's own depth bound says why
        raise too_deep(request.query_params.get("source") or "job.yaml") from None
    except ValueError:
        raise _BadRequest(400, "the request body is not valid JSON",
                          "send {\"spec\": <the job as JSON>, \"source\": \"job.yaml\"}") from None
    if not isinstance(envelope, dict) or "spec" not in envelope or set(envelope) - {"spec", "source"}:
        raise _BadRequest(400, "the request body must be {\"spec\": {...}, \"source\": \"...\"}",
                          "put the job under \"spec\"; \"source\" (optional) names its file")
    source = envelope.get("source") or "job.yaml"
    if not isinstance(source, str):
        raise _BadRequest(400, "\"source\" must be a file name", "e.g. \"source\": \"helmet.yaml\"")
    source = _file_name(source)
    return await run_in_threadpool(lambda: parse_job(envelope["spec"], source, default_team=default_team)), source


def _file_name(source: str) -> str:
    """``source`` is echoed in errors and kept in the job's events: a file name, printable and storable."""
    if len(source) > MAX_SOURCE_CHARS or has_lone_surrogate(source):
        raise _BadRequest(400, f"\"source\" must be a file name of at most {MAX_SOURCE_CHARS} characters "
                          "of valid Unicode", "e.g. \"source\": \"helmet.yaml\"")
    return source


# --- the on-instance agent's routes: one long-lived agent per machine, with its machine token ----------

JobId = Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_-]+$")]
AttemptNo = Annotated[int, Field(ge=1, le=1_000_000)]


class _AgentBody(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AgentHello(_AgentBody):
    """The machine's GPUs as its agent sees them (``scheduler/agent/machine.py``)."""

    gpu_name: str = Field(default="", max_length=128)
    gpu_model: str | None = Field(default=None, max_length=16)
    gpu_count: int = Field(ge=0, le=64)
    gpu_memory_mib: int | None = Field(default=None, ge=0, le=10_000_000)
    source: Literal["nvml", "nvidia-smi", "user-data"]


class AgentHeartbeat(_AgentBody):
    """Alive, and (while it runs one) how its attempt goes; idle: job_id and attempt are null."""

    job_id: JobId | None = None
    attempt: AttemptNo | None = None
    progress: str = Field(default="", max_length=200)
    epochs_done: int | None = Field(default=None, ge=0, le=1_000_000)
    gpu_util: float | None = Field(default=None, ge=0, le=100)


class AgentProgress(_AgentBody):
    job_id: JobId
    attempt: AttemptNo
    epochs_done: int = Field(ge=0, le=1_000_000)
    checkpoint_uri: str | None = Field(default=None, max_length=1024)
    # Images per GPU that trained an epoch on this machine (after halving for CUDA OOM, what fitted).
    physical_batch: int | None = Field(default=None, ge=1, le=4096)


class AgentFinished(_AgentBody):
    job_id: JobId
    attempt: AttemptNo
    ok: bool
    message: str = Field(default="", max_length=2000)
    outputs: str | None = Field(default=None, max_length=1024, pattern=r"^(s3|oss|cos)://\S+$")


class AgentLogs(_AgentBody):
    """A batch of the job's output (whole lines), ``offset`` bytes into the attempt's output."""

    job_id: JobId
    attempt: AttemptNo
    offset: int = Field(ge=0, le=1 << 50)
    text: str = Field(max_length=BATCH_BYTES)


class AgentReclaiming(_AgentBody):
    """The cloud's spot reclaim notice, passed on by the machine's agent: the machine goes at ``at``."""

    job_id: JobId
    attempt: AttemptNo
    at: datetime

    @field_validator("at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        try:  # a time without an offset is UTC, as the clouds' metadata services give it
            return (v if v.tzinfo is not None else v.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
        except OverflowError:
            raise ValueError("not a time the daemon can represent") from None


class AgentRendezvous(_AgentBody):
    """Rank 0 of a multi-node attempt: the address its launcher listens on (``yolo.MASTER_PORT``)."""

    job_id: JobId
    attempt: AttemptNo
    node_rank: int = Field(ge=0, le=1024)
    addr: IPvAnyAddress


_REFUSAL_STATUS = {"forbidden": 403, "invalid": 400, "conflict": 409}


def _refusal(r: Refusal) -> _BadRequest:
    return _BadRequest(_REFUSAL_STATUS[r.kind], r.error, r.fix)


def _agent_router(store: Store, clock: Clock, api_token: str, package: AgentPackage | None = None, *,
                  log_bytes: int = 1 << 20) -> APIRouter:
    """Routes for on-instance agents. Each machine's agent authenticates with its machine token
    (scoped to its instance row), never the API token; every call counts as a heartbeat. The routes
    are thin: the token (and that its instance is not terminated), then whether the job and attempt
    a report names are the ones assigned to this instance (409 otherwise: the agent drops that attempt
    and asks for work again), then what the job and attempt allow it to write (``*_refusal``: 400, 403
    or 409 with an ``agent_refused`` event), then the same ``agent_reports`` function the simulated
    agent calls."""
    key = agent_token.signing_key(api_token)

    def machine(request: Request) -> str:
        instance_id = machine_of(key, clock, bearer(request.headers))
        if instance_id is None:
            raise _Unauthorized()
        with store.session(write=False) as s:
            gone = machine_refusal(s, instance_id)
        if gone is not None:
            log.warning("agent_token_refused", instance=instance_id, why=gone)
            raise _Unauthorized()
        return instance_id

    def not_yours(job_id: str, attempt: int) -> _BadRequest:
        return _BadRequest(409, f"job {job_id} attempt {attempt} is not this machine's work",
                           "drop it and ask GET /v1/agent/work for this machine's work")

    def assignment(s: Any, instance_id: str, job_id: str, attempt: int, *,
                   rank0: bool = False) -> tuple[Assigned | None, _BadRequest | None]:
        """The machine was heard; its assignment for (job, attempt), or why it may not report on it.
        The caller raises the problem after its session commits, so a refused report still counts
        as a heartbeat (and its ``agent_refused`` event is kept)."""
        report_heartbeat(s, [instance_id], clock.now())
        found = assigned_attempt(s, instance_id, job_id, attempt)
        if found is None:
            return None, not_yours(job_id, attempt)
        if rank0 and found.node_rank != 0:
            return None, _BadRequest(400, "only rank 0 reports for the gang",
                                     "the other ranks read master_addr from GET /v1/agent/work")
        return found, None

    router = APIRouter(prefix="/v1/agent", max_body_size=AGENT_BODY_BYTES)

    @router.post("/hello")
    def hello(body: AgentHello, instance_id: str = Depends(machine)) -> dict[str, Any]:
        with store.session() as s:
            agrees = report_hello(s, instance_id, clock.now(), gpu_name=body.gpu_name, gpu_model=body.gpu_model,
                                  gpu_count=body.gpu_count, gpu_memory_mib=body.gpu_memory_mib, source=body.source)
        if agrees is None:
            raise _BadRequest(409, f"instance {instance_id} is not live", "nothing to do: this machine is going away")
        log.info("agent_hello", instance=instance_id, gpu=body.gpu_name, count=body.gpu_count, agrees=agrees)
        return {"instance_id": instance_id, "poll_seconds": WORK_POLL_SECONDS}

    @router.get("/work")
    def work(instance_id: str = Depends(machine)) -> dict[str, Any]:
        with store.session() as s:
            report_heartbeat(s, [instance_id], clock.now())
            return work_for(s, instance_id)

    @router.post("/heartbeat", status_code=204)
    def heartbeat(body: AgentHeartbeat, instance_id: str = Depends(machine)) -> Response:
        if (body.job_id is None) != (body.attempt is None):
            raise _BadRequest(400, "a heartbeat names both job_id and attempt, or neither", None)
        problem = None
        with store.session() as s:
            if body.job_id is not None and body.attempt is not None:
                _, problem = assignment(s, instance_id, body.job_id, body.attempt)
            else:
                report_heartbeat(s, [instance_id], clock.now())
        if problem is not None:
            raise problem
        log.debug("agent_heartbeat", instance=instance_id, job_id=body.job_id, attempt=body.attempt,
                  progress=body.progress, gpu_util=body.gpu_util)
        return Response(status_code=204)

    @router.post("/token")
    def renew(instance_id: str = Depends(machine)) -> dict[str, Any]:
        now = clock.now()
        with store.session() as s:
            report_heartbeat(s, [instance_id], now)
            est_hours = work_estimate(s, instance_id)
        if est_hours is None:
            raise _BadRequest(409, f"instance {instance_id} is not live", "no renewal: this machine is going away")
        ttl = machine_ttl(est_hours)
        return {"token": agent_token.issue(key, instance_id, now, ttl), "expires_at": (now + ttl).isoformat()}

    @router.post("/rendezvous", status_code=204)
    def rendezvous(body: AgentRendezvous, instance_id: str = Depends(machine)) -> Response:
        if body.node_rank != 0:
            raise _BadRequest(400, "only rank 0 advertises the gang's address",
                              "the other ranks read master_addr from GET /v1/agent/work")
        addr = str(body.addr)
        with store.session() as s:
            found, problem = assignment(s, instance_id, body.job_id, body.attempt, rank0=True)
            if found is not None:
                refused = rendezvous_refusal(s, found, instance_id, addr, clock.now())
                if refused is not None:
                    problem = _refusal(refused)
                elif not report_rendezvous(s, body.job_id, body.attempt, addr, clock.now()):
                    problem = not_yours(body.job_id, body.attempt)
        if problem is not None:
            raise problem
        log.info("agent_rendezvous", job_id=body.job_id, attempt=body.attempt, addr=addr)
        return Response(status_code=204)

    @router.post("/progress", status_code=204)
    def progress(body: AgentProgress, instance_id: str = Depends(machine)) -> Response:
        with store.session() as s:
            found, problem = assignment(s, instance_id, body.job_id, body.attempt, rank0=True)
            if found is not None:
                refused = progress_refusal(s, found, instance_id, body.epochs_done, body.checkpoint_uri, clock.now())
                if refused is not None:
                    problem = _refusal(refused)
                else:
                    report_progress(s, body.job_id, body.attempt, body.epochs_done, body.checkpoint_uri, clock.now(),
                                    physical_batch=body.physical_batch)
        if problem is not None:
            raise problem
        return Response(status_code=204)

    @router.post("/finished", status_code=204)
    def finished(body: AgentFinished, instance_id: str = Depends(machine)) -> Response:
        with store.session() as s:
            found, problem = assignment(s, instance_id, body.job_id, body.attempt, rank0=True)
            if found is not None:
                refused = finished_refusal(s, found, instance_id, body.outputs, clock.now())
                if refused is not None:
                    problem = _refusal(refused)
                else:
                    report_finished(s, body.job_id, body.attempt, body.ok, clock.now(), body.message, body.outputs)
        if problem is not None:
            raise problem
        log.info("agent_finished", job_id=body.job_id, attempt=body.attempt, instance=instance_id, ok=body.ok,
                 outputs=body.outputs)
        return Response(status_code=204)

    @router.post("/logs", status_code=204)
    def logs(body: AgentLogs, instance_id: str = Depends(machine)) -> Response:
        """The job's output, in batches (``agent/logship.py``); kept per attempt up to ``log_bytes``."""
        with store.session() as s:
            found, problem = assignment(s, instance_id, body.job_id, body.attempt, rank0=True)
            if found is not None:
                append_output(s, body.job_id, body.attempt, body.offset, body.text, clock.now(), limit=log_bytes)
        if problem is not None:
            raise problem
        return Response(status_code=204)

    @router.post("/reclaiming", status_code=204)
    def reclaiming(body: AgentReclaiming, instance_id: str = Depends(machine)) -> Response:
        """Any node may pass its notice on: losing one node of a gang loses the gang."""
        refused = reclaim_refusal(body.at, clock.now())
        if refused is not None:
            raise _refusal(refused)
        with store.session() as s:
            found, problem = assignment(s, instance_id, body.job_id, body.attempt)
            if found is not None and not report_reclaiming(s, instance_id, body.job_id, body.attempt, body.at,
                                                           clock.now()):
                problem = not_yours(body.job_id, body.attempt)
        if problem is not None:
            raise problem
        log.warning("agent_reclaiming", job_id=body.job_id, attempt=body.attempt, instance=instance_id,
                    at=body.at.isoformat())
        return Response(status_code=204)

    @router.get("/package")
    def agent_wheel(instance_id: str = Depends(machine)) -> Response:
        """The daemon's own gpusched wheel, which the user-data installs after checking its pinned sha256
        (``scheduler/agent/package.py``). Not a heartbeat: the agent is not running yet."""
        if package is None or package.content is None:
            raise _BadRequest(404, "this daemon serves no agent wheel",
                              "set GPUSCHED_AGENT_WHEEL on the daemon, or pin GPUSCHED_AGENT_WHEEL_URL/_SHA256")
        log.info("agent_package_served", instance=instance_id, wheel=package.filename, sha256=package.sha256)
        return Response(package.content, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{package.filename}"'})

    return router


def create_app(
    store: Store,
    clock: Clock,
    settings: Settings,
    *,
    health: Callable[[], dict[str, Any]] | None = None,
    metrics: Callable[[], str] | None = None,
    agent_package: AgentPackage | None = None,
) -> FastAPI:
    """The API on ``store``. ``health`` adds the daemon's tick status to /healthz; ``metrics`` its counters;
    ``agent_package`` is the wheel served to machines at ``GET /v1/agent/package`` (when the daemon serves one)."""
    token = require_token(settings)
    register_secret(token)
    agent_key = agent_token.signing_key(token)
    access = Access(store, clock, token)

    def is_machine_token(given: str | None, _scope: object) -> bool:
        return machine_of(agent_key, clock, given) is not None

    # No app-wide body limit: it would answer in plain text before AuthFirst; routes that read no
    # body never buffer one (the server reads a body only as fast as the route takes it).
    app = FastAPI(title="gpusched", version="1", docs_url=None, redoc_url=None)
    _install_error_handlers(app, store)
    # The token before the body: FastAPI would read and parse a body before the routes' dependencies.
    app.add_middleware(AuthFirst, areas=[("/v1/agent/", is_machine_token), ("/v1/", access.check)],
                       refuse=_unauthorized, oversized=_announced_too_large)
    install_openapi(app)  # /openapi.json: the job file's body and every error answer (app/openapi.py)
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(access.who)], max_body_size=OTHER_BODY_BYTES)

    @v1.post("/jobs", status_code=201, response_model=JobView, max_body_size=MAX_BODY_BYTES)
    async def submit_job(request: Request, who: Principal = Depends(access.who)) -> JobView:
        refused = may_write(who)  # before the body is read: a viewer's job file is not worth parsing
        if refused is not None:
            raise await run_in_threadpool(access.refuse, request, who, "job.submit", refused, target="job")
        spec, source = await _job_from_request(request, who.default_team())
        refused = may_act_for(who, spec.team)
        if refused is not None:
            raise await run_in_threadpool(access.refuse, request, who, "job.submit",
                                          f"the job file names team {spec.team}: {refused}",
                                          target=f"{spec.name} ({source})", team=spec.team,
                                          fix="submit it with a token of that team, or name one of your teams "
                                              "in `team:`")

        def recorded(s: Any, view: JobView) -> None:
            access.allowed(s, request, who, "job.submit", status=201, target=view.id, team=view.team,
                           detail=f"{view.kind.value} {view.model} {view.name} from {source}")

        view = await run_in_threadpool(lambda: service.submit(store, clock, spec, source=source,
                                                              submitted_by=who.name, record=recorded))
        log.info("job_submitted", job_id=view.id, team=view.team, kind=view.kind.value, source=source, by=who.name)
        return view

    @v1.get("/jobs", response_model=list[JobView])
    def list_jobs(
        request: Request,
        who: Principal = Depends(access.who),
        state: JobState | None = None,
        team: str | None = Query(default=None, max_length=63),
        limit: int = Query(default=100, ge=1, le=service.MAX_LIST),
    ) -> list[JobView]:
        refused = may_read(who, team) if team else None
        if refused is not None:
            raise access.refuse(request, who, "job.list", refused, target="jobs", team=team)
        teams = None if who.is_admin else who.teams
        return service.list_jobs(store, state=state, team=team, limit=limit, teams=teams)

    @v1.get("/jobs/{job_id}", response_model=JobDetail)
    def get_job(job_id: str, request: Request, who: Principal = Depends(access.who)) -> JobDetail:
        detail = service.get_job(store, job_id, fx=settings.fx, currency=settings.report_currency, now=clock.now())
        refused = may_read(who, detail.team)
        if refused is not None:
            raise access.refuse(request, who, "job.read", f"job {job_id} is team {detail.team}'s: {refused}",
                                target=job_id, team=detail.team)
        return detail

    @v1.get("/jobs/{job_id}/logs", response_model=JobLogs)
    def job_logs(
        job_id: str,
        request: Request,
        attempt: int | None = Query(default=None, ge=1, le=1_000_000),
        offset: int = Query(default=0, ge=0, le=1 << 50),
        who: Principal = Depends(access.who),
    ) -> JobLogs:
        """One attempt's output (the latest by default) from ``offset`` on; ask again from ``next_offset``."""
        team = service.job_team(store, job_id)
        refused = may_read(who, team)
        if refused is not None:
            raise access.refuse(request, who, "job.logs", f"job {job_id} is team {team}'s: {refused}",
                                target=job_id, team=team)
        return service.job_logs(store, job_id, attempt, offset, limit=settings.job_log_bytes)

    @v1.post("/jobs/{job_id}/cancel", response_model=JobView)
    def cancel_job(job_id: str, request: Request, who: Principal = Depends(access.who)) -> JobView:
        team = service.job_team(store, job_id)
        refused = may_act_for(who, team)
        if refused is not None:
            raise access.refuse(request, who, "job.cancel", f"job {job_id} is team {team}'s: {refused}",
                                target=job_id, team=team)

        def recorded(s: Any, view: JobView) -> None:
            access.allowed(s, request, who, "job.cancel", status=200, target=view.id, team=view.team,
                           detail=f"{view.name}, now {view.state.value}")

        view = service.cancel(store, clock, job_id, record=recorded)
        log.info("job_cancelled", job_id=view.id, by=who.name)
        return view

    app.include_router(v1)
    app.include_router(access_router(access))
    app.include_router(_agent_router(store, clock, token, agent_package, log_bytes=settings.job_log_bytes))

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        body: dict[str, Any] = {"status": "ok", "last_tick": None}
        if health is not None:
            try:
                body.update(health())
            except Exception as exc:  # a broken health probe is an unhealthy daemon, not a crash
                log.error("health_failed", exc_info=exc)
                body.update(status="error", error=f"{type(exc).__name__}: {exc}")
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    @app.get("/livez")
    def livez() -> JSONResponse:
        """Liveness: 503 only when a restart would help (stopped, stalled). Failing ticks are /healthz's
        business (readiness): restarting does not bring a cloud API back."""
        answer = healthz()
        body = json.loads(answer.body)
        live = body["status"] in ("ok", "failing")
        return JSONResponse({"status": "ok" if live else body["status"], "last_tick": body.get("last_tick")},
                            status_code=200 if live else 503)

    from_store = store_registry(store, clock, settings)

    @app.get("/metrics")
    def prometheus() -> Response:
        text = render(from_store).decode()
        if metrics is not None:
            extra = metrics()
            text += extra if extra.endswith("\n") or not extra else extra + "\n"
        return PlainTextResponse(text, media_type=PROMETHEUS_TYPE)

    return app
