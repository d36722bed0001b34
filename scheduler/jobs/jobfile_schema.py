"""The JSON Schema of job.yaml, for editors (yaml-language-server, VS Code): ``gpusched schema``."""

from __future__ import annotations

import re
from typing import Any

from scheduler.gpus import GPUS, gpu_spellings
from scheduler.jobs.jobfile_rules import SECTIONS
from scheduler.models import JobSpec
from scheduler.money import CURRENCIES

__all__ = ["job_json_schema"]


def job_json_schema() -> dict[str, Any]:
    """JSON Schema of job.yaml for editors (yaml-language-server, VS Code).

    Deadlines and budgets are written as text in job files, so the schema says
    so, instead of pydantic's view of them (datetime / timedelta, a Money object).
    """
    schema = JobSpec.model_json_schema()
    defs = schema.setdefault("$defs", {})
    policy = defs["PolicySpec"]["properties"]
    policy["deadline"] = {
        "title": "Deadline",
        "description": "An ISO 8601 time with a UTC offset, or a duration from submission such as 36h, 2d, 1d12h, 90m.",
        "anyOf": [{"type": "string", "pattern": _DEADLINE_PATTERN}, {"type": "null"}],
        "default": None,
        "examples": ["2026-12-10T18:00:00+08:00", "36h"],
    }
    policy["budget"] = {
        "title": "Budget",
        "description": f"Most the job may cost: an amount and a currency ({', '.join(CURRENCIES)}).",
        "anyOf": [{"type": "string", "pattern": _BUDGET_PATTERN}, {"type": "null"}],
        "default": None,
        "examples": ["800 CNY", "120 USD"],
    }
    defs.pop("Money", None)
    gpus = defs["ResourcesSpec"]["properties"]["gpus"]
    # A pattern, not an enum: GPU names are matched case-insensitively and have aliases (A100 = A100-40G).
    # The enum first, for editors' completion; the pattern admits the other spellings.
    names = {"anyOf": [{"enum": list(GPUS)}, {"type": "string", "pattern": _gpu_pattern()}]}
    gpus["anyOf"] = [{"type": "array", "items": names}, {"type": "null"}]
    schema["allOf"] = _section_rules()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpusched job file"
    return schema


def _gpu_pattern() -> str:
    """Every accepted GPU spelling, any case (JSON Schema patterns have no case-insensitive flag)."""
    def any_case(name: str) -> str:
        return "".join(f"[{c}{c.upper()}]" if c.isalpha() else re.escape(c) for c in name)

    return "^(" + "|".join(any_case(n) for n in gpu_spellings()) + ")$"


_DEADLINE_PATTERN = (
    r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})"
    r"|\s*(\d+d)?\s*(\d+h)?\s*(\d+m)?\s*)$"
)
_BUDGET_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*(" + "|".join(CURRENCIES) + r")\s*$"


# Which data counts each kind needs (jobfile_rules' table): the time estimate is made from them.
_DATA_NEEDS = {"train": ["uri", "train_images"], "val": ["uri", "val_images"]}


def _section_rules() -> list[dict[str, Any]]:
    """``jobfile_rules``' sections per kind as JSON Schema: a val job needs ``val:`` and no ``train:`` ..."""
    rules = []
    for kind in SECTIONS:
        then: dict[str, Any] = {
            "required": [kind] + (["data"] if kind in _DATA_NEEDS else []),
            "properties": {kind: {"type": "object"},
                           **{other: {"type": "null"} for other in SECTIONS if other != kind}},
        }
        if kind in _DATA_NEEDS:
            then["properties"]["data"] = {"type": "object", "required": _DATA_NEEDS[kind]}
        rules.append({"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]}, "then": then})
    return rules
