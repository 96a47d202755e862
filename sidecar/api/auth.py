"""Who is asking: the bearer token, its role, and for a host token the actor and workspace it acts for.

Authentication is app-wide (a before_request hook), so a route is closed unless its view class says
otherwise with @public: a new endpoint cannot be left open by forgetting a decorator. Roles are
checked per view method with @roles, before the body is parsed.
"""

import copy
import functools
from dataclasses import dataclass

from flask import current_app, g, request
from flask_smorest.utils import deepupdate

from ..domain.errors import ActorRequired, ForbiddenRole, TooLarge, Unauthenticated, ValidationFailed
from ..store import tokens
from .errors import error_responses
from .parsing import unstorable_refused

ACTOR_HEADER = "X-Nrllm-Actor"
WORKSPACE_HEADER = "X-Nrllm-Workspace"
MAX_ACTOR = 255  # runs.owner
MAX_WORKSPACE = 64  # runs.workspace


@dataclass(frozen=True)
class Principal:
    token_id: str
    token_name: str
    role: str
    actor: str | None
    workspace: str

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"

    @property
    def label(self) -> str:
        """Who did it, for events: the actor of a host token, the token's name for an operator."""
        return self.actor if self.actor and not self.is_operator else f"operator:{self.token_name}"


def public(when=lambda settings: True):
    """Mark a MethodView class (or a plain view function) as answering without a bearer token (when
    `when(settings)` is true). The console's views are such: they authenticate by their session instead."""

    def mark(view):
        view.public_when = staticmethod(when) if isinstance(view, type) else when
        return view

    return mark


def _is_public() -> bool:
    view = current_app.view_functions.get(request.endpoint) if request.endpoint else None
    when = getattr(getattr(view, "view_class", view), "public_when", None)
    return bool(when and when(current_app.config["NRLLM_SETTINGS"]))


def _bearer() -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def _header(name: str, limit: int) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    value = value.strip()
    if refused := unstorable_refused(name, value):
        raise refused
    if len(value) > limit:
        raise ValidationFailed(f"{name} is too long",
                       {name: [f"Longer than maximum length {limit}."]})
    return value or None


def authenticate() -> None:
    """before_request: set g.principal, or answer 401 (unknown routes too, so they reveal nothing)."""
    g.principal = None
    if _is_public():
        return
    presented = _bearer()
    token = tokens.lookup(presented) if presented else None
    if token is None:
        raise Unauthenticated("a valid bearer token is required (Authorization: Bearer ...)")
    g.principal = Principal(
        token_id=token.id,
        token_name=token.name,
        role=token.role,
        actor=_header(ACTOR_HEADER, MAX_ACTOR),
        workspace=_header(WORKSPACE_HEADER, MAX_WORKSPACE) or "0",
    )
    limit = current_app.config["NRLLM_SETTINGS"].body_limit_bytes
    if request.content_length is not None and request.content_length > limit:
        # Refused before any view reads it, also on endpoints that take no body.
        raise TooLarge(f"the body is over the limit of {limit} bytes")


def principal() -> Principal:
    return g.principal


def roles(*allowed: str, actor: bool = True):
    """Allow only these token roles (403 forbidden_role); a host token must name its actor (400)."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            who = g.principal
            if who.role not in allowed:
                raise ForbiddenRole(f"a {who.role} token may not use this endpoint")
            if actor and who.role == "host" and not who.actor:
                raise ActorRequired(f"a host token must name its actor in {ACTOR_HEADER}")
            return fn(*args, **kwargs)

        # The OpenAPI document lists what this check answers, so no view has to repeat it.
        statuses = ([403] if set(allowed) != set(tokens.ROLES) else []) + ([400] if actor and "host" in allowed else [])
        wrapper._apidoc = deepupdate(copy.deepcopy(getattr(wrapper, "_apidoc", {})),
                                     {"manual_doc": {"responses": error_responses(*statuses)}})
        return wrapper

    return decorate
