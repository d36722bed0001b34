"""A boto3 EC2 client per region, botocore's retries off, and the part of it the adapter uses."""

from __future__ import annotations

from typing import Any, Protocol

import boto3
from botocore.config import Config
from pydantic import SecretStr

from providers.aws.config import AwsConfig

__all__ = ["EC2Client", "make_ec2_client"]


class EC2Client(Protocol):
    """The part of a boto3 EC2 client this adapter uses (botocore builds the methods at run time)."""

    def run_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def stop_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def start_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def terminate_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_paginator(self, operation_name: str) -> Any: ...


def make_ec2_client(region: str, config: AwsConfig, session: boto3.session.Session | None = None) -> EC2Client:
    """A boto3 EC2 client for ``region`` with ``config``'s credentials and botocore's retries off.

    ``total_max_attempts: 1`` is what "no retries" means to botocore: its
    ``max_attempts`` counts retries AFTER the first try, so 1 there would still
    retry once (and two Throttling replies in a row would look like one).
    Pass one ``session`` for all regions: it loads the EC2 service model once
    (about 0.3 s) instead of once per client. Building clients from one session
    in several threads at once is not safe; AwsProvider builds them under a lock.
    Without keys in ``config``, botocore's default chain finds credentials
    (an instance role when the daemon runs on EC2).
    """
    client: EC2Client = (session or boto3.session.Session()).client(
        "ec2",
        region_name=region,
        endpoint_url=config.endpoint_url,
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=_reveal(config.secret_access_key),
        aws_session_token=_reveal(config.session_token),
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=config.connect_timeout_seconds,
            read_timeout=config.read_timeout_seconds,
            user_agent_extra="gpusched",
        ),
    )
    return client


def _reveal(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()
