"""Pure ASGI middleware: no request body larger than the configured limit reaches a handler.

The body is read here, chunk by chunk, before any handler parses it; the moment the running
total passes the limit the request is answered 413 (``BODY_TOO_LARGE``, naming the limit)
without reading further. A ``Content-Length`` above the limit is refused before reading at all;
a chunked body (no ``Content-Length``) is counted as it arrives. A body within the limit is
replayed to the app unchanged.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from icepack_gateway.errors import BodyTooLarge, error_response


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            await error_response(BodyTooLarge(self.max_bytes))(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nobody to answer
                return
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await error_response(BodyTooLarge(self.max_bytes))(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as usual

        await self.app(scope, replay, send)
