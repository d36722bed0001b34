"""deploy/ does what it says: read as the tools would, without them (kubectl, docker, promtool, Grafana).

Where a checker is installed (promtool, systemd-analyze, hadolint) the test runs it too; .ci/run does the same.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from scheduler.app.api import create_app
from scheduler.app.daemon import Daemon
from scheduler.clock import SimClock
from scheduler.errors import SettingsError
from scheduler.logs import forget_secrets
from scheduler.settings import Settings, load_settings
from scheduler.store.database import Store
from tests.conftest import SIM_START

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
API_PORT = 8642


def k8s() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "k8s.yaml").read_text()) if d]
    by = {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}
    assert len(by) == len(docs), "two objects of one kind with one name"
    return by


def _daemon_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    objs = k8s()
    [workload] = [o for o in objs.values() if o["kind"] in ("Deployment", "StatefulSet")]
    return workload, workload["spec"]["template"]


def test_k8s_probes_split_liveness_from_readiness() -> None:
    _, pod = _daemon_pod()
    [c] = pod["spec"]["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"  # the process: no database in it
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {p["containerPort"] for p in c["ports"]} == {API_PORT}


def test_k8s_runs_two_replicas_kept_by_a_disruption_budget() -> None:
    workload, pod = _daemon_pod()
    assert workload["spec"]["replicas"] == 2
    [pdb] = [o for o in k8s().values() if o["kind"] == "PodDisruptionBudget"]
    assert pdb["apiVersion"] == "policy/v1"
    assert 1 <= pdb["spec"]["minAvailable"] < workload["spec"]["replicas"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # Two pods cannot share one ReadWriteOnce volume: each replica claims its own.
    assert not any(o["kind"] == "PersistentVolumeClaim" for o in k8s().values())
    if workload["kind"] == "StatefulSet":
        assert workload["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        assert f"Service/{workload['spec']['serviceName']}" in k8s()


def test_k8s_lets_agents_in_through_the_api_port_only() -> None:
    _, pod = _daemon_pod()
    [policy] = [o for o in k8s().values() if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = policy["spec"]["ingress"]
    assert rules and all(r["ports"] == [{"port": API_PORT, "protocol": "TCP"}] for r in rules)
    # Agents run on cloud machines, outside the cluster: some rule must admit addresses, not only pods.
    assert any("ipBlock" in peer for r in rules for peer in r["from"])


def test_k8s_takes_secrets_from_secrets_and_runs_as_non_root() -> None:
    _, pod = _daemon_pod()
    [c] = pod["spec"]["containers"]
    from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"]
                   if "secretKeyRef" in e.get("valueFrom", {})}
    assert set(from_secret) >= {"GPUSCHED_API_TOKEN", "GPUSCHED_DATABASE_URL"}
    assert all(f"Secret/{ref['name']}" in k8s() for ref in from_secret.values())
    assert any(src.get("secretRef", {}).get("name") == "gpusched-clouds" for src in c["envFrom"])
    assert "GPUSCHED_API_TOKEN" not in k8s()["ConfigMap/gpusched"]["data"]
    sc = pod["spec"]["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_every_deploy_path_refuses_to_start_without_a_chosen_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    assert k8s()["ConfigMap/gpusched"]["data"]["GPUSCHED_BACKEND"] == ""
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    backend = compose["services"]["gpusched"]["environment"]["GPUSCHED_BACKEND"]
    assert re.fullmatch(r"\$\{GPUSCHED_BACKEND:\?[^}]+\}", backend), "compose must require it, with no default"
    assert re.search(r"^\s+GPUSCHED_BACKEND=\s*$", (DEPLOY / "Dockerfile").read_text(), re.M)
    env_example = ROOT / ".env.example"
    assert re.search(r"^GPUSCHED_BACKEND=$", env_example.read_text(), re.M)
    # What the daemon does with an empty backend: it refuses, naming the setting and the two choices.
    for name in [n for n in os.environ if n.startswith("GPUSCHED_")]:
        monkeypatch.delenv(name)
    with pytest.raises(SettingsError) as refused:
        load_settings(_env_file=str(env_example))
    assert "GPUSCHED_BACKEND" in refused.value.message and "live" in refused.value.message
    assert "sandbox" in refused.value.message
    # ... and that is the only thing wrong with the example file.
    assert load_settings(_env_file=str(env_example), backend="sandbox").backend == "sandbox"


def test_the_image_carries_the_cloud_sdks_and_runs_as_a_non_root_user() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    installs = re.findall(r"pip install [^\n]*", text)
    assert any("clouds" in line and "postgres" in line for line in installs), installs
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert re.search(r"/livez", text)  # the image's HEALTHCHECK is liveness, like the k8s probe


_PUBLIC_NAME = re.compile(r"pip3? install\s+(--\S+\s+)*['\"]?gpusched(?![-\w.])")


def test_install_hints_name_the_projects_own_wheel_or_checkout() -> None:
    """`pip install gpusched` fetches an unrelated project from the public index: no hint may say it, except
    to warn against it."""
    files = [ROOT / "README.md", ROOT / ".env.example", *DEPLOY.rglob("*"), *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "scheduler").rglob("*.py"), *(ROOT / "providers").rglob("*.py")]
    bad = []
    for f in files:
        if not f.is_file() or f.suffix in (".json", ".csv"):
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if _PUBLIC_NAME.search(line) and not re.search(r"\b(never|not)\b", line):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


# --- Prometheus rules and the Grafana dashboard name series /metrics really has -------------------


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name /metrics can carry (families and their _total / _bucket / _count / _sum)."""
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'gpusched.db'}")
    store.migrate()
    clock = SimClock(SIM_START)
    settings = Settings(_env_file=None, api_token=SecretStr("deploy-test-token-0123456789"),  # type: ignore[call-arg]
                        team_budgets={"vision-qa": "100 CNY"})
    daemon = Daemon(settings, store, clock, tick=lambda: None, monthly_report=lambda: None)
    daemon.run_tick()
    with TestClient(create_app(store, clock, settings, metrics=daemon.metrics)) as c:
        text = c.get("/metrics").text
    forget_secrets()
    store.dispose()
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names |= {family.name + suffix for suffix in ("_total", "_bucket", "_count", "_sum")}
    return names


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _dashboard_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "gpusched-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def test_alert_rules_cover_budget_tick_orphan_and_leader_and_name_real_series(exposed: set[str]) -> None:
    rules = _rules()
    names = {r["alert"] for r in rules}
    assert {"GpuschedBudgetCrossed", "GpuschedTickFailing", "GpuschedOrphanFound", "GpuschedLeaderLost"} <= names
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning") and r["annotations"]["summary"], r["alert"]
        unknown = set(re.findall(r"gpusched_\w+", r["expr"])) - exposed
        assert not unknown, f"{r['alert']} reads series /metrics does not have: {unknown}"


def test_dashboard_panels_read_real_series(exposed: set[str]) -> None:
    exprs = _dashboard_exprs()
    assert len(exprs) >= 10
    used = {n for e in exprs for n in re.findall(r"gpusched_\w+", e)}
    assert not used - exposed, f"the dashboard reads series /metrics does not have: {used - exposed}"
    for family in ("gpusched_jobs", "gpusched_queue_wait_seconds_bucket", "gpusched_spend_month",
                   "gpusched_spend_rate_per_hour", "gpusched_reclaims_total", "gpusched_tick_duration_seconds_bucket",
                   "gpusched_cloud_api_errors_total", "gpusched_idle_stops_total", "gpusched_orphans_terminated_total"):
        assert family in used, f"no panel shows {family}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (apt install prometheus)")
def test_promtool_checks_the_rules_runs_their_unit_tests_and_parses_the_dashboards_queries(tmp_path: Path) -> None:
    alerts = DEPLOY / "prometheus"
    for args in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]):
        r = subprocess.run(["promtool", *args], cwd=alerts, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    # The dashboard's queries as recording rules: promtool parses each PromQL expression.
    exprs = [e.replace("$team", ".*") for e in _dashboard_exprs()]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": e}
                                                         for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump(rules))
    r = subprocess.run(["promtool", "check", "rules", "dashboard.yaml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    # The unit runs /opt/gpusched/bin/gpusched, which is not installed here: verify the rest of it.
    true = shutil.which("true") or "/bin/true"
    unit = (DEPLOY / "gpusched.service").read_text().replace("/opt/gpusched/bin/gpusched", true)
    (tmp_path / "gpusched.service").write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "gpusched.service")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
