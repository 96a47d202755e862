"""The delegation code's one door to a remote agent and to the sealer: a client built from an agent's
record (its card read once and cached), and checkpoints sealed and unsealed."""

import dataclasses
import json

from .. import keys
from ..domain.sealing import CheckpointTampered, KeyNotConfigured
from ..store import remote_agents
from ..store.models import DependencyWait, RemoteAgent
from .a2a import A2AClient, read_card
from .address_guard import AddressRefused
from .types import AgentEndpoint, RemoteError

KeyMissing = KeyNotConfigured
Tampered = CheckpointTampered

MAX_CALL_SECONDS = 10.0


class Unreachable(Exception):
    """The agent's card could not be read, its address is refused, or its secret cannot be unsealed."""


def call_timeout(settings) -> float:
    """Every remote call ends well within the lease, so a healthy segment is never reaped mid-call."""
    # A call may take up to three timeouts (connect, first byte, the rest); a quarter lease keeps it inside.
    return max(0.5, min(MAX_CALL_SECONDS, settings.lease_seconds / 4))


def client_for(agent: RemoteAgent, settings) -> A2AClient:
    try:
        auth = remote_agents.auth_of(agent)
    except (KeyNotConfigured, CheckpointTampered) as exc:
        raise Unreachable(f"its credentials cannot be read: {exc}") from None
    header, value = auth or (None, None)
    endpoint = None
    if agent.endpoint:
        cached = json.loads(agent.endpoint)
        endpoint = AgentEndpoint(**cached, auth_header=header, auth_value=value)
    else:
        try:
            endpoint = read_card(agent.url, allow=settings.remote_allow, timeout=call_timeout(settings),
                                 auth_header=header, auth_value=value)
        except (AddressRefused, RemoteError) as exc:
            raise Unreachable(str(exc)) from None
        public = {k: v for k, v in dataclasses.asdict(endpoint).items() if k not in ("auth_header", "auth_value")}
        remote_agents.save_endpoint(agent.name, json.dumps(public, sort_keys=True), for_url=agent.url)
    return A2AClient(endpoint, allow=settings.remote_allow, timeout=call_timeout(settings))


def seal_checkpoint(data: dict) -> tuple[str, str]:
    return keys.sealer().seal(data)


def unseal_checkpoint(wait: DependencyWait) -> dict:
    """The wait's checkpoint. KeyMissing when its key was removed; Tampered when it does not authenticate."""
    return keys.sealer().unseal(wait.checkpoint, wait.key_fingerprint)
