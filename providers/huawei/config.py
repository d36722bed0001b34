"""The Huawei adapter's name and configuration (GPUSCHED_HUAWEI_*, loaded by ``scheduler.settings``).

The access key, secret key and project id also answer to the names Huawei's own tools read
(``HUAWEICLOUD_SDK_AK``, ``HUAWEICLOUD_SDK_SK``, ``HUAWEICLOUD_SDK_PROJECT_ID``), so an account
already set up for ``hcloud`` or the SDK needs no second copy of its keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, ConfigDict, Field, SecretStr, field_validator, model_validator

from scheduler.models import Frozen

__all__ = ["NAME", "HuaweiConfig"]

NAME = "huawei"


def _env(field: str, *huawei_names: str) -> AliasChoices:
    # Env names only (no bare field name, which would also read an unprefixed ACCESS_KEY variable);
    # populate_by_name lets the settings loader hand the values back by field name.
    return AliasChoices(f"GPUSCHED_HUAWEI_{field.upper()}", *huawei_names)


class HuaweiConfig(Frozen):
    """How to reach Huawei Cloud ECS and what to launch. Settings: GPUSCHED_HUAWEI_<FIELD>.

    Huawei scopes every ECS call to a project, one per region: ``project_ids`` maps each
    region to its project. With one region, ``project_id`` (or HUAWEICLOUD_SDK_PROJECT_ID)
    is enough. The adapter never asks IAM for it: the project is part of every request
    path and a wrong one is refused by the cloud, which is clearer than a silent lookup.

    ``access_key``, ``secret_key`` and ``project_id`` are read under their variable names
    only (GPUSCHED_HUAWEI_ACCESS_KEY or HUAWEICLOUD_SDK_AK ...), so an override handed to
    ``scheduler.settings.load_cloud_config`` names them that way too.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    access_key: SecretStr = Field(validation_alias=_env("access_key", "HUAWEICLOUD_SDK_AK"))
    secret_key: SecretStr = Field(validation_alias=_env("secret_key", "HUAWEICLOUD_SDK_SK"))
    regions: tuple[str, ...] = Field(default=("cn-north-4",), min_length=1)
    project_id: str = Field(default="", validation_alias=_env("project_id", "HUAWEICLOUD_SDK_PROJECT_ID"))
    project_ids: dict[str, str] = Field(default_factory=dict)  # region -> project id
    image_id: str = ""  # an IMS image id (UUID); a request's own image wins
    vpc_id: str = ""  # the VPC every server joins
    subnet_ids: dict[str, str] = Field(default_factory=dict)  # zone -> subnet (network) id
    security_group_ids: tuple[str, ...] = ()
    key_name: str = ""  # an SSH key pair name
    agency_name: str = ""  # the IAM agency the server acts as: OBS access without keys in user-data
    root_volume_type: Literal["SATA", "SAS", "SSD", "GPSSD", "ESSD"] = "SSD"
    root_volume_gb: int = Field(default=100, ge=40, le=1024)
    endpoint: str | None = None  # scheme://host:port for every region (tests: a local emulator); None: Huawei's
    request_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    page_size: int = Field(default=200, ge=1, le=1000)  # ListServersDetails limit; Huawei advises 200
    # How long launch waits for the create job to name its server before giving up (the retry is safe).
    job_wait_seconds: float = Field(default=30.0, ge=0, le=600)
    job_poll_seconds: float = Field(default=2.0, gt=0, le=60)
    # How long a server we saw is still reported (terminated) after Huawei stops listing it.
    tombstone_seconds: float = Field(default=3600.0, ge=0, le=7 * 86400, allow_inf_nan=False)

    @field_validator("endpoint", mode="before")
    @classmethod
    def _empty_endpoint_is_huaweis(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v  # .env.example leaves it empty

    @model_validator(mode="after")
    def _every_region_has_a_project(self) -> HuaweiConfig:
        missing = [r for r in self.regions if not self.project_for(r)]
        if missing:
            raise ValueError(
                f"no project id for region(s) {', '.join(missing)}: set GPUSCHED_HUAWEI_PROJECT_IDS "
                '(JSON, region -> project id), or HUAWEICLOUD_SDK_PROJECT_ID when only one region is configured'
            )
        if self.subnet_ids and not self.vpc_id:
            raise ValueError("subnet_ids need vpc_id (a subnet belongs to one VPC)")
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError("endpoint must start with http:// or https://")
        return self

    def project_for(self, region: str) -> str:
        """The project id ECS calls in ``region`` go to ('' when none is configured)."""
        if region in self.project_ids:
            return self.project_ids[region]
        return self.project_id if len(self.regions) == 1 else ""

    def endpoint_for(self, region: str) -> str:
        return self.endpoint or f"https://ecs.{region}.myhuaweicloud.com"
