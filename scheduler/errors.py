"""One error tree for the whole project.

User-facing errors carry a ``fix`` hint. Provider errors carry the vendor's code
and request id so the log can point at the exact cloud call; adapters translate
vendor exceptions into these and nothing vendor-specific crosses an adapter.
"""

from __future__ import annotations


class GpuschedError(Exception):
    """Root of every error this project raises on purpose."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class UserError(GpuschedError):
    """Something the user can correct: bad input, a missing setting, a refused job."""


class JobFileError(UserError):
    """A job.yaml that cannot be accepted. ``problems`` lists every field at fault."""

    def __init__(self, path: str, problems: list["FieldProblem"]) -> None:
        self.path = path
        self.problems = problems
        lines = [f"{path}: {len(problems)} problem(s)"]
        for p in problems:
            lines.append(f"  {p.field}: {p.message}")
            if p.example:
                lines.append(f"    e.g. {p.example}")
        super().__init__("\n".join(lines))


class FieldProblem:
    """One thing wrong with one field of a job file."""

    __slots__ = ("field", "message", "example")

    def __init__(self, field: str, message: str, example: str | None = None) -> None:
        self.field = field
        self.message = message
        self.example = example

    def __repr__(self) -> str:
        return f"FieldProblem({self.field!r}, {self.message!r}, {self.example!r})"


class SettingsError(UserError):
    """A setting in the environment or .env is missing or malformed."""


class DaemonUnreachable(UserError):
    """The CLI could not reach the daemon's HTTP API."""


class StoreUnavailable(UserError):
    """The store (SQLite file or PostgreSQL) cannot be reached, or is not a sound gpusched database."""


class NotFoundError(UserError):
    """A job or instance id the user named does not exist."""


class IllegalTransition(GpuschedError):
    """A state machine was asked for a move it does not allow: a bug, never user input."""


class LeadershipLost(BaseException):
    """This daemon found, inside a transaction of its tick, that it no longer holds the leader lease
    (another daemon took it, or it expired while this one was paused or cut off from the database).

    A BaseException on purpose, like a simulated crash: the tick sets one bad job aside with
    ``except Exception`` and goes on, but a deposed leader must stop at once, writing nothing more.
    ``lifecycle.tick`` catches it at the top and reports the tick as not led.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProviderError(GpuschedError):
    """Root of cloud errors. ``retryable`` says whether our own retry loop may try again.

    ``retry_after`` is the wait in seconds the cloud asked for (an HTTP ``Retry-After``), when it
    named one; ``providers.retry.call_with_retry`` waits at least that long before the next try.
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        code: str = "",
        request_id: str = "",
        fix: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.provider = provider
        self.code = code
        self.request_id = request_id
        self.retry_after = retry_after

    def log_fields(self) -> dict[str, str]:
        return {
            "error": type(self).__name__,
            "provider": self.provider,
            "vendor_code": self.code,
            "request_id": self.request_id,
            "message": self.message,
        }


class NoCapacity(ProviderError):
    """The cloud has no stock for this offer right now (spot or on-demand)."""


class QuotaExceeded(ProviderError):
    """The account's quota forbids the request (vCPU, GPU or spot quota)."""


class Throttled(ProviderError):
    """Too many requests; retry after a back-off."""

    retryable = True


class AuthFailed(ProviderError):
    """Credentials are missing, wrong or lack a permission."""


class NotFound(ProviderError):
    """The instance (or other resource) does not exist at the cloud."""


class InvalidRequest(ProviderError):
    """The cloud rejected the request's parameters; retrying will not help."""


class ProviderUnavailable(ProviderError):
    """The cloud API is down or unreachable; transient."""

    retryable = True


class ResourceBusy(ProviderError):
    """Another operation on the same resource (or the same client token) is still running at the
    cloud: Alibaba ``OperationConflict`` / ``LastTokenProcessing``, Tencent ``MutexOperation.TaskRunning``.
    Nothing was refused for good; the same call succeeds once that operation ends."""

    retryable = True


class BillingStopped(ProviderError):
    """The cloud will not bill this account any more: its balance is used up or a payment is overdue.
    Nothing launches there until someone pays; not a quota (raising one would not help)."""


def install_hint(extra: str) -> str:
    """How to add an optional part (``postgres``, ``clouds``, ``aws`` ...): from this project's own checkout
    or wheel, never by name from a public index, where an unrelated project owns ``gpusched``."""
    return (f"install it from your gpusched checkout: pip install '.[{extra}]' (or the release wheel: "
            f"pip install 'gpusched-<version>-py3-none-any.whl[{extra}]'); not `pip install gpusched`, "
            "a public index's gpusched is another project")
