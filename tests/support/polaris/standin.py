"""A stand-in for Apache Polaris 1.4.1, over real HTTP: Polaris cannot run here (of the Maven
artifacts its runtime needs, the parent pom and 12 Polaris modules are not served by the
registry these machines reach, and it needs Java 21+).

It follows what a real Polaris 1.4.1 server answered (requests and responses recorded from one
built from the release source) and its policy API spec:

* ``POST /api/catalog/v1/oauth/tokens``: OAuth2 client credentials (the configured pair only),
  a bearer token every policy request must carry (401 otherwise);
* the policy API under ``/api/catalog/polaris/v1/{prefix}``: create (content must be a JSON
  *string*: an object is a 400 with an empty body; content failing the type's schema is a 400
  ``InvalidPolicyException``), list (``policyType`` filter), load, update (version check),
  drop (``detach-all``), attach (``PUT .../mappings``, 204; one inheritable policy per type and
  target, else 409) and detach (``POST .../mappings``, 204), and ``applicable-policies`` for
  the catalog, a namespace (``namespace``, levels joined by 0x1F) or a table (``target-name``):
  per type the most specific attachment wins, with ``inherited`` and the defining
  ``namespace``; every list is paged (``pageSize``, ``pageToken`` -> ``next-page-token``);
* with ``backend`` set, every Iceberg REST request under ``/api/catalog/v1`` is forwarded to
  that real Iceberg REST catalog (the ``{prefix}`` path segment removed; ``/v1/config`` answers
  the prefix as an override, as Polaris does), and namespaces and tables exist when the backend
  says so; without, they are those ``register`` added.

``fail_with`` makes every policy request answer that status (a Polaris outage). ``requests``
counts the policy requests by route, for tests and the fleet bench.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from icepack_core.local.ports import free_port
from tests.support.polaris.content import SYSTEM_TYPES, valid_content

UNIT = "\x1f"
Target = tuple[str, tuple[str, ...]]  # ("catalog", ()), ("namespace", ns), ("table-like", path)


@dataclass
class StoredPolicy:
    namespace: tuple[str, ...]
    name: str
    policy_type: str
    description: str | None
    content: str | None
    version: int = 0

    def wire(self) -> dict[str, Any]:
        return {
            "policy-type": self.policy_type,
            "inheritable": True,
            "name": self.name,
            "description": self.description,
            "content": self.content,
            "version": self.version,
        }


@dataclass
class PolarisState:
    """What the stand-in holds: policies, their mappings, and (standalone) the entities."""

    prefix: str
    client_id: str
    client_secret: str
    backend: str | None = None
    policies: dict[tuple[tuple[str, ...], str], StoredPolicy] = field(default_factory=dict)
    mappings: dict[Target, list[tuple[tuple[str, ...], str]]] = field(default_factory=dict)
    namespaces: set[tuple[str, ...]] = field(default_factory=set)
    tables: set[tuple[str, ...]] = field(default_factory=set)
    tokens: set[str] = field(default_factory=set)
    requests: Counter[str] = field(default_factory=Counter)
    fail_with: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, namespace: tuple[str, ...], table: str | None = None) -> None:
        """Standalone mode: make a namespace (and its parents) or a table exist."""
        for depth in range(1, len(namespace) + 1):
            self.namespaces.add(namespace[:depth])
        if table is not None:
            self.tables.add((*namespace, table))


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)


def _page(items: list[Any], request: Request) -> tuple[list[Any], str | None]:
    raw_size = request.query_params.get("pageSize")
    token = request.query_params.get("pageToken")
    start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
    if raw_size is None:
        return items[start:], None
    size = int(raw_size)
    end = start + size
    following = base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(items) else None
    return items[start:end], following


class PolarisStandIn:
    """The stand-in's routes over one ``PolarisState`` (see the module)."""

    def __init__(self, state: PolarisState) -> None:
        self.state = state
        base = "/api/catalog/polaris/v1/{prefix}"
        ns_base = base + "/namespaces/{namespace}/policies"
        self.app = Starlette(
            routes=[
                Route("/api/catalog/v1/oauth/tokens", self.token, methods=["POST"]),
                Route(ns_base, self.policies, methods=["GET", "POST"]),
                Route(ns_base + "/{name}", self.policy, methods=["GET", "PUT", "DELETE"]),
                Route(ns_base + "/{name}/mappings", self.mapping, methods=["PUT", "POST"]),
                Route(base + "/applicable-policies", self.applicable, methods=["GET"]),
                Route(
                    "/api/catalog/v1/{path:path}",
                    self.forward,
                    methods=["GET", "POST", "PUT", "DELETE", "HEAD"],
                ),
            ]
        )

    # -- authentication ---------------------------------------------------------------------
    async def token(self, request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode()))
        if (form.get("client_id"), form.get("client_secret")) != (
            self.state.client_id,
            self.state.client_secret,
        ):
            return JSONResponse(
                {"error": "unauthorized_client", "error_description": "bad credentials"}, 401
            )
        token = secrets.token_urlsafe(24)
        self.state.tokens.add(token)
        return JSONResponse(
            {
                "access_token": token,
                "token_type": "bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "expires_in": 3600,
            }
        )

    def _refuse(self, request: Request, route: str) -> Response | None:
        self.state.requests[route] += 1
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer ") or header[7:] not in self.state.tokens:
            return _error(401, "NotAuthorizedException", "Not authorized")
        if request.path_params.get("prefix") != self.state.prefix:
            return _error(404, "NotFoundException", "Unable to find warehouse")
        if self.state.fail_with is not None:
            return _error(self.state.fail_with, "ServiceUnavailableException", "unavailable")
        return None

    # -- entities -----------------------------------------------------------------------------
    async def _namespace_exists(self, namespace: tuple[str, ...]) -> bool:
        if self.state.backend is None:
            return namespace in self.state.namespaces
        url = f"{self.state.backend}/v1/namespaces/{quote(UNIT.join(namespace), safe='')}"
        async with httpx.AsyncClient() as client:
            return (await client.get(url)).status_code == 200

    async def _table_exists(self, path: tuple[str, ...]) -> bool:
        if self.state.backend is None:
            return path in self.state.tables
        ns = quote(UNIT.join(path[:-1]), safe="")
        url = f"{self.state.backend}/v1/namespaces/{ns}/tables/{quote(path[-1], safe='')}"
        async with httpx.AsyncClient() as client:
            return (await client.head(url)).status_code in (200, 204)

    # -- policies -----------------------------------------------------------------------------
    async def policies(self, request: Request) -> Response:
        if refused := self._refuse(request, f"{request.method} policies"):
            return refused
        namespace = tuple(request.path_params["namespace"].split(UNIT))
        if not await self._namespace_exists(namespace):
            return _error(404, "NoSuchNamespaceException", f"Namespace does not exist: {namespace}")
        if request.method == "GET":
            wanted = request.query_params.get("policyType")
            ids = [
                {"namespace": list(ns), "name": name}
                for (ns, name), p in sorted(self.state.policies.items())
                if ns == namespace and (not wanted or p.policy_type == wanted)
            ]
            page, following = _page(ids, request)
            return JSONResponse({"next-page-token": following, "identifiers": page})
        return await self._create(request, namespace)

    async def _create(self, request: Request, namespace: tuple[str, ...]) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return Response(status_code=400)
        content = body.get("content")
        if not isinstance(body, dict) or (content is not None and not isinstance(content, str)):
            return Response(status_code=400)  # as Polaris: an object as content, empty body
        name, policy_type = body.get("name"), body.get("type")
        if not isinstance(name, str) or policy_type not in SYSTEM_TYPES:
            return _error(400, "IllegalArgumentException", "Invalid policy name or type")
        if content is None or not valid_content(policy_type, content):
            return _error(400, "InvalidPolicyException", "Invalid policy")
        with self.state.lock:
            if (namespace, name) in self.state.policies:
                return _error(409, "AlreadyExistsException", "The given policy already exists")
            stored = StoredPolicy(namespace, name, policy_type, body.get("description"), content)
            self.state.policies[(namespace, name)] = stored
        return JSONResponse({"policy": stored.wire()})

    def _stored(self, request: Request) -> StoredPolicy | None:
        namespace = tuple(request.path_params["namespace"].split(UNIT))
        return self.state.policies.get((namespace, request.path_params["name"]))

    async def policy(self, request: Request) -> Response:
        if refused := self._refuse(request, f"{request.method} policy"):
            return refused
        stored = self._stored(request)
        if stored is None:
            return _error(404, "NoSuchPolicyException", "The given policy does not exist")
        if request.method == "GET":
            return JSONResponse({"policy": stored.wire()})
        if request.method == "PUT":
            body = json.loads(await request.body())
            content = body.get("content", stored.content)
            if not isinstance(content, str) or not valid_content(stored.policy_type, content):
                return _error(400, "InvalidPolicyException", "Invalid policy")
            if body.get("current-policy-version") != stored.version:
                return _error(409, "PolicyVersionMismatchException", "version mismatch")
            stored.content = content
            stored.description = body.get("description", stored.description)
            stored.version += 1
            return JSONResponse({"policy": stored.wire()})
        key = (stored.namespace, stored.name)
        attached = [t for t, keys in self.state.mappings.items() if key in keys]
        if attached and request.query_params.get("detach-all") != "true":
            return _error(400, "PolicyInUseException", "The policy is attached to targets")
        for target in attached:
            self.state.mappings[target].remove(key)
        del self.state.policies[key]
        return Response(status_code=204)

    async def mapping(self, request: Request) -> Response:
        if refused := self._refuse(request, f"{request.method} mappings"):
            return refused
        stored = self._stored(request)
        if stored is None:
            return _error(404, "NoSuchPolicyException", "The given policy does not exist")
        body = json.loads(await request.body())
        target_type = body["target"]["type"]
        path = tuple(body["target"].get("path") or ())
        target: Target = (target_type, () if target_type == "catalog" else path)
        exists: Callable[[], Awaitable[bool]] = {
            "catalog": lambda: _true(),
            "namespace": lambda: self._namespace_exists(path),
            "table-like": lambda: self._table_exists(path),
        }[target_type]
        if not await exists():
            return _error(404, "NoSuchTargetException", "The given target does not exist")
        key = (stored.namespace, stored.name)
        with self.state.lock:
            attached = self.state.mappings.setdefault(target, [])
            if request.method == "POST":  # detach
                if key not in attached:
                    return _error(404, "NoSuchMappingException", "No such mapping")
                attached.remove(key)
                return Response(status_code=204)
            for other in attached:
                if other != key and self.state.policies[other].policy_type == stored.policy_type:
                    return _error(409, "ConflictPolicyAttachmentException", "already attached")
            if key not in attached:
                attached.append(key)
        return Response(status_code=204)

    async def applicable(self, request: Request) -> Response:
        if refused := self._refuse(request, "GET applicable-policies"):
            return refused
        raw_ns = request.query_params.get("namespace")
        table = request.query_params.get("target-name")
        namespace = tuple(raw_ns.split(UNIT)) if raw_ns else ()
        if table is not None and not namespace:
            return _error(400, "IllegalArgumentException", "target-name needs a namespace")
        if namespace and not await self._namespace_exists(namespace):
            return _error(404, "NoSuchNamespaceException", f"Namespace does not exist: {raw_ns}")
        if table is not None and not await self._table_exists((*namespace, table)):
            return _error(404, "NoSuchTableException", f"Table does not exist: {table}")
        chain: list[Target] = [("catalog", ())]
        chain += [("namespace", namespace[:d]) for d in range(1, len(namespace) + 1)]
        if table is not None:
            chain.append(("table-like", (*namespace, table)))
        winners: dict[str, tuple[int, StoredPolicy]] = {}
        for depth, target in enumerate(chain):
            for key in self.state.mappings.get(target, []):
                stored = self.state.policies[key]
                winners[stored.policy_type] = (depth, stored)  # deeper overrides
        wanted = request.query_params.get("policyType")
        entries = [
            stored.wire()
            | {"inherited": depth != len(chain) - 1, "namespace": list(stored.namespace)}
            for policy_type, (depth, stored) in sorted(winners.items())
            if not wanted or policy_type == wanted
        ]
        page, following = _page(entries, request)
        return JSONResponse({"next-page-token": following, "applicable-policies": page})

    # -- the Iceberg REST catalog, forwarded ----------------------------------------------------
    async def forward(self, request: Request) -> Response:
        if self.state.backend is None:
            return _error(404, "NotFoundException", "no Iceberg REST backend")
        path = request.path_params["path"]
        first, _, rest = path.partition("/")
        if first == self.state.prefix:
            path = rest
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("content-type", "if-none-match", "accept")
        }
        headers["accept-encoding"] = "identity"
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.request(
                request.method,
                f"{self.state.backend}/v1/{path}",
                params=list(request.query_params.multi_items()),
                headers=headers,
                content=await request.body(),
            )
        body = answer.content
        if path == "config" and answer.status_code == 200:
            config = answer.json()
            config.setdefault("overrides", {})["prefix"] = self.state.prefix
            body = json.dumps(config).encode()
        keep = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "etag")}
        return Response(body, answer.status_code, headers=keep)


async def _true() -> bool:
    return True


@dataclass
class RunningStandIn:
    """A stand-in listening on ``uri`` (the REST catalog URI Icepack is configured with)."""

    uri: str
    state: PolarisState

    @property
    def credential(self) -> str:
        return f"{self.state.client_id}:{self.state.client_secret}"


@contextmanager
def run_standin(
    prefix: str = "probe_cat",
    backend: str | None = None,
    client_id: str = "root",
    client_secret: str = "s3cr3t-polaris-standin",
) -> Iterator[RunningStandIn]:
    """The stand-in under uvicorn on a free loopback port, in a thread; stopped on exit."""
    state = PolarisState(prefix, client_id, client_secret, backend)
    port = free_port()
    config = uvicorn.Config(
        PolarisStandIn(state).app, host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the Polaris stand-in did not start")
        time.sleep(0.02)
    try:
        yield RunningStandIn(f"http://127.0.0.1:{port}/api/catalog", state)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
