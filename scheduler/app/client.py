"""The CLI's client for the daemon's HTTP API.

Every failure becomes one of our errors with a fix: the daemon not running,
a wrong token, a job file the daemon refused (rebuilt field by field, so the
CLI prints it exactly as it prints a local validation error), an unknown id.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from scheduler.app.roles import Principal
from scheduler.errors import (
    DaemonUnreachable,
    FieldProblem,
    GpuschedError,
    JobFileError,
    NotFoundError,
    StoreUnavailable,
    UserError,
)
from scheduler.lifecycle.job_logs import JobLogs
from scheduler.lifecycle.service import JobDetail, JobView
from scheduler.states import JobState
from scheduler.store.audit import AuditEntry
from scheduler.store.tokens import IssuedToken, TokenInfo

M = TypeVar("M", JobView, JobDetail, JobLogs, IssuedToken, TokenInfo, AuditEntry, Principal)

UNREACHABLE_FIX = "start it with `gpusched daemon` (or set GPUSCHED_API_URL)"
NOT_THE_DAEMON_FIX = "check that GPUSCHED_API_URL points at the gpusched daemon, not another server"
TOKEN_FIX = "set GPUSCHED_API_TOKEN to the daemon's token (in the environment or .env)"


class ApiClient:
    """Talks to ``base_url`` (e.g. http://127.0.0.1:8642) with a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._has_token = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, transport=transport, timeout=timeout)
        self._timeout = timeout

    # --- the API

    def submit(self, spec: dict[str, Any], source: str) -> JobView:
        """Queue a job given as the JSON form of a job.yaml (``JobSpec.model_dump(mode="json")``)."""
        return self._parse(JobView, self._call("POST", "/v1/jobs", json={"spec": spec, "source": source}))

    def submit_text(self, text: str, source: str) -> JobView:
        """Queue a job given as job.yaml text; the daemon parses it."""
        body = self._call(
            "POST", "/v1/jobs", content=text.encode(), params={"source": source},
            headers={"Content-Type": "application/yaml"},
        )
        return self._parse(JobView, body)

    def list_jobs(
        self, *, state: JobState | str | None = None, team: str | None = None, limit: int = 100
    ) -> list[JobView]:
        return [self._parse(JobView, j) for j in self.list_jobs_json(state=state, team=team, limit=limit)]

    def list_jobs_json(
        self, *, state: JobState | str | None = None, team: str | None = None, limit: int = 100
    ) -> list[Any]:
        """``list_jobs`` as the daemon answered it (checked, not rebuilt): for ``--json``."""
        params: dict[str, str | int] = {"limit": limit}
        if state:
            params["state"] = str(state)
        if team:
            params["team"] = team
        body = self._call("GET", "/v1/jobs", params=params)
        if not isinstance(body, list):
            raise self._mismatch("a list of jobs")
        for j in body:
            self._parse(JobView, j)
        return body

    def get_job(self, job_id: str) -> JobDetail:
        return self._parse(JobDetail, self.get_job_json(job_id))

    def get_job_json(self, job_id: str) -> Any:
        """``get_job`` as the daemon answered it (checked, not rebuilt): for ``--json``."""
        body = self._call("GET", f"/v1/jobs/{_path_part(job_id)}")
        self._parse(JobDetail, body)
        return body

    def logs(self, job_id: str, *, attempt: int | None = None, offset: int = 0) -> JobLogs:
        """One attempt's output (the latest by default) from ``offset`` on; ask again from ``next_offset``."""
        params: dict[str, int] = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self._parse(JobLogs, self._call("GET", f"/v1/jobs/{_path_part(job_id)}/logs", params=params))

    def cancel(self, job_id: str) -> JobView:
        return self._parse(JobView, self._call("POST", f"/v1/jobs/{_path_part(job_id)}/cancel"))

    # --- tokens and the audit log (app/access.py)

    def whoami(self) -> Principal:
        return self._parse(Principal, self._call("GET", "/v1/whoami"))

    def create_token(self, *, name: str, role: str, teams: list[str], expires_in_seconds: int | None) -> IssuedToken:
        body = {"name": name, "role": role, "teams": teams, "expires_in_seconds": expires_in_seconds}
        return self._parse(IssuedToken, self._call("POST", "/v1/tokens", json=body))

    def list_tokens(self) -> list[TokenInfo]:
        return self._parse_list(TokenInfo, self._call("GET", "/v1/tokens"), "a list of tokens")

    def revoke_token(self, token_id: str) -> TokenInfo:
        return self._parse(TokenInfo, self._call("POST", f"/v1/tokens/{_path_part(token_id, 'token')}/revoke"))

    def audit(self, *, since: datetime | None = None, team: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        params: dict[str, str | int] = {"limit": limit}
        if since is not None:
            params["since"] = since.isoformat()
        if team:
            params["team"] = team
        return self._parse_list(AuditEntry, self._call("GET", "/v1/audit", params=params), "audit log entries")

    def health(self) -> dict[str, Any]:
        """The daemon's /healthz answer; an unhealthy daemon (503) still answers with its status."""
        response = self._send("GET", "/healthz")
        if response.status_code in (200, 503):
            return _json(response, self.base_url)
        return self._raise_for(response)

    # --- plumbing

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _parse(self, model: type[M], data: Any) -> M:
        try:
            return model.model_validate(data)
        except ValidationError:
            raise self._mismatch(f"a {model.__name__}") from None

    def _parse_list(self, model: type[M], data: Any, wanted: str) -> list[M]:
        if not isinstance(data, list):
            raise self._mismatch(wanted)
        return [self._parse(model, item) for item in data]

    def _mismatch(self, wanted: str) -> GpuschedError:
        return GpuschedError(
            f"the daemon at {self.base_url} did not answer with {wanted}",
            fix="run the same gpusched version for the CLI and the daemon",
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise DaemonUnreachable(
                f"cannot reach the gpusched daemon at {self.base_url} (no answer within {self._timeout:g} s)",
                fix=UNREACHABLE_FIX,
            ) from None
        except httpx.TransportError:
            raise DaemonUnreachable(
                f"cannot reach the gpusched daemon at {self.base_url}", fix=UNREACHABLE_FIX
            ) from None

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        if response.is_success:
            return _json(response, self.base_url)
        return self._raise_for(response)

    def _raise_for(self, response: httpx.Response) -> Any:
        status = response.status_code
        body = _error_body(response)
        if "error" not in body:  # every answer of the daemon's but a success says {"error", "fix"}
            raise GpuschedError(f"{self.base_url} answered HTTP {status}, not as the gpusched daemon answers",
                                fix=NOT_THE_DAEMON_FIX)
        error, fix = str(body.get("error") or f"HTTP {status}"), body.get("fix")
        if status == 401:
            if not self._has_token:
                raise UserError("the daemon wants an API token and none is set", fix=TOKEN_FIX)
            if error.startswith("the API token") or error.startswith("GPUSCHED_API_TOKEN"):
                raise UserError(f"the daemon refused the API token: {error.removeprefix('the API token ')}",
                                fix=fix or TOKEN_FIX)  # revoked, expired, or the shared one retired: it says so
            raise UserError("the daemon refused the API token", fix=TOKEN_FIX)
        if status == 422 and isinstance(body.get("problems"), list):
            problems = [
                FieldProblem(str(p.get("field", "")), str(p.get("message", "")), p.get("example"))
                for p in body["problems"]
                if isinstance(p, dict)
            ]
            raise JobFileError(str(body.get("path") or "job"), problems)
        if status == 404:
            raise NotFoundError(error, fix=fix or "list jobs with `gpusched status`")
        if 400 <= status < 500:
            raise UserError(error, fix=fix)
        if status == 503 and fix:  # the daemon's store locked, full or out of reach: nothing was changed
            raise StoreUnavailable(f"the gpusched daemon at {self.base_url}: {error}", fix=fix)
        raise GpuschedError(
            f"the gpusched daemon at {self.base_url} failed: {error}", fix=fix or "see the daemon's log"
        )


def _path_part(item_id: str, what: str = "job") -> str:
    # A slash or ".." would reach another route, even escaped (the server decodes %2F first).
    if not item_id or "/" in item_id or item_id in (".", ".."):
        listing = "gpusched status" if what == "job" else f"gpusched {what} list"
        raise NotFoundError(f"no {what} {item_id!r}", fix=f"list {what}s with `{listing}`")
    return quote(item_id, safe="")


def _json(response: httpx.Response, base_url: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise GpuschedError(
            f"{base_url} answered HTTP {response.status_code} with something that is not JSON",
            fix=NOT_THE_DAEMON_FIX,
        ) from None


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}

