"""User-data carries no long-lived secret; the agent token works for one (job, attempt) only, briefly."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import yaml

from scheduler.agent import tokens as agent_token
from scheduler.agent.bootstrap import user_data_for
from scheduler.agent.tokens import AgentTokenError

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
API_TOKEN = "daemon-admin-token-5f2c9a8e7b6d4c3a"
CLOUD_SECRETS = ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "LTAI5tFakeAlibabaSecret0123", "AKIDFakeTencentSecret9876"]


def render(**kw) -> str:
    return user_data_for("https://gpusched.internal:8642", API_TOKEN, "job-0123456789ab", 2, NOW, 3.0, **kw)


def test_user_data_is_cloud_config_that_starts_the_agent():
    text = render(resume_from="s3://bucket/runs/helmet/weights/last.pt")
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")
    assert env["permissions"] == "0600"
    assert "GPUSCHED_AGENT_JOB=job-0123456789ab" in env["content"]
    assert "GPUSCHED_AGENT_ATTEMPT=2" in env["content"]
    assert "GPUSCHED_AGENT_RESUME=s3://bucket/runs/helmet/weights/last.pt" in env["content"]
    assert ["systemctl", "enable", "--now", "gpusched-agent.service"] in doc["runcmd"]
    assert any("shutdown -h +" in " ".join(cmd) for cmd in doc["runcmd"])


def test_user_data_carries_no_long_lived_secret():
    text = render()
    assert API_TOKEN not in text
    for secret in CLOUD_SECRETS:
        assert secret not in text
    assert "AWS_SECRET" not in text and "ACCESS_KEY" not in text.upper().replace("GPUSCHED_AGENT_", "")


def test_agent_token_is_scoped_to_its_job_and_attempt_and_expires():
    doc = yaml.safe_load(render())
    env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")["content"]
    token = next(line.split("=", 1)[1] for line in env.splitlines() if line.startswith("GPUSCHED_AGENT_TOKEN="))
    key = agent_token.signing_key(API_TOKEN)
    assert agent_token.verify(key, token, NOW + timedelta(hours=1)) == ("job-0123456789ab", 2)
    with pytest.raises(AgentTokenError, match="expired"):
        agent_token.verify(key, token, NOW + timedelta(days=2))
    with pytest.raises(AgentTokenError, match="signature"):
        agent_token.verify(agent_token.signing_key("another-daemon-token-xyz"), token, NOW)
    claims, sig = token.split(".")
    forged = agent_token._b64(agent_token._unb64(claims).replace(b"job-0123456789ab|2", b"job-0123456789ab|3"))
    with pytest.raises(AgentTokenError):
        agent_token.verify(key, f"{forged}.{sig}", NOW)
    with pytest.raises(AgentTokenError, match="malformed"):
        agent_token.verify(key, "not-a-token", NOW)


def test_user_data_tells_the_agent_its_gpus_and_the_agent_reads_them():
    from scheduler.agent.runner import AgentConfig

    doc = yaml.safe_load(render(gpu="A100-80G", gpu_count=8))
    env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")["content"]
    values = dict(line.split("=", 1) for line in env.splitlines())
    cfg = AgentConfig.from_env(values)
    assert (cfg.gpu, cfg.gpu_count) == ("A100-80G", 8)


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
