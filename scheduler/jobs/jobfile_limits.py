"""The size bounds of a parsed job document (``scheduler.limits``), checked before the models see it.

A hostile document (nested thousands deep, a 5,000-digit number, a text with a lone surrogate that
no terminal or database can encode) is refused here with the field it is in, so nothing after this
(pydantic, the rules, printing a problem) meets it. The walk is iterative: depth costs no recursion.
"""

from __future__ import annotations

from typing import Any, Mapping

from scheduler.errors import FieldProblem
from scheduler.jobs.jobfile_examples import FILE_FIELD
from scheduler.limits import MAX_DEPTH, MAX_INT_DIGITS, MAX_LIST_ITEMS, MAX_NODES, MAX_TEXT_CHARS

__all__ = ["DEPTH_MESSAGE", "document_problems", "has_lone_surrogate"]

DEPTH_MESSAGE = f"nests deeper than {MAX_DEPTH} levels; a job file needs 3 (e.g. policy: budget:)"
_MAX_PROBLEMS = 20
_INT_BOUND = 10**MAX_INT_DIGITS


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a UTF-16 surrogate on its own: it cannot be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def document_problems(doc: object) -> list[FieldProblem]:
    """Problems of size and encoding anywhere in ``doc``; an empty list when it is within bounds."""
    problems: list[FieldProblem] = []
    stack: list[tuple[object, str, int]] = [(doc, "", 0)]
    nodes = 0
    while stack and len(problems) < _MAX_PROBLEMS:
        value, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            message = f"holds more than {MAX_NODES:,} values; a job file has a few dozen"
            problems.append(FieldProblem(FILE_FIELD, message, "one job per file"))
            break
        if depth > MAX_DEPTH:
            problems.append(FieldProblem(path or FILE_FIELD, DEPTH_MESSAGE, "policy: {budget: 800 CNY}"))
            break
        problem = _leaf_problem(value)
        if problem:
            problems.append(FieldProblem(path or FILE_FIELD, problem, None))
            continue
        if isinstance(value, Mapping):
            if len(value) > MAX_LIST_ITEMS:
                problems.append(FieldProblem(path or FILE_FIELD, f"has {len(value)} keys; at most {MAX_LIST_ITEMS}"))
                continue
            for key, item in reversed(list(value.items())):
                key_problem = _leaf_problem(key)
                child = _join(path, _shown_key(key))
                if key_problem:
                    problems.append(FieldProblem(child, f"the key {key_problem}", None))
                    continue
                stack.append((item, child, depth + 1))
        elif isinstance(value, (list, tuple)):
            if len(value) > MAX_LIST_ITEMS:
                problems.append(FieldProblem(path or FILE_FIELD, f"lists {len(value)} items; at most {MAX_LIST_ITEMS}"))
                continue
            for i in reversed(range(len(value))):
                stack.append((value[i], f"{path}[{i}]", depth + 1))
    return problems


def _leaf_problem(value: Any) -> str | None:
    if isinstance(value, str):
        if len(value) > MAX_TEXT_CHARS:
            return f"is {len(value):,} characters long; text may be at most {MAX_TEXT_CHARS:,}"
        if has_lone_surrogate(value):
            return "holds a lone UTF-16 surrogate (e.g. \\ud800), which is not text; remove it"
        return None
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT_BOUND < value < _INT_BOUND:
        return f"is a number with more than {MAX_INT_DIGITS} digits; no field takes one that large"
    return None


def _shown_key(key: object) -> str:
    # Part of a path that is printed and sent as JSON: no surrogates, no screenful of key.
    text = (key if isinstance(key, str) else repr(key)).encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
