"""The published OpenAPI (``/openapi.json``): FastAPI's, completed with what it cannot see.

FastAPI documents what the route signatures say. It cannot see that ``POST /v1/jobs`` reads its body itself
(a job file as YAML, or ``{"spec": ..., "source": ...}`` as JSON), nor the answers that come from the API's
own error handlers: 400 for a malformed request (FastAPI would say 422), 401 without the token, 404 for an
unknown job, 409 for an agent's report on work that is not its machine's, 413 for a body over the limit,
415 for a body in another format, 422 for a job file at fault (with every problem). This module adds
them, so that clients and ``tests/app/test_openapi_fuzz.py`` (schemathesis) hold the API to its word.

The job's schema is ``gpusched schema``'s (``jobfile_schema.job_json_schema``), with its rules of which
section goes with which kind, not pydantic's looser view of ``JobSpec``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict

from scheduler.jobs.jobfile_schema import job_json_schema

JOB_FILE = "JobFile"
_REF = "#/components/schemas/"


class ErrorBody(BaseModel):
    """Every error the API answers: what is wrong, and what to do about it."""

    model_config = ConfigDict(extra="allow")

    error: str
    fix: str | None = None


class JobProblem(BaseModel):
    field: str
    message: str
    example: str | None = None


class JobFileErrorBody(ErrorBody):
    """A job file that cannot be accepted (422): every field at fault, each with an example."""

    path: str
    problems: list[JobProblem]


def _error(description: str, model: type[BaseModel] = ErrorBody) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": _REF + model.__name__}}}}


BAD_REQUEST = _error("Bad request: a parameter or body that does not fit (the message names it)")
UNAUTHORIZED = _error("Missing or wrong bearer token (or a revoked or expired one)")
FORBIDDEN = _error("The token's role or teams do not allow this (the message says why); the call is audited")
TOO_LARGE = _error("The body is over the limit")

# The answers each route gives besides its success, by (method, path).
_ANSWERS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("post", "/v1/jobs"): {
        "413": TOO_LARGE,
        "415": _error("The body is neither JSON nor YAML"),
        "422": _error("The job file is at fault: every problem, field by field", JobFileErrorBody),
    },
    ("get", "/v1/jobs/{job_id}"): {"404": _error("No such job")},
    ("get", "/v1/jobs/{job_id}/logs"): {"404": _error("No such job, or no such attempt of it")},
    ("post", "/v1/jobs/{job_id}/cancel"): {
        "404": _error("No such job"),
        "400": _error("The job has already finished: nothing to cancel"),
    },
    ("post", "/v1/tokens/{token_id}/revoke"): {"404": _error("No such token")},
    ("get", "/metrics"): {"200": {"description": "Prometheus text exposition: jobs and instances by state, "
                                                 "the daemon's tick and report counters",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}},
    ("get", "/healthz"): {"503": {"description": "Not ready: the scheduler has stopped or stalled, or its last "
                                                 "ticks failed (the last error is given)",
                                  "content": {"application/json": {"schema": {"type": "object"}}}}},
    ("get", "/livez"): {"503": {"description": "Not live: the scheduler has stopped or stalled",
                                "content": {"application/json": {"schema": {"type": "object"}}}}},
    ("get", "/v1/agent/package"): {
        "200": {"description": "The daemon's own gpusched wheel, as the machine's user-data pins its sha256",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        "404": _error("This daemon serves no wheel (GPUSCHED_AGENT_WHEEL is not set)"),
    },
}
_AGENT_NOT_YOURS = _error("The job, attempt or instance is not this machine's (live) work")
_AGENT_FORBIDDEN = _error("A URI outside the job's own output prefix: a machine writes only there")


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json``) the completed document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
            app.openapi_schema = complete(doc)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def complete(doc: dict[str, Any]) -> dict[str, Any]:
    """Add the job file's schema, the request bodies FastAPI cannot see, every error answer and the tokens."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)  # our handler answers 400 with ErrorBody, never FastAPI's 422
    for model in (ErrorBody, JobProblem, JobFileErrorBody):
        schemas.update(model.model_json_schema(ref_template=_REF + "{model}").pop("$defs", {}))
        schemas[model.__name__] = model.model_json_schema(ref_template=_REF + "{model}")
    schemas.update(_job_file_schemas())
    doc["components"]["securitySchemes"] = {
        "apiToken": {"type": "http", "scheme": "bearer",
                     "description": "a person's or service's token (`gpusched token create`), or GPUSCHED_API_TOKEN"},
        "machineToken": {"type": "http", "scheme": "bearer",
                         "description": "the token the daemon gave the machine at launch"},
    }
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            answers = op.setdefault("responses", {})
            if answers.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {}).get(
                    "$ref", "").endswith("/HTTPValidationError"):
                del answers["422"]
            if path.startswith("/v1/agent/"):
                op["security"] = [{"machineToken": []}]
                answers.setdefault("401", UNAUTHORIZED)
                answers.setdefault("409", _AGENT_NOT_YOURS)
                answers.setdefault("400", BAD_REQUEST)
                if method == "post":
                    answers.setdefault("413", TOO_LARGE)
                    answers.setdefault("403", _AGENT_FORBIDDEN)
            elif path.startswith("/v1/"):
                op["security"] = [{"apiToken": []}]
                answers.setdefault("401", UNAUTHORIZED)
                answers.setdefault("403", FORBIDDEN)
                answers.setdefault("400", BAD_REQUEST)
                if method == "post":
                    answers.setdefault("413", TOO_LARGE)
            for status, answer in _ANSWERS.get((method, path), {}).items():
                answers[status] = answer
    jobs = doc["paths"]["/v1/jobs"]["post"]
    jobs["requestBody"] = {
        "required": True,
        "description": "A job file: as YAML, its text (the query's `source` names the file), or as JSON, "
                       "`{\"spec\": <the job>, \"source\": \"helmet.yaml\"}`.",
        "content": {
            "application/json": {"schema": {
                "type": "object", "required": ["spec"], "additionalProperties": False,
                "properties": {"spec": {"$ref": _REF + JOB_FILE},
                               "source": {"type": "string", "maxLength": 255, "description": "the file's name"}},
            }},
            "application/yaml": {"schema": {"$ref": _REF + JOB_FILE}},
        },
    }
    jobs["parameters"] = [{"name": "source", "in": "query", "required": False,
                           "description": "the YAML body's file name, shown in errors (YAML bodies only)",
                           "schema": {"type": "string", "maxLength": 255}}]
    return doc


def _job_file_schemas() -> dict[str, Any]:
    """``JobFile`` and its parts, their ``$defs`` moved into the components as ``JobFile_<name>``."""
    schema = job_json_schema()
    defs = schema.pop("$defs", {})
    schema.pop("$schema", None)
    out = {f"{JOB_FILE}_{name}": _rerooted(part) for name, part in defs.items()}
    out[JOB_FILE] = _rerooted(schema)
    return out


def _rerooted(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (_REF + JOB_FILE + "_" + v.removeprefix("#/$defs/")
                    if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/") else _rerooted(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_rerooted(v) for v in node]
    return node
