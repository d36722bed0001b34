"""The Alibaba Cloud adapter's name and configuration (GPUSCHED_ALIBABA_*, loaded by ``scheduler.settings``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from scheduler.models import Frozen

__all__ = ["NAME", "AlibabaConfig"]

NAME = "alibaba"


class AlibabaConfig(Frozen):
    """How to reach Alibaba Cloud ECS and what to launch there."""

    access_key_id: str = Field(min_length=1)
    access_key_secret: SecretStr
    regions: tuple[str, ...] = Field(default=("cn-hangzhou",), min_length=1)
    image_id: str = ""  # used when a request names no image
    security_group_ids: Mapping[str, str] = Field(default_factory=dict)  # region -> sg-...
    vswitch_ids: Mapping[str, str] = Field(default_factory=dict)  # zone -> vsw-... (a VSwitch lives in one zone)
    key_pair_name: str = ""
    ram_role_name: str = ""  # instance role: credentials from the metadata service, no keys on the machine
    imds_tokens_required: bool = True  # HttpTokens=required: metadata only with a session token
    system_disk_category: str = "cloud_essd"
    system_disk_size_gib: int = Field(default=100, ge=20, le=2048)
    internet_max_bandwidth_out: int = Field(default=0, ge=0, le=100)  # Mbit/s; 0 = no public IP
    spot_duration_hours: int = Field(default=0, ge=0, le=1)  # protected hours of a spot instance
    auto_release_hours: int | None = Field(default=None, ge=1, le=24 * 365)  # backstop: ECS releases by itself
    endpoint: str = ""  # "host[:port]" override (tests, VPC endpoints); empty: the SDK's regional endpoint
    # BSS OpenAPI (the bills, providers/alibaba/bills.py): China site business.aliyuncs.com, international
    # business.ap-southeast-1.aliyuncs.com; "host[:port]" of an emulator in tests.
    bss_endpoint: str = "business.aliyuncs.com"
    protocol: Literal["https", "http"] = "https"
    # Bounded as every cloud's: 10**18 was an internal OverflowError at the first call.
    connect_timeout_seconds: int = Field(default=5, ge=1, le=600)
    read_timeout_seconds: int = Field(default=10, ge=1, le=600)
    tombstone_seconds: int = Field(default=3600, ge=0, le=7 * 86400)

    @field_validator("regions")
    @classmethod
    def _no_blank_region(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not all(r.strip() for r in v):
            raise ValueError("a region id cannot be blank")
        return v
