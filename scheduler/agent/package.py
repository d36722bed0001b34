"""The gpusched wheel a cloud machine installs: exactly the daemon's own version, pinned by its sha256.

Never a name lookup on a package index: an unrelated project owns the name ``gpusched`` on PyPI. The
operator names the wheel in one of two ways, and the daemon checks it before it starts:

- ``GPUSCHED_AGENT_WHEEL``: a wheel file (or a folder holding one) on the daemon's disk, such as the
  one deploy/Dockerfile builds and installs the daemon from. The daemon serves it at
  ``GET /v1/agent/package`` to machines that show their machine token.
- ``GPUSCHED_AGENT_WHEEL_URL`` with ``GPUSCHED_AGENT_WHEEL_SHA256``: a wheel the operator publishes
  elsewhere (an object store, an internal file server). Machines download it without any token.

Either way the user-data pins the sha256, and the machine installs nothing else under that name.
A daemon that starts real machines (backend ``live`` without ``sim_agents``) refuses to start with
neither; the sandbox and the emulators boot nothing, so they need none.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from scheduler.errors import SettingsError
from scheduler.settings import Settings

DIST_NAME = "gpusched"
# Where a machine fetches a wheel its daemon serves (the agent router's prefix plus this).
ROUTE = "/v1/agent/package"
WHEEL_FIX = ("build the daemon's own wheel (`pip wheel --no-deps -w dist .` in the checkout the daemon runs; "
             "deploy/Dockerfile does it) and set GPUSCHED_AGENT_WHEEL to it, or publish that wheel and set "
             "GPUSCHED_AGENT_WHEEL_URL and GPUSCHED_AGENT_WHEEL_SHA256")


@dataclass(frozen=True)
class AgentPackage:
    """The wheel machines install. ``content`` is set when the daemon serves it (read once, at start-up,
    so the bytes served are the bytes hashed); ``url`` when the operator publishes it elsewhere."""

    filename: str  # gpusched-<version>-py3-none-any.whl: pip needs a wheel's own name
    sha256: str
    version: str
    url: str | None = None
    content: bytes | None = None

    @property
    def served_by_daemon(self) -> bool:
        return self.content is not None

    def download_url(self, api_url: str) -> str:
        """Where a machine fetches it: the daemon's route (``api_url`` as machines reach the API), or the pin."""
        return api_url.rstrip("/") + ROUTE if self.url is None else self.url


def daemon_version() -> str:
    """The version of gpusched this process runs."""
    try:
        return metadata.version(DIST_NAME)
    except metadata.PackageNotFoundError:
        raise SettingsError("gpusched is not installed as a package, so its version is unknown",
                            fix="install it (`pip install .` or `scripts/bootstrap`)") from None


def _wheel_name_parts(filename: str) -> tuple[str, str] | None:
    """(distribution, version) of a wheel file name (``name-version[-build]-py-abi-platform.whl``)."""
    parts = filename[: -len(".whl")].split("-") if filename.endswith(".whl") else []
    if len(parts) not in (5, 6):
        return None
    return parts[0].lower().replace(".", "_"), parts[1]


def _find_wheel(path: Path, version: str) -> Path:
    if path.is_dir():
        found = sorted(path.glob(f"{DIST_NAME}-{version}-*.whl"))
        if len(found) != 1:
            what = "no" if not found else f"{len(found)}"
            raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {path} holds {what} {DIST_NAME}-{version}-*.whl "
                                f"(this daemon is gpusched {version})", fix=WHEEL_FIX)
        return found[0]
    if not path.is_file():
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {path} does not exist", fix=WHEEL_FIX)
    return path


def _metadata_version(data: bytes, where: Path) -> str:
    """The version the wheel's own METADATA gives (a renamed file cannot pass for another version)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as wheel:
            names = [n for n in wheel.namelist()
                     if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            if len(names) != 1:
                raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {where} has no single .dist-info/METADATA",
                                    fix=WHEEL_FIX)
            headers = HeaderParser().parsestr(wheel.read(names[0]).decode("utf-8", errors="replace"))
    except zipfile.BadZipFile:
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {where} is not a wheel (not a zip file)", fix=WHEEL_FIX) from None
    if (headers.get("Name") or "").lower() != DIST_NAME:
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {where} is the wheel of {headers.get('Name')!r}, "
                            f"not {DIST_NAME}", fix=WHEEL_FIX)
    return headers.get("Version") or ""


def served_wheel(path: Path, version: str) -> AgentPackage:
    """The wheel at ``path`` (a file, or a folder with one wheel of ``version``), read and checked."""
    wheel = _find_wheel(path, version)
    parts = _wheel_name_parts(wheel.name)
    if parts is None or parts[0] != DIST_NAME:
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {wheel.name} is not named like a {DIST_NAME} wheel "
                            f"({DIST_NAME}-{version}-py3-none-any.whl)", fix=WHEEL_FIX)
    try:
        data = wheel.read_bytes()
    except OSError as exc:
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL: cannot read {wheel}: {exc.strerror or exc}",
                            fix="make the file readable by the daemon's user") from None
    inside = _metadata_version(data, wheel)
    if parts[1] != version or inside != version:
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL: {wheel.name} is gpusched {inside or parts[1]}, but this daemon "
                            f"runs gpusched {version}: machines must run the daemon's own version", fix=WHEEL_FIX)
    return AgentPackage(filename=wheel.name, sha256=hashlib.sha256(data).hexdigest(), version=version, content=data)


def pinned_wheel(url: str, sha256: str, version: str) -> AgentPackage:
    """A wheel the operator publishes at ``url``, pinned by ``sha256`` (checked on the machine, not here)."""
    sha = sha256.strip().lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise SettingsError("GPUSCHED_AGENT_WHEEL_SHA256: not a sha256 (64 hex digits)",
                            fix="`sha256sum gpusched-*.whl` gives it")
    parsed = urlsplit(url)
    if parsed.scheme not in ("https", "http") or not parsed.netloc:
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL_URL: {url!r} is not an http(s) URL",
                            fix="give the address machines download the wheel from, e.g. "
                                f"https://files.internal/{DIST_NAME}-{version}-py3-none-any.whl")
    filename = PurePosixPath(parsed.path).name
    parts = _wheel_name_parts(filename)
    if parts is None or parts != (DIST_NAME, version):
        raise SettingsError(f"GPUSCHED_AGENT_WHEEL_URL: the file it names ({filename or 'none'}) is not a "
                            f"{DIST_NAME} {version} wheel; this daemon runs gpusched {version}",
                            fix=f"publish this daemon's own wheel under its own name "
                                f"({DIST_NAME}-{version}-py3-none-any.whl) and point the URL at it")
    return AgentPackage(filename=filename, sha256=sha, version=version, url=url)


def boots_real_machines(settings: Settings) -> bool:
    """Whether the daemon's machines run a real agent (the sandbox and the emulators boot nothing)."""
    return settings.backend == "live" and not settings.sim_agents


def agent_package(settings: Settings) -> AgentPackage | None:
    """The wheel the daemon's machines install, from settings; None only where no machine boots.

    Raises SettingsError (a one-line start-up error) for a wheel that is missing, unreadable, not
    gpusched, or not the daemon's own version, and for a daemon that would start real machines with
    nothing to install on them."""
    path, url, sha = settings.agent_wheel.strip(), settings.agent_wheel_url.strip(), settings.agent_wheel_sha256
    if path and url:
        raise SettingsError("GPUSCHED_AGENT_WHEEL and GPUSCHED_AGENT_WHEEL_URL are both set",
                            fix="set one: the daemon serves the wheel itself, or machines fetch the pinned URL")
    if sha.strip() and not url:
        raise SettingsError("GPUSCHED_AGENT_WHEEL_SHA256 is set without GPUSCHED_AGENT_WHEEL_URL",
                            fix="set the URL it pins, or leave it empty (a served wheel's hash is computed)")
    if path:
        return served_wheel(Path(path), daemon_version())
    if url:
        if not sha.strip():
            raise SettingsError("GPUSCHED_AGENT_WHEEL_URL is set without GPUSCHED_AGENT_WHEEL_SHA256",
                                fix="pin it: `sha256sum gpusched-*.whl`")
        return pinned_wheel(url, sha, daemon_version())
    if boots_real_machines(settings):
        raise SettingsError("no agent wheel is configured, so machines could not install gpusched: the daemon "
                            "will not start machines that would look the name up on a public index", fix=WHEEL_FIX)
    return None
