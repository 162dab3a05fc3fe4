"""Bearer-token authentication, as pure ASGI middleware.

The rule is by method and path, so no endpoint can forget it. Every write (any method but GET,
HEAD and OPTIONS) needs ``Authorization: Bearer <token>`` naming a live token from
``icepack token create``. Reads are open unless ``read_auth`` (``ICEPACK_GATEWAY_READ_AUTH``)
is on; then they need a token too, except the paths in ``OPEN_PATHS``/``OPEN_PREFIXES``: the
probes and ``/metrics`` (scraped by machines without tokens), and the UI's static files and the
OpenAPI document, which hold no data (the UI asks for a token and sends it with each call).
A token of scope ``read`` (``icepack token create NAME --scope read``) is accepted on reads and
on the ``READ_ONLY_WRITES`` (policy simulations: POSTs that change nothing) and refused on every
other write with 403 ``TOKEN_READ_ONLY``, so UI readers need not hold a write token.
A refused request never reaches a handler: 401 for a missing or unknown token, 403 for a
revoked or read-only one, with the usual JSON error body.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from icepack_core.access.tokens import TokenStore
from icepack_core.errors import TokenError, TokenReadOnly
from icepack_gateway.errors import DATABASE_DOWN, DatabaseUnavailable, error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/openapi.json", "/ui"})
OPEN_PREFIXES = ("/ui/",)
HOOK_PREFIX = "/hooks/"
# POSTs that only compute an answer (a body too large for a query string): a read token may.
READ_ONLY_WRITES = frozenset({"/policies/simulate", "/policies/simulate/fleet"})


def needs_token(method: str, path: str, read_auth: bool) -> bool:
    """Whether a request must carry a valid operator token. The hooks under ``/hooks/`` check
    their own token instead (``api_hooks``): operator tokens are no use there."""
    if path.startswith(HOOK_PREFIX):
        return False
    if method not in SAFE_METHODS:
        return True
    if not read_auth or method == "OPTIONS":
        return False
    return path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES)


def needs_write_scope(method: str, path: str) -> bool:
    """Whether a request changes something, so a read-only token must not make it."""
    return method not in SAFE_METHODS and path not in READ_ONLY_WRITES


def bearer(headers: Headers) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header (None when absent or not bearer)."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class BearerAuth:
    def __init__(self, app: ASGIApp, tokens: TokenStore, read_auth: bool = False) -> None:
        self.app = app
        self.tokens = tokens
        self.read_auth = read_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not needs_token(
            scope["method"], scope["path"], self.read_auth
        ):
            await self.app(scope, receive, send)
            return
        try:
            token = await self.tokens.verify(bearer(Headers(scope=scope)))
        except TokenError as exc:
            await error_response(exc)(scope, receive, send)
            return
        except DATABASE_DOWN:
            await error_response(
                DatabaseUnavailable("cannot check the token: the Icepack database did not answer")
            )(scope, receive, send)
            return
        if not token.may_write and needs_write_scope(scope["method"], scope["path"]):
            await error_response(TokenReadOnly(token.name, scope["method"], scope["path"]))(
                scope, receive, send
            )
            return
        # Handlers and logs can tell who asked: request.state.token.
        scope.setdefault("state", {})["token"] = token
        await self.app(scope, receive, send)
