"""One way for tests to build a ``TableStatus``: complete and valid, with realistic defaults.

Planning takes the parsed model (issue #29), so a test states only the fields it is about and
gets every other field a real inspection sets. The defaults describe a healthy, unpartitioned
table of ten 100 MiB files, inspected at ``INSPECTED_AT`` (the planning tests' clock), with
statistics of neither kind (``StatisticsFreshness()``: missing).
"""

from __future__ import annotations

from typing import Any

from icepack_core.inspection.status import (
    DEFAULT_TARGET_FILE_SIZE,
    StatisticsFreshness,
    TableStatus,
    empty_histogram,
)

MIB = 1024 * 1024
# The planning tests' ``NOW``: a status inspected then never predates a run up to then.
INSPECTED_AT = "2026-11-21T12:00:00.000Z"


def status(**fields: Any) -> TableStatus:
    """A complete ``TableStatus`` with ``fields`` overriding the defaults (validated: a
    misspelt or mistyped field fails the test)."""
    doc: dict[str, Any] = {
        "catalog": "cat",
        "namespace": "db",
        "table": "t",
        "format_version": 2,
        "metadata_location": "file:///wh/db/t/metadata/v3.metadata.json",
        "current_snapshot_id": 3,
        "inspected_at": INSPECTED_AT,
        "inspector": "pyiceberg",
        "inspect_ms": 5,
        "manifests_read": 3,
        "manifests_cached": 0,
        "small_file_threshold_bytes": DEFAULT_TARGET_FILE_SIZE // 8,
        "data_file_count": 10,
        "data_file_bytes": 10 * 100 * MIB,
        "record_count": 1_000_000,
        "file_size_histogram": {**empty_histogram(), "32MiB-128MiB": 10},
        "manifest_count": 3,
        "manifest_bytes": 30_000,
        "partition_count": 1,
        "max_files_in_partition": 10,
        "avg_data_file_bytes": 100 * MIB,
        "snapshot_count": 3,
        "oldest_snapshot_at": "2026-11-21T10:00:00.000Z",
        "current_snapshot_at": "2026-11-21T11:00:00.000Z",
        "table_statistics": StatisticsFreshness(),
        "partition_statistics": StatisticsFreshness(),
    }
    return TableStatus.model_validate(doc | fields)
