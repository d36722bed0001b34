"""The API against its published OpenAPI, with generated requests (schemathesis on hypothesis; issue 16).

Every operation in ``/openapi.json`` gets a bounded number of generated requests, valid and invalid
(``FUZZ_EXAMPLES`` each, so the whole run stays well under a minute), sent to the ASGI app in process
with the right token for its route. Each answer must be no 5xx, a status the document lists for that
operation, and a body that matches the schema it gives for that status. The document itself is checked
too: the job file's body is described, and a val job without ``val:`` does not fit its schema.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings
from jsonschema import Draft202012Validator
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from scheduler.agent import tokens as agent_token
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import service
from scheduler.settings import Settings
from scheduler.store.database import Store
from tests.agent.machines import put_on_machine

MACHINE = "inst-00000000fuzz"
ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
TOKEN = "fuzz-" + "k" * 32
FUZZ_EXAMPLES = 30
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _app() -> Any:
    """The API on an in-memory store holding one job, so that generated ids sometimes meet a real one.

    Built at import: schemathesis' pytest integration parametrizes from a schema it has at collection
    (its lazy ``from_fixture`` does not run under pytest 9).
    """
    store = Store("sqlite://")
    store.migrate()
    clock = SimClock(NOW)
    job = parse_job(yaml.safe_load((ROOT / "examples" / "helmet-s-train.yaml").read_text()))
    view = service.submit(store, clock, job, source="helmet.yaml")
    put_on_machine(store, clock, view.id, instance_id=MACHINE)  # so agent routes get past the token
    return create_app(store, clock, Settings(_env_file=None, api_token=SecretStr(TOKEN)))  # type: ignore[call-arg]


APP = _app()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
MACHINE_TOKEN = agent_token.issue(agent_token.signing_key(TOKEN), MACHINE, NOW, timedelta(days=3650))


@schema.parametrize()
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_answer_is_one_the_openapi_promises(case: Any) -> None:
    token = MACHINE_TOKEN if case.path.startswith("/v1/agent/") else TOKEN
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)


# --- the document itself ------------------------------------------------------------------------------


@pytest.fixture
def document() -> dict[str, Any]:
    return APP.openapi()


def test_submit_documents_its_body_as_yaml_or_json_and_every_error(document: dict[str, Any]) -> None:
    op = document["paths"]["/v1/jobs"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) == {"application/json", "application/yaml"}
    assert content["application/json"]["schema"]["required"] == ["spec"]
    assert {"201", "400", "401", "413", "415", "422"} <= set(op["responses"])
    assert op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobFileErrorBody")
    assert {"401", "404"} <= set(document["paths"]["/v1/jobs/{job_id}"]["get"]["responses"])
    assert "HTTPValidationError" not in document["components"]["schemas"]  # FastAPI's 422 is never sent


def _job_validator(document: dict[str, Any]) -> Draft202012Validator:
    """The document's JobFile schema, its references resolved within the document."""
    root = {**document, "$ref": "#/components/schemas/JobFile"}
    return Draft202012Validator(root)


def test_the_job_schema_wants_each_kinds_own_section(document: dict[str, Any]) -> None:
    validator = _job_validator(document)
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        assert not list(validator.iter_errors(yaml.safe_load(example.read_text()))), example.name
    val = yaml.safe_load((ROOT / "examples" / "helmet-val.yaml").read_text())
    without = {k: v for k, v in val.items() if k != "val"}
    assert any("'val' is a required property" in e.message for e in validator.iter_errors(without))
    with_train = {**val, "train": {"epochs": 3}}
    assert list(validator.iter_errors(with_train))
