"""Each cloud adapter's settings, read from GPUSCHED_<CLOUD>_<FIELD> (environment or .env).

The adapters own their config models (``providers.aws.AwsConfig`` ...); this is
the one place that fills them from the environment, so the adapters never read
it themselves. Lists and maps are JSON: GPUSCHED_ALIBABA_REGIONS='["cn-hangzhou"]'.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError, create_model
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

from scheduler.errors import SettingsError

C = TypeVar("C", bound=BaseModel)


def load_cloud_config(config_cls: type[C], cloud: str, *, env_file: str | None = ".env", **overrides: object) -> C:
    """``config_cls`` filled from GPUSCHED_<CLOUD>_* variables; ``overrides`` win (tests, the demo)."""
    prefix = f"GPUSCHED_{cloud.upper()}_"
    fields = {name: (f.annotation, f) for name, f in config_cls.model_fields.items()}
    reader = create_model(  # type: ignore[call-overload]
        f"{config_cls.__name__}FromEnv",
        __base__=BaseSettings,
        __config__=None,
        **fields,
    )
    reader.model_config = SettingsConfigDict(env_prefix=prefix, env_file=env_file, extra="ignore")
    try:
        values = reader(**overrides).model_dump(exclude_unset=False)
        return config_cls.model_validate(values)
    except ValidationError as exc:
        lines = [f"{prefix}{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()]
        raise SettingsError(f"invalid {cloud} settings:\n  " + "\n  ".join(lines),
                            fix=f"set the {prefix}* variables (see .env.example)") from None
    except PydanticSettingsError as exc:
        raise SettingsError(f"invalid {cloud} settings: {exc}", fix="lists and maps are JSON") from None
