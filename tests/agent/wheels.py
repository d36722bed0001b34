"""A small, dependency-free wheel named gpusched, for tests of how machines install their agent.

pip installs it offline in a second; its ``gpusched`` console script prints ``PROBE_OUTPUT`` and its
version, so a test can run what the systemd unit would run."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PROBE_OUTPUT = "gpusched test wheel"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def small_wheel(folder: Path, version: str, *, name: str = "gpusched") -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``folder`` (an ``agent`` extra with no requirements)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        "gpusched_test_probe/__init__.py": (
            f"def main():\n    print({PROBE_OUTPUT!r}, {version!r})\n"
        ).encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nProvides-Extra: agent\n"
        ).encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": b"[console_scripts]\ngpusched = gpusched_test_probe:main\n",
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist_info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{dist_info}/RECORD", record)
    return wheel
