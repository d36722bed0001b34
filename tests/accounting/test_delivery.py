"""Delivery of reports: a real SMTP server (aiosmtpd) and a local HTTP receiver for the four chat webhooks."""

from __future__ import annotations

import io
import logging
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from pypdf import PdfReader

from scheduler.accounting.delivery import Notice, chat_payload, deliver, mail_message, post_webhook, send_mail
from scheduler.accounting.report_delivery import report_notice, write_and_send
from scheduler.logs import configure_logging
from scheduler.settings import Settings
from scheduler.store.database import Store
from tests.accounting.receivers import TOKENS, hooks_env, smtp_server, webhook_receiver
from tests.accounting.test_reports import Ledger, nov

NOW = datetime(2026, 12, 1, 6, tzinfo=timezone.utc)
NOTICE = Notice(title="GPU spend 2026-11: 1,234.50 CNY", facts=(("Total", "1,234.50 CNY"), ("Team vision", "50%")),
                footer="Report files: report-2026-11.pdf")


# --- each service's own message shape --------------------------------------------------------------


def test_slack_gets_text_and_blocks_in_mrkdwn() -> None:
    body = chat_payload("slack", NOTICE)
    assert set(body) == {"text", "blocks"}
    assert body["text"].startswith(NOTICE.title)
    header, section = body["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": NOTICE.title}}
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert "*Total*: 1,234.50 CNY" in section["text"]["text"] and "**" not in section["text"]["text"]


def test_dingtalk_gets_a_markdown_message_with_title_and_text() -> None:
    body = chat_payload("dingtalk", NOTICE)
    assert body["msgtype"] == "markdown" and set(body) == {"msgtype", "markdown"}
    assert body["markdown"]["title"] == NOTICE.title
    assert body["markdown"]["text"].startswith(f"### {NOTICE.title}\n\n")
    assert "**Total**: 1,234.50 CNY\n\n**Team vision**: 50%" in body["markdown"]["text"]


def test_wecom_gets_markdown_content_under_its_byte_limit() -> None:
    body = chat_payload("wecom", NOTICE)
    assert body == {"msgtype": "markdown", "markdown": {"content": body["markdown"]["content"]}}
    assert body["markdown"]["content"].startswith(f"**{NOTICE.title}**\n**Total**: 1,234.50 CNY")
    long = Notice(title="t", facts=tuple((f"team {i}", "x" * 100) for i in range(100)))
    assert len(chat_payload("wecom", long)["markdown"]["content"].encode()) <= 4096


def test_feishu_gets_an_interactive_card() -> None:
    body = chat_payload("feishu", NOTICE.model_copy(update={"severity": "critical"}))
    assert body["msg_type"] == "interactive"
    card = body["card"]
    assert card["header"] == {"title": {"tag": "plain_text", "content": NOTICE.title}, "template": "red"}
    assert card["elements"][0]["tag"] == "markdown" and "**Total**: 1,234.50 CNY" in card["elements"][0]["content"]


# --- webhooks over HTTP -----------------------------------------------------------------------------


def test_each_webhook_is_posted_its_shape_and_a_refusal_is_reported_without_the_token() -> None:
    with webhook_receiver() as (base, posts), httpx.Client() as http:
        ok = {s: post_webhook(s, SecretStr(f"{base}/{s}/hook?token=tok{s}QxZ7"), NOTICE, http=http)
              for s in ("slack", "dingtalk", "wecom", "feishu")}
        refused = {s: post_webhook(s, SecretStr(f"{base}/refuse/{s}/hook?access_token=tok{s}WvY9"), NOTICE, http=http)
                   for s in ("slack", "dingtalk", "wecom", "feishu")}
    assert all(o.ok for o in ok.values()), ok
    assert posts.for_service("slack")[0] == chat_payload("slack", NOTICE)
    assert posts.for_service("dingtalk")[0] == chat_payload("dingtalk", NOTICE)
    assert posts.for_service("wecom")[0] == chat_payload("wecom", NOTICE)
    assert posts.for_service("feishu")[0] == chat_payload("feishu", NOTICE)
    assert not any(o.ok for o in refused.values())
    assert "HTTP 403" in refused["slack"].detail
    assert "310000" in refused["dingtalk"].detail and "93000" in refused["wecom"].detail
    assert "19021" in refused["feishu"].detail
    for o in [*ok.values(), *refused.values()]:
        assert "QxZ7" not in o.detail and "WvY9" not in o.detail and "/hook" not in o.detail, o.detail


def test_an_unreachable_webhook_is_a_failure_in_words(unused_port: int) -> None:
    with httpx.Client() as http:
        out = post_webhook("slack", SecretStr(f"http://127.0.0.1:{unused_port}/services/T/B/sekrit99"), NOTICE,
                           http=http)
    assert not out.ok and "ConnectError" in out.detail and "sekrit99" not in out.detail


# --- mail over SMTP ----------------------------------------------------------------------------------


def _parts(msg):
    return {part.get_content_type(): part for part in msg.walk()}


def test_mail_carries_html_with_inline_charts_and_the_attachments(tmp_path: Path) -> None:
    pdf, csv = tmp_path / "report-2026-11.pdf", tmp_path / "report-2026-11.csv"
    pdf.write_bytes(b"%PDF-1.4 fake")
    csv.write_text("section,key\ntotal,2026-11\n")
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    html = f'<html><body><h1>Report</h1><img src="data:image/png;base64,{png}"></body></html>'
    msg = mail_message(sender="gpusched@example.com", to=["a@example.com"], subject="report", text="plain",
                       at=datetime(2026, 12, 1, 6, tzinfo=timezone.utc),
                       html=html, attachments=[pdf, csv])
    with smtp_server() as (url, box):
        out = send_mail(SecretStr(url), msg, sender="gpusched@example.com", to=["a@example.com"])
    assert out.ok, out.detail
    [(sender, rcpts, got)] = box.mails
    assert sender == "gpusched@example.com" and rcpts == ["a@example.com"]
    assert got["Date"].datetime == datetime(2026, 12, 1, 6, tzinfo=timezone.utc)  # the caller's clock, not the wall
    parts = _parts(got)
    body = parts["text/html"].get_content()
    assert "<h1>Report</h1>" in body and "data:image" not in body and 'src="cid:' in body
    cid = body.split('src="cid:')[1].split('"')[0]
    assert parts["image/png"]["Content-ID"] == f"<{cid}>"
    attached = {p.get_filename(): p for p in got.iter_attachments()}
    assert attached["report-2026-11.pdf"].get_content() == b"%PDF-1.4 fake"
    assert attached["report-2026-11.csv"].get_content_type() == "text/csv"


def test_a_mail_server_that_is_down_is_a_failure_without_the_password(unused_port: int) -> None:
    msg = mail_message(sender="g@example.com", to=["a@example.com"], subject="s", text="t", at=NOW)
    out = send_mail(SecretStr(f"smtp://ops:hunter22pw@127.0.0.1:{unused_port}"), msg, sender="g@example.com",
                    to=["a@example.com"])
    assert not out.ok and f"smtp://127.0.0.1:{unused_port}" in out.detail and "hunter22pw" not in out.detail


def test_a_bad_smtp_url_is_a_failure_that_says_the_fix() -> None:
    msg = mail_message(sender="g@example.com", to=["a@example.com"], subject="s", text="t", at=NOW)
    out = send_mail(SecretStr("http://mail.example.com"), msg, sender="g@example.com", to=["a@example.com"])
    assert not out.ok and "smtp://" in out.detail


# --- a report, end to end through write_and_send ----------------------------------------------------


@pytest.fixture
def store_with_spend(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    store.migrate()
    with store.session() as s:
        ledger = Ledger(s)
        inst = ledger.instance("i-1", team="vision", price="2", on_demand="4", currency="CNY")
        ledger.cost(inst, nov(2), nov(2, 10), amount="20", on_demand="40")
        other = ledger.instance("i-2", team="retail", price="3", on_demand="5", currency="CNY")
        ledger.cost(other, nov(3), nov(3, 10), amount="30", on_demand="50")
    yield store
    store.dispose()


def test_write_and_send_delivers_the_report_everywhere_and_keeps_the_files(tmp_path: Path, store_with_spend) -> None:
    with smtp_server() as (smtp, box), webhook_receiver() as (base, posts):
        settings = Settings(_env_file=None, data_dir=tmp_path, smtp_url=smtp,
                            report_mail_to="a@example.com,b@example.com", webhooks=hooks_env(base),
                            team_budgets='{"vision": "40 CNY"}')
        sent = write_and_send(settings, "2026-11", now=datetime(2026, 12, 1, 6, tzinfo=timezone.utc),
                              store=store_with_spend)
    assert [o.channel for o in sent.outcomes] == ["mail", "slack", "dingtalk", "wecom", "feishu"]
    assert all(o.ok for o in sent.outcomes), sent.outcomes
    assert set(sent.paths) == {"html", "csv", "md", "xlsx", "pdf", "audit"}
    assert all(p.exists() for p in sent.paths.values())
    [(_, rcpts, msg)] = box.mails
    assert rcpts == ["a@example.com", "b@example.com"]
    assert msg["Subject"] == "GPU spend report 2026-11: 50.00 CNY"
    attached = {p.get_filename(): p for p in msg.iter_attachments()}
    assert set(attached) == {"report-2026-11.pdf", "report-2026-11.csv"}
    pdf = PdfReader(io.BytesIO(attached["report-2026-11.pdf"].get_content()))
    text = "".join(page.extract_text() for page in pdf.pages)
    assert "GPU spend report - 2026-11" in text and "50.00 CNY" in text and "Team budgets" in text
    assert attached["report-2026-11.csv"].get_content() == sent.paths["csv"].read_text()
    html = _parts(msg)["text/html"].get_content()
    assert "Team budgets" in html and "50.0%" in html  # vision: 20 of 40 CNY
    # Each chat service got the same facts, in its own shape.
    [slack] = posts.for_service("slack")
    assert slack["blocks"][0]["text"]["text"] == "GPU spend 2026-11: 50.00 CNY"
    [ding] = posts.for_service("dingtalk")
    assert ding["msgtype"] == "markdown" and "**Budget vision**: 50.0% of 40.00 CNY used" in ding["markdown"]["text"]
    [wecom] = posts.for_service("wecom")
    assert "**Team retail**: 30.00 CNY (60.0%)" in wecom["markdown"]["content"]
    [feishu] = posts.for_service("feishu")
    assert feishu["msg_type"] == "interactive"


def test_failed_channels_lose_no_file_and_log_no_secret(tmp_path: Path, store_with_spend, unused_port: int,
                                                         capsys) -> None:
    configure_logging("console", "info")
    try:
        with webhook_receiver() as (base, _posts):
            hooks = hooks_env(base).replace(f"{base}/dingtalk", f"{base}/refuse/dingtalk")
            settings = Settings(_env_file=None, data_dir=tmp_path, report_mail_to="a@example.com",
                                smtp_url=f"smtp://ops:mailpass77@127.0.0.1:{unused_port}", webhooks=hooks)
            sent = write_and_send(settings, "2026-11", now=datetime(2026, 12, 1, tzinfo=timezone.utc),
                                  store=store_with_spend)
    finally:
        logging.getLogger().handlers.clear()
    failed = {o.channel for o in sent.failed}
    assert failed == {"mail", "dingtalk"}
    assert {o.channel for o in sent.outcomes if o.ok} == {"slack", "wecom", "feishu"}
    assert all(p.exists() and p.stat().st_size > 0 for p in sent.paths.values())
    logged = capsys.readouterr()
    text = logged.out + logged.err + " ".join(o.detail for o in sent.outcomes)
    assert "delivery_failed" in text
    for secret in (*TOKENS, "mailpass77"):
        assert secret not in text


def test_report_notice_says_a_running_month_is_so_far(tmp_path: Path, store_with_spend) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)
    sent = write_and_send(settings, "2026-11", now=datetime(2026, 11, 16, tzinfo=timezone.utc),
                          store=store_with_spend, send=False)
    assert sent.outcomes == []
    from scheduler.accounting.reports import monthly_report

    report = monthly_report(settings, "2026-11", now=datetime(2026, 11, 16, tzinfo=timezone.utc),
                            store=store_with_spend)
    notice = report_notice(report, sent.paths)
    assert notice.title.endswith("so far")
    assert dict(notice.facts)["Forecast to month end"] == "100.00 CNY"  # 50 in 15 days of 30


def test_deliver_with_nothing_configured_sends_nothing(tmp_path: Path) -> None:
    assert deliver(Settings(_env_file=None, data_dir=tmp_path), NOTICE) == []


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




# --- DingTalk signed requests ------------------------------------------------------------------------

DING_SECRET = "SECb7f0c2e9d41a5fq8"


def signed_now() -> datetime:
    """A report time whose DingTalk signature has a '+' in it: unless the sign is URL-encoded, the robot
    reads that '+' as a space and refuses, so the encoding is tested, not left to chance."""
    import base64
    import hashlib
    import hmac
    from datetime import timedelta

    for ms in range(1000):
        at = NOW + timedelta(milliseconds=ms)
        ts = str(int(at.timestamp() * 1000))
        digest = hmac.new(DING_SECRET.encode(), f"{ts}\n{DING_SECRET}".encode(), hashlib.sha256).digest()
        if "+" in base64.b64encode(digest).decode():
            return at
    raise AssertionError("no millisecond of the first second gave a '+'")


def test_a_dingtalk_robot_with_the_sign_setting_takes_signed_posts(tmp_path: Path, capsys) -> None:
    at = signed_now()
    configure_logging("console", "info")
    try:
        with webhook_receiver(dingtalk_secret=DING_SECRET, now=at) as (base, posts):
            settings = Settings(_env_file=None, data_dir=tmp_path, dingtalk_secret=DING_SECRET,
                                webhooks=f"dingtalk={base}/dingtalk/robot/send?access_token=dingsecret22")
            [out] = deliver(settings, NOTICE, now=at)
    finally:
        logging.getLogger().handlers.clear()
    assert out.ok, out
    assert posts.sign_problems == [None]  # the receiver's own HMAC agreed
    [(path, body)] = posts.received
    assert body == chat_payload("dingtalk", NOTICE)
    assert f"timestamp={int(at.timestamp() * 1000)}&sign=" in path and "%2B" in path  # '+' sent encoded
    assert path.startswith("/dingtalk/robot/send?access_token=dingsecret22&timestamp=")
    logged = capsys.readouterr()
    assert DING_SECRET not in logged.out + logged.err + out.detail and "dingsecret22" not in logged.out + logged.err


@pytest.mark.parametrize(
    ("client_secret", "sent_at", "why"),
    [(None, NOW, "no timestamp and sign"), ("SECsomeoneelse", NOW, "sign not match"),
     (DING_SECRET, NOW.replace(hour=4), "timestamp more than an hour off")],
)  # fmt: skip
def test_a_signed_robot_refuses_a_post_it_cannot_verify(tmp_path: Path, client_secret: str | None,
                                                       sent_at: datetime, why: str) -> None:
    with webhook_receiver(dingtalk_secret=DING_SECRET, now=NOW) as (base, posts):
        settings = Settings(_env_file=None, data_dir=tmp_path, dingtalk_secret=client_secret,
                            webhooks=f"dingtalk={base}/dingtalk/robot/send?access_token=dingsecret22")
        [out] = deliver(settings, NOTICE, now=sent_at)
    assert posts.sign_problems == [why]
    assert not out.ok and "310000" in out.detail and "sign not match" in out.detail
    assert DING_SECRET not in out.detail and "SECsomeoneelse" not in out.detail


def test_the_secret_signs_dingtalk_only_and_an_empty_one_is_none(tmp_path: Path) -> None:
    with webhook_receiver() as (base, posts):
        settings = Settings(_env_file=None, data_dir=tmp_path, dingtalk_secret=DING_SECRET,
                            webhooks=f"slack={base}/slack/services/T/B/x,wecom={base}/wecom/send?key=k")
        assert all(o.ok for o in deliver(settings, NOTICE, now=NOW))
    assert all("sign=" not in path for path, _ in posts.received)
    assert Settings(_env_file=None, dingtalk_secret="").dingtalk_secret is None
    assert DING_SECRET not in repr(settings)


def test_a_report_sent_to_a_signed_robot_is_signed_at_the_report_time(tmp_path: Path, store_with_spend) -> None:
    with webhook_receiver(dingtalk_secret=DING_SECRET, now=NOW) as (base, posts):
        settings = Settings(_env_file=None, data_dir=tmp_path, dingtalk_secret=DING_SECRET,
                            webhooks=f"dingtalk={base}/dingtalk/robot/send?access_token=dingsecret22")
        sent = write_and_send(settings, "2026-11", now=NOW, store=store_with_spend)
    assert [o.ok for o in sent.outcomes] == [True] and posts.sign_problems == [None]
