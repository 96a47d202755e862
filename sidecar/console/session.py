"""The console's sessions: a signed cookie that names a token (by id, never its secret), re-checked on every
request, and the CSRF token every form carries.

The cookie is HttpOnly and SameSite=Strict, Secure when the request came over https, and only sent to
/console. It holds the token's id, its role, the actor and workspace a host token acts for, and the CSRF
token. The token itself is looked up again on every request, so a revoked token ends its sessions at
their next request.
"""

import hashlib
import hmac
import secrets
from datetime import timedelta

from flask import g, redirect, request, session, url_for
from flask.sessions import SecureCookieSessionInterface

from ..api import auth
from ..api.parsing import unstorable_refused
from ..domain.errors import CsrfFailed
from ..store import console_queries, tokens

COOKIE_NAME = "nrllm_console"
COOKIE_PATH = "/console"  # the browser sends the cookie to this path and those under it, nowhere else
SESSION_HOURS = 12
CSRF_FIELD = "csrf_token"


class ConsoleSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the cookie Secure when the request is https: to this server, or
    to a reverse proxy that says so in X-Forwarded-Proto (a client that claims https falsely only keeps its
    own browser from sending the cookie back over http)."""

    def get_cookie_secure(self, app) -> bool:
        return request.is_secure or request.headers.get("X-Forwarded-Proto", "").strip().lower() == "https"

    def open_session(self, app, request):
        # The cookie is only sent to the console's paths: elsewhere (the API) there is no session to open,
        # and building the cookie's signer for nothing cost about a tenth of an API request's framework time.
        if request.path != COOKIE_PATH and not request.path.startswith(COOKIE_PATH + "/"):
            return self.make_null_session(app)
        return super().open_session(app, request)


def configure(app, signing_secret: str) -> None:
    # The signing key is derived from the newest sealing key, so every process of one installation signs
    # alike (gunicorn's workers, a restarted server) and nothing new has to be configured.
    app.secret_key = hmac.new(signing_secret.encode(), b"nrllm-sidecar console session", hashlib.sha256).hexdigest()
    app.session_interface = ConsoleSessions()
    app.config.update(SESSION_COOKIE_NAME=COOKIE_NAME, SESSION_COOKIE_PATH=COOKIE_PATH,
                      SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Strict",
                      PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS))


def csrf_token() -> str:
    if CSRF_FIELD not in session:
        session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return session[CSRF_FIELD]


def check_csrf() -> None:
    """Every POST carries the session's CSRF token in a hidden field (a form of another site cannot)."""
    sent = request.form.get(CSRF_FIELD, "")
    expected = session.get(CSRF_FIELD)
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfFailed("the form is out of date or not from this console; reload it and retry")


class LoginRefused(Exception):
    def __init__(self, errors: dict[str, str]):
        super().__init__("login refused")
        self.errors = errors


def log_in(token: str, actor: str, workspace: str) -> auth.Principal:
    """Check what the login form sent and start the session; LoginRefused names the fields at fault."""
    found = tokens.lookup(token.strip()) if token.strip() else None
    if found is None:
        raise LoginRefused({"token": "Not a valid token (unknown or revoked)."})
    actor, workspace = actor.strip(), workspace.strip() or "0"
    errors = {}
    for name, value, limit in (("actor", actor, auth.MAX_ACTOR), ("workspace", workspace, auth.MAX_WORKSPACE)):
        if unstorable_refused(name, value) or len(value) > limit:
            errors[name] = f"At most {limit} printable characters."
    if found.role == "host" and not actor:
        errors["actor"] = "A host token acts for an actor: name it (e.g. be_user:7)."
    if errors:
        raise LoginRefused(errors)
    session.clear()
    session.permanent = True
    session.update(token_id=found.id, actor=actor if found.role == "host" else None, workspace=workspace)
    csrf_token()
    return _principal(found, session["actor"], workspace)


def log_out() -> None:
    session.clear()


def _principal(token, actor: str | None, workspace: str) -> auth.Principal:
    return auth.Principal(token_id=token.id, token_name=token.name, role=token.role, actor=actor, workspace=workspace)


def load_principal() -> None:
    """before_request of the console: g.principal from the session, if its token is still live."""
    g.principal = None
    token_id = session.get("token_id")
    if token_id is None:
        return
    token = console_queries.live_token(token_id)
    if token is None:
        session.clear()  # revoked (or removed): this session ends now
        g.session_ended = True
        return
    g.principal = _principal(token, session.get("actor"), session.get("workspace") or "0")


def require_login():
    """The answer for a request without a live session: to the login form (which says why)."""
    reason = "ended" if g.get("session_ended") else None
    return redirect(url_for("console.login", next=request.path, reason=reason))
