"""The API fuzzed from its own OpenAPI document (schemathesis): every operation, with requests that fit the
document and requests that break it, sent as a host (with an actor), as an operator and without a token.
No answer may be a server error, and every answer must be one the document lists for the operation, with
the documented body. A short seeded run (derandomized: the same cases every time); docs/security.md,
"Fuzzing", says how to run a long one."""

import contextlib
import os

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sidecar.store import tokens
from tests.support.api import ACTOR, app_for, as_operator, settings_for

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Examples per operation and generation mode (positive, negative): a short run in the suite, a long one
# by setting NRLLM_FUZZ_EXAMPLES (docs/security.md).
EXAMPLES = int(os.environ.get("NRLLM_FUZZ_EXAMPLES", "8"))


@pytest.fixture
def fuzz_app(sqlite_url, tmp_path):
    return app_for(settings_for(sqlite_url, tmp_path))


@pytest.fixture
def callers(fuzz_app):
    """The headers of each kind of caller, by name."""
    return {"host": {"Authorization": f"Bearer {tokens.create('fuzz-host', 'host')[0]}"},
            "operator": as_operator(tokens.create("fuzz-operator", "operator")[0]),
            "nobody": {}}


@pytest.fixture
def api_schema(fuzz_app, callers):
    # Generated strings encode as UTF-8 (schemathesis's default codec): no unpaired surrogates, which the
    # body's text checks refuse and their own tests cover.
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", fuzz_app, headers=callers["operator"])


def _fuzz(operation, mode, callers, failures: list[str]) -> None:
    """Send the cases of one operation in one generation mode as every caller; note what fails."""

    @given(operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    def fuzz(case):
        for name, headers in callers.items():
            # A host names its actor; a generated actor header (a bad one too) is sent as it is.
            sent = {"X-Nrllm-Actor": ACTOR, **(case.headers or {}), **headers} if name == "host" else headers
            response = case.call(headers=sent)
            try:
                case.validate_response(response, checks=CHECKS)
            except FailureGroup as failure:
                failures.append(f"{operation.label} ({mode.value}, as {name}): {failure}")
                return

    fuzz()


def test_every_operation_answers_as_documented(api_schema, callers):
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20  # the whole API, not a document that failed to load
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            # Unsatisfiable: nothing in the operation can be made invalid (no parameters, no body).
            with contextlib.suppress(Unsatisfiable):
                _fuzz(operation, mode, callers, failures)
    assert failures == [], "\n\n".join(failures)
