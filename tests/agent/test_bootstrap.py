"""User-data carries no long-lived secret; the agent token works for one machine (instance row) only, briefly."""

from __future__ import annotations

import ast
import hashlib
import hmac
import re
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from scheduler.agent import tokens as agent_token
from scheduler.agent.bootstrap import INSTALL_SCRIPT, user_data_for
from scheduler.agent.package import AgentPackage
from scheduler.agent.tokens import AgentTokenError

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
API_TOKEN = "daemon-admin-token-5f2c9a8e7b6d4c3a"
CLOUD_SECRETS = ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "LTAI5tFakeAlibabaSecret0123", "AKIDFakeTencentSecret9876"]


INSTANCE = "inst-0123456789ab"
WHEEL = b"the daemon's own wheel"
SERVED = AgentPackage(filename="gpusched-0.1.0-py3-none-any.whl", sha256=hashlib.sha256(WHEEL).hexdigest(),
                      version="0.1.0", content=WHEEL)


def render(**kw) -> str:
    kw.setdefault("package", SERVED)
    return user_data_for("https://gpusched.internal:8642", API_TOKEN, INSTANCE, NOW, 3.0, **kw)


def agent_env(text: str) -> dict[str, str]:
    doc = yaml.safe_load(text)
    env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")["content"]
    return dict(line.split("=", 1) for line in env.splitlines())


def test_user_data_is_cloud_config_that_starts_the_long_lived_agent():
    text = render()
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")
    assert env["permissions"] == "0600"
    values = agent_env(text)
    assert values["GPUSCHED_AGENT_INSTANCE"] == INSTANCE
    assert values["GPUSCHED_AGENT_API"] == "https://gpusched.internal:8642"
    # The machine's, not a job's: a warm machine's next job needs no new user-data.
    assert not any(k in values for k in ("GPUSCHED_AGENT_JOB", "GPUSCHED_AGENT_ATTEMPT", "GPUSCHED_AGENT_RESUME"))
    unit = next(f for f in doc["write_files"] if f["path"].endswith("gpusched-agent.service"))["content"]
    assert "ExecStart=/opt/gpusched/bin/gpusched agent" in unit and "Restart=on-failure" in unit
    assert ["systemctl", "enable", "--now", "gpusched-agent.service"] in doc["runcmd"]
    assert any("shutdown -h +" in " ".join(cmd) for cmd in doc["runcmd"])


def test_user_data_carries_no_long_lived_secret():
    text = render()
    assert API_TOKEN not in text
    for secret in CLOUD_SECRETS:
        assert secret not in text
    assert "AWS_SECRET" not in text and "ACCESS_KEY" not in text.upper().replace("GPUSCHED_AGENT_", "")


def test_agent_token_is_scoped_to_its_machine_and_expires_with_the_machines_life_bound():
    values = agent_env(render())
    token = values["GPUSCHED_AGENT_TOKEN"]
    key = agent_token.signing_key(API_TOKEN)
    assert agent_token.verify(key, token, NOW + timedelta(hours=1)) == INSTANCE
    # The token and the shutdown backstop end together: at least a day, three times the estimate.
    assert agent_token.expires_at(token) == NOW + timedelta(hours=24)
    assert agent_token.expires_at(agent_env(user_data_for("https://x", API_TOKEN, INSTANCE, NOW, 20.0, package=None))[
        "GPUSCHED_AGENT_TOKEN"]) == NOW + timedelta(hours=60)
    doc = yaml.safe_load(render())
    assert any("shutdown -h +1440 " in " ".join(cmd) for cmd in doc["runcmd"])
    with pytest.raises(AgentTokenError, match="expired"):
        agent_token.verify(key, token, NOW + timedelta(days=2))
    with pytest.raises(AgentTokenError, match="signature"):
        agent_token.verify(agent_token.signing_key("another-daemon-token-xyz"), token, NOW)
    claims, sig = token.split(".")
    forged = agent_token._b64(agent_token._unb64(claims).replace(INSTANCE.encode(), b"inst-ffffffffffff"))
    with pytest.raises(AgentTokenError, match="signature"):
        agent_token.verify(key, f"{forged}.{sig}", NOW)
    with pytest.raises(AgentTokenError, match="malformed"):
        agent_token.verify(key, "not-a-token", NOW)


def test_an_attempt_scoped_token_of_the_old_kind_is_not_a_machine_token():
    key = agent_token.signing_key(API_TOKEN)
    claims = f"job-0123456789ab|2|{int((NOW + timedelta(hours=1)).timestamp())}".encode()
    old = f"{agent_token._b64(claims)}.{agent_token._b64(hmac.new(key, claims, hashlib.sha256).digest())}"
    with pytest.raises(AgentTokenError, match="not a machine token"):
        agent_token.verify(key, old, NOW)


def test_user_data_tells_the_agent_its_gpus_and_the_agent_reads_them():
    from scheduler.agent.runner import AgentConfig

    cfg = AgentConfig.from_env(agent_env(render(gpu="A100-80G", gpu_count=8)))
    assert (cfg.gpu, cfg.gpu_count) == ("A100-80G", 8)
    assert cfg.instance_id == INSTANCE and cfg.shutdown_backstop is True


def test_a_machine_whose_agent_never_starts_stops_itself_within_half_an_hour(tmp_path):
    import subprocess

    from scheduler.agent.bootstrap import BOOT_BACKSTOP_MINUTES, STARTED_MARK

    doc = yaml.safe_load(render())
    backstop = next(cmd[2] for cmd in doc["runcmd"] if "never started" in " ".join(cmd))
    assert BOOT_BACKSTOP_MINUTES <= 30 and f"sleep {BOOT_BACKSTOP_MINUTES * 60};" in backstop
    # Run the check itself (without the sleep, with a stand-in shutdown): it fires only without the mark.
    check = backstop.split(";", 1)[1].rsplit(")", 1)[0].replace("shutdown", "echo SHUTDOWN")
    for started in (False, True):
        mark = tmp_path / "agent-started"
        if started:
            mark.touch()
        out = subprocess.run(["sh", "-c", check.replace(STARTED_MARK, str(mark))], capture_output=True, text=True)
        assert ("SHUTDOWN" in out.stdout) is (not started)


def test_user_data_names_the_cloud_a_spot_machine_reads_its_reclaim_notice_from():
    assert "GPUSCHED_AGENT_CLOUD" not in agent_env(render())
    assert agent_env(render(cloud="tencent"))["GPUSCHED_AGENT_CLOUD"] == "tencent"


# --- what the machine installs ---------------------------------------------------------------


def install_script(text: str) -> str:
    doc = yaml.safe_load(text)
    return next(f for f in doc["write_files"] if f["path"] == INSTALL_SCRIPT)["content"]


def pinned_constant(script: str, name: str) -> str:
    line = next(line for line in script.splitlines() if line.startswith(f"{name} = "))
    return ast.literal_eval(line.split(" = ", 1)[1].split("  #")[0])


def test_user_data_never_asks_a_package_index_for_gpusched_by_name():
    pinned = AgentPackage(filename="gpusched-0.1.0-py3-none-any.whl", sha256="ab" * 32, version="0.1.0",
                          url="https://files.example/gpusched-0.1.0-py3-none-any.whl")
    for package in (SERVED, pinned):
        text = render(package=package)
        doc = yaml.safe_load(text)
        script = install_script(text)
        # One pip install in all, in the script, and its target is the downloaded file, by its path.
        assert not any("pip" in " ".join(cmd) for cmd in doc["runcmd"])
        [pip] = [line for line in script.splitlines() if "pip" in line and "install" in line]
        assert pip.strip().endswith('"install", "--quiet", str(WHEEL) + "[agent]"], check=True)')
        assert 'WHEEL = Path(PREFIX, "dist", FILENAME)' in script
        assert pinned_constant(script, "FILENAME") == "gpusched-0.1.0-py3-none-any.whl"
        assert pinned_constant(script, "SHA256") == package.sha256
        assert not re.search(r"install\W+(-\S+\W+)*gpusched\b", text)
        assert ["python3", INSTALL_SCRIPT] in doc["runcmd"]
        # Installed before the unit starts; the backstops are set before either.
        order = [" ".join(cmd) for cmd in doc["runcmd"]]
        install = order.index(f"python3 {INSTALL_SCRIPT}")
        assert install < order.index("systemctl enable --now gpusched-agent.service")
        assert all(i < install for i, cmd in enumerate(order) if "shutdown" in cmd)
        assert len(text.encode()) < 16 * 1024  # AWS and Tencent take at most 16 KB of user-data


def test_the_token_goes_only_to_the_daemon_and_never_into_the_install_script():
    served, pinned_url = install_script(render()), "https://files.example/gpusched-0.1.0-py3-none-any.whl"
    assert pinned_constant(served, "URL") == "https://gpusched.internal:8642/v1/agent/package"
    assert pinned_constant(served, "SEND_TOKEN") is True
    pinned = install_script(render(package=AgentPackage(filename="gpusched-0.1.0-py3-none-any.whl",
                                                        sha256="cd" * 32, version="0.1.0", url=pinned_url)))
    assert pinned_constant(pinned, "URL") == pinned_url and pinned_constant(pinned, "SEND_TOKEN") is False
    token = agent_env(render())["GPUSCHED_AGENT_TOKEN"]
    assert token not in served and token not in pinned  # read from the 0600 env file when it is needed


def test_a_machine_that_boots_nothing_gets_no_install_step():
    doc = yaml.safe_load(render(package=None))
    assert all(f["path"] != INSTALL_SCRIPT for f in doc["write_files"])
    assert not any("pip" in " ".join(cmd) or INSTALL_SCRIPT in cmd for cmd in doc["runcmd"])
    assert ["systemctl", "enable", "--now", "gpusched-agent.service"] in doc["runcmd"]
