"""The FOCUS tier: the independent focus-validator checks the FOCUS file the demo's month produces.

focus-validator 1.0.0 lives in its own environment (``.venv-focus``: it pins pandas and pandera versions
of its own, and needs ``multimethod<1.11`` on Python 3.11); ``scripts/test-focus`` makes it and sets
GPUSCHED_FOCUS_TIER=1 and GPUSCHED_FOCUS_VALIDATOR (its ``focus-validator``). The main suite collects
these tests and skips them, saying why; under the tier a missing validator is a failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIER = os.environ.get("GPUSCHED_FOCUS_TIER") == "1"
HERE = Path(__file__).resolve().parent
SKIP_REASON = ("FOCUS tier: runs the demo (about a minute) and focus-validator from .venv-focus; run "
               "scripts/test-focus, which sets GPUSCHED_FOCUS_TIER=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TIER:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)
