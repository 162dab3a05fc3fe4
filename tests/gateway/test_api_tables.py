"""Read APIs of the fleet: listing, paging, filters, sort, one table's views, 404s and 422s."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from tests.gateway.seed import Fleet, seed_many

T = "/tables/demo/web/clicks"


async def walk(client: httpx.AsyncClient, url: str) -> list[dict[str, Any]]:
    items, cursor = [], None
    while True:
        sep = "&" if "?" in url else "?"
        r = await client.get(url + (f"{sep}cursor={cursor}" if cursor else ""))
        assert r.status_code == 200, r.text
        page = r.json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


async def test_tables_lists_worst_first_by_default(client: httpx.AsyncClient, fleet: Fleet) -> None:
    r = await client.get("/tables")
    assert r.status_code == 200
    items = r.json()["items"]
    assert [t["name"] for t in items] == ["clicks", "orders", "users"]  # dropped 'gone' absent
    assert items[0]["health"] == "critical" and items[0]["score"] == 22
    assert items[0]["issues"] == [{"code": "SMALL_FILES", "severity": "critical"}]
    assert items[0]["metrics"]["small_file_count"] == 340


@pytest.mark.parametrize(
    "sort,expected",
    [
        ("score", ["clicks", "orders", "users"]),
        ("-score", ["users", "orders", "clicks"]),
        ("name", ["users", "orders", "clicks"]),  # crm, sales, web
    ],
)
async def test_tables_sort(
    client: httpx.AsyncClient, fleet: Fleet, sort: str, expected: list[str]
) -> None:
    r = await client.get(f"/tables?sort={sort}")
    assert [t["name"] for t in r.json()["items"]] == expected


@pytest.mark.parametrize(
    "query,expected",
    [
        ("health=critical", ["clicks"]),
        ("health=healthy", ["orders", "users"]),
        ("health=unknown", []),
        ("issue=SMALL_FILES", ["clicks"]),
        ("namespace=crm", ["users"]),
        ("catalog=demo&namespace=sales", ["orders"]),
        ("catalog=other", []),
        ("q=CLICK", ["clicks"]),
        ("q=demo.sales", ["orders"]),
    ],
)
async def test_tables_filters(
    client: httpx.AsyncClient, fleet: Fleet, query: str, expected: list[str] | list[Any]
) -> None:
    r = await client.get(f"/tables?{query}")
    assert r.status_code == 200, r.text
    assert [t["name"] for t in r.json()["items"]] == expected


@pytest.mark.parametrize("sort", ["score", "-score", "name"])
async def test_cursor_walks_every_row_exactly_once(
    client: httpx.AsyncClient, db: asyncpg.Pool, sort: str
) -> None:
    await seed_many(db, 237)
    items = await walk(client, f"/tables?limit=20&sort={sort}")
    ids = [t["id"] for t in items]
    assert len(ids) == 237 and len(set(ids)) == 237
    if sort == "score":
        scores = [t["score"] for t in items]
        assert scores == sorted(scores)
    if sort == "-score":
        scores = [t["score"] for t in items]
        assert scores == sorted(scores, reverse=True)
    # Filtered walks see exactly the filtered rows.
    warning = await walk(client, f"/tables?limit=7&sort={sort}&health=warning")
    expected = await db.fetchval(
        "SELECT count(*) FROM icepack.v_table_health WHERE health = 'warning'"
    )
    assert len({t["id"] for t in warning}) == len(warning) == expected


@pytest.mark.parametrize(
    "query,parameter",
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("limit=99999999999999999999999", "limit"),
        ("health=sick", "health"),
        ("sort=size", "sort"),
        ("issue=small files", "issue"),
        ("heatlh=critical", "heatlh"),
        ("catalog=%00", "catalog"),
    ],
)
async def test_bad_parameters_are_422_naming_them(
    client: httpx.AsyncClient, fleet: Fleet, query: str, parameter: str
) -> None:
    r = await client.get(f"/tables?{query}")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "INVALID_PARAMETER" and f"'{parameter}'" in body["message"]


async def test_a_cursor_of_another_sort_is_refused(
    client: httpx.AsyncClient, db: asyncpg.Pool
) -> None:
    await seed_many(db, 30)
    cursor = (await client.get("/tables?limit=5&sort=name")).json()["next_cursor"]
    r = await client.get(f"/tables?limit=5&sort=score&cursor={cursor}")
    assert r.status_code == 400 and "cursor" in r.json()["message"]
    assert r.json()["code"] == "INVALID_CURSOR"


async def test_summary_counts(client: httpx.AsyncClient, fleet: Fleet) -> None:
    body = (await client.get("/summary")).json()
    assert body["tables"] == 3
    assert body["health"] == {"healthy": 2, "warning": 0, "critical": 1, "unknown": 0}
    assert body["issues"] == {"SMALL_FILES": 1}
    assert body["jobs"] == {"queued": 1, "running": 0, "succeeded": 1, "failed": 1, "cancelled": 0}


async def test_table_detail(client: httpx.AsyncClient, fleet: Fleet) -> None:
    body = (await client.get(T)).json()
    assert body["table"]["id"] == fleet.tables["web.clicks"]
    assert body["health"]["health"] == "critical"
    assert body["status"]["status"]["data_file_count"] == 360
    assert body["recommendation"]["actions"][0]["action"] == "rewrite_data_files"
    assert body["latest_job"]["id"] == fleet.jobs["queued"]


async def test_table_status_health_and_recommendation(
    client: httpx.AsyncClient, fleet: Fleet
) -> None:
    status = (await client.get(f"{T}/status")).json()
    assert status["status"]["small_file_count"] == 340
    health = (await client.get(f"{T}/health")).json()
    assert health["score"] == 22
    assert health["issues"][0] | {"value": 340, "threshold": 101} == health["issues"][0]
    rec = (await client.get(f"{T}/maintenance/recommendation")).json()
    assert rec["actions"][0]["reason"].startswith("340 small files")


async def test_status_history_is_oldest_first_and_pages_back(
    client: httpx.AsyncClient, fleet: Fleet
) -> None:
    body = (await client.get(f"{T}/status/history")).json()
    assert [p["data_file_count"] for p in body["items"]] == [60, 120, 180, 240, 300, 360]
    assert body["items"][-1]["delete_file_count"] == 15
    first = (await client.get(f"{T}/status/history?limit=4")).json()
    assert [p["data_file_count"] for p in first["items"]] == [180, 240, 300, 360]
    rest = (await client.get(f"{T}/status/history?limit=4&cursor={first['next_cursor']}")).json()
    assert [p["data_file_count"] for p in rest["items"]] == [60, 120]
    assert rest["next_cursor"] is None


async def test_table_jobs_and_history(client: httpx.AsyncClient, fleet: Fleet) -> None:
    jobs = (await client.get("/tables/demo/sales/orders/jobs")).json()["items"]
    assert [j["id"] for j in jobs] == [fleet.jobs["done"]]
    history = (await client.get("/tables/demo/sales/orders/history")).json()["items"]
    impact = history[0]["job_actions"][0]["impact"]
    assert impact["before"] | {"data_file_count": 200, "small_file_count": 120} == impact["before"]
    assert impact["after"] | {"data_file_count": 90, "small_file_count": 10} == impact["after"]


@pytest.mark.parametrize(
    "suffix",
    [
        "",
        "/status",
        "/status/history",
        "/health",
        "/maintenance/recommendation",
        "/jobs",
        "/history",
    ],
)
async def test_unknown_table_is_404(client: httpx.AsyncClient, fleet: Fleet, suffix: str) -> None:
    r = await client.get(f"/tables/demo/nope/missing{suffix}")
    assert r.status_code == 404
    assert r.json()["code"] == "TABLE_NOT_FOUND"


@pytest.mark.parametrize(
    "suffix,code",
    [
        ("/status", "NO_STATUS"),
        ("/health", "NO_HEALTH"),
        ("/maintenance/recommendation", "NO_RECOMMENDATION"),
    ],
)
async def test_a_table_without_rows_says_which(
    client: httpx.AsyncClient, db: asyncpg.Pool, suffix: str, code: str
) -> None:
    await db.execute(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('demo', 'new', 'fresh')"
    )
    r = await client.get(f"/tables/demo/new/fresh{suffix}")
    assert r.status_code == 404 and r.json()["code"] == code
    detail = (await client.get("/tables/demo/new/fresh")).json()
    assert detail["health"] is None and detail["status"] is None


async def test_a_dropped_table_stays_readable(client: httpx.AsyncClient, fleet: Fleet) -> None:
    body = (await client.get("/tables/demo/old/gone")).json()
    assert body["table"]["dropped_at"] is not None


async def test_unknown_route_is_json_404(client: httpx.AsyncClient) -> None:
    r = await client.get("/nope")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    r = await client.delete("/tables")
    assert r.status_code in (401, 405)
