"""The Flask app factory: the HTTP API (api/) and the console (console/) in one app. Importing this module
starts nothing: no thread, no connection."""

from flask import Flask

from . import __version__, bootstrap, console
from .api import (
    access,
    auth,
    decisions,
    docs_page,
    event_schemas,
    grants,
    headers,
    health,
    metrics,
    parsing,
    remote_agents,
    runs,
    streaming,
)
from .api import compat as compat_views
from .api import push as push_views
from .api.errors import SidecarApi
from .application import Application
from .config import Settings
from .engine.registry import build_registry
from .plugins import plugin_context, plugin_manager
from .store import db, doorbell

SECURITY_SCHEME = "bearerToken"


def create_app(settings: Settings | None = None, *, bind_database: bool = True, plugin_manager=None) -> Flask:
    """The app of a new application (bootstrap.start; the arguments are its): every request runs in it."""
    settings = settings or Settings.from_env()
    application = bootstrap.start(settings, bind_database=bind_database, plugin_manager=plugin_manager)
    return application.run(_build, application, settings)


def _build(application: Application, settings: Settings) -> Flask:
    # The API queues runs and brings polls forward for workers in other processes: ring them at once
    # instead of leaving it to their next poll (store/doorbell.py).
    doorbell.ring_other_processes()
    app = Flask("nrllm_sidecar")
    app.extensions["nrllm_application"] = application
    # A push that is accepted is answered before Flask; Flask answers every other request (api/push.py).
    app.wsgi_app = _InApplication(push_views.PushShortcut(app.wsgi_app, settings.body_limit_bytes), application)
    app.config.update(
        NRLLM_SETTINGS=settings,
        MAX_CONTENT_LENGTH=settings.body_limit_bytes,
        API_TITLE="nr-llm sidecar",
        API_VERSION=__version__,  # the OpenAPI info.version: the sidecar's release; paths carry v1
        OPENAPI_VERSION="3.0.3",
        # No OPENAPI_URL_PREFIX: the document and the docs page are api/docs_page.py's (local assets, and
        # readable without a token unless NRLLM_PUBLIC_DOCS=0).
        # Every operation needs the bearer token unless it says otherwise (health: security []).
        API_SPEC_OPTIONS={"security": [{SECURITY_SCHEME: []}]},
    )
    # First: every answer, a refused one too, carries its request id and gets its access log line.
    access.install(app)
    # A browser's preflight (from an origin NRLLM_CORS_ORIGINS lists) carries no token: answered first.
    app.before_request(headers.answer_preflight)
    # Before any view, and for routes that do not exist too: 401 unless the view is public.
    app.before_request(auth.authenticate)
    app.before_request(parsing.refuse_unstorable_in_url)
    # The tools and providers runs may name, checked when a run is created.
    app.extensions["nrllm_registry"] = build_registry(settings)
    api = SidecarApi(app)
    _document_common_parts(api)
    api.register_blueprint(health.blp)
    api.register_blueprint(push_views.blp)
    api.register_blueprint(runs.blp)
    api.register_blueprint(metrics.blp)
    api.register_blueprint(compat_views.blp)
    api.register_blueprint(remote_agents.blp)
    api.register_blueprint(decisions.blp)
    api.register_blueprint(grants.blp)
    app.register_blueprint(docs_page.blp)  # plain Flask: the document does not describe itself
    for blueprints in plugin_manager().hook.nrllm_register_routes(context=plugin_context()):
        for blueprint in blueprints or []:
            api.register_blueprint(blueprint)

    # The operator console and the inbox at /console/ (docs/console.md): pages over the same services.
    console.install(app, settings)

    app.after_request(headers.add_headers)
    app.teardown_request(streaming.release_unused)

    @app.teardown_request
    def _return_connection(_exc):
        # Request threads live long (gunicorn's pool): give each request's pooled connection back, or discard
        # one that cannot be given back (the server went away). A SQLite connection stays with its thread:
        # opening one (with its pragmas) costs as much as a small request.
        db.release_connection(pooled_only=True)

    return app


class _InApplication:
    """WSGI middleware: the request, and the iteration of its answer (a stream is read after the view has
    returned), run in the app's application, whichever thread the server runs them on."""

    def __init__(self, wsgi_app, application: Application):
        self.wsgi_app = wsgi_app
        self.application = application

    def __call__(self, environ, start_response):
        return _Answer(self.application.run(self.wsgi_app, environ, start_response), self.application)


class _Answer:
    """The answer's body, each of its chunks made in the application (a stream reads the store as it goes)."""

    def __init__(self, body, application: Application):
        self.body = body
        self.application = application
        self._iterator = None

    def __iter__(self):
        return self

    def __next__(self):
        if self._iterator is None:
            self._iterator = self.application.run(iter, self.body)
        return self.application.run(next, self._iterator)

    def close(self):
        if hasattr(self.body, "close"):
            self.application.run(self.body.close)


def _document_common_parts(api: SidecarApi) -> None:
    components = api.spec.components
    event_schemas.register(api.spec)
    components.security_scheme(
        SECURITY_SCHEME,
        {"type": "http", "scheme": "bearer",
         "description": "A token from `nrllm-sidecar token create --name NAME --role host|operator`."},
    )
    components.parameter(
        "Actor", "header",
        {"name": auth.ACTOR_HEADER, "schema": {"type": "string", "maxLength": auth.MAX_ACTOR},
         "description": "The actor a host token acts for, e.g. `be_user:7` (required for host tokens)."},
    )
    components.parameter(
        "Workspace", "header",
        {"name": auth.WORKSPACE_HEADER, "schema": {"type": "string", "maxLength": auth.MAX_WORKSPACE, "default": "0"},
         "description": "The workspace a host token acts in."},
    )
