"""docs/http-api.md keeps up with the code: every path of the OpenAPI document, every error code the API
answers with and every event kind the code writes has its place on the page."""

import re

from sidecar.api.errors import _DEFAULT_CODES
from sidecar.domain.errors import answered_kinds
from tests.helpers import ROOT

pytest_plugins = ["tests.api_support"]

PAGE = (ROOT / "docs" / "http-api.md").read_text()
SOURCES = [p.read_text() for p in (ROOT / "sidecar").rglob("*.py") if p.name != "testing.py"]


def _normalise(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_path_and_method_of_the_openapi_document_is_described(client, operator_token):
    spec = client.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {operator_token}"}).json
    described = _normalise(PAGE)
    missing = [f"{method.upper()} {path}" for path, operations in spec["paths"].items() for method in operations
               if method != "parameters" and not path.startswith("/api/v1/example")  # the test plugin's route
               and f"{method.upper()} {_normalise(path)}" not in described]
    assert not missing, f"docs/http-api.md does not describe {missing}"


def test_every_error_code_is_in_the_table_with_its_status():
    answered = {(kind.http_status, kind.code) for kind in answered_kinds()} | {(500, "internal_error")}
    assert {(403, "not_permitted"), (409, "pause_not_pending"), (409, "digest_mismatch"), (404, "not_found"),
            (503, "database_unavailable")} <= answered
    table = {(int(status), code) for status, code in re.findall(r"^\| (\d{3}) \| `(\w+)` \|", PAGE, re.MULTILINE)}
    assert answered <= table, f"missing from the error table: {sorted(answered - table)}"
    # A bare HTTP error gets the code of its status (a 415 the code of a 400's malformed body, say).
    defaults = set(_DEFAULT_CODES.values())
    assert defaults <= {code for _, code in table}, f"missing: {sorted(defaults - {code for _, code in table})}"


def test_every_event_kind_written_is_described():
    written = {kind for source in SOURCES
               for kind in re.findall(r"events\.(?:append|record)\([^,]+,[^,]+, \"(\w+)\"|\.event\(\"(\w+)\"", source)
               for kind in kind if kind}
    assert {"status", "pause", "decision", "outbound", "budget", "error", "note"} <= written
    described = set(re.findall(r"^\| `(\w+)` \| ", PAGE.split("## Events", 1)[1], re.MULTILINE))
    assert written <= described, f"event kinds missing from docs/http-api.md: {sorted(written - described)}"
