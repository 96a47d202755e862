"""A real A2A peer for the delegation tests: a2a-sdk 1.3 served by uvicorn on 127.0.0.1.

The agent does what the message text says, so a test scripts the remote by what it sends:
  complete:<text>            completes at once with an artifact <text> (the send's answer is already terminal)
  work:<seconds>:<text>      works that long, then completes with an artifact <text>
  fail:<reason>              fails, the reason in the status message
  reject:<reason>            rejects the task, the reason in the status message
  input:<question>           asks for input; a follow-up on the task completes it with "answer: <reply>"
  auth:<text>                asks for authentication; a follow-up completes it like input
  message:<text>             answers with a direct message and creates no task
  big:<n>                    completes with an artifact of n bytes
  anything else              completes at once with the text itself

Usage (a `with PeerPool() as pool:` per test or module stops everything at the end):
  peer = pool.start(card="1.0", push=False)
                        # card: "1.0", "both" (1.0 and 0.3 interfaces), "0.3" (as the sdk serves it),
                        # "0.3-legacy" (a pre-1.0 card: url/preferredTransport), None (no card: 404);
                        # push: capabilities.pushNotifications, and the peer really posts notifications
  peer.url              # the base URL to register or to read the card from; peer.rpc_url the endpoint
  peer.task_count       # tasks that exist on the peer; peer.tasks_in(context_id) their ids
  peer.calls["SendMessage"], peer.calls["CancelTask"], peer.calls["message/send"]
                        # JSON-RPC requests received, by method (kept across restarts)
  peer.pushes["sent"], peer.pushes["answered"], peer.pushes_settled()
                        # the notifications a push peer posted, and whether each was answered
  peer.restart()        # same port, every task forgotten (GetTask then answers -32001)
  Peer(record=path)     # also appends a JSON line to `path` for every JSON-RPC request (method, messageId)
                        # and every saved task (id, contextId, state): what the peer received and did,
                        # kept across restarts and processes (the chaos suite reads it)
  proxy = pool.lossy_proxy(peer)
                        # proxy.url in place of peer.url: drops the answer to SendMessage / message/send
                        # (proxy.drop is a set: clear it to stop dropping); proxy.dropped counts them
"""

import asyncio
import collections
import json
import socket
import threading
import time

import httpx
import uvicorn
from a2a.helpers.proto_helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.network import LossyProxy
from tests.support.waiting import wait_until

V1_PATH = "/a2a/v1"
V03_PATH = "/a2a/v03"


class Record:
    """Appends one JSON line per entry to a file (one write each, so lines of two processes never mix)."""

    def __init__(self, path):
        self.path = path

    def write(self, **entry) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps({**entry, "at": time.time()}) + "\n")


class CountingTaskStore(InMemoryTaskStore):
    """Remembers every task id it ever saved: the number of tasks that exist on the peer."""

    def __init__(self, record: Record | None = None):
        super().__init__()
        self.contexts: dict[str, str] = {}
        self.record = record

    async def save(self, task, context):
        self.contexts[task.id] = task.context_id
        await super().save(task, context)
        if self.record:
            self.record.write(task=task.id, context=task.context_id, state=TaskState.Name(task.status.state))


class ScriptedAgent(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue) -> None:
        text = context.get_user_input()
        task_id, context_id = context.task_id, context.context_id
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is not None:
            # A follow-up on an interrupted task: the reply answers it.
            await updater.add_artifact([new_text_part(f"answer: {text}")])
            await updater.complete()
            return
        verb, _, rest = text.partition(":")
        if verb == "message":
            await event_queue.enqueue_event(new_text_message(rest, context_id=context_id))
            return
        if verb == "complete" or verb not in ("work", "fail", "reject", "input", "auth", "big"):
            # Published complete as the first event, so the send's own answer is already terminal.
            answer = rest if verb == "complete" else text
            artifact = Artifact(artifact_id="result", name="result", parts=[new_text_part(answer)])
            done = TaskStatus(state=TaskState.TASK_STATE_COMPLETED)
            task = Task(id=task_id, context_id=context_id, status=done, artifacts=[artifact],
                        history=[context.message])
            await event_queue.enqueue_event(task)
            return
        await event_queue.enqueue_event(Task(id=task_id, context_id=context_id, history=[context.message],
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        await updater.start_work()
        reason = updater.new_agent_message([new_text_part(rest)])
        if verb == "work":
            seconds, _, answer = rest.partition(":")
            await asyncio.sleep(float(seconds))
            await updater.add_artifact([new_text_part(answer)], name="result")
            await updater.complete()
        elif verb == "big":
            await updater.add_artifact([new_text_part("x" * int(rest))], name="result")
            await updater.complete()
        elif verb == "fail":
            await updater.failed(reason)
        elif verb == "reject":
            await updater.reject(reason)
        elif verb == "input":
            await updater.requires_input(reason)
        else:
            await updater.requires_auth(reason)

    async def cancel(self, context: RequestContext, event_queue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def _card(kind: str, base: str, push: bool) -> AgentCard:
    interfaces = {
        "1.0": [(V1_PATH, "1.0")],
        "both": [(V1_PATH, "1.0"), (V03_PATH, "0.3")],
        "0.3": [(V03_PATH, "0.3")],
    }[kind]
    return AgentCard(
        name="scripted peer", description="does what the message says", version="1.0.0",
        supported_interfaces=[AgentInterface(url=base + path, protocol_binding="JSONRPC", protocol_version=v)
                              for path, v in interfaces],
        capabilities=AgentCapabilities(push_notifications=push, streaming=False),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="script", name="script", description="follows the script", tags=["test"])],
    )


def _legacy_card(base: str, push: bool) -> dict:
    """A card as a pre-1.0 server serves it: no supportedInterfaces, the endpoint in `url`."""
    return {
        "name": "legacy peer", "description": "speaks 0.3", "version": "1.0.0", "protocolVersion": "0.3.0",
        "url": base + V03_PATH, "preferredTransport": "JSONRPC",
        "capabilities": {"pushNotifications": push, "streaming": False},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
    }


class Peer:
    """One A2A server in a background thread; stop() and start() again keep the port and lose the tasks."""

    def __init__(self, card: str | None = "1.0", push: bool = False, port: int = 0, record=None):
        self.card_kind = card
        self.push = push
        self.port = port
        self.calls: collections.Counter = collections.Counter()
        self.received: list[tuple[dict, dict]] = []  # (headers, JSON-RPC body) of every call, in order
        self.pushes: collections.Counter = collections.Counter()  # notifications "sent" and "answered"
        self.record = Record(record) if record else None
        self.store = CountingTaskStore(self.record)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def rpc_url(self) -> str:
        """The endpoint the card names (the 1.0 one when it offers both); without a card, the base URL.
        Every path ("/", V1_PATH, V03_PATH) serves both dialects, as the a2a-sdk's compat routes do."""
        if self.card_kind is None:
            return self.url + "/"
        return self.url + (V03_PATH if self.card_kind in ("0.3", "0.3-legacy") else V1_PATH)

    def push_tokens(self) -> list[str]:
        """The push tokens the sends to this peer carried, in order."""
        tokens = []
        for _, body in list(self.received):
            config = (body.get("params") or {}).get("configuration") or {}
            push = config.get("taskPushNotificationConfig") or config.get("pushNotificationConfig")
            if isinstance(push, dict) and push.get("token"):
                tokens.append(push["token"])
        return tokens

    def pushes_settled(self) -> bool:
        """The peer posted a notification, and every one it posted was answered."""
        return 0 < self.pushes["sent"] == self.pushes["answered"]

    def _push_client(self) -> httpx.AsyncClient:
        async def sent(_request):
            self.pushes["sent"] += 1

        async def answered(_response):
            self.pushes["answered"] += 1

        return httpx.AsyncClient(event_hooks={"request": [sent], "response": [answered]})

    @property
    def task_count(self) -> int:
        return len(self.store.contexts)

    def tasks_in(self, context_id: str) -> list[str]:
        return [t for t, c in list(self.store.contexts.items()) if c == context_id]

    def _app(self) -> Starlette:
        card = _card(self.card_kind if self.card_kind in ("1.0", "both", "0.3") else "1.0", self.url, self.push)
        push_store = InMemoryPushNotificationConfigStore() if self.push else None
        handler = DefaultRequestHandler(
            agent_executor=ScriptedAgent(), task_store=self.store, agent_card=card,
            push_config_store=push_store,
            push_sender=BasePushNotificationSender(self._push_client(), push_store) if self.push else None,
        )
        routes = []
        for path in ("/", V1_PATH, V03_PATH):
            for route in create_jsonrpc_routes(handler, rpc_url=path, enable_v0_3_compat=True):
                routes.append(Route(path, endpoint=self._counting(route.endpoint), methods=["POST"]))
        if self.card_kind == "0.3-legacy":
            legacy = _legacy_card(self.url, self.push)

            async def legacy_card(request: Request):
                return JSONResponse(legacy)

            routes.append(Route("/.well-known/agent-card.json", endpoint=legacy_card, methods=["GET"]))
        elif self.card_kind is not None:
            routes.extend(create_agent_card_routes(card))
        return Starlette(routes=routes)

    def _counting(self, endpoint):
        async def counted(request: Request):
            try:
                body = await request.json()
            except Exception:  # noqa: BLE001 - a malformed body is the handler's to answer
                body = None
            body = body if isinstance(body, dict) else {}
            method = body.get("method")
            self.calls[method] += 1
            self.received.append((dict(request.headers), body))
            if self.record:
                message = (body.get("params") or {}).get("message") or {}
                self.record.write(method=method, message_id=message.get("messageId"))
            return await endpoint(request)

        return counted

    def start(self) -> "Peer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1)
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True,
                                        name=f"a2a-peer-{self.port}")
        self._thread.start()
        wait_until(lambda: server.started or not self._thread.is_alive(), timeout=60, interval=0.02,
                   what="the A2A peer to start")
        if not server.started:
            raise RuntimeError("the A2A peer did not start: its thread ended")
        self._sock = sock
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(10)
            self._server = None
            self._sock.close()

    def restart(self) -> "Peer":
        """A peer that lost every task: same port, a new (empty) task store."""
        self.stop()
        self.store = CountingTaskStore(self.record)
        return self.start()


class PeerPool:
    """Starts peers and proxies for a test and stops them all at the end."""

    def __init__(self):
        self._peers: list[Peer] = []
        self._proxies: list[LossyProxy] = []

    def start(self, card: str | None = "1.0", push: bool = False, record=None) -> Peer:
        peer = Peer(card=card, push=push, record=record).start()
        self._peers.append(peer)
        return peer

    def lossy_proxy(self, peer: Peer, drop=("SendMessage", "message/send"), rewrite=lambda data: data) -> LossyProxy:
        proxy = LossyProxy(peer.url, drop=drop, rewrite=rewrite).start()
        self._proxies.append(proxy)
        return proxy

    def __enter__(self) -> "PeerPool":
        return self

    def __exit__(self, *exc) -> None:
        for proxy in self._proxies:
            proxy.stop()
        for peer in self._peers:
            peer.stop()
