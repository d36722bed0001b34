"""Settings: the only reader of the environment and ``.env``.

``Settings`` holds the scheduler's own settings (GPUSCHED_*); ``load_cloud_config`` fills each
cloud adapter's config model (``providers.aws.config.AwsConfig`` ...) from GPUSCHED_<CLOUD>_*, so the
adapters never read the environment themselves. Lists and maps are JSON:
GPUSCHED_ALIBABA_REGIONS='["cn-hangzhou"]'.

Every setting has the ``GPUSCHED_`` prefix; ``.env.example`` lists them all.
Secrets are ``SecretStr`` so they never print in a repr or a log line.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal, TypeVar
from urllib.parse import SplitResult, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

from scheduler.errors import SettingsError
from scheduler.models import CLOUDS, ReservedCapacity, team_problem
from scheduler.money import FxRates, Money, parse_fx_rates

_MONTH_RE = re.compile(r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])$")
DAY_S = 86_400
WEEK_MIN = 7 * 24 * 60
YEAR_H = 366 * 24
MAX_SPEEDUP = 100_000  # a sandbox year in about five minutes
MAX_TEAM_BUDGET = Decimal(10) ** 9
_FX_FILE_LIMIT = 1024 * 1024
_MAIL_RE = re.compile(r"^[^@\s,]+@[^@\s,]+$")
WEBHOOK_SERVICES = ("slack", "dingtalk", "wecom", "feishu")


# The daemon's settings a simulation may be asked "what if" about (``gpusched simulate --set``), by field name,
# read from the environment (GPUSCHED_*) as the daemon reads them; those away from their defaults are in the
# simulation's summary (``simulation.simulate.changed_settings``).
# Not the rest: the simulator sets the store, cluster, seed and tick itself, and the others (the API, reports,
# mail, secrets) change nothing a simulated month decides or bills. Reserved capacity is free at the margin
# in a simulated bill, as in the ledger; its fee, amortized as the report does, is the summary's ``reserved_fees``.
WHAT_IF_SETTINGS = ("providers", "reserved", "idle_stop_minutes", "launch_grace_seconds", "agent_silence_minutes",
                    "stopped_retention_hours", "team_budgets", "budget_at_limit", "report_currency", "fx_usd_cny")


class FxRatesFile(BaseModel):
    """GPUSCHED_FX_RATES_FILE: the file, and the dated rates read from it when the settings were loaded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    rates: dict[str, Decimal]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GPUSCHED_", env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    # --- where things live
    data_dir: Path = Path(".gpusched")
    database_url: str = ""  # empty: sqlite file <data_dir>/gpusched.db
    cluster: str = Field(default="default", pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")

    # --- HTTP API (the daemon serves it, the CLI calls it)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8642, ge=1, le=65535)
    api_url: str = ""  # empty: http://<api_host>:<api_port>
    api_token: SecretStr | None = None
    # How instances reach the API (the agent reports progress there); empty: api_url.
    agent_api_url: str = ""
    # The gpusched wheel machines install: exactly the daemon's version, pinned by sha256 in their user-data,
    # never a name lookup on a public index (scheduler/agent/package.py). Either a wheel file, or a folder
    # holding one, that the daemon serves to its machines (deploy/Dockerfile builds it) ...
    agent_wheel: str = ""
    # ... or a URL where the operator publishes that wheel, with its sha256.
    agent_wheel_url: str = ""
    agent_wheel_sha256: str = ""

    # --- the lifecycle
    # Every number has a ceiling well past any sane use: an overflowing timedelta or Decimal deep in a
    # tick is a traceback, a refused setting at start is one line naming it.
    # At least 0.05 s: 1e-6 was accepted, and the daemon ticked as fast as the store allowed.
    tick_seconds: float = Field(default=10.0, ge=0.05, le=DAY_S, allow_inf_nan=False)
    idle_stop_minutes: int = Field(default=10, ge=0, le=WEEK_MIN)
    # "learned": a machine whose job did not set policy.idle_stop_minutes stays warm only where
    # machines of its kind were wanted again soon often enough to pay (scheduler/lifecycle/idle_window.py);
    # "fixed": always idle_stop_minutes.
    idle_warm: Literal["learned", "fixed"] = "learned"
    launch_grace_seconds: int = Field(default=120, ge=0, le=DAY_S)
    # A running machine whose agent has been silent this long (or, after boot, never said hello) is
    # taken as lost: its job is requeued like a preemption and the machine terminated. 0: never.
    agent_silence_minutes: int = Field(default=10, ge=0, le=WEEK_MIN)
    # Several daemons on one database (PostgreSQL): the leader lease (scheduler/lifecycle/leadership.py). The
    # leader holds it for leader_lease_s and renews it every leader_renew_s (empty: a third of the lease); a
    # dead leader is replaced at most lease + renew seconds after its last renewal.
    leader_lease_s: float = Field(default=30.0, ge=1, le=3600, allow_inf_nan=False)
    leader_renew_s: float | None = Field(default=None, ge=0.1, le=1200, allow_inf_nan=False)  # 1e-9 hammered the store
    # Which clouds to use, and how to reach them. Backend "sandbox": the built-in
    # simulated cloud poses as each listed provider (no account needed). "live": the
    # real adapters, configured by GPUSCHED_AWS_* / GPUSCHED_ALIBABA_* / GPUSCHED_TENCENT_* / GPUSCHED_HUAWEI_*
    # (their endpoints can point at the HTTP emulators in providers/emulators/).
    backend: Literal["sandbox", "live"] = "sandbox"
    # Simulate the on-instance agent (jobs "run" in the daemon): always on for the sandbox;
    # set it for a live backend pointed at emulators, whose instances run nothing.
    sim_agents: bool = False
    providers: Annotated[list[Literal[CLOUDS]], NoDecode] = ["aws", "alibaba", "tencent"]  # type: ignore[valid-type]
    # then a stopped machine is terminated
    stopped_retention_hours: float = Field(default=24.0, ge=0, le=YEAR_H, allow_inf_nan=False)
    reserved: list[ReservedCapacity] = []

    # The jobs' output kept per attempt for `gpusched logs` (bytes); past it the oldest lines are dropped.
    job_log_bytes: int = Field(default=1 << 20, ge=4096, le=64 << 20)

    # --- money and reports
    # Monthly budget per team, JSON: {"vision-qa": "5000 CNY"}. A job that would break it waits.
    team_budgets: dict[str, Money] = {}
    # Monthly budget per project (job.yaml's project:), JSON: {"safety-helmet": "3000 CNY"}. Reported and
    # alerted as team budgets are (50/80/100%); not enforced: a project's jobs do not wait for it.
    project_budgets: dict[str, Money] = {}
    report_currency: Literal["CNY", "USD"] = "CNY"
    fx_usd_cny: Decimal = Field(default=Decimal("7.2"), gt=0, le=1000, allow_inf_nan=False)
    # Dated rates, JSON {"2026-10": "7.12", "2026-11": "7.18"}: a month's report (and each month of its
    # trend) converts at its own month's rate; a month not listed uses fx_usd_cny.
    fx_usd_cny_by_month: dict[str, Decimal] = {}
    # The same, written pair by pair: "2026-11:USD/CNY=7.12,2026-10:USD/CNY=7.09" (CNY/USD=0.1404 is taken
    # as its inverse) ...
    fx_rates: Annotated[dict[str, Decimal], NoDecode] = {}
    # ... or a file of such entries, one a line (# comments); scheduler/money.py parse_fx_rates reads both.
    # A month given twice must say the same rate. Which wins, none: two different rates for one month refuse.
    fx_rates_file: FxRatesFile | None = None
    # Which clouds' own bills the monthly report reconciles with the ledger (scheduler/accounting/
    # reconcile_bills.py): "aws,alibaba,tencent" or a subset; empty: none. Needs GPUSCHED_BACKEND=live and each
    # cloud's credentials with billing read access (README, "Reports").
    bills: Annotated[list[Literal["aws", "alibaba", "tencent"]], NoDecode] = []
    # The difference between the ledger and a cloud's bill the reconciliation accepts, in percent.
    bill_tolerance_pct: Decimal = Field(default=Decimal(1), ge=0, le=100, allow_inf_nan=False)
    report_cron: str = "0 6 1 * *"  # minute hour day month weekday: 06:00 on the 1st
    report_dir: Path | None = None  # empty: <data_dir>/reports

    # --- delivery of reports and budget alerts (scheduler/accounting/delivery.py)
    # smtp://[user:password@]host[:port] (plain, STARTTLS when the server offers it), smtps:// (TLS from the
    # start), smtp+starttls:// (STARTTLS or fail). A secret: the password must never reach a log line.
    smtp_url: SecretStr | None = None
    report_mail_to: Annotated[list[str], NoDecode] = []  # comma-separated addresses
    report_mail_from: str = "gpusched@localhost"
    # Chat webhooks, service=URL comma-separated: slack=https://hooks.slack.com/services/...,dingtalk=...,
    # wecom=..., feishu=... Their URLs carry the token, so they are secrets too.
    webhooks: Annotated[dict[str, SecretStr], NoDecode] = {}
    # A DingTalk robot with the "sign" security setting: its secret (SEC...); posts to it are then signed.
    dingtalk_secret: SecretStr | None = None
    # A team is alerted (once per threshold per month) when its month's billed spend crosses these shares of
    # its GPUSCHED_TEAM_BUDGETS budget.
    budget_alert_thresholds: Annotated[list[int], NoDecode] = [50, 80, 100]
    # How often the daemon looks: at least a minute (0.0001 read the month's spend every 6 ms), at most a week
    # (inf was an internal error at start).
    budget_check_minutes: float = Field(default=15.0, ge=1, le=WEEK_MIN, allow_inf_nan=False)
    # What a team at 100% gets: "wait": no new job of the team starts until next month or a raised budget
    # (the planner holds every job whose cost does not fit what is left); running jobs run to their end.
    # "stop": that, and its running training and inference jobs stop right after their next checkpoint
    # and wait too (scheduler/lifecycle/budget_stop.py).
    budget_at_limit: Literal["wait", "stop"] = "wait"

    # --- the sandbox cloud
    sandbox_seed: int = 7
    # >1 runs the sandbox daemon faster than real time
    sandbox_speedup: float = Field(default=1.0, gt=0, le=MAX_SPEEDUP, allow_inf_nan=False)
    # With a speedup: the real moment (ISO, with its offset) from which the sped-up clock runs, reading that
    # moment itself then. Processes given the same one (daemons and emulators of one sandbox) agree on the
    # time; empty: each process's own start.
    sandbox_clock_start: datetime | None = None

    # --- logging
    log_format: Literal["json", "console"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("providers", "bills", mode="before")
    @classmethod
    def _csv(cls, v: object) -> object:
        if isinstance(v, str) and not v.strip().startswith("["):
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @field_validator("providers")
    @classmethod
    def _some_cloud(cls, v: list[str]) -> list[str]:
        # "GPUSCHED_PROVIDERS=" left empty in a .env: a daemon with no cloud refuses every job, one by one.
        if not v:
            raise ValueError("is empty: name the clouds to run jobs on, e.g. aws,alibaba,tencent")
        return v

    @field_validator("backend", mode="before")
    @classmethod
    def _backend_chosen(cls, v: object) -> object:
        # The deploy files leave it empty on purpose: an operator must say which, never get the sandbox unasked.
        if isinstance(v, str) and not v.strip():
            raise ValueError("is empty; choose one: live (your cloud accounts: real machines, real bills) or "
                             "sandbox (simulated clouds: no machine starts, no job really runs)")
        return v

    @field_validator("leader_renew_s", "sandbox_clock_start", mode="before")
    @classmethod
    def _empty_is_none(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("sandbox_clock_start")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError("needs a UTC offset, e.g. 2026-11-20T08:00:00+00:00")
        return v

    @field_validator("leader_renew_s")
    @classmethod
    def _renew_within_lease(cls, v: float | None, info: ValidationInfo) -> float | None:
        lease = info.data.get("leader_lease_s")
        if v is not None and lease is not None and v >= lease:
            raise ValueError(f"{v:g} must be less than GPUSCHED_LEADER_LEASE_S ({lease:g}), or the lease lapses "
                             "between renewals")
        return v

    @property
    def leader_renew_seconds(self) -> float:
        """How often the leader renews the lease (and a follower tries to take it)."""
        return self.leader_renew_s if self.leader_renew_s is not None else self.leader_lease_s / 3

    @field_validator("smtp_url", "dingtalk_secret", mode="before")
    @classmethod
    def _no_empty_url(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("api_url", "agent_api_url")
    @classmethod
    def _daemon_url(cls, v: str) -> str:
        # A typo here was "cannot reach the daemon" (or an internal error for "http://[::1"), and for
        # GPUSCHED_AGENT_API_URL machines booted, billed, that could never report.
        problem = daemon_url_problem(v) if v.strip() else None
        if problem:
            raise ValueError(problem)
        return v.strip()

    @field_validator("smtp_url")
    @classmethod
    def _smtp_url(cls, v: SecretStr | None) -> SecretStr | None:
        # Checked at start: a malformed URL was found only when the month's report failed to go out.
        problem = None if v is None else smtp_url_problem(v.get_secret_value())
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("report_mail_to", mode="before")
    @classmethod
    def _addresses(cls, v: object) -> object:
        if isinstance(v, str):
            return [a.strip() for a in v.split(",") if a.strip()]
        return v

    @field_validator("report_mail_to")
    @classmethod
    def _valid_addresses(cls, v: list[str]) -> list[str]:
        for address in v:
            if not _MAIL_RE.match(address):
                raise ValueError(f"{address!r} is not a mail address like ops@example.com")
        return v

    @field_validator("webhooks", mode="before")
    @classmethod
    def _webhooks(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        hooks: dict[str, str] = {}
        for item in v.split(","):
            if not item.strip():
                continue
            service, sep, url = item.partition("=")
            service = service.strip().lower()
            # Never echo the URL back: it carries the webhook's token.
            if not sep or not url.strip():
                raise ValueError(f"{service or item[:12]!r} needs a URL: write service=URL, e.g. slack=https://...")
            if service not in WEBHOOK_SERVICES:
                raise ValueError(f"unknown webhook service {service!r}; use {', '.join(WEBHOOK_SERVICES)}")
            if not url.strip().lower().startswith(("http://", "https://")):
                raise ValueError(f"the {service} webhook must be an http:// or https:// URL")
            if service in hooks:
                raise ValueError(f"the {service} webhook is given twice")
            hooks[service] = url.strip()
        return hooks

    @field_validator("budget_alert_thresholds", mode="before")
    @classmethod
    def _thresholds(cls, v: object) -> object:
        if isinstance(v, str):
            return [p.strip().rstrip("%") for p in v.split(",") if p.strip()]
        return v

    @field_validator("budget_alert_thresholds")
    @classmethod
    def _valid_thresholds(cls, v: list[int]) -> list[int]:
        for pct in v:
            if not 1 <= pct <= 1000:
                raise ValueError(f"threshold {pct} must be a percentage between 1 and 1000")
        return sorted(set(v))

    @field_validator("team_budgets", "project_budgets", mode="before")
    @classmethod
    def _budgets(cls, v: object) -> object:
        if isinstance(v, str):
            v = json.loads(v) if v.strip() else {}
        if isinstance(v, dict):
            return {team: Money.parse(m) if isinstance(m, str) else m for team, m in v.items()}
        return v

    @field_validator("fx_usd_cny_by_month", mode="before")
    @classmethod
    def _fx_json(cls, v: object) -> object:
        if isinstance(v, str):
            return json.loads(v) if v.strip() else {}
        return v

    @field_validator("fx_usd_cny_by_month", "fx_rates")
    @classmethod
    def _fx_months(cls, v: dict[str, Decimal]) -> dict[str, Decimal]:
        return _check_fx_months(v)

    @field_validator("fx_rates", mode="before")
    @classmethod
    def _fx_pairs(cls, v: object) -> object:
        if isinstance(v, str):
            return parse_fx_rates(v.replace(",", "\n"), where="")
        return v

    @field_validator("fx_rates_file", mode="before")
    @classmethod
    def _fx_file(cls, v: object) -> object:
        if isinstance(v, str) and not v.strip():
            return None
        if isinstance(v, (str, Path)):
            path = Path(v)
            try:
                with path.open("rb") as fh:
                    data = fh.read(_FX_FILE_LIMIT + 1)
            except OSError as exc:
                raise ValueError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
            if len(data) > _FX_FILE_LIMIT:
                raise ValueError(f"{path} is over {_FX_FILE_LIMIT // 1024} KiB; it holds one line per month and pair")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path} is not UTF-8 text") from None
            return FxRatesFile(path=path, rates=_check_fx_months(parse_fx_rates(text, where=str(path))))
        return v

    @model_validator(mode="after")
    def _one_rate_per_month(self) -> "Settings":
        sources = [("GPUSCHED_FX_USD_CNY_BY_MONTH", self.fx_usd_cny_by_month), ("GPUSCHED_FX_RATES", self.fx_rates)]
        if self.fx_rates_file is not None:
            sources.append((f"GPUSCHED_FX_RATES_FILE ({self.fx_rates_file.path})", self.fx_rates_file.rates))
        seen: dict[str, tuple[str, Decimal]] = {}
        for name, rates in sources:
            for month, rate in rates.items():
                if month in seen and seen[month][1] != rate:
                    raise ValueError(f"{seen[month][0]} and {name} give {month} two USD/CNY rates "
                                     f"({seen[month][1]} and {rate}); keep one")
                seen.setdefault(month, (name, rate))
        return self

    @field_validator("team_budgets", "project_budgets")
    @classmethod
    def _budgets_in_range(cls, v: dict[str, Money], info: ValidationInfo) -> dict[str, Money]:
        whose = "team" if info.field_name == "team_budgets" else "project"
        for name, money in v.items():
            problem = team_problem(name, whose)  # a capital or a space: no job file can give it, so it never applied
            if problem:
                raise ValueError(f"{problem}; a budget under it would never match a job")
            if not (money.amount.is_finite() and 0 < money.amount <= MAX_TEAM_BUDGET):
                raise ValueError(f"{whose} {name!r}: a monthly budget is more than 0 and at most {MAX_TEAM_BUDGET:,}")
        return v

    @field_validator("reserved", mode="before")
    @classmethod
    def _reserved_json(cls, v: object) -> object:
        if isinstance(v, str):
            return json.loads(v) if v.strip() else []
        return v

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'gpusched.db'}"

    @property
    def base_url(self) -> str:
        return self.api_url or f"http://{self.api_host}:{self.api_port}"

    @property
    def reports_path(self) -> Path:
        return self.report_dir or self.data_dir / "reports"

    @property
    def fx(self) -> FxRates:
        """Today's rates: what plans and budgets convert with."""
        return FxRates(base="CNY", rates={"USD": self.fx_usd_cny})

    @property
    def fx_by_month(self) -> dict[str, Decimal]:
        """Every dated USD/CNY rate, from GPUSCHED_FX_USD_CNY_BY_MONTH, GPUSCHED_FX_RATES and the rates file
        (they agree: a month given twice must say the same rate)."""
        merged = dict(self.fx_usd_cny_by_month)
        merged.update(self.fx_rates)
        if self.fx_rates_file is not None:
            merged.update(self.fx_rates_file.rates)
        return merged

    def fx_dated(self, month: str) -> bool:
        """Whether ``month`` has a rate of its own (else it converts at GPUSCHED_FX_USD_CNY)."""
        return month in self.fx_by_month

    def fx_for(self, month: str) -> FxRates:
        """The rates a report of ``month`` (``YYYY-MM``) converts with: that month's, else the default."""
        return FxRates(base="CNY", rates={"USD": self.fx_by_month.get(month, self.fx_usd_cny)})


def _check_fx_months(v: dict[str, Decimal]) -> dict[str, Decimal]:
    for month, rate in v.items():
        if not _MONTH_RE.match(month):
            raise ValueError(f"key {month!r} is not a month like 2026-11")
        if not (rate.is_finite() and 0 < rate <= 1000):
            raise ValueError(f"the rate for {month} must be above 0 and at most 1000, not {rate}")
    return v


def _split_url(raw: str) -> SplitResult | ValueError:
    """``raw`` split into its parts, its port read too (out of range or not a number), or why it cannot be."""
    try:
        parts = urlsplit(raw.strip())
        parts.port  # noqa: B018 - read for its ValueError
    except ValueError as exc:
        return exc
    return parts


def daemon_url_problem(raw: str) -> str | None:
    """Why ``raw`` cannot be where the daemon's API is reached, or None. Never quotes a user:password in it."""
    parts = _split_url(raw)
    if isinstance(parts, ValueError):
        return f"is not a URL ({parts}); write it as http://HOST:PORT, e.g. http://10.0.0.5:8642"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return (f"must be an http:// or https:// URL with a host, not {parts.scheme or '(no scheme)'}://...; "
                "e.g. http://10.0.0.5:8642")
    if parts.username is not None or parts.password is not None:
        return "must not carry a user or password (the API's token is GPUSCHED_API_TOKEN; a machine gets its own)"
    return None


SMTP_SCHEMES = ("smtp", "smtps", "smtp+starttls")


def smtp_url_problem(raw: str) -> str | None:
    """Why ``raw`` is no GPUSCHED_SMTP_URL, or None; never with the value, which may hold a password."""
    parts = _split_url(raw)
    if isinstance(parts, ValueError):
        return "is not a URL (its value is not shown: it may hold a password)"
    if parts.scheme not in SMTP_SCHEMES or not parts.hostname:
        return (f"must start with smtp://, smtps:// or smtp+starttls:// and name a host, not "
                f"{parts.scheme or '(no scheme)'}://...")
    return None


def load_settings(**overrides: object) -> Settings:
    """Read settings, turning validation errors into one readable SettingsError."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field, *inside = err["loc"] or ("",)  # the variable, then where in its JSON: [0].count
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in inside)
            # A check across settings has no one variable: its message names them.
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"GPUSCHED_{str(field).upper()}{where}: {message}" if field else message)
        raise SettingsError("invalid settings: " + "; ".join(lines), fix="see .env.example") from None
    except PydanticSettingsError as exc:  # a value that is not valid JSON where JSON is expected
        raise SettingsError(f"invalid settings: {exc}", fix="lists and maps are JSON; see .env.example") from None
    except ValueError as exc:  # a malformed JSON value read before validation (e.g. GPUSCHED_TEAM_BUDGETS)
        raise SettingsError(f"invalid settings: {exc}", fix="lists and maps are JSON; see .env.example") from None


C = TypeVar("C", bound=BaseModel)


def load_cloud_config(config_cls: type[C], cloud: str, *, env_file: str | None = ".env", **overrides: object) -> C:
    """``config_cls`` filled from GPUSCHED_<CLOUD>_* variables; ``overrides`` win (tests, the demo)."""
    prefix = f"GPUSCHED_{cloud.upper()}_"
    fields = {name: (f.annotation, f) for name, f in config_cls.model_fields.items()}
    reader = create_model(  # type: ignore[call-overload]
        f"{config_cls.__name__}FromEnv",
        __base__=BaseSettings,
        __config__=None,
        **fields,
    )
    # A blank variable (``GPUSCHED_TENCENT_SYSTEM_DISK_GB=`` as .env.example lists them) means "not set".
    reader.model_config = SettingsConfigDict(env_prefix=prefix, env_file=env_file, extra="ignore",
                                             env_ignore_empty=True)
    try:
        values = reader(**overrides).model_dump(exclude_unset=False)
        return config_cls.model_validate(values)
    except ValidationError as exc:
        # An error of several fields together (a model check) has no field: it names its settings itself.
        lines = [f"{prefix}{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" if e["loc"]
                 else e["msg"].removeprefix("Value error, ") for e in exc.errors()]
        raise SettingsError(f"invalid {cloud} settings: " + "; ".join(lines),
                            fix=f"set the {prefix}* variables (see .env.example)") from None
    except PydanticSettingsError as exc:
        raise SettingsError(f"invalid {cloud} settings: {exc}", fix="lists and maps are JSON") from None
