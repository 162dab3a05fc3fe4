"""A credential-vending REST catalog for tests: a real HTTP server in front of a real Iceberg
REST catalog (SeaweedFS's) that answers like a vending catalog (Polaris, Unity) would.

It stands in because Polaris cannot run here, and neither real REST catalog the tests run
vends: Apache's REST fixture and SeaweedFS's both answer loadTable with an empty ``config``
whatever ``X-Iceberg-Access-Delegation`` says.

What it does, as a vending catalog does:
- its own OAuth2 client-credentials endpoint (``/v1/oauth/tokens``) with its own client id and
  secret; every other request must carry the token it issued (a client never learns the
  storage keys, only the catalog's);
- forwards each request to the backend with the backend's token (the catalog's own storage
  access, like Polaris's storage configuration);
- to a loadTable or createTable that asked for ``vended-credentials``, adds the storage keys to
  the answer's ``config`` (``s3.access-key-id``, ``s3.secret-access-key``, ``s3.endpoint``,
  ``s3.path-style-access``, ``client.region``) and to ``storage-credentials`` (a list of
  ``{"prefix", "config"}``), the two places the REST spec gives them; other answers, and
  loads that did not ask, carry no keys;
- records every request's method, path and headers, for the tests to check what was asked.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import requests

DELEGATION = "X-Iceberg-Access-Delegation"
# GET .../namespaces/{ns}/tables/{table} (loadTable) and POST .../namespaces/{ns}/tables
# (createTable) answer a LoadTableResult; POST .../tables/{table} (a commit) does not.
_LOAD = re.compile(r"^/v1/(?:[^/]+/)?namespaces/[^/]+/tables/[^/]+$")
_CREATE = re.compile(r"^/v1/(?:[^/]+/)?namespaces/[^/]+/tables$")
_HOP_BY_HOP = {"host", "authorization", "content-length", "accept-encoding", "connection"}


@dataclass(frozen=True)
class Seen:
    """One request the proxy received."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def is_load(self) -> bool:
        return self.method == "GET" and bool(_LOAD.match(self.path.split("?", 1)[0]))

    @property
    def asked_for_vending(self) -> bool:
        return "vended-credentials" in self.headers.get(DELEGATION.lower(), "")


@dataclass
class VendingProxy:
    """Serves on 127.0.0.1:``port`` once ``start`` ran; ``uri`` is the catalog URI to use."""

    backend_uri: str
    backend_client_id: str
    backend_client_secret: str
    vended: dict[str, str]  # the storage config a vending answer carries
    vend_prefix: str  # the location prefix the vended keys are for (``storage-credentials``)
    client_id: str = "icepack"
    client_secret: str = field(default_factory=lambda: f"proxyClient-{secrets.token_hex(6)}")
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._token = f"proxyToken-{secrets.token_hex(8)}"
        self._backend = requests.Session()
        self._backend_token: str | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def uri(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def credential(self) -> str:
        return f"{self.client_id}:{self.client_secret}"

    def start(self) -> VendingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy._handle(self)

            def do_POST(self) -> None:
                proxy._handle(self)

            def do_DELETE(self) -> None:
                proxy._handle(self)

            def do_HEAD(self) -> None:
                proxy._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                return  # request lines on stderr would be noise in the tests' captured output

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._backend.close()

    def loads(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.is_load]

    # --- request handling -------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in req.headers.items()}
        with self._lock:
            self.seen.append(Seen(req.command, req.path, headers))
        path = req.path.split("?", 1)[0]
        if path.endswith("/v1/oauth/tokens") and req.command == "POST":
            self._token_endpoint(req, body)
            return
        if headers.get("authorization") != f"Bearer {self._token}":
            self._reply(req, 401, _error("NotAuthorizedException", "not this catalog's token"))
            return
        forwarded = {k: v for k, v in req.headers.items() if k.lower() not in _HOP_BY_HOP}
        forwarded["Authorization"] = f"Bearer {self._backend_bearer()}"
        forwarded["Accept-Encoding"] = "identity"
        answer = self._backend.request(
            req.command, self.backend_uri + req.path, data=body, headers=forwarded, timeout=60
        )
        payload = answer.content
        vends = answer.status_code == 200 and DELEGATION.lower() in headers
        vends = vends and "vended-credentials" in headers[DELEGATION.lower()]
        is_result = (req.command == "GET" and _LOAD.match(path)) or (
            req.command == "POST" and _CREATE.match(path)
        )
        if vends and is_result:
            payload = self._with_credentials(payload)
        extra = {k: v for k, v in answer.headers.items() if k.lower() in ("etag", "content-type")}
        self._reply(req, answer.status_code, payload, extra)

    def _token_endpoint(self, req: BaseHTTPRequestHandler, body: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if (form.get("client_id"), form.get("client_secret")) != (
            self.client_id,
            self.client_secret,
        ):
            self._reply(req, 401, json.dumps({"error": "invalid_client"}).encode())
            return
        token = {
            "access_token": self._token,
            "token_type": "bearer",
            "expires_in": 3600,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }
        self._reply(req, 200, json.dumps(token).encode())

    def _backend_bearer(self) -> str:
        with self._lock:
            if self._backend_token is None:
                answer = self._backend.post(
                    f"{self.backend_uri}/v1/oauth/tokens",
                    data={
                        "grant_type": "client_credentials",
                        "client_id": self.backend_client_id,
                        "client_secret": self.backend_client_secret,
                        "scope": "PRINCIPAL_ROLE:ALL",
                    },
                    timeout=30,
                )
                answer.raise_for_status()
                self._backend_token = str(answer.json()["access_token"])
            return self._backend_token

    def _with_credentials(self, payload: bytes) -> bytes:
        result = json.loads(payload)
        result["config"] = {**result.get("config", {}), **self.vended}
        result["storage-credentials"] = [{"prefix": self.vend_prefix, "config": self.vended}]
        return json.dumps(result).encode()

    @staticmethod
    def _reply(
        req: BaseHTTPRequestHandler,
        status: int,
        payload: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        req.send_response(status)
        sent = {"Content-Type": "application/json", **(headers or {})}
        for key, value in sent.items():
            req.send_header(key, value)
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        if req.command != "HEAD" and payload:
            req.wfile.write(payload)


def _error(kind: str, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": 401}}).encode()
