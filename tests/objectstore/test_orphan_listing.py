"""Orphan listing on object stores goes through the table's FileIO (``prefix_listing``):
a Spark with Iceberg's AWS bundle has no Hadoop ``FileSystem`` for ``s3://``, so the
procedure's default listing fails there. Local and HDFS tables keep Hadoop's listing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.execution.procedure_calls import lists_through_file_io, procedure_args
from icepack_core.intents import parse_intent
from icepack_core.spark.sql import procedure_call
from icepack_core.types import TableRef

SEGMENT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/:?#"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
OBJECT_SCHEMES = ["s3", "s3a", "s3n", "S3A", "gs", "gcs", "abfs", "abfss", "wasbs", "oss"]
FILE_SYSTEM_SCHEMES = ["file", "hdfs", "viewfs", "webhdfs"]


@given(st.sampled_from(OBJECT_SCHEMES), SEGMENT, st.lists(SEGMENT, max_size=4))
def test_object_store_locations_list_through_file_io(
    scheme: str, bucket: str, parts: list[str]
) -> None:
    assert lists_through_file_io(f"{scheme}://{bucket}/{'/'.join(parts)}")


@given(st.sampled_from(FILE_SYSTEM_SCHEMES), st.lists(SEGMENT, min_size=1, max_size=4))
def test_file_system_locations_keep_hadoop_listing(scheme: str, parts: list[str]) -> None:
    assert not lists_through_file_io(f"{scheme}:///{'/'.join(parts)}")
    assert not lists_through_file_io("/" + "/".join(parts))


def test_an_unparseable_location_keeps_the_default() -> None:
    assert not lists_through_file_io("")
    assert not lists_through_file_io("relative/path")


def orphan_call(location: str) -> str:
    older = (datetime.now(UTC) - timedelta(days=4)).isoformat()
    intent = parse_intent({"action": "remove_orphan_files", "params": {"older_than": older}})
    name, args = procedure_args(intent, TableRef("lake", "ns", "t"), location=location)
    return procedure_call("lake", name, args)


def test_the_orphan_call_asks_for_prefix_listing_on_s3_only() -> None:
    on_s3 = orphan_call("s3a://warehouse/ns/t")
    assert "prefix_listing => true" in on_s3
    assert "location => 's3a://warehouse/ns/t'" in on_s3
    assert "prefix_mismatch_mode => 'ERROR'" in on_s3
    assert "prefix_listing" not in orphan_call("file:///tmp/warehouse/ns/t")
