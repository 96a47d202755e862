"""Bad requests get the documented status and code, never a 500, and write nothing; every route but
health needs a token."""

import http.client
import json
import re
import uuid
from urllib.parse import urlparse

import pytest
from werkzeug.routing import UUIDConverter

from sidecar.store import runs, tokens
from tests.support.api import ACTOR, as_host, as_operator, row_counts

RUN = "{run}"  # replaced by a run of ACTOR
GOOD_BODY = {"input": "hello"}


def _deep(levels: int, inside: str = "") -> str:
    return '{"input": "x", "tools": ' + "[" * levels + inside + "]" * levels + "}"


# (name, method, path, who, body, expected status, expected code, field expected in errors)
# who: "host", "operator", "host-no-actor", "none", "bad", "revoked"; body: dict (as JSON), str/bytes (raw)
CASES = [
    # authentication
    ("no token", "POST", "/api/v1/runs", "none", GOOD_BODY, 401, "unauthenticated", None),
    ("unknown token", "GET", f"/api/v1/runs/{RUN}", "bad", None, 401, "unauthenticated", None),
    ("revoked token", "POST", "/api/v1/runs", "revoked", GOOD_BODY, 401, "unauthenticated", None),
    ("revoked token, list", "GET", "/api/v1/runs", "revoked", None, 401, "unauthenticated", None),
    ("basic scheme", "GET", "/api/v1/runs", "basic", None, 401, "unauthenticated", None),
    ("no token, metrics", "GET", "/metrics", "none", None, 401, "unauthenticated", None),
    # roles and actor
    ("operator creates", "POST", "/api/v1/runs", "operator", GOOD_BODY, 403, "forbidden_role", None),
    ("host scrapes metrics", "GET", "/metrics", "host", None, 403, "forbidden_role", None),
    ("no actor, create", "POST", "/api/v1/runs", "host-no-actor", GOOD_BODY, 400, "actor_required", None),
    ("no actor, list", "GET", "/api/v1/runs", "host-no-actor", None, 400, "actor_required", None),
    ("no actor, get", "GET", f"/api/v1/runs/{RUN}", "host-no-actor", None, 400, "actor_required", None),
    ("no actor, events", "GET", f"/api/v1/runs/{RUN}/events", "host-no-actor", None, 400, "actor_required", None),
    ("no actor, cancel", "POST", f"/api/v1/runs/{RUN}/cancel", "host-no-actor", None, 400, "actor_required", None),
    ("actor too long", "GET", "/api/v1/runs", "host-long-actor", None, 422, "validation_failed", "X-Nrllm-Actor"),
    # bodies that are not a JSON object
    ("malformed JSON", "POST", "/api/v1/runs", "host", '{"input": ', 400, "malformed_request", None),
    ("JSON array", "POST", "/api/v1/runs", "host", '["input"]', 400, "malformed_request", None),
    ("JSON string", "POST", "/api/v1/runs", "host", '"input"', 400, "malformed_request", None),
    ("JSON null", "POST", "/api/v1/runs", "host", "null", 400, "malformed_request", None),
    ("empty body", "POST", "/api/v1/runs", "host", "", 400, "malformed_request", None),
    ("NaN", "POST", "/api/v1/runs", "host", '{"input": "x", "budget": {"max_cost": NaN}}', 400,
     "malformed_request", None),
    ("bad UTF-8", "POST", "/api/v1/runs", "host", b'{"input": "\xff\xfe"}', 400, "malformed_request", None),
    ("nested too deep", "POST", "/api/v1/runs", "host", _deep(100), 400, "malformed_request", None),
    # The limit is 64 levels: the object and 63 lists in it are read (and refused by the schema); a value
    # inside the 64th container is one level too deep.
    ("nested to the limit", "POST", "/api/v1/runs", "host", _deep(63), 422, "validation_failed", "tools.0"),
    ("nested past the limit", "POST", "/api/v1/runs", "host", _deep(64), 400, "malformed_request", None),
    ("a value past the limit", "POST", "/api/v1/runs", "host", _deep(63, inside='"a"'), 400, "malformed_request",
     None),
    ("nested beyond the parser", "POST", "/api/v1/runs", "host", _deep(100_000), 400, "malformed_request", None),
    ("over the limit", "POST", "/api/v1/runs", "host", '{"input": "' + "x" * (1024 * 1024) + '"}', 413,
     "too_large", None),
    ("over the limit, cancel", "POST", f"/api/v1/runs/{RUN}/cancel", "host", "x" * (1024 * 1024 + 1), 413,
     "too_large", None),
    # fields
    ("missing input", "POST", "/api/v1/runs", "host", {"origin": "x"}, 422, "validation_failed", "input"),
    ("empty input", "POST", "/api/v1/runs", "host", {"input": ""}, 422, "validation_failed", "input"),
    ("input not a string", "POST", "/api/v1/runs", "host", {"input": 42}, 422, "validation_failed", "input"),
    ("unknown field", "POST", "/api/v1/runs", "host", {"input": "x", "bogus": 1}, 422, "validation_failed",
     "bogus"),
    ("unknown provider", "POST", "/api/v1/runs", "host", {"input": "x", "provider": "gpt-9000"}, 422,
     "validation_failed", "provider"),
    ("unknown tool", "POST", "/api/v1/runs", "host", {"input": "x", "tools": ["echo", "rm_rf"]}, 422,
     "validation_failed", "tools"),
    ("integer as string", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max_iterations": "5"}},
     422, "validation_failed", "budget.max_iterations"),
    ("integer as boolean", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max_tokens": True}},
     422, "validation_failed", "budget.max_tokens"),
    ("integer too big", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max_bytes": 10**30}},
     422, "validation_failed", "budget.max_bytes"),
    ("fractional integer", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max_delegations": 1.5}},
     422, "validation_failed", "budget.max_delegations"),
    ("infinite deadline", "POST", "/api/v1/runs", "host", '{"input": "x", "budget": {"deadline_seconds": 1e400}}',
     422, "validation_failed", "budget.deadline_seconds"),
    ("enormous deadline", "POST", "/api/v1/runs", "host", '{"input": "x", "budget": {"deadline_seconds": 1'
     + "0" * 400 + "}}", 422, "validation_failed", "budget.deadline_seconds"),
    ("negative cost", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max_cost": -1}}, 422,
     "validation_failed", "budget.max_cost"),
    ("unknown budget field", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max_pages": 1}}, 422,
     "validation_failed", "budget.max_pages"),
    ("budget not an object", "POST", "/api/v1/runs", "host", {"input": "x", "budget": 5}, 422,
     "validation_failed", "budget"),
    ("bad on_denial", "POST", "/api/v1/runs", "host", {"input": "x", "on_denial": "maybe"}, 422,
     "validation_failed", "on_denial"),
    ("tools not a list", "POST", "/api/v1/runs", "host", {"input": "x", "tools": "echo"}, 422,
     "validation_failed", "tools"),
    ("origin too long", "POST", "/api/v1/runs", "host", {"input": "x", "origin": "o" * 256}, 422,
     "validation_failed", "origin"),
    ("turn with both kinds", "POST", "/api/v1/runs", "host",
     {"input": "x", "script": [{"content": "a", "tool_calls": [{"id": "c", "name": "echo"}]}]}, 422,
     "validation_failed", "script.0"),
    ("tool call without name", "POST", "/api/v1/runs", "host",
     {"input": "x", "script": [{"tool_calls": [{"id": "c"}]}]}, 422, "validation_failed",
     "script.0.tool_calls.0.name"),
    ("script for another provider", "POST", "/api/v1/runs", "host",
     {"input": "x", "provider": "openai", "script": [{"content": "a"}]}, 422, "validation_failed", "script"),
    ("key too long", "POST", "/api/v1/runs", "host-long-key", GOOD_BODY, 422, "validation_failed",
     "Idempotency-Key"),
    # query strings
    ("limit zero", "GET", "/api/v1/runs?limit=0", "host", None, 422, "validation_failed", "limit"),
    ("limit not a number", "GET", "/api/v1/runs?limit=ten", "host", None, 422, "validation_failed", "limit"),
    ("unknown status", "GET", "/api/v1/runs?status=sleeping", "operator", None, 422, "validation_failed", "status"),
    ("forged cursor", "GET", "/api/v1/runs?cursor=bm90LWEtY3Vyc29y", "host", None, 422, "validation_failed",
     "cursor"),
    ("negative after", "GET", f"/api/v1/runs/{RUN}/events?after=-1", "host", None, 422, "validation_failed",
     "after"),
    ("after not a number", "GET", f"/api/v1/runs/{RUN}/events?after=x", "host", None, 422, "validation_failed",
     "after"),
    # the NUL character: valid JSON and URL text, but no PostgreSQL text column can hold it
    ("NUL in input", "POST", "/api/v1/runs", "host", {"input": "a\x00b"}, 422, "validation_failed", "input"),
    ("NUL in origin", "POST", "/api/v1/runs", "host", {"input": "x", "origin": "o\x00"}, 422, "validation_failed",
     "origin"),
    ("NUL in a script", "POST", "/api/v1/runs", "host", {"input": "x", "script": [{"content": "\x00"}]}, 422,
     "validation_failed", "script.0.content"),
    ("NUL in a key", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"max\x00": 1}}, 422,
     "validation_failed", None),
    ("NUL in a query", "GET", "/api/v1/runs?owner=a%00b", "operator", None, 422, "validation_failed", "owner"),
    ("NUL in a path", "PUT", "/api/v1/actors/a%00b/grants", "host", {"grants": []}, 422, "validation_failed",
     "actor"),
    ("NUL in a consumer", "PUT", "/api/v1/consumers/a%00b", "host", {"version": "1.0.0"}, 422,
     "validation_failed", "name"),
    ("NUL in the actor", "GET", "/api/v1/runs", "host-nul-actor", None, 422, "validation_failed", "X-Nrllm-Actor"),
    # an unpaired surrogate (a lone \ud800 escape): valid JSON, but no database driver can encode it
    ("surrogate in input", "POST", "/api/v1/runs", "host", {"input": "a\ud800"}, 422, "validation_failed", "input"),
    ("surrogate as raw bytes", "POST", "/api/v1/runs", "host", b'{"input": "a\xed\xa0\x80"}', 422,
     "validation_failed", "input"),
    ("surrogate in origin", "POST", "/api/v1/runs", "host", {"input": "x", "origin": "\udfff"}, 422,
     "validation_failed", "origin"),
    ("surrogate in a key", "POST", "/api/v1/runs", "host", {"input": "x", "budget": {"\ud800": 1}}, 422,
     "validation_failed", None),
    ("surrogate in a consumer's version", "PUT", "/api/v1/consumers/typo3", "host", {"version": "1.\ud800"}, 422,
     "validation_failed", "version"),
    ("surrogate in a grant's workspace", "PUT", "/api/v1/actors/be_user:9/grants", "host",
     {"workspace": "w\ud800", "grants": ["agent:approve"]}, 422, "validation_failed", "workspace"),
    ("surrogate in an agent's auth value", "POST", "/api/v1/remote-agents", "operator",
     {"name": "research", "url": "http://8.8.8.8/", "auth": {"header": "X-Key", "value": "k\udc00"}}, 422,
     "validation_failed", "auth.value"),
    # ids
    ("malformed id", "GET", "/api/v1/runs/not-a-uuid", "host", None, 404, "not_found", None),
    ("malformed id, events", "GET", "/api/v1/runs/123/events", "operator", None, 404, "not_found", None),
    ("malformed id, cancel", "POST", "/api/v1/runs/zzzz/cancel", "host", None, 404, "not_found", None),
    ("unknown id", "GET", f"/api/v1/runs/{uuid.uuid4()}", "operator", None, 404, "not_found", None),
    ("unknown id, cancel", "POST", f"/api/v1/runs/{uuid.uuid4()}/cancel", "host", None, 404, "not_found", None),
    ("another actor's run", "GET", f"/api/v1/runs/{RUN}", "host-other-actor", None, 404, "not_found", None),
    ("another actor's events", "GET", f"/api/v1/runs/{RUN}/events", "host-other-actor", None, 404, "not_found",
     None),
    ("another actor's cancel", "POST", f"/api/v1/runs/{RUN}/cancel", "host-other-actor", None, 404, "not_found",
     None),
    ("unknown route", "GET", "/api/v1/nothing-here", "host", None, 404, "not_found", None),
    ("wrong method", "DELETE", f"/api/v1/runs/{RUN}", "host", None, 405, "method_not_allowed", None),
]


@pytest.fixture
def revoked_token(database_url):
    plaintext, info = tokens.create("revoked-test", "host")
    tokens.revoke(info.name)
    return plaintext


def _headers(who: str, host_token: str, operator_token: str, revoked_token: str) -> dict:
    return {
        "none": {},
        "bad": as_host("nrllm_not-a-token"),
        "basic": {"Authorization": f"Basic {host_token}", "X-Nrllm-Actor": ACTOR},
        "revoked": as_host(revoked_token),
        "host": as_host(host_token),
        "host-no-actor": as_host(host_token, actor=None),
        "host-other-actor": as_host(host_token, actor="be_user:8"),
        "host-long-actor": as_host(host_token, actor="a" * 256),
        "host-nul-actor": as_host(host_token, actor="a\x00b"),
        "host-long-key": as_host(host_token, **{"Idempotency-Key": "k" * 256}),
        "operator": as_operator(operator_token),
    }[who]


@pytest.mark.parametrize(("name", "method", "path", "who", "body", "status", "code", "field"), CASES,
                         ids=[case[0] for case in CASES])
def test_bad_request_gets_its_code_and_writes_nothing(
    client, host_token, operator_token, revoked_token, name, method, path, who, body, status, code, field
):
    run_id = runs.create_run(ACTOR, "an existing run")
    headers = _headers(who, host_token, operator_token, revoked_token)
    kwargs = {"json": body} if isinstance(body, dict) else {"data": body, "content_type": "application/json"}
    before = row_counts()
    response = client.open(path.replace(RUN, run_id), method=method, headers=headers, **kwargs)
    assert (response.status_code, response.json.get("code")) == (status, code), response.json
    assert set(response.json) <= {"code", "message", "errors"} and response.json["message"]
    if field is not None:
        assert field in response.json["errors"], response.json
        assert all(isinstance(v, list) for v in response.json["errors"].values()), "errors must be flat"
    assert row_counts() == before, "a refused request wrote something"


def test_a_chunked_body_over_the_limit_is_413_on_a_real_server(live_server, host_token):
    url = urlparse(live_server)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    before = row_counts()

    def chunks():
        yield b'{"input": "'
        for _ in range(1100):
            yield b"x" * 1024
        yield b'"}'

    conn.request("POST", "/api/v1/runs", body=chunks(), encode_chunked=True,
                 headers={**as_host(host_token), "Content-Type": "application/json"})
    response = conn.getresponse()
    body = json.loads(response.read())
    assert (response.status, body["code"]) == (413, "too_large"), body
    assert row_counts() == before


@pytest.mark.parametrize("public_metrics, public_docs", [(False, False), (True, True)])
def test_every_route_needs_a_token_but_health(app, public_metrics, public_docs):
    """Walks the URL map: any route that answers without a token (health aside) fails this test.

    The OpenAPI document and the docs page (with its files) are open unless NRLLM_PUBLIC_DOCS=0
    (docs/api-choices.md). /metrics is open only when NRLLM_METRICS_PUBLIC=1. POST /api/v1/push takes no
    bearer token but its delegation's token: without one it is 401 all the same (only its OPTIONS answers).
    The console's pages take a session instead: without one they send the browser to the login form (which,
    with the console's files, is all that is open).
    """
    settings = app.config["NRLLM_SETTINGS"]
    app.config["NRLLM_SETTINGS"] = type(settings)(**{**settings.__dict__, "metrics_public": public_metrics,
                                                      "public_docs": public_docs})
    open_endpoints = {"health.Health"} | ({"metrics.Metrics"} if public_metrics else set())
    open_endpoints |= {"docs.openapi_json", "docs.page", "docs.asset"} if public_docs else set()
    client = app.test_client()
    checked = 0
    for rule in app.url_map.iter_rules():
        path = _sample_path(rule)
        for method in rule.methods:
            response = client.open(path, method=method, data=b"{}", content_type="application/json")
            checked += 1
            if rule.endpoint.startswith("console."):
                if rule.endpoint in ("console.login", "console.static_file"):
                    assert response.status_code in (200, 404, 422), (method, path, response.status_code)
                else:
                    assert response.status_code == 302, (method, path, response.status_code)
                    assert response.headers["Location"].startswith("/console/login?")
            elif rule.endpoint in open_endpoints or (rule.endpoint == "push.PushNotification" and method == "OPTIONS"):
                # The sample file name "x" is no file of the docs page: 404, which is not a 401.
                unknown_file = rule.endpoint == "docs.asset" and response.status_code == 404
                assert response.status_code < 400 or unknown_file, (method, path, response.status_code)
            else:
                assert response.status_code == 401, (method, path, response.status_code)
                assert method == "HEAD" or response.json["code"] == "unauthenticated"
    assert checked >= 15, "the URL map walk found too few routes"


def _sample_path(rule) -> str:
    """The rule with a sample value for each variable: a UUID where the rule wants one, else "x"."""

    def sample(match):
        converter = rule._converters[match.group(1)]
        return str(uuid.uuid4()) if isinstance(converter, UUIDConverter) else "x"

    return re.sub(r"<(?:[^<>:]+:)?([^<>]+)>", sample, rule.rule)
