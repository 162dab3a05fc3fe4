"""Pure ASGI middleware: every request gets an id, bound into structlog's context (so each log
line of the request carries it) and echoed in the ``X-Request-ID`` response header."""

from __future__ import annotations

import re
import uuid

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
# Accept a caller's id only if it is short and plain, so it cannot forge log structure.
_SAFE_ID = re.compile(rb"^[A-Za-z0-9._-]{1,64}$")


class RequestIds:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(HEADER, b"")
        request_id = given.decode() if _SAFE_ID.match(given) else uuid.uuid4().hex

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (HEADER, request_id.encode())]
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id, path=scope.get("path")):
            await self.app(scope, receive, send_with_id)
