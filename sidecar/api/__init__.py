"""The Flask app factory. Importing this module starts nothing: no thread, no connection."""

from flask import Flask

from ..config import Settings
from ..store import db
from . import health
from .errors import SidecarApi


def create_app(settings: Settings | None = None, *, bind_database: bool = True) -> Flask:
    settings = settings or Settings.from_env()
    if bind_database:
        db.bind(settings.database_url)
    app = Flask("nrllm_sidecar")
    app.config.update(
        NRLLM_SETTINGS=settings,
        MAX_CONTENT_LENGTH=settings.body_limit_bytes,
        API_TITLE="nr-llm sidecar",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/api/v1",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="docs",
        OPENAPI_SWAGGER_UI_URL="https://cdn.jsdelivr.net/npm/swagger-ui-dist/",
    )
    api = SidecarApi(app)
    api.register_blueprint(health.blp)

    @app.teardown_request
    def _return_connection(_exc):
        # Request threads come and go; give each request's connection back (to the pool, or closed).
        if not db.database.is_closed():
            db.database.close()

    return app
