"""How the command line prints: text from outside shown literally, and JSON for scripts (``--json``)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.markup import escape


def shown(value: object) -> str:
    """``value`` as Rich prints it literally: markup escaped, characters the terminal cannot encode as escapes."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return escape(text)


def print_json(data: Any) -> None:
    """``data`` as plain JSON on stdout (no colours, no wrapping): ``json.loads`` of it gives ``data`` back."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()
