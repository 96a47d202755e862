"""The one errors module: every refusal carries its code and status as data, and the API answers it so
from wherever it is raised."""

import pytest

from sidecar.api.error_codes import DEFAULT_CODES, DESCRIPTIONS, ERROR_CODES, code_statuses
from sidecar.domain import errors
from sidecar.domain.errors import SidecarError, answered_kinds


def test_every_refusal_says_its_code_and_a_client_error_status():
    kinds = answered_kinds()
    assert len(kinds) >= 20
    for kind in kinds:
        assert kind.code != "internal_error" and kind.code.islower(), kind
        assert 400 <= kind.http_status < 500 or kind.code == "database_unavailable", kind


def test_a_code_means_one_status():
    statuses: dict[str, set[int]] = {}
    for kind in answered_kinds():
        statuses.setdefault(kind.code, set()).add(kind.http_status)
    for status, code in DEFAULT_CODES.items():
        if code in statuses and status not in (415,):  # 415 is answered as a malformed body, by its own status
            statuses[code].add(status)
    assert {code: s for code, s in statuses.items() if len(s) > 1} == {}


def test_every_code_has_a_description_and_takes_its_status_from_its_kind():
    """The API's list of codes (sidecar/api/error_codes.py) writes no status of a kind again: a new kind
    without a description, or a description left behind by a code that is gone, fails here."""
    answered = code_statuses()
    assert {kind.code for kind in answered_kinds()} <= set(answered)
    assert sorted(set(answered) - set(DESCRIPTIONS)) == [], "codes without a description"
    assert sorted(set(DESCRIPTIONS) - set(answered)) == [], "descriptions of codes nothing answers"
    assert all(DESCRIPTIONS.values())
    for kind in answered_kinds():
        assert ERROR_CODES[kind.code][0] == kind.http_status, kind
    assert ERROR_CODES["internal_error"][0] == SidecarError.http_status == 500
    assert ERROR_CODES["too_many_requests"][0] == 429  # an error of HTTP itself, not a kind


def test_every_error_class_of_the_sidecar_is_in_the_errors_module():
    """Kinds defined elsewhere would escape the one mapping; the private signals of a module (a leading
    underscore) and the errors plugins and remote agents' clients see stay where they are used."""
    import ast

    from tests.support import ROOT

    allowed_elsewhere = {"AddressRefused", "ProviderError", "ToolError", "RemoteError", "Unreachable",
                         "Impossible", "UnusableSchema", "PluginLoadError", "PauseTaken", "ReadTimedOut",
                         "LoginRefused", "NotJson"}  # the console's forms: their fields, never an answer's code
    found = []
    for path in (ROOT / "sidecar").rglob("*.py"):
        if path == ROOT / "sidecar" / "domain" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(base, "id", getattr(base, "attr", "")).endswith(("Error", "Exception"))
                    or getattr(base, "id", "") in {k.__name__ for k in answered_kinds()}
                    for base in node.bases) and not node.name.startswith("_") and node.name not in allowed_elsewhere:
                found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert found == []


@pytest.mark.parametrize("kind", answered_kinds(), ids=lambda kind: kind.__name__)
def test_the_api_answers_each_refusal_in_the_error_shape(kind):
    from flask import Flask

    from sidecar.api.errors import SidecarApi

    app = Flask("refusals")
    app.config.update(API_TITLE="t", API_VERSION="1", OPENAPI_VERSION="3.0.3")
    SidecarApi(app)

    @app.get("/refuse")
    def refuse():
        raise kind("because", {"field": ["Wrong."]}, headers={"Retry-After": "5"})

    answer = app.test_client().get("/refuse")
    assert answer.status_code == kind.http_status
    assert answer.json == {"code": kind.code, "message": "because", "errors": {"field": ["Wrong."]}}
    assert answer.headers["Retry-After"] == "5"


def test_a_fault_of_the_sidecar_is_a_500_not_a_refusal():
    from flask import Flask

    from sidecar.api.errors import SidecarApi

    app = Flask("faults")
    app.config.update(API_TITLE="t", API_VERSION="1", OPENAPI_VERSION="3.0.3")
    SidecarApi(app)

    @app.get("/fault")
    def fault():
        raise errors.StatusNotWritable("running", "no compatibility gate is installed in this process")

    answer = app.test_client().get("/fault")
    assert (answer.status_code, answer.json["code"]) == (500, "internal_error")
    assert issubclass(errors.StatusNotWritable, SidecarError)
