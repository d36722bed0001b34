"""One ``CvmClient`` per region with the SDK's retries off, and the check that a given client has none."""

from __future__ import annotations

from typing import Callable

from tencentcloud.common import credential
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.common.retry import NoopRetryer
from tencentcloud.cvm.v20170312 import cvm_client

from providers.tencent.config import TencentConfig

__all__ = ["ClientFactory", "CvmClient", "refuse_sdk_retryer", "sdk_client_factory"]

CvmClient = cvm_client.CvmClient
ClientFactory = Callable[[str], CvmClient]


def sdk_client_factory(config: TencentConfig) -> ClientFactory:
    """Builds one real CvmClient per region, with the SDK's retries off."""

    def build(region: str) -> CvmClient:
        http = HttpProfile(
            protocol=config.protocol,
            endpoint=config.endpoint,
            reqMethod="POST",
            reqTimeout=config.request_timeout_seconds,
            keepAlive=True,
        )
        # The profile must be complete before the client is built: the client reads it once.
        profile = ClientProfile(httpProfile=http, language="en-US", retryer=None)
        cred = credential.Credential(config.secret_id.get_secret_value(), config.secret_key.get_secret_value())
        return cvm_client.CvmClient(cred, region, profile)

    return build


def refuse_sdk_retryer(client: CvmClient) -> None:
    """Raise ValueError if ``client`` would retry by itself (its profile has a retryer other than NoopRetryer)."""
    retryer = getattr(getattr(client, "profile", None), "retryer", None)
    if retryer is not None and not isinstance(retryer, NoopRetryer):
        raise ValueError(
            "the CvmClient has an SDK retryer; build it with ClientProfile(retryer=None): "
            "retries belong to providers.retry (the SDK's StandardRetryer raises stale errors)"
        )
