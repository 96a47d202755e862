"""The API described for people and programs: the OpenAPI document at /api/v1/openapi.json and Swagger UI at
/api/v1/docs, both served by the sidecar itself.

Swagger UI's files come from the flask-swagger-ui package (its `dist` folder, the swagger-ui-dist release it
ships); only the page and the few lines that start Swagger UI are ours. The page loads nothing from anywhere
else, and its Content-Security-Policy tells the browser not to: it works offline and leaks nothing about who
reads it. Both are readable without a token unless NRLLM_PUBLIC_DOCS=0 (docs/configuration.md); the page's
Authorize button takes a bearer token for "Try it out".
"""

from pathlib import Path

import flask_swagger_ui
from flask import Blueprint, Response, current_app, send_from_directory
from flask.views import MethodView

from ..domain.errors import NotFound
from .auth import public

SWAGGER_UI = Path(flask_swagger_ui.__file__).parent / "dist"
# The files the page uses; nothing else in the folder is served.
ASSETS = ("swagger-ui.css", "index.css", "swagger-ui-bundle.js", "favicon-32x32.png", "favicon-16x16.png")
START = "start.js"

# Everything from this origin; inline styles only because Swagger UI sets style attributes; images as data:
# URIs (its icons). No connection, script or frame elsewhere.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                           "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'")

# Relative addresses: the page works under any path prefix a reverse proxy adds.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>nr-llm sidecar: HTTP API v1</title>
  <link rel="stylesheet" href="docs/assets/swagger-ui.css">
  <link rel="stylesheet" href="docs/assets/index.css">
  <link rel="icon" type="image/png" href="docs/assets/favicon-32x32.png" sizes="32x32">
  <link rel="icon" type="image/png" href="docs/assets/favicon-16x16.png" sizes="16x16">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/assets/swagger-ui-bundle.js"></script>
  <script src="docs/assets/start.js"></script>
</body>
</html>
"""

# validatorUrl null: Swagger UI would otherwise show a badge from an outside validator.
START_SCRIPT = """window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: new URL("openapi.json", window.location.href).href,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    validatorUrl: null,
    displayRequestDuration: true
  });
});
"""

blp = Blueprint("docs", __name__, url_prefix="/api/v1")


def _docs_public(settings) -> bool:
    return settings.public_docs


@public(when=_docs_public)
class OpenApiDocument(MethodView):
    def get(self):
        api = current_app.extensions["flask-smorest"]["apis"][""]["ext_obj"]
        return current_app.json.response(api.spec.to_dict())


@public(when=_docs_public)
class DocsPage(MethodView):
    def get(self):
        return Response(PAGE, content_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY})


@public(when=_docs_public)
class DocsAsset(MethodView):
    def get(self, name: str):
        if name == START:
            return Response(START_SCRIPT, content_type="text/javascript; charset=utf-8")
        if name not in ASSETS:
            raise NotFound(f"no file {name!r} belongs to the docs page")
        return send_from_directory(SWAGGER_UI, name, max_age=0)


blp.add_url_rule("/openapi.json", view_func=OpenApiDocument.as_view("openapi_json"))
blp.add_url_rule("/docs", view_func=DocsPage.as_view("page"))
blp.add_url_rule("/docs/assets/<name>", view_func=DocsAsset.as_view("asset"))
