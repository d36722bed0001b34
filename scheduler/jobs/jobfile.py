"""Load a job.yaml (or the same document as JSON) into a ``JobSpec``, or say exactly why not.

Every failure is one ``JobFileError`` carrying one ``FieldProblem`` per fault:
the dotted field path (``policy.budget``, ``resources.gpus[1]``), what is wrong
in plain words, and a value that would be right (``jobfile_examples``). All
problems of a file are reported together, so a user fixes a file in one round,
not one error at a time.

Two layers of checks:

* structure (types, ranges, patterns, unknown keys) comes from the pydantic
  models in ``scheduler.models``; their errors are translated by
  ``jobfile_problems``, never shown raw;
* rules that span fields or need the catalog (which section goes with which
  kind, known GPU models, ``half`` with ``dynamic``, the GPU total) run on the
  raw document (``jobfile_rules``), so they are reported even when other
  fields are broken.

YAML is read strictly: a key written twice in one mapping is an error, not the
last one silently kept.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import ValidationError

from scheduler.errors import FieldProblem, JobFileError
from scheduler.jobs.jobfile_examples import FIELD_EXAMPLES, FILE_FIELD
from scheduler.jobs.jobfile_problems import kind_of, translate
from scheduler.jobs.jobfile_rules import rule_problems
from scheduler.models import JobSpec
from scheduler.times import utc

__all__ = [
    "load_job_file",
    "parse_job_text",
    "parse_job",
    "submit_problems",
]


# The daemon's limit on a submitted body too (``scheduler.app.api``): a file that validates here is one it takes.
MAX_JOB_FILE_BYTES = 1 << 20

# --- entry points -------------------------------------------------------------


def load_job_file(path: str | Path) -> JobSpec:
    """Read and validate one job file; raise ``JobFileError`` listing every problem."""
    source = str(path)
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_JOB_FILE_BYTES + 1)  # never more: the path may be /dev/urandom or a huge file
        if len(raw) > MAX_JOB_FILE_BYTES:
            raise _fail(source, f"is over {MAX_JOB_FILE_BYTES // 2**20} MiB; a job file is a few hundred bytes "
                                "(is it the right file?)")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise _fail(source, "no such file", "gpusched submit examples/helmet-s-train.yaml") from None
    except IsADirectoryError:
        raise _fail(source, "is a folder, not a job file", "gpusched submit examples/helmet-s-train.yaml") from None
    except PermissionError:
        raise _fail(source, "cannot be read: permission denied") from None
    except UnicodeDecodeError:
        raise _fail(source, "is not UTF-8 text; save the job file as UTF-8") from None
    except OSError as exc:
        raise _fail(source, f"cannot be read: {exc.strerror or type(exc).__name__}") from None
    return parse_job_text(text, source)


def parse_job_text(text: str, source: str) -> JobSpec:
    """Parse YAML (JSON is YAML too) and validate it; ``source`` names it in errors."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise JobFileError(source, [_yaml_problem(exc)]) from None
    except yaml.reader.ReaderError as exc:
        raise _fail(source, f"has a character YAML does not allow ({exc.character!r}) "
                            f"at position {exc.position}") from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"is not valid YAML ({type(exc).__name__})") from None
    if data is None:
        raise _fail(source, "the file is empty (or holds only comments)")
    return parse_job(data, source)


def parse_job(data: object, source: str = "<job>") -> JobSpec:
    """Validate an already parsed document (a dict from YAML or the HTTP API's JSON)."""
    if not isinstance(data, Mapping):
        raise _fail(
            source,
            f"the top level must be a mapping of keys (name:, team:, kind: ...), not {kind_of(data)}",
        )
    problems: list[FieldProblem] = []
    spec: JobSpec | None = None
    try:
        spec = JobSpec.model_validate(dict(data))
    except ValidationError as exc:
        problems.extend(translate(exc))
    problems.extend(rule_problems(data))
    problems = _dedupe(problems)
    if problems or spec is None:
        raise JobFileError(source, problems)
    return spec


def submit_problems(spec: JobSpec, now: datetime) -> list[FieldProblem]:
    """Checks that depend on the submission time; an empty list means the job may be queued."""
    deadline = spec.policy.deadline
    if isinstance(deadline, datetime) and utc(deadline) <= utc(now):
        return [
            FieldProblem(
                "policy.deadline",
                f"the deadline {deadline.isoformat()} has already passed "
                f"(now is {utc(now).isoformat(timespec='seconds')})",
                FIELD_EXAMPLES["policy.deadline"],
            )
        ]
    return []


# --- YAML ---------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML silently keeps the last one."""


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key; construct_mapping reports it properly
            break
        if duplicate:
            raise _DuplicateKey(None, None, f"key {key!r} appears twice; keep one", key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> FieldProblem:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "unreadable YAML"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if isinstance(exc, _DuplicateKey):
        return FieldProblem(FILE_FIELD, f"duplicate key{where}: {what}", "each key once per section")
    return FieldProblem(
        FILE_FIELD,
        f"YAML syntax error{where}: {what}",
        "key: value pairs, two-space indents, lists as [a, b]",
    )


# --- small helpers --------------------------------------------------------------


def _fail(source: str, message: str, example: str | None = None) -> JobFileError:
    return JobFileError(source, [FieldProblem(FILE_FIELD, message, example or FIELD_EXAMPLES[FILE_FIELD])])


def _dedupe(problems: Iterable[FieldProblem]) -> list[FieldProblem]:
    # A union field fails once per member; the user needs to hear it once.
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.field not in seen:
            seen.add(p.field)
            out.append(p)
    return out
