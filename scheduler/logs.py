"""Logging: structlog for our code, stdlib logging (uvicorn, apscheduler, alembic) through the same chain.

The daemon writes one JSON object per line with an ISO UTC timestamp, for a log
shipper; the CLI writes short readable lines. Either way every line passes the
redaction step last, after exceptions are rendered to text, so a token cannot
leak through a traceback, a request line or a library's message.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Literal, TextIO

import structlog
from pydantic import SecretStr
from structlog.typing import EventDict, Processor, WrappedLogger

MASK = "***"
LogFormat = Literal["json", "console"]

# A key whose value is a credential, whatever its spelling: api_token, X-Api-Key,
# secret_access_key, Authorization, db_password ...
_SECRET_KEY_RE = re.compile(
    r"token|secret|passw(or)?d|passwd|access[_-]?key|authori[sz]ation|api[_-]?key|credential|private[_-]?key|cookie",
    re.IGNORECASE,
)
# Values shorter than this are not registered: masking every "a" or "1" in every
# line would wreck the log and protects nothing a real secret needs.
_MIN_SECRET_LEN = 6

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_handler_marker = "_gpusched_handler"

# Libraries that log every routine step at INFO; their chatter drowns the tick's own lines.
_CHATTY = ("apscheduler", "alembic.runtime.migration", "httpx", "httpcore")


def register_secret(value: str | SecretStr | None) -> None:
    """Mask ``value`` wherever it appears in a log line from now on (tokens, DB passwords)."""
    if value is None:
        return
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    if len(raw) >= _MIN_SECRET_LEN:
        with _secrets_lock:
            _secrets.add(raw)


def forget_secrets() -> None:
    """Drop every registered secret (tests start from a clean slate)."""
    with _secrets_lock:
        _secrets.clear()


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY_RE.search(key))


def _mask_text(text: str, secrets: tuple[str, ...]) -> str:
    for s in secrets:
        if s in text:
            text = text.replace(s, MASK)
    return text


def _hides(key: object, value: Any) -> bool:
    # An empty value under a secret key stays visible: "api_token=None" says it is missing.
    return isinstance(key, str) and is_secret_key(key) and value is not None and value != ""


def _scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, str):
        return _mask_text(value, secrets)
    if isinstance(value, Mapping):
        return {k: MASK if _hides(k, v) else _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_scrub(v, secrets) for v in value]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    # Anything else reaches the line as text; scrub that text now.
    return _mask_text(str(value), secrets)


def redact(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: mask values under secret-looking keys and every registered secret."""
    with _secrets_lock:
        # Longest first, so a secret that contains another is masked whole.
        secrets = tuple(sorted(_secrets, key=len, reverse=True))
    return {key: MASK if _hides(key, value) else _scrub(value, secrets) for key, value in event_dict.items()}


def _level_number(level: str) -> int:
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ValueError(f"unknown log level {level!r}; use debug, info, warning or error")
    return number


def _shared_processors() -> list[Processor]:
    """Steps for every line, ours and stdlib's, before it is rendered."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


_LEAD_KEYS = ("timestamp", "level", "logger", "event")


def _lead_keys_first(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """When, how bad, who, what: first in every JSON line, so a human can scan them too."""
    lead = {k: event_dict[k] for k in _LEAD_KEYS if k in event_dict}
    return {**lead, **{k: v for k, v in event_dict.items() if k not in lead}}


def _renderers(fmt: LogFormat) -> list[Processor]:
    if fmt == "json":
        return [_lead_keys_first, structlog.processors.JSONRenderer(default=str, sort_keys=False)]
    if fmt == "console":
        return [structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)]
    raise ValueError(f"unknown log format {fmt!r}; use json or console")


def configure_logging(fmt: LogFormat = "console", level: str = "info", *, stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr by default) as JSON lines or console text.

    Safe to call again: the handler installed by an earlier call is replaced, not doubled.
    """
    threshold = _level_number(level)
    renderers = _renderers(fmt)
    shared = _shared_processors()

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a later configure_logging (tests, the CLI turning into the daemon) must take effect.
        cache_logger_on_first_use=False,
    )

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # Render tracebacks to text before redaction, so the traceback is redacted too.
            structlog.processors.format_exc_info,
            redact,
            *renderers,
        ],
    )
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    setattr(handler, _handler_marker, True)

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _handler_marker, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(threshold)

    quiet = max(threshold, logging.WARNING)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(quiet if threshold > logging.DEBUG else threshold)
    # uvicorn sets up its own handlers unless told otherwise; its loggers must reach ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
        lg.setLevel(logging.NOTSET)


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    """A structlog logger named like a stdlib one (``get_logger(__name__)``)."""
    return structlog.stdlib.get_logger(name)  # type: ignore[no-any-return]
