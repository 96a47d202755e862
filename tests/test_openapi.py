"""The OpenAPI document the sidecar serves is a valid OpenAPI 3.0 document: every reference resolves and
every pattern is a regex of the language OpenAPI names (ECMA-262), so clients and fuzzers can load it."""

import pytest
from openapi_spec_validator import OpenAPIV30SpecValidator

from tests.support.api import as_operator


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_served_openapi_document_validates(client, operator_token):
    answer = client.get("/api/v1/openapi.json", headers=as_operator(operator_token))
    assert answer.status_code == 200
    document = answer.get_json()
    problems = [f"{'/'.join(map(str, error.absolute_path))}: {error.message[:200]}"
                for error in OpenAPIV30SpecValidator(document).iter_errors()]
    assert problems == []
    # The push webhook's answers, the operation whose missing response made the document invalid.
    assert set(document["paths"]["/api/v1/push"]["post"]["responses"]) >= {"204", "400", "401", "404", "413"}
    # No catch-all: every answer is listed, health's 503 (with the health body) too.
    operations = [op for path in document["paths"].values() for op in path.values() if "responses" in op]
    assert not [op for op in operations if "default" in op["responses"]]
    health = document["paths"]["/api/v1/health"]["get"]["responses"]
    body_of = {status: health[status]["content"]["application/json"]["schema"] for status in ("200", "503")}
    assert body_of["503"] == body_of["200"]
