"""One ``AcsClient`` per region, the SDK's retries off; an endpoint override sets host and port."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

from aliyunsdkcore.client import AcsClient

from providers.alibaba.config import AlibabaConfig

__all__ = ["ClientFactory", "make_client_factory", "split_endpoint"]

ClientFactory = Callable[[str], AcsClient]


def split_endpoint(endpoint: str) -> tuple[str, int | None]:
    """``"host[:port]"`` as (host, port or None); ("", None) for no override."""
    if not endpoint:
        return "", None
    host, sep, port = endpoint.rpartition(":")
    if sep and port.isdigit() and host:
        return host, int(port)
    return endpoint, None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def make_client_factory(config: AlibabaConfig) -> ClientFactory:
    """One AcsClient per region, SDK retries off; an endpoint override sets the port."""
    host, port = split_endpoint(config.endpoint)
    # The SDK logs every refusal at ERROR, expected ones too (a terminate of an instance already
    # gone); the adapter translates each and its caller logs it once, with the request id.
    logging.getLogger("aliyunsdkcore.client").setLevel(logging.CRITICAL)
    # A loopback endpoint is reached directly, whatever HTTP(S)_PROXY says.
    proxy = {"http": None, "https": None} if host and _is_loopback(host) else None

    def build(region: str) -> AcsClient:
        return AcsClient(
            config.access_key_id,
            config.access_key_secret.get_secret_value(),
            region,
            auto_retry=False,
            max_retry_time=0,
            port=port or (443 if config.protocol == "https" else 80),
            connect_timeout=config.connect_timeout_seconds,
            timeout=config.read_timeout_seconds,
            proxy=proxy,
        )

    return build
