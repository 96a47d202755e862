"""Plain helpers of the API tests (the fixtures are in api_support.py)."""

from sidecar.store.models import ApiToken, IdempotencyRecord, Run, RunEvent

ACTOR = "be_user:7"
OTHER_ACTOR = "be_user:8"
# The sealing key of every test, in this process (api_support's settings) and in the processes tests start.
TEST_SECRET_KEY = "aDx54tm13xXSGYKe2DcA7pPT1AsbB-JDwZ3t8ThQlFc="


def as_host(token: str, actor: str | None = ACTOR, **extra) -> dict:
    headers = {"Authorization": f"Bearer {token}", **extra}
    if actor is not None:
        headers["X-Nrllm-Actor"] = actor
    return headers


def as_operator(token: str, **extra) -> dict:
    return {"Authorization": f"Bearer {token}", **extra}


def row_counts() -> dict[str, int]:
    """Rows of every table a request could write: compared before and after a refused request."""
    return {model.__name__: model.select().count() for model in (Run, RunEvent, IdempotencyRecord, ApiToken)}
