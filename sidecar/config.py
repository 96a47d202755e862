"""Configuration from the environment (docs/configuration.md). Read once, passed down."""

import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from .domain.retention import parse_duration


def _float_env(env, name: str, default: float, *, zero_allowed: bool = False) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number of seconds, not {raw!r}") from None
    if not (value > 0 or zero_allowed and value == 0):  # NaN too
        raise SystemExit(f"{name} must be {'0 or more' if zero_allowed else 'positive'}, not {raw!r}")
    return value


def _duration_env(env, name: str) -> timedelta | None:
    raw = env.get(name)
    if raw in (None, ""):
        return None
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise SystemExit(f"{name}: {exc}") from None


def _int_env(env, name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, not {raw!r}") from None
    if value <= 0:
        raise SystemExit(f"{name} must be positive, not {raw!r}")
    return value


def _choice_env(env, name: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (the first when unset); any other value stops the command."""
    raw = env.get(name, "").strip().lower() or choices[0]
    if raw not in choices:
        raise SystemExit(f"{name} must be {', '.join(choices[:-1])} or {choices[-1]}, not {raw!r}")
    return raw


def _switch_env(env, name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SystemExit(f"{name} must be 1, true, yes, on or 0, false, no, off, not {raw!r}")


@dataclass(frozen=True)
class Settings:
    instance_path: Path
    database_url: str
    lease_seconds: float = 30.0
    metrics_public: bool = False
    # The OpenAPI document and the docs page answer without a token (NRLLM_PUBLIC_DOCS=0 closes them).
    public_docs: bool = True
    public_url: str | None = None
    remote_allow: tuple[str, ...] = field(default_factory=tuple)
    secret_keys: tuple[str, ...] = field(default_factory=tuple)
    body_limit_bytes: int = 1024 * 1024
    # Model providers: the provider a run gets when it names none, and the OpenAI-compatible server.
    default_provider: str = "scripted"
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str | None = field(default=None, repr=False)
    openai_model: str | None = None
    openai_timeout: float = 20.0
    # Finished runs older than this are purged by every worker once a day; None keeps them forever.
    retention: timedelta | None = None
    # Serving (docs/deploy.md, docs/security.md): reading a request, open event streams, cross-origin callers.
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # How long the thread that answered a kept-alive connection waits there for its next request (0: not).
    keepalive_linger: float = 0.05
    streams_per_token: int = 100
    streams_per_process: int = 2000
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    # Whether each HTTP worker and worker process of a group is held to one core: auto, on, off
    # (sidecar/affinity.py).
    cpu_pinning: str = "auto"

    @property
    def provider_timeout(self) -> float:
        """Seconds a provider call may take: the configured timeout, but always shorter than the lease."""
        return min(self.openai_timeout, self.lease_seconds * 0.9)

    @classmethod
    def from_env(cls, env=None) -> "Settings":
        env = os.environ if env is None else env
        instance = Path(env.get("NRLLM_INSTANCE_PATH") or Path.cwd() / "instance").resolve()
        url = env.get("NRLLM_DATABASE_URL") or f"sqlite:///{instance / 'nrllm-sidecar.db'}"
        return cls(
            instance_path=instance,
            database_url=url,
            lease_seconds=_float_env(env, "NRLLM_LEASE_SECONDS", 30.0),
            metrics_public=env.get("NRLLM_METRICS_PUBLIC", "") in ("1", "true", "yes"),
            public_docs=_switch_env(env, "NRLLM_PUBLIC_DOCS", True),
            public_url=env.get("NRLLM_PUBLIC_URL") or None,
            remote_allow=tuple(p.strip() for p in env.get("NRLLM_REMOTE_ALLOW", "").split(",") if p.strip()),
            secret_keys=tuple(k.strip() for k in env.get("NRLLM_SECRET_KEYS", "").split(",") if k.strip()),
            default_provider=env.get("NRLLM_DEFAULT_PROVIDER") or "scripted",
            openai_base_url=(env.get("NRLLM_OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/"),
            openai_api_key=env.get("NRLLM_OPENAI_API_KEY") or None,
            openai_model=env.get("NRLLM_OPENAI_MODEL") or None,
            openai_timeout=_float_env(env, "NRLLM_OPENAI_TIMEOUT", 20.0),
            retention=_duration_env(env, "NRLLM_RETENTION"),
            header_timeout=_float_env(env, "NRLLM_HEADER_TIMEOUT", 10.0),
            body_timeout=_float_env(env, "NRLLM_BODY_TIMEOUT", 30.0),
            keepalive_linger=_float_env(env, "NRLLM_KEEPALIVE_LINGER", 0.05, zero_allowed=True),
            streams_per_token=_int_env(env, "NRLLM_STREAMS_PER_TOKEN", 100),
            streams_per_process=_int_env(env, "NRLLM_STREAMS_PER_PROCESS", 2000),
            cors_origins=tuple(o.strip().rstrip("/") for o in env.get("NRLLM_CORS_ORIGINS", "").split(",")
                               if o.strip()),
            cpu_pinning=_choice_env(env, "NRLLM_CPU_PINNING", ("auto", "on", "off")),
        )
