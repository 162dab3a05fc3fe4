"""The confinement rule: what an action may delete or move, and when it refuses to say.

The rule itself is pure (``Confinement``); ``load_confinement`` reads every known table and the
catalogs' listing state from a real Postgres, written by discovery's own queries.
"""

from __future__ import annotations

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.db.queries import load_query
from icepack_core.errors import ActionRefused, DeletionOutsideTable
from icepack_core.execution.ledger.expiry_live import path_key
from icepack_core.safety.confinement import (
    Confinement,
    Root,
    load_confinement,
    refuse_foreign,
    table_roots,
)

SANDBOX = "lake.sandbox.t"
PROD = "lake.prod.orders"


def rule(*others: Root, own: list[Root] | None = None) -> Confinement:
    mine = own if own is not None else table_roots(SANDBOX, "s3://lake/sandbox/t", None, {})
    return Confinement(SANDBOX, mine, list(others))


def test_own_files_pass_and_another_table_s_are_named() -> None:
    confinement = rule(*table_roots(PROD, "s3://lake/prod/orders", None, {}))
    assert confinement.foreign("s3a://lake/sandbox/t/data/f.parquet") is None
    prod = confinement.foreign("s3://lake/prod/orders/data/f.parquet")
    assert prod is not None and prod.owner == PROD and prod.owner_root == "s3://lake/prod/orders"
    stray = confinement.foreign("s3://lake/elsewhere/f.parquet")
    assert stray is not None and stray.owner is None and "outside every root" in stray.reason


@pytest.mark.parametrize(
    "spelling",
    [
        "s3://lake/prod//orders/data/f.parquet",
        "s3a://lake/prod/x/../orders/data/f.parquet",
        "s3n://LAKE/prod/./orders/data/f.parquet",
        "s3://lake/sandbox/t/../../prod/orders/data/f.parquet",
        "s3://lake/sandbox/t?/../../prod/orders/data/f.parquet",
    ],
)
def test_no_spelling_of_another_table_s_file_passes(spelling: str) -> None:
    confinement = rule(*table_roots(PROD, "s3://lake/prod/orders", None, {}))
    found = confinement.foreign(spelling)
    assert found is not None


def test_dot_segments_are_refused_even_inside_the_table() -> None:
    """S3FileIO deletes the key as spelled, Hadoop resolves it: the two disagree on the file."""
    found = rule().foreign("s3://lake/sandbox/t/data/../data/f.parquet")
    assert found is not None and "'..'" in found.reason


def test_write_paths_and_granted_roots_are_own_but_never_another_table_s() -> None:
    own = table_roots(
        SANDBOX,
        "s3://lake/sandbox/t",
        "s3://meta/sandbox/t/v3.metadata.json",
        {"write.data.path": "s3://data/sandbox/t", "write.object-storage.path": "s3://objs/t"},
    )
    own.append(Root(SANDBOX, "root granted by an operator policy", "s3://legacy/hive/t"))
    prod = table_roots(
        PROD, "s3://lake/prod/orders", None, {"write.data.path": "s3://legacy/hive/t/p"}
    )
    confinement = rule(*prod, own=own)
    for path in (
        "s3://data/sandbox/t/part-0.parquet",
        "s3://meta/sandbox/t/v2.metadata.json",
        "s3://objs/t/ab/cd/f.parquet",
        "s3://legacy/hive/t/x.parquet",
    ):
        assert confinement.foreign(path) is None, path
    nested = confinement.foreign("s3://legacy/hive/t/p/f.parquet")
    assert nested is not None and nested.owner == PROD and "write.data.path" in nested.reason


def test_a_table_nested_in_the_location_owns_its_subtree_and_an_empty_authority_matches_any() -> (
    None
):
    inner = table_roots("lake.sandbox.inner", "s3://lake/sandbox/t/inner", None, {})
    confinement = rule(*inner)
    assert confinement.foreign("s3://lake/sandbox/t/data/f") is None
    assert confinement.foreign("s3://lake/sandbox/t/inner/data/f") is not None
    hdfs = Confinement(SANDBOX, table_roots(SANDBOX, "hdfs://nn/wh/t", None, {}),
                       table_roots(PROD, "hdfs:///wh/prod", None, {}))  # fmt: skip
    assert hdfs.foreign("hdfs://nn:8020/wh/t/f") is None
    assert hdfs.foreign("hdfs://nn/wh/prod/f") is not None


def test_refuse_foreign_lists_the_paths_and_the_tables_they_belong_to() -> None:
    confinement = rule(*table_roots(PROD, "s3://lake/prod/orders", None, {}))
    paths = [f"s3://lake/prod/orders/data/{i}.parquet" for i in range(250)]
    with pytest.raises(DeletionOutsideTable) as caught:
        refuse_foreign(confinement, ["s3://lake/sandbox/t/data/own.parquet", *paths], "x")
    evidence = caught.value.evidence
    assert evidence["tables"] == [PROD] and evidence["foreign_count"] == 250
    foreign = evidence["foreign"]
    assert isinstance(foreign, list)
    assert len(foreign) == 200 and foreign[0]["table"] == PROD
    assert PROD in str(caught.value)


segment = st.text(alphabet="abt_-0", min_size=1, max_size=3)


@given(st.lists(segment, min_size=1, max_size=4), st.lists(segment, min_size=1, max_size=4))
def test_a_path_is_confined_exactly_when_it_is_under_the_own_root_and_not_the_other(
    a: list[str], b: list[str]
) -> None:
    own, other = "s3://b/" + "/".join(a), "s3://b/" + "/".join(b)
    confinement = Confinement(SANDBOX, table_roots(SANDBOX, own, None, {}),
                              table_roots(PROD, other, None, {}))  # fmt: skip
    path = own + "/f"
    under_other = [*a, "f"][: len(b)] == b
    assert (confinement.foreign(path) is None) is (not under_other)


def test_the_ledger_check_compares_s3_and_s3a_as_one_file() -> None:
    """Expiry's live check (``expiry_live``) compares a recorded path with a kept snapshot's
    through ``path_key``: two spellings of one file are one key, another file is not."""
    assert path_key("s3://lake/t/data/a.parquet") == path_key("s3a://lake/t/data/a.parquet")
    assert path_key("s3://lake/t/metadata//m1.avro") == path_key("s3://lake/t/metadata/m1.avro")
    assert path_key("s3://lake/t/data/gone.parquet") != path_key("s3a://lake/t/data/a.parquet")


async def add_table(db: asyncpg.Pool, namespace: str, name: str, metadata_location: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location) "
        "VALUES ('lake', $1, $2, $3) RETURNING id",
        namespace,
        name,
        metadata_location,
    )
    return table_id


async def test_load_confinement_refuses_while_a_catalog_is_unlisted_or_failing(
    db: asyncpg.Pool,
) -> None:
    own_id = await add_table(db, "sandbox", "t", "s3://lake/sandbox/t/metadata/v1.metadata.json")
    await add_table(db, "prod", "orders", "s3://lake/prod/orders/metadata/v9.metadata.json")
    own = table_roots(SANDBOX, "s3://lake/sandbox/t", None, {})

    await db.execute(load_query("catalog_status_listing_started"), ["lake", "other"])
    with pytest.raises(ActionRefused) as caught:
        await load_confinement(db, own_id, SANDBOX, own)
    assert caught.value.rule == "CATALOGS_NOT_LISTED"
    assert "lake (not listed since discovery started)" in str(caught.value)
    assert "other (not listed" in str(caught.value)

    for catalog in ("lake", "other"):
        await db.execute(load_query("catalog_status_ok"), catalog, 1, [], {}, 0.0)
    confinement = await load_confinement(db, own_id, SANDBOX, own)
    foreign = confinement.foreign("s3://lake/prod/orders/data/f")
    assert foreign is not None and foreign.owner == PROD

    await db.execute(load_query("catalog_status_error"), "other", "connection refused")
    with pytest.raises(ActionRefused, match=r"other \(its last listing failed\)"):
        await load_confinement(db, own_id, SANDBOX, own)


async def test_load_confinement_refuses_a_table_whose_location_is_unknown(db: asyncpg.Pool) -> None:
    own_id = await add_table(db, "sandbox", "t", "s3://lake/sandbox/t/metadata/v1.metadata.json")
    await add_table(db, "prod", "mystery", "s3://lake/custom/v1.metadata.json")
    own = table_roots(SANDBOX, "s3://lake/sandbox/t", None, {})
    with pytest.raises(ActionRefused) as caught:
        await load_confinement(db, own_id, SANDBOX, own)
    assert caught.value.rule == "LOCATION_UNKNOWN" and "lake.prod.mystery" in str(caught.value)


def test_only_an_operator_policy_grants_roots_outside_the_location() -> None:
    from icepack_core.errors import PolicyError
    from icepack_core.policy import PolicyAttachment, resolve

    granted = PolicyAttachment(
        "system.snapshot-expiry",
        "table",
        "lake",
        "sandbox",
        "t",
        True,
        {"delete_outside_location": ["s3://legacy/hive/t"]},
    )
    policy = resolve([granted], "sandbox", "t", {})
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.delete_outside_location == ["s3://legacy/hive/t"]
    with pytest.raises(PolicyError, match="unknown table property"):
        resolve([], "sandbox", "t", {"icepack.snapshot-expiry.delete-outside-location": "s3://x"})
    bad = PolicyAttachment(
        "system.snapshot-expiry", "catalog", "lake", None, None, True,
        {"delete_outside_location": ["relative/dir"]},
    )  # fmt: skip
    with pytest.raises(PolicyError, match=r"delete_outside_location\[0\].*'relative/dir'"):
        resolve([bad], "sandbox", "t", {})
