"""One ECS ``EcsClient`` per region, built with the SDK's retries off and no endpoint or credential lookups.

The SDK can find a region's endpoint and the project id by itself (environment variables,
a regions file, an IAM call); the adapter gives it both explicitly instead, so the
configuration is the one place they come from and a test's endpoint is the only one used.
"""

from __future__ import annotations

from typing import Callable

from huaweicloudsdkcore.auth.credentials import BasicCredentials
from huaweicloudsdkcore.http.http_config import HttpConfig
from huaweicloudsdkecs.v2 import EcsClient

from providers.huawei.config import HuaweiConfig

__all__ = ["ClientFactory", "EcsClient", "refuse_sdk_retries", "sdk_client_factory"]

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
        return (
            EcsClient.new_builder()
            .with_http_config(http)
            .with_credentials(credentials)
            .with_endpoints([config.endpoint_for(region)])
            .build()
        )

    return build


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
