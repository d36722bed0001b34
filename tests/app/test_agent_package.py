"""The daemon's own wheel for its machines: which wheel the settings name (checked at start-up), and
``GET /v1/agent/package``, which serves it only to a machine that shows its machine token."""

from __future__ import annotations

import ast
import hashlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr
from structlog.testing import capture_logs

from scheduler.agent import tokens as agent_token
from scheduler.agent.bootstrap import INSTALL_SCRIPT, user_data_for
from scheduler.agent.package import ROUTE, agent_package, daemon_version
from scheduler.app.api import create_app
from scheduler.app.wiring import run_daemon
from scheduler.clock import SimClock
from scheduler.errors import SettingsError
from scheduler.settings import Settings
from tests.agent.machines import machine_row
from tests.agent.wheels import small_wheel
from tests.lifecycle.test_lifecycle import World, job_spec

NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
TOKEN = "api-token-for-tests-0123456789"
INSTANCE = "inst-0123456789ab"


def settings(**kw: object) -> Settings:
    return Settings(_env_file=None, api_token=SecretStr(TOKEN), **kw)  # type: ignore[arg-type]


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return small_wheel(tmp_path / "wheels", daemon_version())


def pinned_sha256(user_data: str) -> str:
    script = next(f for f in yaml.safe_load(user_data)["write_files"] if f["path"] == INSTALL_SCRIPT)["content"]
    line = next(line for line in script.splitlines() if line.startswith("SHA256 = "))
    return ast.literal_eval(line.split(" = ", 1)[1])


def machine_token(instance: str = INSTANCE, now: datetime = NOW, ttl: timedelta = timedelta(hours=24)) -> str:
    return agent_token.issue(agent_token.signing_key(TOKEN), instance, now, ttl)


def booting_machine(store) -> None:
    """The instance row the tick wrote before launching: a token opens nothing for an unknown machine."""
    with store.session() as session:
        session.add(machine_row(INSTANCE, SimClock(NOW), job_id=None, client_token="gs-boot", state="pending"))


def test_a_machine_with_its_token_gets_the_bytes_its_user_data_pins(store, wheel):
    booting_machine(store)
    s = settings(agent_wheel=str(wheel))
    package = agent_package(s)
    client = TestClient(create_app(store, SimClock(NOW), s, agent_package=package))
    user_data = user_data_for("http://testserver", TOKEN, INSTANCE, NOW, 2.0, package=package)
    token = dict(line.split("=", 1) for line in next(
        f for f in yaml.safe_load(user_data)["write_files"] if f["path"] == "/etc/gpusched/agent.env"
    )["content"].splitlines())["GPUSCHED_AGENT_TOKEN"]

    with capture_logs() as logs:
        answer = client.get(ROUTE, headers={"Authorization": f"Bearer {token}"})

    assert answer.status_code == 200, answer.text
    assert answer.content == wheel.read_bytes()
    assert hashlib.sha256(answer.content).hexdigest() == pinned_sha256(user_data)
    assert f'filename="{wheel.name}"' in answer.headers["content-disposition"]
    assert [e["event"] for e in logs] == ["agent_package_served"] and logs[0]["instance"] == INSTANCE
    assert token not in repr(logs)


def test_the_wheel_is_refused_without_a_machine_token(store, wheel):
    s = settings(agent_wheel=str(wheel))
    client = TestClient(create_app(store, SimClock(NOW), s, agent_package=agent_package(s)))
    other_daemon = agent_token.issue(agent_token.signing_key("another-daemon-token-0123456"), INSTANCE, NOW,
                                     timedelta(hours=24))
    expired = machine_token(now=NOW - timedelta(days=3))
    for headers in ({}, {"Authorization": f"Bearer {TOKEN}"},  # the API token is not a machine's
                    {"Authorization": f"Bearer {other_daemon}"}, {"Authorization": f"Bearer {expired}"},
                    {"Authorization": "Bearer not-a-token"}, {"Authorization": f"Basic {machine_token()}"}):
        answer = client.get(ROUTE, headers=headers)
        assert answer.status_code == 401, headers
        assert answer.headers["www-authenticate"] == "Bearer"
        assert b"PK" not in answer.content  # no part of the zip


def test_a_daemon_that_serves_no_wheel_says_so(store):
    booting_machine(store)
    pinned = settings(agent_wheel_url=f"https://files.example/gpusched-{daemon_version()}-py3-none-any.whl",
                      agent_wheel_sha256="ab" * 32)
    for s in (settings(), pinned):
        client = TestClient(create_app(store, SimClock(NOW), s, agent_package=agent_package(s)))
        answer = client.get(ROUTE, headers={"Authorization": f"Bearer {machine_token()}"})
        assert answer.status_code == 404
        assert "GPUSCHED_AGENT_WHEEL" in answer.json()["fix"]


# --- which wheel: checked before the daemon starts ---------------------------------------------


def test_a_folder_holding_the_daemons_wheel_is_enough(wheel):
    package = agent_package(settings(agent_wheel=str(wheel.parent)))
    assert package is not None and package.filename == wheel.name and package.version == daemon_version()
    assert package.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"),
    ("other version", "machines must run the daemon's own version"),
    ("renamed", "machines must run the daemon's own version"),  # the name says our version, METADATA does not
    ("other project", "is the wheel of 'gpusched-impostor'"),
    ("not a zip", "not a wheel"),
    ("empty folder", "holds no gpusched-"),
])
def test_a_wrong_wheel_stops_the_daemon_with_one_clear_line(tmp_path, case, message):
    version = daemon_version()
    if case == "missing":
        path = tmp_path / f"gpusched-{version}-py3-none-any.whl"
    elif case == "other version":
        path = small_wheel(tmp_path, "0.0.1")
    elif case == "renamed":
        path = small_wheel(tmp_path, "0.0.1").rename(tmp_path / f"gpusched-{version}-py3-none-any.whl")
    elif case == "other project":
        path = small_wheel(tmp_path, version, name="gpusched-impostor")
        path = path.rename(tmp_path / f"gpusched-{version}-py3-none-any.whl")
    elif case == "not a zip":
        path = tmp_path / f"gpusched-{version}-py3-none-any.whl"
        path.write_text("not a wheel")
    else:
        path = tmp_path / "empty"
        path.mkdir()
    with pytest.raises(SettingsError, match=message) as err:
        agent_package(settings(agent_wheel=str(path)))
    assert "GPUSCHED_AGENT_WHEEL" in str(err.value) and err.value.fix


@pytest.mark.parametrize("kw, message", [
    ({"agent_wheel_url": "https://files.example/gpusched-{v}-py3-none-any.whl"}, "without GPUSCHED_AGENT_WHEEL_SHA256"),
    ({"agent_wheel_sha256": "ab" * 32}, "without GPUSCHED_AGENT_WHEEL_URL"),
    ({"agent_wheel_url": "https://files.example/gpusched-{v}-py3-none-any.whl", "agent_wheel_sha256": "xyz"},
     "not a sha256"),
    ({"agent_wheel_url": "https://files.example/gpusched-0.0.1-py3-none-any.whl", "agent_wheel_sha256": "ab" * 32},
     "is not a gpusched"),
    ({"agent_wheel_url": "https://pypi.org/simple/gpusched/", "agent_wheel_sha256": "ab" * 32}, "is not a gpusched"),
    ({"agent_wheel_url": "file:///srv/gpusched-{v}-py3-none-any.whl", "agent_wheel_sha256": "ab" * 32},
     "not an http"),
    ({"agent_wheel": "/srv/w.whl", "agent_wheel_url": "https://f.example/gpusched-{v}-py3-none-any.whl",
      "agent_wheel_sha256": "ab" * 32}, "both set"),
])
def test_a_wrong_pin_stops_the_daemon_with_one_clear_line(kw, message):
    kw = {k: v.replace("{v}", daemon_version()) for k, v in kw.items()}
    with pytest.raises(SettingsError, match=message):
        agent_package(settings(**kw))


def test_a_pinned_url_of_the_daemons_version_is_taken_as_given():
    url = f"https://files.example/releases/gpusched-{daemon_version()}-py3-none-any.whl"
    package = agent_package(settings(agent_wheel_url=url, agent_wheel_sha256="AB" * 32))
    assert package is not None and package.url == url and package.sha256 == "ab" * 32
    assert package.download_url("https://gpusched.internal:8642") == url


def test_only_a_daemon_that_boots_real_machines_needs_a_wheel():
    assert agent_package(settings()) is None  # the sandbox boots nothing
    assert agent_package(settings(backend="live", sim_agents=True)) is None  # the emulators neither
    with pytest.raises(SettingsError, match="no agent wheel is configured"):
        agent_package(settings(backend="live"))


def test_a_live_daemon_without_a_wheel_does_not_start(tmp_path):
    with pytest.raises(SettingsError, match="no agent wheel is configured") as err:
        run_daemon(settings(backend="live", data_dir=tmp_path))
    assert "GPUSCHED_AGENT_WHEEL" in err.value.fix


# --- the tick: what a launched machine is given --------------------------------------------------


def test_a_launched_machine_installs_the_wheel_the_daemon_serves(store, sim_clock, wheel):
    w = World(store, sim_clock)
    w.settings = settings(cluster="t", providers=["alibaba"], agent_wheel=str(wheel),
                          agent_api_url="https://gpusched.example:8642")
    package = agent_package(w.settings)
    w.ctx = w.new_ctx(agent_package=package)
    w.submit(job_spec())
    w.step()
    [inst] = w.cloud.all_instances()
    assert pinned_sha256(inst.user_data) == hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_a_live_tick_with_no_wheel_launches_nothing(store, sim_clock):
    """The daemon does not start so; a context built around it still launches no machine without an agent."""
    w = World(store, sim_clock)
    w.settings = settings(cluster="t", providers=["alibaba"], backend="live")
    w.ctx = w.new_ctx()
    w.submit(job_spec())
    try:
        w.step()
    except SettingsError as exc:
        assert "no agent wheel is configured" in exc.message
    assert w.cloud.all_instances() == []
