"""The Tencent adapter's name and configuration (GPUSCHED_TENCENT_*, loaded by ``scheduler.settings``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from scheduler.models import Frozen

__all__ = ["NAME", "TencentConfig"]

NAME = "tencent"


class TencentConfig(Frozen):
    """How to reach Tencent Cloud and what to launch. Settings: GPUSCHED_TENCENT_<FIELD>."""

    secret_id: SecretStr
    secret_key: SecretStr
    regions: tuple[str, ...] = Field(min_length=1)
    image_id: str = ""  # img-...; a request's own image wins
    vpc_id: str = ""
    subnet_ids: dict[str, str] = Field(default_factory=dict)  # zone -> subnet-... (CVM subnets are zonal)
    security_group_ids: tuple[str, ...] = ()
    key_ids: tuple[str, ...] = ()  # SSH key pair ids (skey-...)
    cam_role_name: str = ""  # the instance's role: credentials on the machine, no keys in user-data
    public_bandwidth_mbps: int = Field(default=0, ge=0, le=200)  # 0: no public IP
    system_disk_gb: int | None = Field(default=None, ge=20, le=2048)
    max_lifetime_hours: float | None = Field(default=None, gt=0)  # ActionTimer backstop: destroyed after this
    endpoint: str | None = None  # host[:port]; None: the SDK's cvm.tencentcloudapi.com
    # The Billing API (the bills, providers/tencent/bills.py): None: the SDK's billing.tencentcloudapi.com
    # (the international site also answers at billing.intl.tencentcloudapi.com); host[:port] of an emulator.
    billing_endpoint: str | None = None
    protocol: Literal["https", "http"] = "https"
    currency: Literal["USD", "CNY"] = "USD"  # the account's site: international USD, China CNY
    live_prices: bool = True
    request_timeout_seconds: int = Field(default=30, ge=1, le=600)
    page_size: int = Field(default=100, ge=1, le=100)

    @model_validator(mode="after")
    def _plain_http_only_for_an_explicit_endpoint(self) -> TencentConfig:
        if self.protocol == "http" and not self.endpoint and not self.billing_endpoint:
            raise ValueError("protocol http needs an explicit endpoint (a local emulator); the cloud is https")
        if self.subnet_ids and not self.vpc_id:
            raise ValueError("subnet_ids need vpc_id")
        return self
