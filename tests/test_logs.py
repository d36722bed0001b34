"""Logging: JSON lines for the daemon, console lines for the CLI, stdlib routed through, secrets masked."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
import structlog
from pydantic import SecretStr
from structlog.testing import capture_logs

from scheduler.logs import MASK, configure_logging, forget_secrets, get_logger, redact, register_secret

TOKEN = "tok-3f9c0a1b2d4e5f60718293a4"


@pytest.fixture(autouse=True)
def clean_logging() -> Iterator[None]:
    yield
    forget_secrets()
    structlog.reset_defaults()
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, "_gpusched_handler", False)]:
        root.removeHandler(h)
    root.setLevel(logging.WARNING)


def json_lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def json_log(level: str = "info") -> io.StringIO:
    buf = io.StringIO()
    configure_logging("json", level, stream=buf)
    return buf


def test_json_lines_carry_an_iso_utc_timestamp_level_logger_and_fields() -> None:
    buf = json_log()
    at = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
    get_logger("gpusched.test").info("job_submitted", job_id="job-1", epochs=30, deadline=at)

    [line] = json_lines(buf)
    assert line["deadline"] == "2026-11-20T08:00:00+00:00"
    assert line["event"] == "job_submitted"
    assert (line["level"], line["logger"], line["job_id"], line["epochs"]) == ("info", "gpusched.test", "job-1", 30)
    stamp = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
    assert stamp.utcoffset() == timezone.utc.utcoffset(None)
    assert list(line)[:4] == ["timestamp", "level", "logger", "event"]


@pytest.mark.parametrize(
    ("level", "shown"),
    [("debug", ["d", "i", "w"]), ("info", ["i", "w"]), ("warning", ["w"]), ("error", [])],
)
def test_the_level_filters_lines(level: str, shown: list[str]) -> None:
    buf = json_log(level)
    log = get_logger("t")
    log.debug("d")
    log.info("i")
    log.warning("w")
    assert [line["event"] for line in json_lines(buf)] == shown


def test_stdlib_loggers_come_out_as_the_same_json() -> None:
    buf = json_log()
    logging.getLogger("uvicorn.error").warning("Started server process [%d]", 42)

    [line] = json_lines(buf)
    assert line["event"] == "Started server process [42]"
    assert (line["logger"], line["level"]) == ("uvicorn.error", "warning")
    assert "timestamp" in line


def test_chatty_libraries_are_quieted_unless_debugging() -> None:
    buf = json_log("info")
    logging.getLogger("apscheduler.executors.default").info("Running job tick")
    logging.getLogger("apscheduler.executors.default").warning("job missed")
    assert [line["event"] for line in json_lines(buf)] == ["job missed"]

    buf = json_log("debug")
    logging.getLogger("apscheduler.executors.default").info("Running job tick")
    assert [line["event"] for line in json_lines(buf)] == ["Running job tick"]


def test_configuring_again_replaces_the_handler_instead_of_doubling_lines() -> None:
    json_log()
    buf = json_log()
    get_logger("t").info("once")
    assert [line["event"] for line in json_lines(buf)] == ["once"]


def test_console_format_is_readable_text() -> None:
    buf = io.StringIO()
    configure_logging("console", "info", stream=buf)
    get_logger("t").info("tick_done", ticks=3)

    text = buf.getvalue()
    assert "tick_done" in text and "ticks=3" in text
    assert not text.lstrip().startswith("{")


@pytest.mark.parametrize("fmt", ["xml", "JSON "])
def test_unknown_format_is_refused(fmt: str) -> None:
    with pytest.raises(ValueError, match="format"):
        configure_logging(fmt, "info", stream=io.StringIO())  # type: ignore[arg-type]


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="level"):
        configure_logging("json", "chatty", stream=io.StringIO())


# --- redaction


@pytest.mark.parametrize(
    "key",
    ["api_token", "token", "secret_access_key", "AccessKeySecret", "password", "db_passwd", "Authorization",
     "x-api-key", "apikey", "credentials", "private_key", "cookie"],
)
def test_values_under_secret_looking_keys_are_masked(key: str) -> None:
    buf = json_log()
    get_logger("t").info("call", **{key: "hunter2-value"}, team="vision-qa")

    [line] = json_lines(buf)
    assert line[key] == MASK
    assert line["team"] == "vision-qa"
    assert "hunter2-value" not in buf.getvalue()


def test_secret_keys_are_masked_inside_nested_values() -> None:
    with capture_logs(processors=[redact]) as logs:
        get_logger("t").info("request", headers={"Authorization": "Bearer abc123", "Accept": "json"})
    assert logs[0]["headers"] == {"Authorization": MASK, "Accept": "json"}


def test_a_registered_secret_is_masked_wherever_it_appears() -> None:
    register_secret(TOKEN)
    buf = json_log()
    log = get_logger("t")
    log.info(f"calling with {TOKEN}", url=f"http://x/?t={TOKEN}", args=["a", TOKEN], n=3)
    logging.getLogger("httpx").warning("HTTP Request: GET http://x/?t=%s", TOKEN)
    try:
        raise RuntimeError(f"refused token {TOKEN}")
    except RuntimeError:
        log.exception("tick_failed")

    out = buf.getvalue()
    assert TOKEN not in out
    lines = json_lines(buf)
    assert lines[0]["event"] == f"calling with {MASK}"
    assert lines[0]["url"] == f"http://x/?t={MASK}" and lines[0]["args"] == ["a", MASK] and lines[0]["n"] == 3
    assert lines[1]["event"].endswith(MASK)
    assert "RuntimeError: refused token ***" in lines[2]["exception"]


def test_secret_values_from_settings_are_registered_unwrapped_and_masked_as_objects() -> None:
    register_secret(SecretStr(TOKEN))
    with capture_logs(processors=[redact]) as logs:
        get_logger("t").info("settings", note=f"token is {TOKEN}", raw=SecretStr("anything-at-all"))
    assert logs[0]["note"] == f"token is {MASK}"
    assert logs[0]["raw"] == MASK


def test_very_short_values_are_not_registered_as_secrets() -> None:
    register_secret("ab")
    register_secret(None)
    with capture_logs(processors=[redact]) as logs:
        get_logger("t").info("about ab", label="ab")
    assert logs[0]["event"] == "about ab" and logs[0]["label"] == "ab"


def test_an_empty_secret_key_value_stays_visible() -> None:
    # "api_token: None" says the setting is missing: useful, and not a secret.
    with capture_logs(processors=[redact]) as logs:
        get_logger("t").info("settings", api_token=None)
    assert logs[0]["api_token"] is None
