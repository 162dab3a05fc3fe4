"""Request ids: bound into logs, echoed to the caller."""

import httpx


async def test_every_response_carries_a_request_id(client: httpx.AsyncClient) -> None:
    mine = await client.get("/summary", headers={"X-Request-ID": "trace-me-42"})
    assert mine.headers["x-request-id"] == "trace-me-42"
    generated = await client.get("/summary", headers={"X-Request-ID": "bad id\nforged"})
    assert len(generated.headers["x-request-id"]) == 32  # replaced, not echoed
