"""An independent computation of the TableStatus counts from PyIceberg's metadata tables."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pyiceberg.table import Table

from icepack_core.inspection.status import HISTOGRAM_BUCKETS, TableStatus


def _bucket(size: int) -> str:
    for name, upper in HISTOGRAM_BUCKETS:
        if upper is None or size < upper:
            return name
    raise AssertionError(size)


def oracle_metrics(table: Table, small_threshold: int) -> dict[str, Any]:
    """Counts from ``inspect.files()`` / ``inspect.manifests()`` (PyIceberg's own code path)."""
    if table.metadata.current_snapshot() is None:
        files: list[dict[str, Any]] = []
        manifests: list[dict[str, Any]] = []
    else:
        files = table.inspect.files().to_pylist()
        manifests = table.inspect.manifests().to_pylist()
    data = [f for f in files if f["content"] == 0]
    pos = [f for f in files if f["content"] == 1 and f["file_format"].upper() != "PUFFIN"]
    dvs = [f for f in files if f["content"] == 1 and f["file_format"].upper() == "PUFFIN"]
    eq = [f for f in files if f["content"] == 2]
    partitions = Counter(
        (f["spec_id"], json.dumps(f["partition"], default=str, sort_keys=True)) for f in data
    )
    histogram = {name: 0 for name, _ in HISTOGRAM_BUCKETS}
    for f in data:
        histogram[_bucket(f["file_size_in_bytes"])] += 1
    small = [f["file_size_in_bytes"] for f in data if f["file_size_in_bytes"] < small_threshold]
    data_bytes = sum(f["file_size_in_bytes"] for f in data)
    return {
        "data_file_count": len(data),
        "data_file_bytes": data_bytes,
        "record_count": sum(f["record_count"] for f in data),
        "small_file_count": len(small),
        "small_file_bytes": sum(small),
        "file_size_histogram": histogram,
        "position_delete_file_count": len(pos),
        "equality_delete_file_count": len(eq),
        "deletion_vector_count": len(dvs),
        "delete_record_count": sum(f["record_count"] for f in pos + dvs + eq),
        "manifest_count": len(manifests),
        "manifest_bytes": sum(m["length"] for m in manifests),
        "partition_count": len(partitions),
        "max_files_in_partition": max(partitions.values(), default=0),
        "avg_data_file_bytes": data_bytes // len(data) if data else 0,
    }


def assert_matches_oracle(status: TableStatus, table: Table) -> None:
    expected = oracle_metrics(table, status.small_file_threshold_bytes)
    got = {k: getattr(status, k) for k in expected}
    assert got == expected


def assert_matches_summary(status: TableStatus, summary: dict[str, str]) -> None:
    """Compare with the writer's snapshot summary (``total-*`` properties)."""
    if "total-data-files" in summary:
        assert status.data_file_count == int(summary["total-data-files"])
    if "total-records" in summary:
        assert status.record_count == int(summary["total-records"])
    if "total-delete-files" in summary:
        assert status.delete_file_count == int(summary["total-delete-files"])
    if "total-files-size" in summary:
        assert status.data_file_bytes + 0 <= int(summary["total-files-size"])
    deletes = int(summary.get("total-equality-deletes", 0)) + int(
        summary.get("total-position-deletes", 0)
    )
    if "total-equality-deletes" in summary or "total-position-deletes" in summary:
        assert status.delete_record_count == deletes
