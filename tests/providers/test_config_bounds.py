"""Every cloud's numeric settings are bounded and finite: a huge or infinite one failed late and obscurely.

Each case was accepted before: an Alibaba connect timeout of 10**18 was an internal OverflowError at the first
call; an AWS timeout of inf failed every call with "timestamp out of range for platform time_t"; a Tencent
lifetime of inf would have failed every launch (its ActionTimer's time); a tombstone of 10**18 seconds an
OverflowError once a machine left the cloud's list."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from providers.alibaba.config import AlibabaConfig
from providers.aws.config import AwsConfig
from providers.huawei.config import HuaweiConfig
from providers.tencent.config import TencentConfig

BASE: dict[type[BaseModel], dict[str, Any]] = {
    AlibabaConfig: {"access_key_id": "k", "access_key_secret": "s"},
    AwsConfig: {},
    TencentConfig: {"secret_id": "k", "secret_key": "s", "regions": ["ap-guangzhou"], "currency": "CNY"},
    HuaweiConfig: {"GPUSCHED_HUAWEI_ACCESS_KEY": "k", "GPUSCHED_HUAWEI_SECRET_KEY": "s",
                   "GPUSCHED_HUAWEI_PROJECT_ID": "p"},
}


@pytest.mark.parametrize("config, field, value", [
    (AlibabaConfig, "connect_timeout_seconds", 10**18),
    (AlibabaConfig, "read_timeout_seconds", 10**18),
    (AlibabaConfig, "tombstone_seconds", 10**18),
    (AwsConfig, "connect_timeout_seconds", float("inf")),
    (AwsConfig, "read_timeout_seconds", 1e300),
    (TencentConfig, "max_lifetime_hours", float("inf")),
    (TencentConfig, "max_lifetime_hours", 1e300),
    (HuaweiConfig, "tombstone_seconds", float("inf")),
])
def test_a_huge_or_infinite_number_is_refused(config: type[BaseModel], field: str, value: float) -> None:
    assert config.model_validate(BASE[config])  # the base is valid: the field alone is at fault
    with pytest.raises(ValidationError) as caught:
        config.model_validate({**BASE[config], field: value})
    assert [e["loc"] for e in caught.value.errors()] == [(field,)]
