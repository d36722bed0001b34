"""One ECS ``EcsClient`` per region, built with the SDK's retries off and no endpoint or credential lookups.

The SDK can find a region's endpoint and the project id by itself (environment variables,
a regions file, an IAM call); the adapter gives it both explicitly instead, so the
configuration is the one place they come from and a test's endpoint is the only one used.

Two SDK habits lose what a throttling answer says, and are turned off here: its session retries
HTTP 429 through urllib3 (with ``retry_times`` 0 that only turns the answer into a bare "429" error,
its body, code and headers gone), and its exception handler drops the answer's headers. With both
off, a 429 reaches the adapter as the gateway's ``APIGW.0308`` with its ``Retry-After`` kept on the
exception (``retry_after``, seconds) for the retry helper to honour. A loopback endpoint (a local
emulator) is reached directly, whatever HTTP(S)_PROXY says.
"""

from __future__ import annotations

import ipaddress
from typing import Callable
from urllib.parse import urlsplit

from huaweicloudsdkcore.auth.credentials import BasicCredentials
from huaweicloudsdkcore.exceptions.exception_handler import DefaultExceptionHandler
from huaweicloudsdkcore.exceptions.exceptions import ServiceResponseException
from huaweicloudsdkcore.http.http_config import HttpConfig
from huaweicloudsdkecs.v2 import EcsClient
from urllib3.util.retry import Retry

from providers.huawei.config import HuaweiConfig
from providers.retry import parse_retry_after

__all__ = ["ClientFactory", "EcsClient", "KeepRetryAfter", "answer_429s", "refuse_sdk_retries", "sdk_client_factory"]

ClientFactory = Callable[[str], EcsClient]


def sdk_client_factory(config: HuaweiConfig) -> ClientFactory:
    """Builds one real EcsClient per region: AK/SK signing (SDK-HMAC-SHA256), the region's project, no retries."""

    def build(region: str) -> EcsClient:
        http = HttpConfig.get_default_config()
        http.timeout = (min(10.0, config.request_timeout_seconds), config.request_timeout_seconds)
        http.retry_times = 0  # retries are providers.retry's: see refuse_sdk_retries
        credentials = BasicCredentials(
            config.access_key.get_secret_value(), config.secret_key.get_secret_value(), config.project_for(region)
        )
        client = (
            EcsClient.new_builder()
            .with_http_config(http)
            .with_credentials(credentials)
            .with_endpoints([config.endpoint_for(region)])
            .with_exception_handler(KeepRetryAfter())
            .build()
        )
        answer_429s(client)
        if _is_loopback(config.endpoint_for(region)):
            # A local emulator is reached directly, whatever HTTP(S)_PROXY says.
            session = getattr(client.get_http_client(), "_session", None)
            if session is not None:
                session.trust_env = False
        return client

    return build


def _is_loopback(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def answer_429s(client: EcsClient) -> None:
    """Let an HTTP 429 through the SDK's session as the answer it is (no urllib3 status retry)."""
    session = getattr(client.get_http_client(), "_session", None)
    for adapter in getattr(session, "adapters", {}).values():
        adapter.max_retries = Retry(0, read=False)  # what requests' own max_retries=0 means


class KeepRetryAfter(DefaultExceptionHandler):
    """The SDK's own handling of an error answer, with its ``Retry-After`` kept on the exception."""

    def handle_exception(self, request, response):  # type: ignore[no-untyped-def]
        try:
            super().handle_exception(request, response)
        except ServiceResponseException as exc:
            exc.retry_after = parse_retry_after(response.headers.get("Retry-After"))  # type: ignore[attr-defined]
            raise


def refuse_sdk_retries(client: EcsClient) -> None:
    """Raise ValueError if ``client`` would retry a request by itself.

    The SDK's HttpConfig.retry_times becomes a urllib3 Retry on every connection; a POST
    retried there after a lost answer goes out again with the same X-Client-Token only if
    the token is still within Huawei's idempotency window, and our own back-off would never
    see the failures it multiplies.
    """
    config = getattr(getattr(client, "get_http_client", lambda: None)(), "config", None)
    retries = getattr(config, "retry_times", 0) or 0
    if retries:
        raise ValueError(
            f"the EcsClient retries by itself (HttpConfig.retry_times={retries}); build it with retry_times=0: "
            "retries belong to providers.retry"
        )
