"""Delivery: mail over SMTP and chat webhooks (Slack, DingTalk, WeCom, Feishu), for reports and budget alerts.

A ``Notice`` (a title and a few labelled facts) becomes each chat service's own message
JSON; a report mail carries the report's HTML as its body (charts as inline images, so
mail clients that refuse ``data:`` images still show them) and the PDF and CSV attached.

Every channel is tried, one failure does not stop the others, and each outcome comes back
as a ``Delivered`` with the reason in words. Webhook URLs carry their token in the path or
query, and SMTP URLs may carry a password: no message built here contains either (a URL is
shown as its scheme and host only), and both are registered with the log redactor.

A DingTalk robot whose security setting is "sign" (加签) takes only signed requests: with
``GPUSCHED_DINGTALK_SECRET`` set, each post carries ``timestamp`` (milliseconds since the epoch, from the
injected clock) and ``sign`` = URL-encoded base64 of HMAC-SHA256 over ``"<timestamp>\n<secret>"`` keyed with
the secret, as DingTalk's custom-robot documentation specifies. The secret itself never travels and is
never logged; DingTalk refuses a timestamp more than an hour from its own clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path
from urllib.parse import quote_plus, unquote, urlsplit

import httpx
from pydantic import SecretStr

from scheduler.clock import SystemClock
from scheduler.errors import SettingsError
from scheduler.logs import get_logger, register_secret
from scheduler.models import Frozen
from scheduler.settings import WEBHOOK_SERVICES, Settings, smtp_url_problem
from scheduler.times import utc

__all__ = ["Delivered", "Notice", "chat_payload", "deliver", "dingtalk_signed_url", "send_mail", "post_webhook",
           "mail_message", "channels_configured"]

log = get_logger(__name__)

TIMEOUT_S = 20.0
# WeCom refuses markdown over 4,096 bytes; the others allow more, and a chat message should be short anyway.
_MAX_CHAT_BYTES = 3800
_DATA_PNG_RE = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


class Notice(Frozen):
    """What a chat message says: a title, labelled facts in order, and an optional closing line."""

    title: str
    facts: tuple[tuple[str, str], ...] = ()
    footer: str | None = None
    severity: str = "info"  # info | warning | critical: the colour of a Feishu card


class Delivered(Frozen):
    """One channel's outcome: ``channel`` is "mail" or a chat service; ``detail`` says where or why not."""

    channel: str
    ok: bool
    detail: str


# --- chat message shapes ------------------------------------------------------------------


def _markdown(notice: Notice, bold: str = "**") -> str:
    lines = [f"{bold}{label}{bold}: {value}" for label, value in notice.facts]
    if notice.footer:
        lines.append(notice.footer)
    return _cap("\n".join(lines))


def _cap(text: str) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= _MAX_CHAT_BYTES:
        return text
    return raw[:_MAX_CHAT_BYTES].decode("utf-8", "ignore").rstrip() + "\n..."


_FEISHU_TEMPLATE = {"info": "blue", "warning": "orange", "critical": "red"}


def chat_payload(service: str, notice: Notice) -> dict:
    """The JSON body ``service``'s incoming webhook expects for ``notice``."""
    if service == "slack":
        # Slack mrkdwn: *bold*; "text" is the notification's fallback, "blocks" what the channel shows.
        body = _markdown(notice, bold="*")
        return {
            "text": f"{notice.title}\n{body}",
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": notice.title[:150]}},
                {"type": "section", "text": {"type": "mrkdwn", "text": body[:3000]}},
            ],
        }
    if service == "dingtalk":
        # DingTalk markdown needs a blank line between lines to break them.
        text = f"### {notice.title}\n\n" + _markdown(notice).replace("\n", "\n\n")
        return {"msgtype": "markdown", "markdown": {"title": notice.title, "text": text}}
    if service == "wecom":
        return {"msgtype": "markdown", "markdown": {"content": _cap(f"**{notice.title}**\n" + _markdown(notice))}}
    if service == "feishu":
        return {
            "msg_type": "interactive",
            "card": {
                "config": {"wide_screen_mode": True},
                "header": {"title": {"tag": "plain_text", "content": notice.title},
                           "template": _FEISHU_TEMPLATE.get(notice.severity, "blue")},
                "elements": [{"tag": "markdown", "content": _markdown(notice)}],
            },
        }
    raise SettingsError(f"unknown webhook service {service!r}", fix=f"use one of {', '.join(WEBHOOK_SERVICES)}")


def _where(url: str) -> str:
    """A URL as it may be shown: scheme and host, never the path or query that carry the token."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}"


def _refusal(service: str, response: httpx.Response) -> str | None:
    """Why the service refused a message it answered, or None when it took it.

    DingTalk and WeCom answer HTTP 200 with ``errcode`` != 0 on a refusal, Feishu with ``code``
    (older bots: ``StatusCode``) != 0; Slack answers "ok", and an HTTP error with a word otherwise.
    """
    if response.status_code >= 300:
        return f"HTTP {response.status_code}: {response.text[:200].strip()}"
    if service == "slack":
        return None
    try:
        body = response.json()
    except ValueError:
        return f"answered HTTP {response.status_code} with a body that is not JSON: {response.text[:120]!r}"
    if not isinstance(body, dict):
        return f"answered with unexpected JSON: {str(body)[:120]}"
    code = body.get("errcode", body.get("code", body.get("StatusCode", 0)))
    if code not in (0, "0", None):
        message = body.get("errmsg", body.get("msg", body.get("StatusMessage", "")))
        return f"refused: code {code} {message}".strip()
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def dingtalk_signed_url(url: str, secret: str, at: datetime) -> str:
    """``url`` with DingTalk's ``timestamp`` and ``sign`` for a request made at ``at`` appended to its query."""
    timestamp = str((utc(at) - _EPOCH) // timedelta(milliseconds=1))
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp}\n{secret}".encode("utf-8"), hashlib.sha256).digest()
    sign = quote_plus(base64.b64encode(digest).decode("ascii"))
    return f"{url}{'&' if urlsplit(url).query else '?'}timestamp={timestamp}&sign={sign}"


def post_webhook(service: str, url: SecretStr | str, notice: Notice, *, http: httpx.Client,
                 secret: SecretStr | None = None, now: datetime | None = None) -> Delivered:
    """Post ``notice`` to one chat webhook; the outcome, never an exception, never the URL's token.

    ``secret``: a DingTalk robot's signing secret; the request is signed for ``now`` (default: the clock's now).
    """
    raw = url.get_secret_value() if isinstance(url, SecretStr) else url
    register_secret(raw)
    where = _where(raw)
    target = raw
    if secret is not None and service == "dingtalk":
        key = secret.get_secret_value()
        register_secret(key)
        target = dingtalk_signed_url(raw, key, now or SystemClock().now())
    try:
        payload = chat_payload(service, notice)
        response = http.post(target, json=payload, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        # httpx puts the request URL into some messages; say what failed in our words only.
        return Delivered(channel=service, ok=False, detail=f"{where}: {type(exc).__name__} (could not deliver)")
    why = _refusal(service, response)
    if why is not None:
        return Delivered(channel=service, ok=False, detail=f"{where}: {why.replace(raw, '***')}")
    return Delivered(channel=service, ok=True, detail=f"posted to {where}")


# --- mail ---------------------------------------------------------------------------------


class _Smtp(Frozen):
    mode: str  # plain | starttls | tls
    host: str
    port: int
    user: str | None
    password: str | None

    @property
    def where(self) -> str:
        return f"{'smtps' if self.mode == 'tls' else 'smtp'}://{self.host}:{self.port}"


_SMTP_SCHEMES = {"smtp": ("plain", 25), "smtp+starttls": ("starttls", 587), "smtps": ("tls", 465)}
_SMTP_FIX = "GPUSCHED_SMTP_URL=smtp://[user:password@]host[:port] (or smtps://, smtp+starttls://)"


def _smtp(url: SecretStr) -> _Smtp:
    raw = url.get_secret_value()
    register_secret(raw)
    problem = smtp_url_problem(raw)  # settings checked it at start; a URL handed in directly is checked here
    if problem:
        raise SettingsError(f"GPUSCHED_SMTP_URL {problem}", fix=_SMTP_FIX)
    parts = urlsplit(raw)
    port = parts.port
    mode, default_port = _SMTP_SCHEMES[parts.scheme]
    password = unquote(parts.password) if parts.password else None
    register_secret(password)
    return _Smtp(mode=mode, host=parts.hostname, port=port or default_port,
                 user=unquote(parts.username) if parts.username else None, password=password)


def mail_message(*, sender: str, to: Sequence[str], subject: str, at: datetime, text: str, html: str | None = None,
                 attachments: Sequence[Path] = ()) -> EmailMessage:
    """A mail dated ``at``: plain text, the HTML alternative (its ``data:`` PNGs as inline parts), files attached."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(utc(at))
    msg["Message-ID"] = make_msgid(domain="gpusched")
    msg.set_content(text)
    if html is not None:
        images: list[tuple[str, bytes]] = []

        def to_cid(m: re.Match[str]) -> str:
            cid = make_msgid(domain="gpusched")
            images.append((cid, base64.b64decode(m.group(1))))
            return f"cid:{cid[1:-1]}"

        msg.add_alternative(_DATA_PNG_RE.sub(to_cid, html), subtype="html")
        html_part = msg.get_payload()[-1]
        for cid, data in images:
            html_part.add_related(data, maintype="image", subtype="png", cid=cid)
    for path in attachments:
        data = path.read_bytes()
        if path.suffix == ".pdf":
            msg.add_attachment(data, maintype="application", subtype="pdf", filename=path.name)
        elif path.suffix == ".csv":
            # As bytes (base64): a text part's line ends would become CRLF on the way; the file arrives as written.
            msg.add_attachment(data, maintype="text", subtype="csv", filename=path.name, params={"charset": "utf-8"})
        else:
            msg.add_attachment(data, maintype="application", subtype="octet-stream", filename=path.name)
    return msg


def send_mail(smtp_url: SecretStr, msg: EmailMessage, *, sender: str, to: Sequence[str]) -> Delivered:
    """Send ``msg`` over SMTP; the outcome, never an exception, never the password."""
    try:
        cfg = _smtp(smtp_url)
    except SettingsError as exc:
        return Delivered(channel="mail", ok=False, detail=exc.message)
    try:
        context = ssl.create_default_context()
        if cfg.mode == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(cfg.host, cfg.port, timeout=TIMEOUT_S, context=context)
        else:
            client = smtplib.SMTP(cfg.host, cfg.port, timeout=TIMEOUT_S)
        with client:
            client.ehlo()
            if cfg.mode == "starttls" or (cfg.mode == "plain" and client.has_extn("starttls")):
                client.starttls(context=context)
                client.ehlo()
            if cfg.user:
                client.login(cfg.user, cfg.password or "")
            refused = client.send_message(msg, from_addr=sender, to_addrs=list(to))
    except smtplib.SMTPAuthenticationError as exc:
        return Delivered(channel="mail", ok=False, detail=f"{cfg.where}: login refused ({exc.smtp_code})")
    except smtplib.SMTPResponseException as exc:
        reply = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        return Delivered(channel="mail", ok=False, detail=f"{cfg.where}: the server said {exc.smtp_code} {reply}")
    except smtplib.SMTPRecipientsRefused as exc:
        return Delivered(channel="mail", ok=False, detail=f"{cfg.where}: every recipient refused "
                                                          f"({', '.join(exc.recipients)})")
    except (OSError, smtplib.SMTPException) as exc:
        return Delivered(channel="mail", ok=False, detail=f"{cfg.where}: {type(exc).__name__}: {_no_secret(exc, cfg)}")
    sent = [a for a in to if a not in refused]
    note = f"; refused: {', '.join(refused)}" if refused else ""
    return Delivered(channel="mail", ok=True, detail=f"sent to {', '.join(sent)} via {cfg.where}{note}")


def _no_secret(exc: BaseException, cfg: _Smtp) -> str:
    text = str(exc)
    return text.replace(cfg.password, "***") if cfg.password else text


# --- everything configured ----------------------------------------------------------------


def channels_configured(settings: Settings) -> list[str]:
    """The channels the settings name: "mail" (an SMTP URL and recipients), then each webhook service."""
    out = ["mail"] if settings.smtp_url is not None and settings.report_mail_to else []
    return out + [s for s in WEBHOOK_SERVICES if s in settings.webhooks]


def deliver(
    settings: Settings,
    notice: Notice,
    *,
    mail: EmailMessage | None = None,
    webhooks: Mapping[str, SecretStr] | None = None,
    http: httpx.Client | None = None,
    now: datetime | None = None,
) -> list[Delivered]:
    """Send ``mail`` (when given and mail is set up) and ``notice`` to every webhook; one outcome per channel.
    ``now``: when the messages go (DingTalk's signature carries it); default: the clock's now."""
    outcomes: list[Delivered] = []
    if mail is not None and settings.smtp_url is not None and settings.report_mail_to:
        outcomes.append(send_mail(settings.smtp_url, mail, sender=settings.report_mail_from,
                                  to=settings.report_mail_to))
    hooks = settings.webhooks if webhooks is None else webhooks
    if hooks:
        own = http is None
        client = http or httpx.Client(follow_redirects=False)
        try:
            for service in WEBHOOK_SERVICES:
                if service in hooks:
                    outcomes.append(post_webhook(service, hooks[service], notice, http=client,
                                                 secret=settings.dingtalk_secret, now=now))
        finally:
            if own:
                client.close()
    for o in outcomes:
        if o.ok:
            log.info("delivered", channel=o.channel, detail=o.detail, title=notice.title)
        else:
            log.warning("delivery_failed", channel=o.channel, detail=o.detail, title=notice.title)
    return outcomes
