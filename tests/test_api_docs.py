"""docs/http-api.md keeps up with the code: every path of the OpenAPI document, every error code the API
answers with and every event kind the code writes has its place on the page."""

import re

from sidecar.api.error_codes import ERROR_CODES
from sidecar.api.event_schemas import PAYLOADS
from tests.support import ROOT

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


def test_the_error_table_is_the_list_of_codes():
    # error_codes.py is the one list (tests/test_openapi_contract.py holds it to the source); the page shows
    # each code once, with its status.
    table = {code: int(status) for status, code in re.findall(r"^\| (\d{3}) \| `(\w+)` \|", PAGE, re.MULTILINE)}
    assert table == {code: status for code, (status, _) in ERROR_CODES.items()}


def test_every_event_kind_written_is_described():
    # A kind is written by events.append/record, by a segment's event(), or as a (kind, payload) pair of the
    # events one write describes (events.record_many, leases.fenced_update_with_events).
    written = {kind for source in SOURCES
               for kind in re.findall(r"events\.(?:append|record)\([^,]+,[^,]+, \"(\w+)\"|\.event\(\"(\w+)\"|"
                                      r"\(\"(\w+)\", \{\"", source)
               for kind in kind if kind}
    assert {"status", "pause", "decision", "outbound", "budget", "error", "note"} <= written
    described = set(re.findall(r"^\| `(\w+)` \| ", PAGE.split("## Events", 1)[1], re.MULTILINE))
    assert written <= described, f"event kinds missing from docs/http-api.md: {sorted(written - described)}"
    # The OpenAPI document types the same kinds (api/event_schemas.py), no more and no fewer.
    assert described == set(PAYLOADS), sorted(described ^ set(PAYLOADS))
