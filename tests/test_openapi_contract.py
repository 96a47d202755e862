"""The OpenAPI document is a contract a client can build on: every request body and every answer has an
example that is valid against its own schema, the error `code` enum is exactly the codes the source answers
with, and the typed schemas (events per kind, inbox items, pending calls, the compat report) hold what the
sidecar really answers."""

import ast
from http import HTTPStatus

import pytest
from openapi_schema_validator import OAS30Validator

from sidecar.api.error_codes import DEFAULT_CODES, ERROR_CODES
from sidecar.api.event_schemas import PAYLOADS
from sidecar.domain.errors import answered_kinds
from tests.support import ROOT
from tests.support.api import as_host, as_operator
from tests.support.decisions import INPUT_SCRIPT, body, paused_run

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

# Calls whose first two arguments are an HTTP status and an error code.


def _document(client, token) -> dict:
    answer = client.get("/api/v1/openapi.json", headers=as_operator(token))
    assert answer.status_code == 200
    return answer.get_json()


def _problems(document: dict, schema: dict, value) -> list[str]:
    """How `value` breaks `schema`, whose references (#/components/...) point into the document."""
    validator = OAS30Validator({**schema, "components": document["components"]})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:160]}" for e in validator.iter_errors(value)]


def _named(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _media_types(document: dict):
    """(where, content) of every request body and every answer that has a body."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters" or path.startswith("/api/v1/example"):  # the test plugin's route
                continue
            if "requestBody" in operation:
                yield f"{method.upper()} {path} request", operation["requestBody"]["content"]
            for status, answer in operation["responses"].items():
                if "$ref" in answer:
                    answer = document["components"]["responses"][answer["$ref"].rsplit("/", 1)[-1]]
                if "content" in answer:
                    yield f"{method.upper()} {path} {status}", answer["content"]


def test_every_request_and_answer_has_an_example_valid_against_its_schema(client, operator_token):
    document = _document(client, operator_token)
    missing, invalid, seen = [], [], 0
    for where, content in _media_types(document):
        for media_type, media in content.items():
            shown = [media["example"]] if "example" in media else [e["value"] for e in media.get("examples", {})
                                                                     .values()]
            if not shown:
                missing.append(f"{where} {media_type}")
            for example in shown:
                seen += 1
                invalid += [f"{where} {media_type}: {p}" for p in _problems(document, media["schema"], example)]
    assert not missing, f"without an example: {missing}"
    assert not invalid, "examples that break their schema:\n" + "\n".join(invalid)
    assert seen > 40


def test_an_example_that_breaks_its_schema_is_caught(client, operator_token):
    document = _document(client, operator_token)
    run = document["paths"]["/api/v1/runs/{run_id}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert _problems(document, run["schema"], run["example"]) == []
    assert _problems(document, run["schema"], {**run["example"], "status": "finished"})
    assert _problems(document, run["schema"], {**run["example"], "surprise": 1})


def _raised_in_source() -> set[tuple[int, str]]:
    """(status, code) of every refusal kind (sidecar/domain/errors.py) and of every literal error_body(...)
    in the source (the error handler's own answers)."""
    found = {(kind.http_status, kind.code) for kind in answered_kinds()}
    for path in [*(ROOT / "sidecar").rglob("*.py"), *(ROOT / "compat").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            status, code = node.args[0], node.args[1]
            if name == "error_body" and isinstance(code, ast.Constant) and isinstance(status, ast.Constant):
                found.add((status.value, code.value))
    return found


def test_the_error_code_enum_is_every_code_the_source_answers_with(client, operator_token):
    raised = _raised_in_source()
    assert {(409, "pause_not_pending"), (429, "too_many_streams"), (503, "database_unavailable"),
            (500, "internal_error")} <= raised  # the scan sees views, services and the error handler
    wrong_status = sorted((status, code) for status, code in raised if ERROR_CODES.get(code, (status,))[0] != status)
    assert not wrong_status, f"answered with another status than error_codes.py says: {wrong_status}"
    answered = {code for _, code in raised} | set(DEFAULT_CODES.values())
    assert answered == set(ERROR_CODES), (
        f"not in error_codes.py: {sorted(answered - set(ERROR_CODES))}; "
        f"never answered: {sorted(set(ERROR_CODES) - answered)}")
    enum = _document(client, operator_token)["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
    assert set(enum) == set(ERROR_CODES)


def test_every_error_answer_shows_each_code_of_its_status(client, operator_token):
    responses = _document(client, operator_token)["components"]["responses"]
    for name, answer in responses.items():
        examples = answer.get("content", {}).get("application/json", {}).get("examples", {})
        status = next((s for s, _ in ERROR_CODES.values() if name == HTTPStatus(s).name), None)
        if status is not None:
            assert set(examples) == {c for c, (s, _) in ERROR_CODES.items() if s == status}, name


def test_the_document_has_a_bearer_scheme_and_every_kind_of_event(client, operator_token):
    document = _document(client, operator_token)
    scheme = document["components"]["securitySchemes"]["bearerToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert document["security"] == [{"bearerToken": []}]
    mapping = document["components"]["schemas"]["Event"]["discriminator"]["mapping"]
    assert set(mapping) == set(PAYLOADS)
    typed = {name: document["components"]["schemas"][name]["properties"] for name in ("CompatReport", "InboxItem")}
    assert typed["CompatReport"]["delegation"] == _named("DelegationOffer")
    assert typed["InboxItem"]["pending_calls"]["items"] == _named("PendingCall")


def _events(client, token, run_id) -> list[dict]:
    answer = client.get(f"/api/v1/runs/{run_id}/events", headers=as_host(token))
    assert answer.status_code == 200
    return answer.get_json()["items"]


def test_what_the_sidecar_answers_matches_the_typed_schemas(client, host_token, operator_token, settings):
    """Real runs (one approved, one answered, one cancelled) and the inbox and compat answers, validated
    against the schemas of the document the same app serves: a field the code adds or renames fails here."""
    document = _document(client, operator_token)
    approved, answered = paused_run(settings=settings), paused_run(INPUT_SCRIPT, settings=settings)
    cancelled = paused_run(settings=settings)
    inbox = client.get("/api/v1/inbox", headers=as_host(host_token)).get_json()
    assert len(inbox["items"]) == 3 and _problems(document, _named("Inbox"), inbox) == []
    waiting = client.get(f"/api/v1/runs/{approved}", headers=as_host(host_token)).get_json()
    assert _problems(document, _named("Run"), waiting) == []

    decide = [(approved, body(approved, mode="now")),
              (answered, body(answered, "input", mode="now", input={"page": 4}))]
    for run_id, sent in decide:
        done = client.post(f"/api/v1/runs/{run_id}/decision", json=sent, headers=as_host(host_token))
        assert done.status_code == 200 and done.get_json()["status"] == "completed", done.get_json()
    assert client.post(f"/api/v1/runs/{cancelled}/cancel", headers=as_host(host_token)).status_code == 200

    seen = set()
    for run_id in (approved, answered, cancelled):
        for event in _events(client, host_token, run_id):
            seen.add((event["kind"], event["payload"].get("kind")))
            assert _problems(document, _named("Event"), event) == [], event
    assert {("status", None), ("llm", None), ("tool", None), ("note", None), ("pause", "approval"),
            ("pause", "input"), ("decision", None), ("resume", None)} <= seen
    compat = client.get("/api/v1/compat", headers=as_operator(operator_token)).get_json()
    assert _problems(document, _named("CompatReport"), compat) == []
    assert _problems(document, _named("Event"), {"sequence": 1, "kind": "note", "at": "x", "payload": {"txt": ""}})
