"""Which store serves a URI."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.agent.storage.base import (
    SCHEMES,
    ObjectStore,
    parse_uri,
)
from scheduler.agent.storage.cos import CosStore
from scheduler.agent.storage.oss import OssStore
from scheduler.agent.storage.s3 import S3Store

# --- choosing ----------------------------------------------------------------------

_DEFAULT_STORES: dict[str, Callable[[], ObjectStore]] = {"s3": S3Store, "oss": OssStore, "cos": CosStore}


def store_for(uri: str, **factories: Callable[[], ObjectStore]) -> ObjectStore:
    """The store for ``uri``'s scheme: ``factories[scheme]()`` if given (keys s3, oss, cos), else the role default."""
    unknown = set(factories) - set(SCHEMES)
    if unknown:
        raise TypeError(f"store_for() takes factories for {', '.join(SCHEMES)}, not {', '.join(sorted(unknown))}")
    scheme, _, _ = parse_uri(uri)
    return (factories.get(scheme) or _DEFAULT_STORES[scheme])()
