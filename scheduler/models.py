"""The job.yaml contract (JobSpec) and the domain records that cross module seams.

Every model is frozen with ``extra="forbid"``: unknown keys are errors, not
silently ignored. Structural rules live here; rules that need the catalog or the
kind of job (which section goes with which kind) live in ``jobs/jobfile_rules.py``, and
``jobs/jobfile.py`` turns every problem into a message with the field path and an example.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from scheduler.gpus import canonical_gpu
from scheduler.limits import (
    MAX_DEADLINE_AHEAD,
    MAX_RESERVED_COUNT,
    budget_problem,
    deadline_time_problem,
    duration_problem,
)
from scheduler.money import Money
from scheduler.times import utc

MODELS = tuple(f"{f}-{s}" for f in ("yolov9", "gelan") for s in "tsmce")
# The clouds gpusched has an adapter for (providers/<name>/): the one list job files and settings check against.
CLOUDS = ("aws", "alibaba", "tencent", "huawei")
PROVIDERS = (*CLOUDS, "sandbox")
EXPORT_FORMATS = ("torchscript", "onnx", "openvino", "engine", "coreml", "saved_model", "pb", "tflite")

_DURATION_RE = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*$")


def format_duration(delta: timedelta) -> str:
    """The inverse of parse_duration: timedelta(hours=36) -> "1d12h" (minutes precision)."""
    minutes = int(delta.total_seconds() // 60)
    d, rest = divmod(minutes, 1440)
    h, m = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((d, "d"), (h, "h"), (m, "m")) if n) or "0m"


def parse_duration(text: str) -> timedelta:
    """``"36h"``, ``"2d"``, ``"1d12h"``, ``"90m"`` -> timedelta; ValueError otherwise."""
    m = _DURATION_RE.match(text)
    if not m or not any(m.groups()):
        raise ValueError(f"{text!r} is neither an ISO time with a UTC offset nor a duration like '36h'")
    too_long = duration_problem(*(x or "" for x in m.groups()))
    if too_long:
        raise ValueError(f"{text.strip()!r} {too_long}")
    d, h, mins = (int(x) if x else 0 for x in m.groups())
    delta = timedelta(days=d, hours=h, minutes=mins)
    if delta <= timedelta(0):
        raise ValueError("a deadline duration must be positive")
    return delta


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Kind(StrEnum):
    train = "train"
    infer = "infer"
    val = "val"
    export = "export"


class Capacity(StrEnum):
    spot = "spot"
    on_demand = "on-demand"
    reserved = "reserved"


UriStr = Annotated[str, Field(pattern=r"^(s3|oss|cos)://[^/\s]+(/\S*)?$")]
WeightsStr = Annotated[str, Field(pattern=r"^((s3|oss|cos)://\S+|[\w.\-]+\.pt)$")]


class DataSpec(Frozen):
    uri: UriStr
    train_images: int | None = Field(default=None, ge=1, le=100_000_000)
    val_images: int | None = Field(default=None, ge=0, le=10_000_000)


class TrainSpec(Frozen):
    epochs: int = Field(default=100, ge=1, le=10_000)
    img_size: int = Field(default=640, ge=32, le=2048, multiple_of=32)
    batch: int = Field(default=64, ge=1, le=1024)
    weights: Annotated[str, Field(pattern=r"^((s3|oss|cos)://\S+|[\w.\-]+\.pt)?$")] = ""
    hyp: str = Field(default="hyp.scratch-high.yaml", pattern=r"^[\w.\-/]+\.ya?ml$")
    close_mosaic: int = Field(default=15, ge=0, le=10_000)
    patience: int = Field(default=100, ge=0, le=10_000)


class InferSpec(Frozen):
    source: UriStr
    images: int = Field(ge=1, le=1_000_000_000)
    img_size: int = Field(default=640, ge=32, le=2048, multiple_of=32)
    weights: WeightsStr
    conf: float = Field(default=0.25, gt=0, lt=1)
    iou: float = Field(default=0.45, gt=0, lt=1)
    output: UriStr | None = None  # where the labels go; default: runs/<job name>/ in the source's bucket


class ValSpec(Frozen):
    weights: WeightsStr
    img_size: int = Field(default=640, ge=32, le=2048, multiple_of=32)
    batch: int = Field(default=32, ge=1, le=1024)


class ExportSpec(Frozen):
    weights: WeightsStr
    formats: tuple[Literal[EXPORT_FORMATS], ...] = Field(default=("onnx",), min_length=1)  # type: ignore[valid-type]
    img_size: int = Field(default=640, ge=32, le=2048, multiple_of=32)
    half: bool = False
    dynamic: bool = False


class ResourcesSpec(Frozen):
    gpus: tuple[str, ...] | None = None  # validated against scheduler.gpus in jobfile_rules.py
    gpu_count: int = Field(default=1, ge=1, le=8)
    nodes: int = Field(default=1, ge=1, le=64)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpu_names(cls, v: object) -> object:
        """``a100`` / ``A100-80GB`` / ``h100`` -> the model names offers carry; unknown names are left for
        jobfile_rules to explain."""
        if isinstance(v, (list, tuple)):
            return [canonical_gpu(g) or g if isinstance(g, str) else g for g in v]
        return v


class WhereSpec(Frozen):
    providers: tuple[Literal[PROVIDERS], ...] | None = None  # type: ignore[valid-type]
    regions: tuple[str, ...] | None = None


class PolicySpec(Frozen):
    capacity: Literal["auto", "spot", "on-demand", "reserved"] = "auto"
    deadline: datetime | timedelta | None = None
    budget: Money | None = None
    priority: int = Field(default=50, ge=0, le=100)
    max_restarts: int = Field(default=10, ge=0, le=1000)
    idle_stop_minutes: int | None = Field(default=None, ge=0, le=10_080)

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                dt = datetime.fromisoformat(v)
            except ValueError:
                return parse_duration(v)
            v = dt
        if isinstance(v, date) and not isinstance(v, datetime):
            raise ValueError("give a time of day and a UTC offset, e.g. 2026-12-10T18:00:00+08:00")
        if isinstance(v, datetime) and v.tzinfo is None:
            raise ValueError("a deadline needs a UTC offset, e.g. 2026-12-10T18:00:00+08:00")
        if isinstance(v, datetime) and (far := deadline_time_problem(v)):
            raise ValueError(far)
        if isinstance(v, timedelta) and (v <= timedelta(0) or v > MAX_DEADLINE_AHEAD):
            raise ValueError(f"a deadline must be positive and at most {MAX_DEADLINE_AHEAD.days} days "
                             "after submission")
        if isinstance(v, (int, float)):
            raise ValueError("a deadline is an ISO time or a duration string like '36h'")
        return v

    @field_serializer("deadline")
    def _deadline_out(self, v: datetime | timedelta | None) -> str | None:
        # Written back the way job.yaml spells it, so a dumped spec parses again.
        if v is None:
            return None
        return format_duration(v) if isinstance(v, timedelta) else v.isoformat()

    @field_serializer("budget")
    def _budget_out(self, v: Money | None) -> str | None:
        return None if v is None else f"{v.amount} {v.currency}"

    @field_validator("budget", mode="before")
    @classmethod
    def _budget(cls, v: object) -> object:
        if isinstance(v, str):
            return Money.parse(v)
        if isinstance(v, (int, float, Decimal)):
            raise ValueError("a budget needs a currency, e.g. '800 CNY' or '120 USD'")
        return v

    @field_validator("budget", mode="after")
    @classmethod
    def _budget_bounded(cls, v: Money | None) -> Money | None:
        # However it was written (text, or {amount, currency} through the API), the same bounds.
        problem = None if v is None else budget_problem(v.amount, v.currency)
        if problem:
            raise ValueError(problem)
        return v


TEAM_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"  # a team's (and a project's) name, wherever one is given
MAX_NAME_CHARS = 63


def team_problem(name: str, noun: str = "team") -> str | None:
    """Why ``name`` cannot be a team's (or, ``noun`` "project", a project's) name, or None: the job file's rule,
    for a name given anywhere else."""
    if len(name) <= MAX_NAME_CHARS and re.match(TEAM_PATTERN, name):
        return None
    return (f"{_clip(name)!r} is not a {noun} name: lowercase letters, digits, '-' and '_', starting with a letter "
            f"or digit, at most {MAX_NAME_CHARS} characters")


def _clip(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:40]}..."


class JobSpec(Frozen):
    """One job.yaml, as the user wrote it (relative deadlines not yet resolved)."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", max_length=63)
    team: str = Field(pattern=TEAM_PATTERN, max_length=MAX_NAME_CHARS)
    project: str | None = Field(default=None, pattern=TEAM_PATTERN, max_length=MAX_NAME_CHARS)
    kind: Kind
    model: Literal[MODELS]  # type: ignore[valid-type]
    data: DataSpec | None = None
    train: TrainSpec | None = None
    infer: InferSpec | None = None
    val: ValSpec | None = None
    export: ExportSpec | None = None
    resources: ResourcesSpec = ResourcesSpec()
    where: WhereSpec = WhereSpec()
    policy: PolicySpec = PolicySpec()

    def deadline_at(self, submitted_at: datetime) -> datetime | None:
        d = self.policy.deadline
        if d is None:
            return None
        if isinstance(d, timedelta):
            return submitted_at + d
        return d

    def with_capacity(self, capacity: str) -> JobSpec:
        """The same job asked on ``capacity`` ("spot", "on-demand", ...): how the daemon plans a move."""
        return self.model_copy(update={"policy": self.policy.model_copy(update={"capacity": capacity})})


# --- offers and prices -------------------------------------------------------


class Stock(StrEnum):
    available = "available"
    low = "low"
    sold_out = "sold_out"
    unknown = "unknown"


class Price(Frozen):
    """An hourly price and where it came from."""

    per_hour: Money
    source: str
    as_of: date


class Offer(Frozen):
    """One instance type in one zone of one cloud, with its prices and stock.

    ``spot_interruptions_per_hour`` is the expected rate of spot reclaims, used by
    the planner's expected-cost model.
    """

    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpu_count: int = Field(ge=1)
    gpu_mem_gib: float = Field(gt=0)
    vcpus: int = Field(ge=1)
    mem_gib: float = Field(gt=0)
    on_demand: Price | None = None
    spot: Price | None = None
    on_demand_stock: Stock = Stock.unknown
    spot_stock: Stock = Stock.unknown
    spot_interruptions_per_hour: float = Field(default=0.05, ge=0)

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.region}/{self.zone}/{self.instance_type}"

    def price(self, capacity: Capacity) -> Price | None:
        if capacity is Capacity.spot:
            return self.spot
        if capacity is Capacity.on_demand:
            return self.on_demand
        return None

    def stock(self, capacity: Capacity) -> Stock:
        return self.spot_stock if capacity is Capacity.spot else self.on_demand_stock


class ReservedCapacity(Frozen):
    """Instances the organisation has already paid for: zero marginal cost until ``until``.

    The terms are for the monthly report's amortized view (``accounting/reservations.py``):
    ``upfront_fee`` is paid once for the whole term [``start``, ``until``) and all ``count``
    machines; ``monthly_fee`` is billed every month of the term for all of them. Set one or both
    (AWS partial upfront has both); with neither, the report counts the reservation as free and says so.
    """

    provider: str
    region: str
    zone: str | None = None
    instance_type: str
    count: int = Field(ge=1, le=MAX_RESERVED_COUNT)  # the planner holds a slot per free machine (``limits``)
    until: datetime
    start: datetime | None = None  # when the term began; needed to spread an upfront fee over it
    upfront_fee: Money | None = None
    monthly_fee: Money | None = None
    note: str = ""

    @field_validator("upfront_fee", "monthly_fee", mode="before")
    @classmethod
    def _money_text(cls, v: object) -> object:
        return Money.parse(v) if isinstance(v, str) else v  # "36000 CNY", as GPUSCHED_TEAM_BUDGETS

    @model_validator(mode="after")
    def _term(self) -> "ReservedCapacity":
        if self.start is not None and utc(self.start) >= utc(self.until):
            raise ValueError(f"start {self.start.isoformat()} is not before until {self.until.isoformat()}")
        if self.upfront_fee is not None and self.start is None:
            raise ValueError("an upfront_fee needs the term's start, to spread the fee over the term")
        for fee in (self.upfront_fee, self.monthly_fee):
            if fee is not None and fee.amount < 0:
                raise ValueError(f"a reservation fee cannot be negative ({fee})")
        if self.upfront_fee and self.monthly_fee and self.upfront_fee.currency != self.monthly_fee.currency:
            raise ValueError("upfront_fee and monthly_fee must be in the same currency")
        return self

    @property
    def has_fee(self) -> bool:
        return self.upfront_fee is not None or self.monthly_fee is not None
