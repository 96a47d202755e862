"""/api/v1/docs and /api/v1/openapi.json: served from the sidecar's own files, readable without a token unless
NRLLM_PUBLIC_DOCS=0, and with nothing on the page that points elsewhere."""

import re
import shutil
import subprocess
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

from sidecar.config import Settings
from tests.support.api import as_operator

SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

PAGE = "/api/v1/docs"
EXTERNAL = re.compile(r"(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)  # a scheme or a protocol-relative address


class _References(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("src", "href") and value]


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.found


@pytest.fixture
def closed_docs(app):
    settings = app.config["NRLLM_SETTINGS"]
    app.config["NRLLM_SETTINGS"] = type(settings)(**{**settings.__dict__, "public_docs": False})
    return app.test_client()


@SQLITE
def test_the_page_and_every_file_it_loads_come_from_the_sidecar_without_a_token(client):
    page = client.get(PAGE)
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    references = _references(html)
    assert len(references) >= 6  # two style sheets, two icons, Swagger UI and the script that starts it
    assert not [r for r in references if EXTERNAL.match(r)]
    assert "://" not in html
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "script-src 'self'" in policy
    for reference in references:
        path = urlsplit(urljoin(f"http://sidecar{PAGE}", reference)).path
        answer = client.get(path)
        assert answer.status_code == 200, (reference, answer.status_code)
        assert answer.data, reference
    start = client.get(urlsplit(urljoin(f"http://sidecar{PAGE}", "docs/assets/start.js")).path)
    script = start.get_data(as_text=True)
    assert "//" not in script.replace('"openapi.json"', "") and "validatorUrl: null" in script
    bundle = client.get("/api/v1/docs/assets/swagger-ui-bundle.js").get_data(as_text=True)
    assert "SwaggerUIBundle" in bundle


@SQLITE
def test_the_document_the_page_reads_is_open_and_has_the_bearer_scheme(client):
    document = client.get(urlsplit(urljoin(f"http://sidecar{PAGE}", "openapi.json")).path)
    assert document.status_code == 200
    schemes = document.get_json()["components"]["securitySchemes"]
    assert schemes["bearerToken"]["type"] == "http" and schemes["bearerToken"]["scheme"] == "bearer"


@SQLITE
@pytest.mark.parametrize("name", ["VERSION", "oauth2-redirect.html", "swagger-ui.js", "nothing.js"])
def test_only_the_files_of_the_page_are_served(client, name):
    answer = client.get(f"/api/v1/docs/assets/{name}")
    assert answer.status_code == 404 and answer.json["code"] == "not_found"


@SQLITE
def test_a_path_out_of_the_folder_is_no_route(client):
    # No route matches (a file name has no slash), and an unknown path without a token is 401.
    assert client.get("/api/v1/docs/assets/..%2Fflask_swagger_ui.py").status_code == 401


@SQLITE
@pytest.mark.parametrize("path", [PAGE, "/api/v1/openapi.json", "/api/v1/docs/assets/swagger-ui.css",
                                  "/api/v1/docs/assets/start.js"])
def test_with_public_docs_off_a_token_is_needed(closed_docs, operator_token, path):
    refused = closed_docs.get(path)
    assert refused.status_code == 401
    assert refused.json["code"] == "unauthenticated" and set(refused.json) == {"code", "message"}
    assert closed_docs.get(path, headers=as_operator(operator_token)).status_code == 200


@pytest.mark.parametrize("raw, public", [(None, True), ("", True), ("1", True), ("yes", True), ("0", False),
                                         ("false", False), ("off", False)])
def test_the_setting(raw, public, tmp_path):
    env = {"NRLLM_INSTANCE_PATH": str(tmp_path)} | ({} if raw is None else {"NRLLM_PUBLIC_DOCS": raw})
    assert Settings.from_env(env).public_docs is public


def test_a_setting_that_is_no_switch_stops_the_command(tmp_path):
    with pytest.raises(SystemExit, match="NRLLM_PUBLIC_DOCS"):
        Settings.from_env({"NRLLM_INSTANCE_PATH": str(tmp_path), "NRLLM_PUBLIC_DOCS": "maybe"})


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine")
@SQLITE
def test_a_browser_that_cannot_reach_anything_else_shows_the_operations_and_authorize(live_server):
    """Every host name but the sidecar's address resolves to nothing: the page still renders."""
    rendered = subprocess.run(
        [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=15000",
         "--dump-dom", f"{live_server}{PAGE}"],
        capture_output=True, text=True, timeout=120,
    ).stdout
    assert "btn authorize" in rendered
    assert 'data-path="/api/v1/runs"' in rendered and 'data-path="/api/v1/runs/{run_id}/decision"' in rendered
