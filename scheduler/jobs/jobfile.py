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
last one silently kept. Nothing in a job file needs YAML's aliases (``*name``), so
they are refused: a 1,434-byte "billion laughs" file otherwise costs seconds and a
gigabyte. Size, nesting, numbers and text are bounded (``scheduler.limits``) before
the models see the document (``jobfile_limits``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import ValidationError

from scheduler.errors import FieldProblem, JobFileError
from scheduler.jobs.jobfile_examples import FIELD_EXAMPLES, FILE_FIELD
from scheduler.jobs.jobfile_limits import DEPTH_MESSAGE, document_problems
from scheduler.jobs.jobfile_problems import kind_of, translate
from scheduler.jobs.jobfile_rules import rule_problems
from scheduler.limits import MAX_DEADLINE_AHEAD, MAX_DEPTH, MAX_FILE_BYTES, MAX_INT_DIGITS, deadline_time_problem
from scheduler.models import JobSpec
from scheduler.times import utc

__all__ = [
    "load_job_file",
    "parse_job_text",
    "parse_job",
    "submit_problems",
    "too_deep",
]


# --- entry points -------------------------------------------------------------


def load_job_file(path: str | Path) -> JobSpec:
    """Read and validate one job file; raise ``JobFileError`` listing every problem."""
    source = str(path)
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # capped: the path may be /dev/urandom
        if len(raw) > MAX_FILE_BYTES:
            raise _fail(source, f"is larger than {MAX_FILE_BYTES // 1024} KiB; a job file is a few hundred bytes, "
                                "is this the right file?")
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


def parse_job_text(text: str, source: str, *, default_team: str | None = None) -> JobSpec:
    """Parse YAML (JSON is YAML too) and validate it; ``source`` names it in errors. ``default_team``: the
    team of a file that names none (the API's caller's only team)."""
    if len(text) > MAX_FILE_BYTES:
        raise _fail(source, f"is larger than {MAX_FILE_BYTES // 1024} KiB; a job file is a few hundred bytes")
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise JobFileError(source, [_yaml_problem(exc)]) from None
    except yaml.reader.ReaderError as exc:
        raise _fail(source, f"has a character YAML does not allow ({exc.character!r}) "
                            f"at position {exc.position}") from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"is not valid YAML ({type(exc).__name__})") from None
    except (ValueError, OverflowError) as exc:  # PyYAML's constructors: a date like 2026-13-01
        raise _fail(source, f"has a value that cannot be read ({exc})") from None
    except RecursionError:  # defence in depth: compose_node bounds the nesting well before this
        raise too_deep(source) from None
    if data is None:
        raise _fail(source, "the file is empty (or holds only comments)")
    return parse_job(data, source, default_team=default_team)


def parse_job(data: object, source: str = "<job>", *, default_team: str | None = None) -> JobSpec:
    """Validate an already parsed document (a dict from YAML or the HTTP API's JSON); ``default_team`` is
    the team of a document without ``team:``."""
    if not isinstance(data, Mapping):
        raise _fail(
            source,
            f"the top level must be a mapping of keys (name:, team:, kind: ...), not {kind_of(data)}",
        )
    if default_team is not None and "team" not in data:
        data = {**data, "team": default_team}
    too_big = document_problems(data)
    if too_big:  # a hostile document goes no further: the models and rules walk it, messages print it
        raise JobFileError(source, too_big)
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


def too_deep(source: str) -> JobFileError:
    """The error for a document too deep to parse at all (the HTTP API's JSON decoder gives up first)."""
    return _fail(source, DEPTH_MESSAGE, "policy: {budget: 800 CNY}")


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
    if isinstance(deadline, datetime) and utc(deadline) > utc(now) + MAX_DEADLINE_AHEAD:
        return [
            FieldProblem(
                "policy.deadline",
                f"the deadline {deadline.isoformat()} is more than {MAX_DEADLINE_AHEAD.days} days away; "
                f"a deadline may be at most {MAX_DEADLINE_AHEAD.days} days after submission",
                FIELD_EXAMPLES["policy.deadline"],
            )
        ]
    if isinstance(deadline, timedelta):
        # The store keeps the deadline as the time it falls on: read back, it must be one a job file may name.
        falls = utc(now) + deadline
        why = deadline_time_problem(falls)
        if why is not None:
            return [FieldProblem("policy.deadline", f"falls on {falls:%Y-%m-%d}: {why}",
                                 FIELD_EXAMPLES["policy.deadline"])]
    return []


# --- YAML ---------------------------------------------------------------------


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


class _Refused(yaml.constructor.ConstructorError):
    """Within YAML's rules but outside a job file's: an alias, too deep, a number too long."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one), aliases, nesting
    deeper than ``MAX_DEPTH`` (PyYAML composes recursively, so 5,000 levels were a RecursionError) and
    integers longer than ``MAX_INT_DIGITS`` (Python refuses to parse 4,301 digits, with a ValueError)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _Refused(None, None, "aliases (*name) are not accepted in a job file; write the value out",
                           self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH + 1:  # the top-level mapping is level 0 of the document
                raise _Refused(None, None, DEPTH_MESSAGE, self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's name
        # Refused while scanning, before the composer: each open bracket may start a key, so the scanner
        # looks ahead up to 1,024 characters at every level, and 5,000 brackets took about a second.
        if self.flow_level >= MAX_DEPTH:
            raise _Refused(None, None, DEPTH_MESSAGE, self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS + 2:  # room for a 0x / 0o prefix; the bound itself is jobfile_limits'
            raise _Refused(None, None, f"a number with {digits:,} digits; no field takes one that large",
                           node.start_mark)
        return int(super().construct_yaml_int(node))


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
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> FieldProblem:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "unreadable YAML"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if isinstance(exc, _DuplicateKey):
        return FieldProblem(FILE_FIELD, f"duplicate key{where}: {what}", "each key once per section")
    if isinstance(exc, _Refused):
        return FieldProblem(FILE_FIELD, f"{what}{where}", "key: value pairs, each value written out")
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
