"""The command line's everyday tools, in process (Typer's CliRunner, the app the console script runs):
--version, shell completion, `offers` in one currency cheapest first, `providers check` (the sandbox told
apart, no credential ever printed), GPU names as people type them, --json on the listings, progress bars."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from decimal import Decimal
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from providers.catalog import filter_offers, load_catalog
from scheduler.app import cli

ROOT = Path(__file__).resolve().parents[2]
OK, FAILED, BAD_INPUT = 0, 1, 2


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("GPUSCHED_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env; the data folder is the test's own


def run(*args: str, env: dict[str, str] | None = None, **kw):
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "250", **(env or {})}, **kw)
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


# --- version and completion


def test_version_is_the_installed_packages() -> None:
    r = run("--version")
    assert r.exit_code == OK and r.stdout.strip() == f"gpusched {version('gpusched')}"


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", "complete -o default -F _gpusched_completion gpusched"),
    ("zsh", "#compdef gpusched"),
    ("fish", "complete --command gpusched"),
])
def test_completion_prints_the_script_for_each_shell(shell: str, marker: str) -> None:
    r = run("completion", shell)
    assert r.exit_code == OK and marker in r.stdout and "_GPUSCHED_COMPLETE" in r.stdout


def test_an_unknown_shell_is_a_usage_error() -> None:
    r = run("completion", "powershell-9")
    assert r.exit_code == BAD_INPUT and "bash" in r.stderr


@pytest.mark.parametrize(("words", "cword", "expected"), [
    ("gpusched lo", 1, {"logs"}),
    ("gpusched logs --", 2, {"--follow", "--attempt"}),
    ("gpusched offers --by ", 3, {"on-demand", "spot"}),
    ("gpusched completion ", 2, {"bash", "zsh", "fish"}),
])
def test_the_completion_script_gets_its_answers_from_gpusched(words: str, cword: int, expected: set[str]) -> None:
    """What the bash script asks at each Tab (its _GPUSCHED_COMPLETE protocol), answered by the real app."""
    r = CliRunner().invoke(cli.app, [], prog_name="gpusched",
                           env={"_GPUSCHED_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert r.exit_code == OK
    assert expected <= set(r.stdout.split())


# --- offers


def usd_price(instance_type: str, zone: str) -> Decimal:
    [offer] = [o for o in load_catalog() if o.instance_type == instance_type and o.zone == zone]
    assert offer.on_demand is not None and offer.on_demand.per_hour.currency == "USD"
    return offer.on_demand.per_hour.amount


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()]


def test_offers_are_in_the_report_currency_cheapest_first() -> None:
    r = run("offers", "--provider", "aws")
    assert r.exit_code == OK, r.stderr
    assert "per hour in CNY" in r.stdout and "1 USD = 7.2 CNY" in r.stdout
    rows = table_rows(r.stdout)
    prices = [Decimal(row[5].replace(",", "")) for row in rows if row[5] != "-"]
    assert len(prices) > 10 and prices == sorted(prices)
    g5 = next(row for row in rows if row[2] == "g5.xlarge")
    assert Decimal(g5[5]) == (usd_price("g5.xlarge", g5[1]) * Decimal("7.2")).quantize(Decimal("0.01"))
    usd = run("offers", "--provider", "aws", env={"GPUSCHED_REPORT_CURRENCY": "USD"})
    assert "per hour in USD" in usd.stdout and "CNY" not in usd.stdout


def test_offers_sorted_by_spot() -> None:
    rows = table_rows(run("offers", "--by", "spot", "--provider", "alibaba").stdout)
    spot = [row[6] for row in rows]
    prices = [Decimal(p.replace(",", "")) for p in spot if p != "-"]
    assert prices == sorted(prices) and spot[: len(prices)] == [p for p in spot if p != "-"]  # no price: last


def test_offers_json_is_the_offers_in_the_same_order() -> None:
    r = run("offers", "--gpu", "t4", "--json")
    assert r.exit_code == OK
    offers = json.loads(r.stdout)
    assert offers and {o["gpu"] for o in offers} == {"T4"}
    table = table_rows(run("offers", "--gpu", "t4").stdout)
    assert [(o["provider"], o["zone"], o["instance_type"]) for o in offers] == [tuple(row[:3]) for row in table]


@pytest.mark.parametrize("args", [
    ["--gpu", "H100", "--provider", "alibaba"],
    ["--region", "mars-north-1"],
    ["--gpu", "L40S"],  # known, but no cloud here sells one
])
def test_a_filter_that_matches_nothing_says_so(args: list[str]) -> None:
    r = run("offers", *args)
    assert r.exit_code == BAD_INPUT and r.stdout == ""
    assert r.stderr.startswith("error: no offer matches") and "fix:" in r.stderr


def test_an_unknown_provider_for_offers_names_the_configured_ones() -> None:
    r = run("offers", "--provider", "gcp")
    assert r.exit_code == BAD_INPUT and "alibaba, aws, tencent" in r.stderr


# --- GPU names as people type them


@pytest.mark.parametrize(("typed", "model"), [
    ("A100", "A100-40G"), ("a100", "A100-40G"), ("a100-80gb", "A100-80G"), ("A100-80GB", "A100-80G"),
    ("a10g", "A10G"), ("A10G", "A10G"), ("h100", "H100"), ("H100", "H100"), ("l40s", "L40S"), ("L40S", "L40S"),
])
def test_perf_takes_the_names_job_files_take(typed: str, model: str) -> None:
    r = run("perf", "--gpu", typed, "--model", "yolov9-s", "--json")
    assert r.exit_code == OK, r.stderr
    assert [row["gpu"] for row in json.loads(r.stdout)] == [model]


@pytest.mark.parametrize(("typed", "model"), [
    ("a100", "A100-40G"), ("A100-80gb", "A100-80G"), ("a10G", "A10G"), ("h100", "H100")])
def test_offers_take_the_names_job_files_take(typed: str, model: str) -> None:
    offers = json.loads(run("offers", "--gpu", typed, "--json").stdout)
    assert offers and {o["gpu"] for o in offers} == {model}


JOB = """\
name: coco-{slug}
team: vision-qa
kind: train
model: yolov9-c
data: {{uri: s3://vision-qa-datasets/coco, train_images: 118000, val_images: 5000}}
train: {{epochs: 10, batch: 64}}
resources: {{gpus: [{gpu}], gpu_count: {count}}}
policy: {{capacity: on-demand, deadline: 14d, budget: 500000 CNY}}
"""


@pytest.mark.parametrize(("typed", "model", "count", "instance"), [
    ("A100", "A100-40G", 8, "p4d.24xlarge"),
    ("a100-80gb", "A100-80G", 1, "ecs.gn7e"),
    ("a10g", "A10G", 1, "g5."),
    ("h100", "H100", 8, "p5.48xlarge"),
])
def test_validate_accepts_and_plan_prices_each_spelling(tmp_path: Path, typed: str, model: str, count: int,
                                                        instance: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(slug=model.lower(), gpu=typed, count=count))
    r = run("validate", str(job))
    assert r.exit_code == OK, r.stderr
    r = run("plan", str(job), "--at", "2026-11-02T09:00:00+00:00", "--show", "40")
    assert r.exit_code == OK, r.stderr
    chosen = next(line for line in r.stdout.splitlines() if "→" in line)
    assert f"{count}x {model}" in chosen and instance in chosen


def test_l40s_is_known_but_nobody_here_sells_it(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(slug="l40s", gpu="L40S", count=1))
    assert run("validate", str(job)).exit_code == OK
    r = run("plan", str(job), "--at", "2026-11-02T09:00:00+00:00")
    assert r.exit_code == BAD_INPUT and "refused" in r.stdout and "L40S" in r.stdout
    assert "unknown GPU" not in r.stdout + r.stderr


@pytest.mark.parametrize("command", [["perf", "--gpu"], ["offers", "--gpu"]])
def test_an_unknown_gpu_gets_the_job_files_help(tmp_path: Path, command: list[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(slug="typo", gpu="H10", count=1))
    in_file = run("validate", str(job)).stderr
    r = run(*command, "H10")
    assert r.exit_code == BAD_INPUT
    help_text = "unknown GPU 'H10'; did you mean 'H100'? (known: "
    assert help_text in in_file and help_text in r.stderr


def test_perf_with_an_unknown_model_says_so() -> None:
    """It printed an empty table: no row matched, and nothing said why."""
    r = run("perf", "--model", "yolov9-x")
    assert r.exit_code == BAD_INPUT and r.stdout == ""
    assert "--model: unknown model 'yolov9-x'" in r.stderr and "yolov9-e" in r.stderr
    assert {row["model"] for row in json.loads(run("perf", "--model", "YOLOv9-C", "--json").stdout)} == {"yolov9-c"}


def test_perf_json_rows_are_the_tables() -> None:
    rows = json.loads(run("perf", "--model", "yolov9-c", "--json").stdout)
    assert {r["model"] for r in rows} == {"yolov9-c"} and all(r["source"] == "prior" for r in rows)
    table = table_rows(run("perf", "--model", "yolov9-c").stdout)
    assert [r["gpu"] for r in rows] == [row[1] for row in table]


# --- providers check


def test_providers_check_says_the_sandbox_is_simulated() -> None:
    r = run("providers", "check")
    assert r.exit_code == OK
    lines = r.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["alibaba", "aws", "tencent"]
    assert all("sandbox (simulated, no real cloud)" in line for line in lines)
    checked = json.loads(run("providers", "check", "--json").stdout)
    assert [(c["provider"], c["kind"], c["ok"]) for c in checked] == \
        [("alibaba", "sandbox", True), ("aws", "sandbox", True), ("tencent", "sandbox", True)]


CREDENTIALS = {
    "GPUSCHED_AWS_ACCESS_KEY_ID": "AKIAFAKEKEYID7Q2W3E4R",
    "GPUSCHED_AWS_SECRET_ACCESS_KEY": "awsSecretFake0a1b2c3d4e5f6g7h8i9j0",
    "GPUSCHED_ALIBABA_ACCESS_KEY_ID": "LTAIfakeKeyId5t6y7u8i",
    "GPUSCHED_ALIBABA_ACCESS_KEY_SECRET": "aliSecretFake9o8i7u6y5t",
    "GPUSCHED_TENCENT_SECRET_ID": "AKIDfakeTencentId1q2w3e4r",
    "GPUSCHED_TENCENT_SECRET_KEY": "tcSecretFake4r3e2w1q0p",
}


def assert_no_credential(text: str) -> None:
    for name, value in CREDENTIALS.items():
        assert value not in text, f"{name} printed"


def live_env(**endpoints: str) -> dict[str, str]:
    return {"GPUSCHED_BACKEND": "live", "GPUSCHED_TENCENT_REGIONS": '["ap-guangzhou"]',
            "GPUSCHED_ALIBABA_PROTOCOL": "http", "GPUSCHED_TENCENT_PROTOCOL": "http",
            "GPUSCHED_TENCENT_CURRENCY": "USD", **CREDENTIALS, **endpoints}


@pytest.mark.timeout(120)
def test_a_cloud_that_cannot_be_reached_is_named_without_a_credential() -> None:
    """Port 9 refuses: each SDK's connection error, Alibaba's with its signed URL, is shown; no credential."""
    pytest.importorskip("aliyunsdkcore", reason="the Alibaba SDK is optional: pip install '.[alibaba]'")
    pytest.importorskip("tencentcloud", reason="the Tencent SDK is optional: pip install '.[tencent]'")
    pytest.importorskip("boto3", reason="the AWS SDK is optional: pip install '.[aws]'")
    env = live_env(GPUSCHED_AWS_ENDPOINT_URL="http://127.0.0.1:9", GPUSCHED_ALIBABA_ENDPOINT="127.0.0.1:9",
                   GPUSCHED_TENCENT_ENDPOINT="127.0.0.1:9")
    r = run("providers", "check", env=env)
    assert r.exit_code == FAILED
    lines = r.stdout.splitlines()
    assert [line.split()[:2] for line in lines if line[:1] != " "] == \
        [["FAIL", "alibaba"], ["FAIL", "aws"], ["FAIL", "tencent"]]
    assert "AccessKeyId=***" in r.stdout and "Signature=***" in r.stdout  # the URL is there, masked
    assert "sandbox" not in r.stdout
    assert_no_credential(r.stdout + r.stderr)
    checked = json.loads(run("providers", "check", "--json", env=env).stdout)
    assert {c["kind"] for c in checked} == {"cloud"} and not any(c["ok"] for c in checked)
    assert_no_credential(json.dumps(checked))


@pytest.mark.timeout(120)
def test_a_cloud_that_refuses_the_credentials_is_named_without_them(tmp_path: Path) -> None:
    """The Alibaba and Tencent emulators check signatures: a wrong secret is refused, a right one answers."""
    pytest.importorskip("aliyunsdkcore", reason="the Alibaba SDK is optional: pip install '.[alibaba]'")
    pytest.importorskip("tencentcloud", reason="the Tencent SDK is optional: pip install '.[tencent]'")
    from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
    from providers.emulators.tencent_cvm import TencentCvmEmulator
    from providers.sandbox.provider import SandboxCloud
    from scheduler.clock import SimClock

    clock = SimClock(datetime(2026, 11, 2, tzinfo=timezone.utc))
    ali = AlibabaEcsEmulator(SandboxCloud(clock, filter_offers(load_catalog(), providers=["alibaba"]), seed=1),
                             {CREDENTIALS["GPUSCHED_ALIBABA_ACCESS_KEY_ID"]: "the-right-secret-123"})
    tc = TencentCvmEmulator(SandboxCloud(clock, filter_offers(load_catalog(), providers=["tencent"]), seed=2), clock,
                            {CREDENTIALS["GPUSCHED_TENCENT_SECRET_ID"]: "the-right-secret-456"}, seed=2)
    try:
        env = live_env(GPUSCHED_PROVIDERS="alibaba,tencent", GPUSCHED_ALIBABA_ENDPOINT=ali.endpoint,
                       GPUSCHED_TENCENT_ENDPOINT=tc.endpoint)
        refused = run("providers", "check", env=env)
        assert refused.exit_code == FAILED and refused.stdout.count("FAIL") == 2
        assert "AuthFailed" in refused.stdout
        assert_no_credential(refused.stdout + refused.stderr)
        right = {**env, "GPUSCHED_ALIBABA_ACCESS_KEY_SECRET": "the-right-secret-123",
                 "GPUSCHED_TENCENT_SECRET_KEY": "the-right-secret-456"}
        answered = run("providers", "check", env=right)
        assert answered.exit_code == OK, answered.stdout
        assert answered.stdout.count("reachable;") == 2 and "sandbox" not in answered.stdout
        for secret in ("the-right-secret-123", "the-right-secret-456", *CREDENTIALS.values()):
            assert secret not in answered.stdout + answered.stderr
    finally:
        ali.close()
        tc.close()


# --- progress bars: on stderr, only when asked for or on a terminal


def test_trace_generate_draws_its_bar_only_when_asked(tmp_path: Path) -> None:
    quiet = run("trace", "generate", "--out", str(tmp_path / "a.jsonl"), "--jobs", "30")
    assert quiet.exit_code == OK and "team streams" not in quiet.stderr  # not a terminal: no bar
    shown = run("trace", "generate", "--out", str(tmp_path / "b.jsonl"), "--jobs", "30", "--progress")
    assert shown.exit_code == OK and "trace 2026-11: team streams" in shown.stderr and "9/9" in shown.stderr
    assert "team streams" not in shown.stdout and "wrote" in shown.stdout
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_report_draws_its_bar_only_when_asked(tmp_path: Path) -> None:
    env = {"GPUSCHED_DATA_DIR": str(tmp_path / "data")}
    quiet = run("report", "--month", "2026-11", "--out", str(tmp_path / "a"), env=env)
    assert quiet.exit_code == OK and "report 2026-11" not in quiet.stderr
    shown = run("report", "--month", "2026-11", "--out", str(tmp_path / "b"), "--progress", env=env)
    assert shown.exit_code == OK, shown.stderr
    assert "report 2026-11" in shown.stderr and "6/6" in shown.stderr and "written" in shown.stderr
    assert "pdf:" in shown.stdout and "report 2026-11 " not in shown.stdout
    off = run("report", "--month", "2026-11", "--out", str(tmp_path / "c"), "--no-progress", env=env)
    assert off.exit_code == OK and "report 2026-11" not in off.stderr


@pytest.mark.timeout(300)
def test_demo_draws_its_bar_on_stderr_and_tells_its_story_on_stdout(tmp_path: Path) -> None:
    r = run("demo", "--out", str(tmp_path / "demo"), "--progress")
    assert r.exit_code == OK, r.stderr
    assert "demo: jobs done" in r.stderr and "7/7" in r.stderr
    assert "preempted" in r.stdout and "report (html)" in r.stdout and "demo: jobs done" not in r.stdout
