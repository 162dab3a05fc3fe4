"""Bearer-token authentication for operator writes, as pure ASGI middleware.

The rule is by method, so no write endpoint can forget it: GET, HEAD and OPTIONS are open (the
read APIs, the UI and ``/metrics``); every other method needs ``Authorization: Bearer <token>``
naming a live token from ``icepack token create``. A refused request never reaches a handler:
401 for a missing or unknown token, 403 for a revoked one, with the usual JSON error body.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from icepack_core.tokens import TokenError, TokenStore
from icepack_gateway.errors import DATABASE_DOWN, DatabaseUnavailable, error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


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
    def __init__(self, app: ASGIApp, tokens: TokenStore) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        try:
            token = await self.tokens.verify(bearer(Headers(scope=scope)))
        except TokenError as exc:
            await error_response(exc)(scope, receive, send)
            return
        except DATABASE_DOWN:
            await error_response(DatabaseUnavailable(
                "cannot check the token: the Icepack database did not answer"))(
                scope, receive, send)
            return
        # Handlers and logs can tell who asked: request.state.token.
        scope.setdefault("state", {})["token"] = token
        await self.app(scope, receive, send)
