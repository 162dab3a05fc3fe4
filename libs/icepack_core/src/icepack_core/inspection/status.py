"""The ``TableStatus`` metrics contract (docs/table-status.md), shared by both inspectors.

This module only holds the model and its small formatting helpers; computing a status lives in
``pyiceberg_inspector`` (or go-inspector, parsed by ``go_inspector``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from icepack_core.inspection.clustering import Clustering

MIB = 1024 * 1024
# Contract bucket names, in order, with their exclusive upper bounds (the last is open).
HISTOGRAM_BUCKETS: tuple[tuple[str, int | None], ...] = (
    ("<1MiB", 1 * MIB),
    ("1MiB-8MiB", 8 * MIB),
    ("8MiB-32MiB", 32 * MIB),
    ("32MiB-128MiB", 128 * MIB),
    ("128MiB-512MiB", 512 * MIB),
    (">=512MiB", None),
)
TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE = 536_870_912  # Iceberg's default write.target-file-size-bytes
# Fields that describe the run rather than the table; the parity test ignores them.
RUN_FIELDS = frozenset(
    {"inspected_at", "inspector", "inspect_ms", "manifests_read", "manifests_cached"}
)


def bucket_of(size: int) -> str:
    """The histogram bucket of a file of ``size`` bytes (lower bound inclusive)."""
    for name, upper in HISTOGRAM_BUCKETS:
        if upper is None or size < upper:
            return name
    raise AssertionError("unreachable: the last bucket is open")


def empty_histogram() -> dict[str, int]:
    return {name: 0 for name, _ in HISTOGRAM_BUCKETS}


def parse_target_file_size(raw: str) -> int:
    """A target file size (``write.target-file-size-bytes``, the ``target-file-size-bytes``
    rewrite option): a positive whole number that fits Iceberg's Java ``long``, in ASCII
    digits only. The one parser of it.

    Raises:
        ValueError: anything else, naming the value.
    """
    if re.fullmatch(r"[0-9]{1,19}", raw) is None or not 0 < int(raw) < 2**63:
        raise ValueError(f"target file size {raw!r} is not a positive whole number of bytes")
    return int(raw)


def target_file_size(properties: Mapping[str, Any]) -> int | None:
    """The table's ``write.target-file-size-bytes`` when ``parse_target_file_size`` accepts
    it, else None: Iceberg's default applies. Any string a writer put there yields one of the
    two, never an exception."""
    raw = properties.get(TARGET_FILE_SIZE_PROPERTY)
    if not isinstance(raw, str):
        return None
    try:
        return parse_target_file_size(raw)
    except ValueError:
        return None


def small_file_threshold(properties: dict[str, str], override: int | None = None) -> int:
    """Files strictly smaller than this are small: target file size / 8 (Amoro's *fragment*)."""
    if override is not None:
        return override
    return (target_file_size(properties) or DEFAULT_TARGET_FILE_SIZE) // 8


def format_ts(value: datetime | int | None) -> str | None:
    """RFC 3339 UTC with milliseconds and a ``Z`` suffix; ints are epoch milliseconds."""
    if value is None:
        return None
    if isinstance(value, int):
        value = datetime.fromtimestamp(value / 1000, tz=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_ts(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class StatisticsFreshness(BaseModel):
    """Which snapshot a table's statistics (``statistics`` or ``partition-statistics``
    entries of its metadata) describe, and how far the table has moved since
    (``inspection.statistics``; docs/table-status.md). ``snapshot_id`` is None when no entry
    describes the current snapshot or one of its ancestors: the statistics are missing, and
    the distance fields are None too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: int = 0  # entries in the metadata, for any snapshot
    snapshot_id: int | None = None  # the nearest described snapshot on the current lineage
    file_bytes: int = 0  # that entry's file-size-in-bytes
    snapshots_behind: int | None = None  # snapshots on the lineage after it (0: current)
    added_records: int | None = None  # added-records of those snapshots (not `replace`)
    added_data_files: int | None = None  # added-data-files of those snapshots (not `replace`)

    @property
    def current(self) -> bool:
        """True when they describe the current snapshot (what Spark's CBO reads)."""
        return self.snapshots_behind == 0


class TableStatus(BaseModel):
    """One table's metrics for its current snapshot plus history; see docs/table-status.md."""

    model_config = ConfigDict(extra="forbid")

    catalog: str
    namespace: str
    table: str
    format_version: int
    metadata_location: str
    current_snapshot_id: int | None
    inspected_at: str
    inspector: Literal["pyiceberg", "iceberg-go"]
    inspect_ms: int
    manifests_read: int
    manifests_cached: int
    small_file_threshold_bytes: int
    data_file_count: int = 0
    data_file_bytes: int = 0
    record_count: int = 0
    small_file_count: int = 0
    small_file_bytes: int = 0
    file_size_histogram: dict[str, int]
    position_delete_file_count: int = 0
    equality_delete_file_count: int = 0
    deletion_vector_count: int = 0
    delete_record_count: int = 0
    manifest_count: int = 0
    manifest_bytes: int = 0
    partition_count: int = 0
    max_files_in_partition: int = 0
    avg_data_file_bytes: int = 0
    snapshot_count: int = 0
    oldest_snapshot_at: str | None = None
    current_snapshot_at: str | None = None
    metadata_log_count: int = 0
    ref_count: int = 0
    # Table statistics (Puffin NDV sketches) and partition statistics: see StatisticsFreshness.
    # Both inspectors always set them; None is a stored status of an inspector that predates
    # statistics inspection: unknown (planning waits for the next inspection, health skips).
    table_statistics: StatisticsFreshness | None = None
    partition_statistics: StatisticsFreshness | None = None
    # Only for a table whose compaction policy clusters it (sort, zorder): its overlap depth
    # on the key (inspection.clustering), measured by the inspector's unit of work after
    # either inspector, so both leave it None.
    clustering: Clustering | None = None

    @property
    def delete_file_count(self) -> int:
        """Every live delete file: position, equality and deletion vectors."""
        return (
            self.position_delete_file_count
            + self.equality_delete_file_count
            + self.deletion_vector_count
        )

    def table_metrics(self) -> dict[str, object]:
        """The contract without the run fields (what the parity test compares)."""
        return self.model_dump(exclude=set(RUN_FIELDS))


def describe_error(exc: BaseException) -> str:
    """A one-line cause for an INSPECTION_FAILED message (pydantic's essay shortened)."""
    if isinstance(exc, ValidationError):
        reasons = "; ".join(str(e["msg"]) for e in exc.errors()[:3])
        return f"not valid table metadata: {reasons}"
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"
