"""Tests that need an optional package skip without it, saying which and how to install it; in CI
(``GPUSCHED_REQUIRE_DEPS``, set by ``.ci/run``) the same absence fails, so no skip hides a feature.
A test module that skips whole at import (``pytest.importorskip``) is failed the same way by
``tests/conftest.py``'s ``pytest_collectreport``."""

from __future__ import annotations

import os

import pytest


def missing(reason: str) -> None:
    """Skip with ``reason``; fail with it where CI requires every dependency."""
    if os.environ.get("GPUSCHED_REQUIRE_DEPS"):
        pytest.fail(f"required in CI: {reason}", pytrace=False)
    pytest.skip(reason)

