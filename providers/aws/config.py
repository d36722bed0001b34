"""The AWS adapter's name and configuration (GPUSCHED_AWS_*, loaded by ``scheduler.settings``)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, SecretStr, model_validator

from scheduler.models import Frozen

__all__ = ["NAME", "AwsConfig"]

NAME = "aws"


class AwsConfig(Frozen):
    """How to reach EC2 and what to launch with. Secrets stay SecretStr.

    Leave both keys empty to use botocore's default credential chain (an
    instance role when the daemon itself runs on EC2: the recommended setup).
    AMIs, subnets and security groups are regional (subnets per zone), hence
    the mappings.
    """

    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    regions: tuple[str, ...] = Field(default=("us-east-1",), min_length=1)
    image_ids: Mapping[str, str] = Field(default_factory=dict)  # region -> AMI id
    subnet_ids: Mapping[str, str] = Field(default_factory=dict)  # availability zone -> subnet id
    security_group_ids: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)  # region -> group ids
    key_name: str | None = None
    instance_profile: str | None = None  # IAM instance profile name, or its ARN
    endpoint_url: str | None = None  # tests: a local moto server
    # Cost Explorer (the bills, providers/aws/bills.py) is one global endpoint: us-east-1 (cn-northwest-1 for
    # the China partition). endpoint_url, when set, serves it too (moto serves every service on one port).
    cost_explorer_region: str = "us-east-1"
    page_size: int = Field(default=100, ge=5, le=1000)  # DescribeInstances MaxResults allows 5..1000
    # Bounded as every cloud's: inf failed every call with "timestamp out of range for platform time_t".
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=600, allow_inf_nan=False)
    read_timeout_seconds: float = Field(default=30.0, gt=0, le=600, allow_inf_nan=False)

    @model_validator(mode="after")
    def _keys_come_in_pairs(self) -> AwsConfig:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both the AWS access key id and the secret access key, or neither")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("an AWS session token needs an access key id and secret access key")
        return self
