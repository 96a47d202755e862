"""The operator console and the deciders' inbox at /console/: server-rendered pages over the same services
and checks as the API (docs/console.md).

Its views are public to the API's bearer-token check (api/auth.py) and authenticate by their own session
instead (session.py); they then set the same `g.principal` the API's views see, so the API's role checks
(`roles`), visibility rules and services apply unchanged. Every POST carries a CSRF token.
"""

from pathlib import Path

from flask import Blueprint, g, redirect, render_template, request, send_from_directory, url_for

from .. import keys
from ..api.auth import public
from ..api.parsing import unstorable_refused
from ..domain.errors import SidecarError
from . import session as console_session

STATIC = Path(__file__).resolve().parent / "static"
# The console loads its own script and style sheet and nothing else: no other origin, no inline code.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

bp = Blueprint("console", __name__, url_prefix="/console", template_folder="templates")


def route(rule: str, **options):
    """A console route: public to the bearer-token check, answered only with a live session (but the
    login form and the static files)."""

    def decorate(view):
        return bp.route(rule, **options)(public()(view))

    return decorate


OPEN_ENDPOINTS = {"console.login", "console.static_file"}


@bp.before_request
def _authenticate():
    console_session.load_principal()
    if request.method == "POST":
        for name, value in request.form.items(multi=True):
            if refused := unstorable_refused(name, value):
                raise refused
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    if g.principal is None:
        return console_session.require_login()
    if request.method == "POST":
        console_session.check_csrf()
    return None


@bp.after_request
def _headers(response):
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


@bp.errorhandler(SidecarError)
def _refused(error: SidecarError):
    """A refusal of the console's own or of a service: the API's status, code and message, as a page."""
    if not error.is_refusal():
        raise error  # a fault of the sidecar, not a refusal: logged, and answered 500
    return render_template("console/error.html", error=error), error.http_status


@bp.app_context_processor
def _globals():
    return {"csrf_token": console_session.csrf_token, "CSRF_FIELD": console_session.CSRF_FIELD,
            "who": g.get("principal")}


@route("/static/<path:filename>")
def static_file(filename):
    return send_from_directory(STATIC, filename, max_age=3600)


@route("/login", methods=["GET", "POST"])
def login():
    errors, values = {}, {"actor": "", "workspace": ""}
    if request.method == "POST":
        values = {"actor": request.form.get("actor", ""), "workspace": request.form.get("workspace", "")}
        try:
            who = console_session.log_in(request.form.get("token", ""), values["actor"], values["workspace"])
        except console_session.LoginRefused as refused:
            errors = refused.errors
        else:
            target = request.args.get("next", "")
            # Back to the page asked for, if it is one of this console's: never a redirect elsewhere.
            if not target.startswith("/console/") or target == url_for("console.home"):
                target = _home_of(who)
            return redirect(target)
    reason = request.args.get("reason")
    return render_template("console/login.html", errors=errors, values=values, ended=reason == "ended"), \
        422 if errors else 200


def _home_of(who) -> str:
    return url_for("console.runs_page") if who.is_operator else url_for("console.inbox_page")


@route("/logout", methods=["POST"])
def logout():
    console_session.log_out()
    return redirect(url_for("console.login"))


@route("/")
def home():
    return redirect(_home_of(g.principal))


def install(app, settings) -> None:
    """Register the console on the app (sidecar/app.py)."""
    from . import inbox, operator, runs  # noqa: F401 - their routes register on bp

    console_session.configure(app, keys.keys_for(settings)[0])
    app.register_blueprint(bp)
