"""The user-data's install step, run for real: against a live daemon that serves a small wheel named
gpusched, with the machine's paths moved under a temporary folder. It downloads with the machine
token, checks the pinned sha256, makes the virtual environment and pip-installs the file; a wrong
pin or a wrong token installs nothing, and the token never shows in what the step prints."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml
from pydantic import SecretStr

from scheduler.agent.bootstrap import ENV_FILE, INSTALL_SCRIPT, PREFIX, user_data_for
from scheduler.agent.package import AgentPackage, agent_package, daemon_version
from scheduler.app.api import create_app
from scheduler.clock import SystemClock
from scheduler.settings import Settings
from scheduler.store.database import Store
from tests.agent.machines import machine_row
from tests.agent.wheels import PROBE_OUTPUT, small_wheel

API_TOKEN = "daemon-api-token-for-install-tests-0123"
INSTANCE = "inst-0123456789ab"


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return small_wheel(tmp_path / "wheels", daemon_version())


@pytest.fixture
def daemon(tmp_path: Path, wheel: Path) -> Iterator[tuple[str, AgentPackage]]:
    """A live daemon API (uvicorn on a free port) serving ``wheel``, as the daemon does with GPUSCHED_AGENT_WHEEL."""
    settings = Settings(_env_file=None, api_token=SecretStr(API_TOKEN), agent_wheel=str(wheel))  # type: ignore[call-arg]
    package = agent_package(settings)
    assert package is not None and package.served_by_daemon
    store = Store(f"sqlite:///{tmp_path / 'gpusched.db'}")
    store.migrate()
    with store.session() as s:  # the row the tick wrote before launching: tokens of unknown machines open nothing
        s.add(machine_row(INSTANCE, SystemClock(), job_id=None, client_token="gs-boot", state="pending"))
    config = uvicorn.Config(create_app(store, SystemClock(), settings, agent_package=package),
                            host="127.0.0.1", port=0, log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the test daemon did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", package
    server.should_exit = True
    thread.join(timeout=10)
    store.dispose()


def machine(root: Path, user_data: str) -> tuple[list[str], str]:
    """Lay out a fresh machine under ``root`` from cloud-init's write_files (paths moved there) and give
    the install command, as runcmd has it, and the machine token from the env file."""
    doc = yaml.safe_load(user_data)

    def moved(text: str) -> str:
        return text.replace(PREFIX, str(root / PREFIX.lstrip("/"))).replace("/etc/gpusched", str(root / "etc/gpusched"))

    for f in doc["write_files"]:
        path = Path(moved(f["path"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(moved(f["content"]) if f["path"] == INSTALL_SCRIPT else f["content"])
        path.chmod(int(f["permissions"], 8))
    [install] = [cmd for cmd in doc["runcmd"] if INSTALL_SCRIPT in cmd]
    env = dict(line.split("=", 1) for line in Path(moved(ENV_FILE)).read_text().splitlines())
    return [moved(word) for word in install], env["GPUSCHED_AGENT_TOKEN"]


def run_install(argv: list[str]) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "python3"  # the image's Python; here the one running the tests
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}  # offline: nothing by name
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=300, env=env)


def test_the_rendered_install_fetches_checks_and_installs_the_daemons_own_wheel(tmp_path, daemon, wheel):
    api, package = daemon
    user_data = user_data_for(api, API_TOKEN, INSTANCE, SystemClock().now(), 1.0, package=package)
    argv, token = machine(tmp_path / "machine", user_data)

    done = run_install(argv)

    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert token not in out and API_TOKEN not in out
    prefix = tmp_path / "machine" / PREFIX.lstrip("/")
    assert (prefix / "dist" / wheel.name).read_bytes() == wheel.read_bytes()
    assert f"gpusched: installed {wheel.name} (sha256 {package.sha256})" in out
    # What the unit's ExecStart runs is the wheel's own entry point.
    agent = subprocess.run([str(prefix / "bin" / "gpusched")], capture_output=True, text=True, timeout=60)
    assert agent.stdout.split() == [*PROBE_OUTPUT.split(), daemon_version()]


def test_a_wheel_that_does_not_match_the_pin_is_not_installed(tmp_path, daemon):
    api, package = daemon
    other_pin = replace(package, sha256="0" * 64)  # the daemon serves different bytes than the user-data pins
    argv, token = machine(tmp_path / "machine", user_data_for(api, API_TOKEN, INSTANCE, SystemClock().now(), 1.0,
                                                              package=other_pin))
    done = run_install(argv)
    assert done.returncode != 0
    assert f"with sha256 {package.sha256}, not the pinned {'0' * 64}" in done.stderr
    assert not (tmp_path / "machine" / PREFIX.lstrip("/") / "bin").exists()  # no environment, nothing installed
    assert token not in done.stdout + done.stderr


def test_a_machine_with_a_wrong_token_gets_nothing_and_its_token_is_not_printed(tmp_path, daemon):
    api, package = daemon
    argv, token = machine(tmp_path / "machine", user_data_for(api, "another-daemon-token-0123456789", INSTANCE,
                                                              SystemClock().now(), 1.0, package=package))
    done = run_install(argv)
    assert done.returncode != 0 and "answered 401" in done.stderr
    assert token not in done.stdout + done.stderr
    assert not (tmp_path / "machine" / PREFIX.lstrip("/") / "dist").exists()
    assert httpx.get(f"{api}/v1/agent/package", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_a_pinned_url_is_fetched_without_the_machine_token(tmp_path, wheel):
    """Where the operator publishes the wheel elsewhere, the machine sends that server no token."""
    seen: list[dict[str, str]] = []
    body = wheel.read_bytes()

    class Files(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/files/{wheel.name}"
        settings = Settings(_env_file=None, agent_wheel_url=url, agent_wheel_sha256="f" * 64)  # type: ignore[call-arg]
        package = agent_package(settings)
        assert package is not None and not package.served_by_daemon
        argv, token = machine(tmp_path / "machine", user_data_for("https://gpusched.internal:8642", API_TOKEN,
                                                                  INSTANCE, SystemClock().now(), 1.0, package=package))
        done = run_install(argv)
    finally:
        server.shutdown()
    assert len(seen) == 1 and "authorization" not in seen[0]
    assert done.returncode != 0 and "not the pinned " + "f" * 64 in done.stderr  # the hash is still checked
    assert token not in done.stdout + done.stderr
