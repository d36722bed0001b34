"""Issue 18's "Done when", as written: after `gpusched demo`, `gpusched report --month 2026-11 --send` with
GPUSCHED_SMTP_URL, GPUSCHED_REPORT_MAIL_TO and GPUSCHED_WEBHOOKS pointing at local receivers delivers one mail
(HTML body, PDF and CSV attached) and four chat messages, each in its service's own JSON shape."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pypdf import PdfReader

from tests.accounting.receivers import TOKENS, hooks_env, smtp_server, webhook_receiver

GPUSCHED = [sys.executable, "-m", "scheduler.app.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    return env | extra


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """A fresh `gpusched demo`, run the way a user runs it: in a working folder, default output folder."""
    work = tmp_path_factory.mktemp("fresh")
    done = subprocess.run([*GPUSCHED, "demo"], cwd=work, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return work


@pytest.mark.timeout(900)
def test_report_send_after_the_demo_delivers_one_mail_and_four_chat_messages(demo_dir: Path) -> None:
    with smtp_server() as (smtp, box), webhook_receiver() as (base, posts):
        env = _env(GPUSCHED_DATA_DIR="gpusched-demo", GPUSCHED_SMTP_URL=smtp,
                   GPUSCHED_REPORT_MAIL_TO="a@example.com", GPUSCHED_WEBHOOKS=hooks_env(base))
        done = subprocess.run([*GPUSCHED, "report", "--month", "2026-11", "--send"], cwd=demo_dir, env=env,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for secret in TOKENS:
        assert secret not in done.stdout + done.stderr
    reports = demo_dir / "gpusched-demo" / "reports"
    assert {p.name for p in reports.iterdir()} >= {f"report-2026-11.{x}" for x in ("html", "csv", "md", "pdf")}

    [(_, rcpts, msg)] = box.mails
    assert rcpts == ["a@example.com"] and msg["Subject"].startswith("GPU spend report 2026-11: ")
    html = next(p for p in msg.walk() if p.get_content_type() == "text/html").get_content()
    assert "GPU spend report &mdash; 2026-11" in html and html.count('src="cid:') >= 2
    attached = {p.get_filename(): p for p in msg.iter_attachments()}
    assert set(attached) == {"report-2026-11.pdf", "report-2026-11.csv"}
    assert attached["report-2026-11.pdf"].get_content_type() == "application/pdf"
    pdf = PdfReader(io.BytesIO(attached["report-2026-11.pdf"].get_content()))
    assert "GPU spend report - 2026-11" in pdf.pages[0].extract_text()
    assert attached["report-2026-11.csv"].get_content() == (reports / "report-2026-11.csv").read_text()

    [slack] = posts.for_service("slack")
    assert set(slack) == {"text", "blocks"} and slack["text"].startswith("GPU spend 2026-11: ")
    [ding] = posts.for_service("dingtalk")
    assert ding["msgtype"] == "markdown" and set(ding["markdown"]) == {"title", "text"}
    [wecom] = posts.for_service("wecom")
    assert wecom["msgtype"] == "markdown" and set(wecom["markdown"]) == {"content"}
    [feishu] = posts.for_service("feishu")
    assert feishu["msg_type"] == "interactive" and feishu["card"]["elements"][0]["tag"] == "markdown"
    # The same figures everywhere: the headline total in the mail's subject is the one in each chat title.
    total = msg["Subject"].split(": ", 1)[1]
    assert ding["markdown"]["title"] == slack["blocks"][0]["text"]["text"] == f"GPU spend 2026-11: {total}"
    assert f"**Total (amortized)**: {total}" in wecom["markdown"]["content"]
    # The chat messages are where the delivery tokens went, in their URLs: each arrived at its own service.
    assert len(posts.received) == 4


def test_report_send_with_nowhere_to_send_says_what_to_set(tmp_path: Path) -> None:
    done = subprocess.run([*GPUSCHED, "report", "--month", "2026-11", "--send"], cwd=tmp_path,
                          env=_env(GPUSCHED_DATA_DIR="d"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "nowhere to send" in done.stderr and "GPUSCHED_WEBHOOKS" in done.stderr


def test_report_send_with_a_channel_down_exits_1_and_keeps_the_files(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with webhook_receiver() as (base, posts):
        env = _env(GPUSCHED_DATA_DIR="d", GPUSCHED_SMTP_URL=f"smtp://ops:mailpass77@127.0.0.1:{port}",
                   GPUSCHED_REPORT_MAIL_TO="a@example.com",
                   GPUSCHED_WEBHOOKS=f"slack={base}/slack/services/T/B/slacksecret1")
        done = subprocess.run([*GPUSCHED, "report", "--month", "2026-11", "--send"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    text = done.stdout + done.stderr
    assert "FAILED" in text and "mail" in text and "sent" in text and "slack" in text
    assert "are kept" in text
    assert "mailpass77" not in text and "slacksecret1" not in text
    assert (tmp_path / "d" / "reports" / "report-2026-11.pdf").stat().st_size > 0
    assert len(posts.received) == 1
