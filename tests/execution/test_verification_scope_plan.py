"""The pure parts of the scoped verification: reading a physical plan and the partition layout.

The plan texts are Spark 3.5 / Iceberg 1.10 ``EXPLAIN`` output as measured; the Spark tests
(``tests/execution/test_verification_scope.py``) exercise the same code against a live plan.
"""

from __future__ import annotations

from icepack_core.execution.scoping.partition_filter import (
    PartitionColumn,
    identity_columns,
    transform_columns,
)
from icepack_core.execution.verification.scope import has_post_scan_filter, layout_from_describe

PRUNED = (
    "== Physical Plan ==\nAdaptiveSparkPlan isFinalPlan=false\n"
    "+- HashAggregate(keys=[], functions=[count(1), sum(xxhash64(id#185L, 42))])\n"
    "   +- Exchange SinglePartition, ENSURE_REQUIREMENTS, [plan_id=210]\n"
    "      +- HashAggregate(keys=[], functions=[partial_count(1)])\n"
    "         +- Project [id#185L]\n"
    "            +- BatchScan icepack.x.t[id#185L, part#186] icepack.x.t (branch=null) "
    "[filters=(part = 'a' OR part IS NULL), groupedBy=] RuntimeFilters: []\n"
)
ROW_FILTER = (
    "== Physical Plan ==\nAdaptiveSparkPlan isFinalPlan=false\n+- Union\n"
    "   :- HashAggregate(keys=[], functions=[count(1)])\n"
    "   :  +- Project [id#1L]\n"
    "   :     +- Filter (isnotnull(ts#3) AND (ts#3 = 2024-01-01 10:00:00))\n"
    "   :        +- BatchScan icepack.x.d[id#1L, ts#3] icepack.x.d [filters=ts IS NOT NULL, "
    "ts = 1704103200000000, groupedBy=] RuntimeFilters: []\n"
)


def test_a_filter_operator_anywhere_in_the_plan_is_seen() -> None:
    assert has_post_scan_filter(ROW_FILTER)
    assert has_post_scan_filter("(2) Filter [codegen id : 1]\nInput [1]: [id#1L]")  # formatted
    assert has_post_scan_filter("*(1) Filter isnotnull(x#1)")


def test_iceberg_pushed_filters_and_runtime_filters_are_not_a_filter_operator() -> None:
    assert not has_post_scan_filter(PRUNED)
    assert not has_post_scan_filter("+- BatchScan t [filters=x = 1] RuntimeFilters: [Filter]")


def describe(partition_type: str, partitioning: list[tuple[str, str]]) -> list[dict[str, str]]:
    rows = [{"col_name": "id", "data_type": "bigint"}, {"col_name": "part", "data_type": "string"}]
    rows += [{"col_name": n, "data_type": t} for n, t in partitioning]
    return [
        *rows,
        {"col_name": "", "data_type": ""},
        {"col_name": "# Metadata Columns", "data_type": ""},
        {"col_name": "_spec_id", "data_type": "int"},
        {"col_name": "_partition", "data_type": partition_type},
    ]


def test_layout_reads_identity_columns_and_whether_any_spec_is_partitioned() -> None:
    flat = describe("struct<>", [])
    assert layout_from_describe(flat, identity_columns(flat)).partitioned is False
    assert identity_columns(flat) == []
    identity = describe(
        "struct<part:string>",
        [("# Partition Information", ""), ("# col_name", "data_type"), ("part", "string")],
    )
    layout = layout_from_describe(identity, identity_columns(identity))
    assert layout.partitioned and [c.field_name for c in layout.columns or []] == ["part"]
    # Unpartitioned now, partitioned before: the old spec's tuple field is still there.
    evolved = describe("struct<part:string>", [])
    assert layout_from_describe(evolved, identity_columns(evolved)).partitioned is True
    transform = describe("struct<ts_day:date>", [("# Partitioning", ""), ("Part 0", "days(ts)")])
    assert layout_from_describe(transform, identity_columns(transform)).columns is None


def test_transforms_are_read_from_the_partitioning_section_with_default_field_names() -> None:
    rows = describe(
        "struct<ts_day:date,id_bucket:int,part_trunc:string,part:string>",
        [
            ("ts", "timestamp"),
            ("", ""),
            ("# Partitioning", ""),
            ("Part 0", "days(ts)"),
            ("Part 1", "bucket(4, id)"),
            ("Part 2", "truncate(2, part)"),
            ("Part 3", "part"),
        ],
    )
    assert transform_columns(rows, "cat") == [
        PartitionColumn(("ts",), "timestamp", "day", "cat", "ts_day"),
        PartitionColumn(("id",), "bigint", "bucket[4]", "cat", "id_bucket"),
        PartitionColumn(("part",), "string", "truncate[2]", "cat", "part_trunc"),
        PartitionColumn(("part",), "string"),
    ]
    for bad in ("bucket(id)", "days(nested.ts)", "zorder(id)", "days(ts", "bucket(x, id)"):
        weird = describe("struct<>", [("# Partitioning", ""), ("Part 0", bad)])
        assert transform_columns(weird, "cat") is None, bad
    assert transform_columns(describe("struct<>", []), "cat") is None
