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
    # ActionTimer backstop: destroyed after this; at most a year, finite (inf would fail every launch).
    max_lifetime_hours: float | None = Field(default=None, gt=0, le=24 * 366, allow_inf_nan=False)
    endpoint: str | None = None  # host[:port]; None: the SDK's cvm.tencentcloudapi.com
    # The Billing API (the bills, providers/tencent/bills.py): None: the SDK's billing.tencentcloudapi.com
    # (the international site also answers at billing.intl.tencentcloudapi.com); host[:port] of an emulator.
    billing_endpoint: str | None = None
    protocol: Literal["https", "http"] = "https"
    # The currency the account is billed in: CNY on the China site, USD on the international one.
    # Never guessed: set it, or the site, or point the endpoint at the international site (*.intl.*).
    currency: Literal["USD", "CNY"] | None = None
    site: Literal["china", "international"] | None = None
    live_prices: bool = True
    request_timeout_seconds: int = Field(default=30, ge=1, le=600)
    page_size: int = Field(default=100, ge=1, le=100)

    @model_validator(mode="after")
    def _plain_http_only_for_an_explicit_endpoint(self) -> TencentConfig:
        if self.protocol == "http" and not self.endpoint and not self.billing_endpoint:
            raise ValueError("protocol http needs an explicit endpoint (a local emulator); the cloud is https")
        if self.subnet_ids and not self.vpc_id:
            raise ValueError("subnet_ids need vpc_id")
        by_site = _SITE_CURRENCY.get(self.site or "") or _endpoint_currency(self.endpoint) \
            or _endpoint_currency(self.billing_endpoint)
        if self.currency is None and by_site is None:
            raise ValueError(
                "the currency this Tencent Cloud account is billed in is unknown: set GPUSCHED_TENCENT_CURRENCY "
                "(CNY for a China-site account, USD for an international-site one) or GPUSCHED_TENCENT_SITE "
                "(china | international)"
            )
        if self.currency is not None and self.site is not None and self.currency != _SITE_CURRENCY[self.site]:
            raise ValueError(f"GPUSCHED_TENCENT_CURRENCY={self.currency} contradicts GPUSCHED_TENCENT_SITE={self.site} "
                             f"(the {self.site} site bills in {_SITE_CURRENCY[self.site]}): set one of them")
        return self

    @property
    def billing_currency(self) -> str:
        """The currency prices and bills are in: the setting, else the site's (the validator ensures one)."""
        found = self.currency or _SITE_CURRENCY.get(self.site or "") or _endpoint_currency(self.endpoint) \
            or _endpoint_currency(self.billing_endpoint)
        assert found is not None
        return found


_SITE_CURRENCY = {"china": "CNY", "international": "USD"}


def _endpoint_currency(endpoint: str | None) -> str | None:
    """USD for the international site's API domain (``*.intl.tencentcloudapi.com``); None otherwise."""
    host = (endpoint or "").split(":")[0].lower()
    return "USD" if host.endswith(".intl.tencentcloudapi.com") else None
