"""The safety choke point on a real Postgres: holds, opt-outs, floors, orphan policy and
overlapping locations refuse, naming the rule, the table and the parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import ActionRefused
from icepack_core.intents import Intent, parse_intents
from icepack_core.safety.admission import admit
from icepack_core.safety.confinement import location_from_metadata
from icepack_core.safety.locations import locations_overlap, normalize_location

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
WH = "file:///lake/wh"


async def add(
    db: asyncpg.Pool,
    name: str,
    location: str | None,
    *,
    catalog: str = "lake",
    namespace: str = "db",
    properties: dict[str, str] | None = None,
) -> TableRow:
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location, properties,"
        " location) VALUES ($1, $2, $3, $4, $5::jsonb, $6) RETURNING id",
        catalog,
        namespace,
        name,
        f"{location or WH + '/elsewhere/' + name}/metadata/00001-x.metadata.json",
        properties or {},
        location,
    )
    return await table_row(db, table_id)


async def table_row(db: asyncpg.Pool, table_id: int) -> TableRow:
    row = await db.fetchrow(load_query("table_get"), table_id)
    assert row is not None
    return TableRow.from_record(row)


async def attach_orphan_policy(
    db: asyncpg.Pool, config: dict[str, object], catalog: str = "lake"
) -> None:
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, config) "
        "VALUES ('system.orphan-file-removal', 'catalog', $1, $2::jsonb)",
        catalog,
        config,
    )


def orphans(hours: float) -> list[Intent]:
    older = (NOW - timedelta(hours=hours)).isoformat()
    return parse_intents([{"action": "remove_orphan_files", "params": {"older_than": older}}])


def expire(hours: float) -> list[Intent]:
    older = (NOW - timedelta(hours=hours)).isoformat()
    return parse_intents([{"action": "expire_snapshots", "params": {"older_than": older}}])


async def refused(db: asyncpg.Pool, table: TableRow, intents: list[Intent]) -> ActionRefused:
    with pytest.raises(ActionRefused) as exc:
        await admit(db, table, intents, now=NOW, expiry_min_age_hours=1)
    return exc.value


async def test_held_and_opted_out_tables_are_refused(db: asyncpg.Pool) -> None:
    held = await add(db, "held", f"{WH}/db/held")
    await db.execute(
        load_query("table_hold_set"),
        held.id,
        {"reason": "rewrite snapshot 7 changed the live contents"},
    )
    assert held.id is not None
    held = await table_row(db, held.id)
    rewrite = parse_intents([{"action": "rewrite_data_files"}])
    error = await refused(db, held, rewrite)
    assert (error.rule, error.conflict) == ("TABLE_HELD", True)
    assert "lake.db.held is on hold: rewrite snapshot 7" in str(error)

    out = await add(db, "out", f"{WH}/db/out", properties={"icepack.maintenance.enabled": "false"})
    assert (await refused(db, out, rewrite)).rule == "TABLE_OPTED_OUT"
    bad = await add(db, "bad", f"{WH}/db/bad", properties={"icepack.no-such-knob": "1"})
    error = await refused(db, bad, rewrite)
    assert error.rule == "POLICY_INVALID" and "icepack.no-such-knob" in str(error)


async def test_expiry_floor(db: asyncpg.Pool) -> None:
    table = await add(db, "t", f"{WH}/db/t")
    error = await refused(db, table, expire(0.5))
    assert error.rule == "SAFETY_FLOOR" and error.field == "actions[0].params.older_than"
    assert not error.conflict
    await admit(db, table, expire(1.5), now=NOW, expiry_min_age_hours=1)


@pytest.mark.parametrize(
    ("value", "enabled"),
    [(None, True), ("true", True), ("TRUE", True), ("false", False), ("no", False), ("", False)],
)
async def test_expiry_and_orphan_removal_respect_gc_enabled_as_iceberg_reads_it(
    db: asyncpg.Pool, value: str | None, enabled: bool
) -> None:
    """Iceberg deletes a table's files only when ``gc.enabled`` parses as true
    (``Boolean.parseBoolean``: anything but a case-insensitive ``true`` is false)."""
    properties = {} if value is None else {"gc.enabled": value}
    table = await add(db, "t", f"{WH}/db/t", properties=properties)
    await attach_orphan_policy(db, {})
    rewrite = parse_intents([{"action": "rewrite_data_files"}])
    await admit(db, table, rewrite, now=NOW, expiry_min_age_hours=1)  # deletes nothing
    for intents in (expire(2), orphans(100)):
        if enabled:
            await admit(db, table, intents, now=NOW, expiry_min_age_hours=1)
            continue
        error = await refused(db, table, intents)
        assert error.rule == "GC_DISABLED" and error.conflict
        assert f"gc.enabled={value!r}" in str(error) and "lake.db.t" in str(error)


async def test_orphan_removal_needs_an_operator_policy_a_property_cannot_enable_it(
    db: asyncpg.Pool,
) -> None:
    table = await add(db, "t", f"{WH}/db/t", properties={"icepack.orphan-removal.enabled": "true"})
    error = await refused(db, table, orphans(100))
    assert error.rule == "ORPHAN_REMOVAL_NOT_ENABLED"
    assert "property icepack.orphan-removal.enabled=true ignored" in str(error)
    await attach_orphan_policy(db, {})
    admission = await admit(db, table, orphans(100), now=NOW, expiry_min_age_hours=1)
    assert admission.location == f"{WH}/db/t"
    # ... and a property can still turn it off.
    off = await add(
        db, "off", f"{WH}/db/off", properties={"icepack.orphan-removal.enabled": "false"}
    )
    assert (await refused(db, off, orphans(100))).rule == "ORPHAN_REMOVAL_NOT_ENABLED"


async def test_orphan_age_floor_is_72h_unless_the_operator_policy_allows_less(
    db: asyncpg.Pool,
) -> None:
    table = await add(db, "t", f"{WH}/db/t")
    await attach_orphan_policy(db, {})
    error = await refused(db, table, orphans(1))
    assert error.rule == "SAFETY_FLOOR" and "72 h floor" in str(error)
    await db.execute(
        "UPDATE icepack.policies SET config = $1::jsonb",
        {"older_than_hours": 2, "allow_unsafe_older_than": True},
    )
    await admit(db, table, orphans(3), now=NOW, expiry_min_age_hours=1)
    assert (await refused(db, table, orphans(1))).rule == "SAFETY_FLOOR"


@pytest.mark.parametrize(
    ("other_location", "overlaps"),
    [
        (f"{WH}/db/t", True),  # equal
        (f"{WH}/db/t/", True),  # equal, trailing separator
        (f"{WH}/db/t/nested", True),  # under the target
        (f"{WH}/db", True),  # over the target
        ("/lake/wh/db/t/x", True),  # a plain local path is file://
        (f"{WH}/db/t_v2", False),  # a sibling sharing a prefix
        (f"{WH}/db/other", False),
    ],
)
async def test_orphan_removal_refuses_overlapping_locations_in_any_catalog(
    db: asyncpg.Pool, other_location: str, overlaps: bool
) -> None:
    table = await add(db, "t", f"{WH}/db/t")
    await attach_orphan_policy(db, {})
    await add(db, "neighbour", other_location, catalog="other_catalog", namespace="ns")
    if overlaps:
        error = await refused(db, table, orphans(100))
        assert error.rule == "LOCATION_OVERLAP" and error.conflict
        assert "other_catalog.ns.neighbour" in str(error)
    else:
        admission = await admit(db, table, orphans(100), now=NOW, expiry_min_age_hours=1)
        assert admission.location == f"{WH}/db/t"


@pytest.mark.parametrize(
    ("properties", "metadata_dir", "named"),
    [
        ({"write.data.path": f"{WH}/db/t/data/shared"}, None, "write.data.path"),
        ({"write.object-storage.path": "s3a://elsewhere/x"}, None, None),
        ({"write.object-storage.path": f"{WH}/db"}, None, "write.object-storage.path"),
        ({"write.metadata.path": f"{WH}/db/t/meta"}, None, "write.metadata.path"),
        ({"write.folder-storage.path": "/lake/wh/db/t/old"}, None, "write.folder-storage.path"),
        ({}, f"{WH}/db/t/other-metadata", "metadata file"),
        ({"write.data.path": f"{WH}/db/t_v2/data"}, f"{WH}/db/t_v2/metadata", None),
    ],
)
async def test_orphan_removal_refuses_another_tables_files_under_the_location(
    db: asyncpg.Pool, properties: dict[str, Any], metadata_dir: str | None, named: str | None
) -> None:
    """A table elsewhere whose data, metadata or object-storage path lies in the target's
    location has its files there too: they would look like orphans."""
    table = await add(db, "t", f"{WH}/db/t")
    await attach_orphan_policy(db, {})
    other = await add(db, "writer", f"{WH}/other/writer", namespace="ns", properties=properties)
    if metadata_dir is not None:
        await db.execute(
            "UPDATE icepack.tables SET metadata_location = $2 WHERE id = $1",
            other.id,
            f"{metadata_dir}/00009-y.metadata.json",
        )
    if named is None:
        admission = await admit(db, table, orphans(100), now=NOW, expiry_min_age_hours=1)
        assert admission.location == f"{WH}/db/t"
        return
    error = await refused(db, table, orphans(100))
    assert error.rule == "LOCATION_OVERLAP" and f"({named})" in str(error)
    assert "lake.ns.writer" in str(error)


async def test_dropped_tables_do_not_block_and_unknown_locations_do(db: asyncpg.Pool) -> None:
    table = await add(db, "t", f"{WH}/db/t")
    await attach_orphan_policy(db, {})
    gone = await add(db, "gone", f"{WH}/db/t")
    await db.execute("UPDATE icepack.tables SET dropped_at = now() WHERE id = $1", gone.id)
    await admit(db, table, orphans(100), now=NOW, expiry_min_age_hours=1)
    # Not inspected yet and laid out so that its root cannot be derived: refuse.
    await db.execute(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('lake', 'db', 'mystery')"
    )
    error = await refused(db, table, orphans(100))
    assert error.rule == "LOCATION_UNKNOWN" and "lake.db.mystery" in str(error)


@pytest.mark.parametrize(
    "spelling",
    [
        "file:/lake/wh//db/t/sub",
        "file:/lake/wh/x/../db/t/sub",
        "file:/lake/wh/./db/t",
        "/lake/wh/db/t/",
    ],
)
async def test_orphan_removal_sees_every_spelling_of_an_overlap(
    db: asyncpg.Pool, spelling: str
) -> None:
    """Issue 28: ``//``, ``..`` and ``.`` spell the same directory to the file system."""
    table = await add(db, "t", f"{WH}/db/t")
    await attach_orphan_policy(db, {})
    await add(db, "spelled", spelling, namespace="ns")
    error = await refused(db, table, orphans(100))
    assert error.rule == "LOCATION_OVERLAP" and "lake.ns.spelled" in str(error)


async def test_orphan_removal_refuses_until_every_catalog_finished_a_listing(
    db: asyncpg.Pool,
) -> None:
    """A table created while discovery's first pass runs is unknown: it could lie anywhere."""
    table = await add(db, "t", f"{WH}/db/t")
    await attach_orphan_policy(db, {})
    await db.execute(load_query("catalog_status_listing_started"), ["lake", "other_catalog"])
    await db.execute(load_query("catalog_status_ok"), "lake", 1, [], {}, 0.0)
    error = await refused(db, table, orphans(100))
    assert error.rule == "CATALOGS_NOT_LISTED"
    assert "other_catalog (not listed since discovery started)" in str(error)
    assert "lake (" not in str(error)
    await db.execute(load_query("catalog_status_ok"), "other_catalog", 0, [], {}, 0.0)
    admission = await admit(db, table, orphans(100), now=NOW, expiry_min_age_hours=1)
    assert admission.location == f"{WH}/db/t"


def test_location_helpers() -> None:
    assert normalize_location("s3a://Bucket/wh/t/") == "s3://bucket/wh/t"
    assert normalize_location("/wh/t") == normalize_location("file:///wh/t") == "file:///wh/t"
    assert location_from_metadata("s3://b/wh/t/metadata/v3.metadata.json") == "s3://b/wh/t"
    assert location_from_metadata("s3://b/custom/v3.metadata.json") is None


segment = st.text(alphabet="abt_-.0", min_size=1, max_size=4).filter(lambda s: s not in (".", ".."))


@given(st.lists(segment, min_size=1, max_size=4), st.lists(segment, min_size=1, max_size=4))
def test_overlap_is_exactly_a_path_prefix_at_a_separator(a: list[str], b: list[str]) -> None:
    x, y = "s3://bucket/" + "/".join(a), "s3a://bucket/" + "/".join(b)
    expected = a == b[: len(a)] or b == a[: len(b)]
    assert locations_overlap(x, y) is expected
    assert locations_overlap(y, x) is expected
