"""Per-manifest aggregates: what one manifest contributes to a ``TableStatus``.

Manifests are immutable, so an aggregate keyed by the manifest's path never goes stale and
re-inspection after a commit only reads the manifests the commit added (``manifest_stats``).

Cache format (the ``stats`` jsonb of ``manifest_stats``, version ``AGGREGATE_VERSION``)::

    {"v": 1, "small_threshold": 67108864,
     "data_files": n, "data_bytes": b, "records": r, "small_files": n, "small_bytes": b,
     "histogram": {"<1MiB": n, ...},
     "position_deletes": n, "equality_deletes": n, "deletion_vectors": n, "delete_records": r,
     "partitions": {"[0,[\"2024-01-01\"]]": files, ...},
     "data_mins": {"<partition key>": [min data sequence number, files with it], ...},
     "deletes": {"<kind>|<sequence number>|<partition key>": [files, records], ...}}

``data_mins`` and ``deletes`` say which delete files can still apply
(``delete_applicability``); a live entry without a sequence number inherits its manifest's.

The small-file counts depend on the table's ``write.target-file-size-bytes``, so the threshold
they were computed with is part of the aggregate: a cached row is only used when its threshold
equals the current one; otherwise the manifest is re-read and the row replaced. A threshold change
is rare (a table property edit), while keeping every file size would make the cache as large as
the manifests themselves. Partition keys are ``[spec_id, [values...]]`` rendered as compact JSON
with values made JSON-safe, so equal partitions from different manifests merge.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, NotRequired, Protocol, TypedDict

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)

from icepack_core.errors import AvroUnsupported
from icepack_core.inspection.avro_scan import (
    INHERIT,
    CheckedInput,
    Entry,
    Plan,
    check_format,
    check_framing,
    open_container,
    scan_entries,
)
from icepack_core.inspection.delete_applicability import (
    EQUALITY,
    MAX_GROUPS,
    POSITION,
    VECTOR,
    Applicable,
    DataMins,
    DeleteGroups,
    add_groups,
    add_min,
    applicable,
    group_key,
    groups_to_json,
    mins_known,
    parse_groups,
    parse_mins,
)
from icepack_core.inspection.status import HISTOGRAM_BUCKETS, bucket_of, empty_histogram

AGGREGATE_VERSION = 2
TOTALS_VERSION = f"1/{AGGREGATE_VERSION}"

# bucket_of as a bisection: the i-th finite upper bound ends bucket i (lower bound inclusive).
_BUCKET_UPPERS = [upper for _, upper in HISTOGRAM_BUCKETS if upper is not None]
_BUCKET_BOUNDS = [name for name, _ in HISTOGRAM_BUCKETS]


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    return repr(value)


def partition_key(spec_id: int, partition: Any) -> str:
    """Canonical JSON of a data file's partition: ``[spec_id, [v1, v2, ...]]``."""
    values = [_json_safe(partition[i]) for i in range(len(partition))] if partition else []
    return json.dumps([spec_id, values], separators=(",", ":"), sort_keys=True)


class _CountsDoc(TypedDict):
    """The counts an aggregate and the totals share, in their stored (jsonb) form."""

    data_files: int
    data_bytes: int
    records: int
    small_files: int
    small_bytes: int
    histogram: dict[str, int]
    position_deletes: int
    equality_deletes: int
    deletion_vectors: int
    delete_records: int
    partitions: dict[str, int]
    data_mins: dict[str, list[int]]
    deletes: dict[str, list[int]]


class AggregateDoc(_CountsDoc):
    """``ManifestAggregate``'s stored form: a ``manifest_stats.stats`` row (the module
    docstring's cache format). Rows of another ``v`` may hold other keys: check ``v`` first."""

    v: int
    small_threshold: int


class TotalsDoc(_CountsDoc):
    """``Totals``' stored form: an ``inspection_totals.totals`` row, with the manifest list it
    is the sum of (and that list's manifest bytes) once stored by the inspector."""

    v: str
    groups_dropped: bool
    manifest_list: NotRequired[str | None]
    manifest_bytes: NotRequired[int]


@dataclass
class ManifestAggregate:
    """The live (ADDED/EXISTING) entries of one manifest, summed."""

    small_threshold: int
    data_files: int = 0
    data_bytes: int = 0
    records: int = 0
    small_files: int = 0
    small_bytes: int = 0
    histogram: dict[str, int] = field(default_factory=empty_histogram)
    position_deletes: int = 0
    equality_deletes: int = 0
    deletion_vectors: int = 0
    delete_records: int = 0
    partitions: Counter[str] = field(default_factory=Counter)
    data_mins: DataMins = field(default_factory=dict)
    deletes: DeleteGroups = field(default_factory=dict)

    def add_data_seq(self, partition: str, seq: int) -> None:
        """One live data file of data sequence number ``seq`` in ``partition``."""
        add_min(self.data_mins, partition, seq, 1)

    def add_delete(self, kind: str, seq: int, partition: str, records: int) -> None:
        """One live delete file of ``kind`` (``delete_applicability``) and ``records``."""
        found = self.deletes.setdefault(group_key(kind, seq, partition), [0, 0])
        found[0] += 1
        found[1] += records

    def to_json(self) -> AggregateDoc:
        return {
            "v": AGGREGATE_VERSION,
            "small_threshold": self.small_threshold,
            "data_files": self.data_files,
            "data_bytes": self.data_bytes,
            "records": self.records,
            "small_files": self.small_files,
            "small_bytes": self.small_bytes,
            "histogram": dict(self.histogram),
            "position_deletes": self.position_deletes,
            "equality_deletes": self.equality_deletes,
            "deletion_vectors": self.deletion_vectors,
            "delete_records": self.delete_records,
            "partitions": dict(self.partitions),
            "data_mins": {k: list(v) for k, v in self.data_mins.items()},
            "deletes": groups_to_json(self.deletes),
        }

    @classmethod
    def from_json(cls, data: AggregateDoc, small_threshold: int) -> ManifestAggregate | None:
        """The cached aggregate, or None when it cannot serve this threshold/format."""
        if data.get("v") != AGGREGATE_VERSION or data.get("small_threshold") != small_threshold:
            return None
        histogram = empty_histogram()
        histogram.update({k: int(v) for k, v in data["histogram"].items()})
        return cls(
            small_threshold=small_threshold,
            data_files=int(data["data_files"]),
            data_bytes=int(data["data_bytes"]),
            records=int(data["records"]),
            small_files=int(data["small_files"]),
            small_bytes=int(data["small_bytes"]),
            histogram=histogram,
            position_deletes=int(data["position_deletes"]),
            equality_deletes=int(data["equality_deletes"]),
            deletion_vectors=int(data["deletion_vectors"]),
            delete_records=int(data["delete_records"]),
            partitions=Counter({k: int(v) for k, v in data["partitions"].items()}),
            data_mins=parse_mins(data["data_mins"]),
            deletes=parse_groups(data["deletes"]),
        )


class ManifestLike(Protocol):
    """What reading a manifest needs of it: a ``ManifestRef`` or PyIceberg's ``ManifestFile``."""

    @property
    def manifest_path(self) -> str: ...

    @property
    def partition_spec_id(self) -> int | None: ...

    @property
    def sequence_number(self) -> int: ...


# One manifest decoded at a time in this process; reads stay concurrent. Decoding holds the GIL
# except inside each ``zlib.decompress``, which releases and re-takes it: PyIceberg writes one
# entry per Avro block, so several decoding threads hand the GIL back and forth once per entry
# and each re-take can wait a switch interval. Measured on 1,000 PyIceberg-written manifests
# (local files): 4 decoding threads 2.4 s of wall and 2.9 s of CPU, one at a time 1.2 s.
_DECODING = threading.Lock()


def header_spec_id(data: bytes) -> int:
    """The ``partition-spec-id`` a manifest's Avro header names (0 when it names none).

    Used for v1 inline manifests, which have no manifest list entry to say it.

    Raises:
        ValueError: the header's value is not an integer.
    """
    try:
        meta = open_container(data).meta
    except Exception:  # a corrupt file: the read that follows reports it
        return 0
    raw = meta.get("partition-spec-id")
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"header partition-spec-id {raw!r} is not an integer") from None


def read_manifest(manifest: ManifestLike, io: FileIO, small_threshold: int) -> ManifestAggregate:
    """Open one manifest and aggregate its live entries (blocking: call from a thread).

    The fast scan (``avro_scan``) is used when it handles the file exactly; anything else
    goes through PyIceberg's Avro reader (``read_manifest_pyiceberg``). A manifest without a
    spec id (v1 inline) takes the one its header names.

    Raises:
        Exception: whatever the FileIO or Avro reader raises for a missing or corrupt file.
    """
    with io.new_input(manifest.manifest_path).open() as stream:
        data = stream.read()
    # The scan checks every length it reads against the file (AvroDamaged, never a fallback);
    # the framing of a file it does not handle is checked before PyIceberg's reader sees it.
    try:
        with _DECODING:
            spec_id = manifest.partition_spec_id
            if spec_id is None:
                spec_id = header_spec_id(data)
            plan, entries = scan_entries(data)
            seq = manifest.sequence_number or 0
            return _aggregate_scanned(spec_id, seq, plan, entries, small_threshold)
    except AvroUnsupported:
        check_framing(data)
        return read_manifest_pyiceberg(
            manifest, io, small_threshold, spec_id, CheckedInput(manifest.manifest_path, data)
        )


def _aggregate_scanned(
    spec_id: int, manifest_seq: int, plan: Plan, entries: list[Entry], small_threshold: int
) -> ManifestAggregate:
    agg = ManifestAggregate(small_threshold=small_threshold)
    scan = _scan_entries(agg, manifest_seq, entries, small_threshold)
    for fmt in scan.formats:
        check_format(fmt)
    for raw in scan.raws:  # PyIceberg decodes every entry's partition; a bad one fails the read
        plan.partition_key(spec_id, raw, partition_key)
    partitions = agg.partitions
    for raw, count in scan.by_raw.items():
        partitions[plan.partition_key(spec_id, raw, partition_key)] += count
    for raw, (seq, count) in scan.mins.items():
        add_min(agg.data_mins, plan.partition_key(spec_id, raw, partition_key), seq, count)
    for (kind, seq, raw), (files, records) in scan.deletes.items():
        key = group_key(kind, seq, plan.partition_key(spec_id, raw, partition_key))
        add_groups(agg.deletes, {key: [files, records]})
    return agg


@dataclass
class _Scanned:
    """One manifest's entries by encoded partition, before the partitions are decoded (once
    per distinct encoding, not per entry)."""

    by_raw: dict[bytes, int] = field(default_factory=dict)  # live data files per partition
    mins: dict[bytes, list[int]] = field(default_factory=dict)  # -> [min data seq, files]
    deletes: dict[tuple[str, int, bytes], list[int]] = field(default_factory=dict)
    formats: set[str] = field(default_factory=set)
    raws: set[bytes] = field(default_factory=set)  # every entry's, deleted ones too


def _scan_entries(
    agg: ManifestAggregate, manifest_seq: int, entries: list[Entry], small_threshold: int
) -> _Scanned:
    """Count ``entries`` into ``agg`` (data file totals, delete kinds) and the partition tallies
    returned. The hot loop of an inspection: everything it touches is a local."""
    scan = _Scanned()
    by_raw, mins, deletes, formats, raws = (
        scan.by_raw,
        scan.mins,
        scan.deletes,
        scan.formats,
        scan.raws,
    )
    histogram = agg.histogram
    bounds = _BUCKET_BOUNDS
    data_files = data_bytes = records_sum = small_files = small_bytes = 0
    for status, content, fmt, raw, records, size, seq in entries:
        formats.add(fmt)
        raws.add(raw)
        if status == 2:  # DELETED
            continue
        if status != 0 and status != 1:
            raise AvroUnsupported(f"entry status {status}")
        if seq == INHERIT:
            seq = manifest_seq
        if content != 0:
            _count_delete(agg, deletes, content, fmt, seq, raw, records)
            continue
        low = mins.get(raw)
        if low is None or seq < low[0]:
            mins[raw] = [seq, 1]
        elif seq == low[0]:
            low[1] += 1
        data_files += 1
        data_bytes += size
        records_sum += records
        histogram[bounds[bisect_right(_BUCKET_UPPERS, size)]] += 1
        if size < small_threshold:
            small_files += 1
            small_bytes += size
        by_raw[raw] = by_raw.get(raw, 0) + 1
    agg.data_files, agg.data_bytes, agg.records = data_files, data_bytes, records_sum
    agg.small_files, agg.small_bytes = small_files, small_bytes
    return scan


def _count_delete(
    agg: ManifestAggregate,
    deletes: dict[tuple[str, int, bytes], list[int]],
    content: int,
    fmt: str,
    seq: int,
    raw: bytes,
    records: int,
) -> None:
    """Count one live delete file (``content`` 1: positions or a deletion vector, 2: equality)
    into ``agg`` and its group."""
    if content == 2:
        agg.equality_deletes += 1
        agg.delete_records += records
        _group(deletes, (EQUALITY, seq, raw), records)
    elif content == 1:
        if fmt.upper() == "PUFFIN":
            agg.deletion_vectors += 1
            _group(deletes, (VECTOR, seq, raw), records)
        else:
            agg.position_deletes += 1
            _group(deletes, (POSITION, seq, raw), records)
        agg.delete_records += records
    else:
        raise AvroUnsupported(f"data file content {content}")


def _group(
    groups: dict[tuple[str, int, bytes], list[int]], key: tuple[str, int, bytes], records: int
) -> None:
    found = groups.get(key)
    if found is None:
        groups[key] = [1, records]
    else:
        found[0] += 1
        found[1] += records


def read_manifest_pyiceberg(
    manifest: ManifestLike,
    io: FileIO,
    small_threshold: int,
    spec_id: int | None = None,
    checked: CheckedInput | None = None,
) -> ManifestAggregate:
    """``read_manifest`` through PyIceberg's Avro reader (the reference path), entry by entry
    as ``ManifestFile.fetch_manifest_entry`` reads them, without holding them all. ``checked``
    is the manifest already read and framing-checked; without it the file is read from ``io``.

    Raises:
        Exception: whatever the FileIO or Avro reader raises for a missing or corrupt file.
    """
    agg = ManifestAggregate(small_threshold=small_threshold)
    if spec_id is None:
        spec_id = manifest.partition_spec_id or 0
    manifest_seq = manifest.sequence_number or 0
    with AvroFile[ManifestEntry](
        checked if checked is not None else io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        for entry in reader:
            if entry.status == ManifestEntryStatus.DELETED:
                continue
            seq = entry.sequence_number
            _add_entry(
                agg, entry.data_file, spec_id, manifest_seq if seq is None else seq, small_threshold
            )
    return agg


def _add_entry(
    agg: ManifestAggregate, f: DataFile, spec_id: int, seq: int, small_threshold: int
) -> None:
    size = int(f.file_size_in_bytes)
    key = partition_key(spec_id, f.partition)
    records = int(f.record_count)
    if f.content == DataFileContent.DATA:
        agg.data_files += 1
        agg.data_bytes += size
        agg.records += records
        agg.histogram[bucket_of(size)] += 1
        if size < small_threshold:
            agg.small_files += 1
            agg.small_bytes += size
        agg.partitions[key] += 1
        agg.add_data_seq(key, seq)
    elif f.content == DataFileContent.EQUALITY_DELETES:
        agg.equality_deletes += 1
        agg.delete_records += records
        agg.add_delete(EQUALITY, seq, key, records)
    else:  # position deletes: a v3 deletion vector lives in a Puffin file
        if f.file_format == FileFormat.PUFFIN:
            agg.deletion_vectors += 1
            agg.add_delete(VECTOR, seq, key, records)
        else:
            agg.position_deletes += 1
            agg.add_delete(POSITION, seq, key, records)
        agg.delete_records += records


def manifest_content(manifest: ManifestFile) -> int:
    """0 for a data manifest, 1 for a delete manifest (``manifest_stats.content``)."""
    return 1 if manifest.content == ManifestContent.DELETES else 0


_COUNTS = (
    "data_files",
    "data_bytes",
    "records",
    "small_files",
    "small_bytes",
    "position_deletes",
    "equality_deletes",
    "deletion_vectors",
    "delete_records",
)


@dataclass
class Totals:
    """Aggregates of every manifest of a snapshot, merged.

    Cached as ``inspection_totals.totals`` (version ``TOTALS_VERSION``, which embeds the
    aggregate version it was summed from): ``{"v": "...", <the counts>, "histogram": {...},
    "partitions": {...}}``; partitions whose count falls to 0 are dropped.
    """

    data_files: int = 0
    data_bytes: int = 0
    records: int = 0
    small_files: int = 0
    small_bytes: int = 0
    histogram: dict[str, int] = field(default_factory=empty_histogram)
    position_deletes: int = 0
    equality_deletes: int = 0
    deletion_vectors: int = 0
    delete_records: int = 0
    partitions: dict[str, int] = field(default_factory=dict)
    data_mins: DataMins = field(default_factory=dict)
    deletes: DeleteGroups = field(default_factory=dict)
    groups_dropped: bool = False  # past MAX_GROUPS: every live delete file is counted

    def add(self, agg: ManifestAggregate, sign: int = 1) -> None:
        """Merge one manifest's aggregate in (``sign=-1``: take it out again)."""
        for key, (seq, count) in agg.data_mins.items():
            add_min(self.data_mins, key, seq, count, sign)
        if not self.groups_dropped:
            add_groups(self.deletes, agg.deletes, sign)
            if len(self.deletes) > MAX_GROUPS:
                self.groups_dropped = True
                self.deletes = {}
        self.data_files += sign * agg.data_files
        self.data_bytes += sign * agg.data_bytes
        self.records += sign * agg.records
        self.small_files += sign * agg.small_files
        self.small_bytes += sign * agg.small_bytes
        histogram = self.histogram
        for key, count in agg.histogram.items():
            histogram[key] += sign * count
        self.position_deletes += sign * agg.position_deletes
        self.equality_deletes += sign * agg.equality_deletes
        self.deletion_vectors += sign * agg.deletion_vectors
        self.delete_records += sign * agg.delete_records
        partitions = self.partitions
        get = partitions.get
        for key, count in agg.partitions.items():
            total = get(key, 0) + sign * count
            if total:
                partitions[key] = total
            else:
                del partitions[key]

    def consistent(self) -> bool:
        """No count is negative (subtracting an aggregate that was never added would show),
        every partition's oldest data sequence number is known, and the delete groups are kept
        unless the table has too many delete files for them (a recompute could keep them)."""
        delete_files = self.position_deletes + self.equality_deletes + self.deletion_vectors
        return (
            all(getattr(self, name) >= 0 for name in _COUNTS)
            and all(v >= 0 for v in self.histogram.values())
            and all(v > 0 for v in self.partitions.values())
            and mins_known(self.data_mins)
            and all(files > 0 and records >= 0 for files, records in self.deletes.values())
            and not (self.groups_dropped and delete_files <= MAX_GROUPS)
        )

    def applicable(self) -> Applicable:
        """The live delete files that can still apply (all of them when the groups were
        dropped), as ``delete_applicability`` rules."""
        if self.groups_dropped:
            return Applicable(
                self.equality_deletes,
                self.position_deletes,
                self.deletion_vectors,
                self.delete_records,
            )
        return applicable(self.data_mins, self.deletes)

    def to_json(self) -> TotalsDoc:
        return {
            "v": TOTALS_VERSION,
            "data_files": self.data_files,
            "data_bytes": self.data_bytes,
            "records": self.records,
            "small_files": self.small_files,
            "small_bytes": self.small_bytes,
            "position_deletes": self.position_deletes,
            "equality_deletes": self.equality_deletes,
            "deletion_vectors": self.deletion_vectors,
            "delete_records": self.delete_records,
            "histogram": dict(self.histogram),
            "partitions": self.partitions,
            "data_mins": {k: list(v) for k, v in self.data_mins.items()},
            "deletes": groups_to_json(self.deletes),
            "groups_dropped": self.groups_dropped,
        }

    @classmethod
    def from_json(cls, data: Any) -> Totals | None:
        """The cached totals, or None when the row has another format."""
        if not isinstance(data, dict) or data.get("v") != TOTALS_VERSION:
            return None
        histogram = empty_histogram()
        if set(data["histogram"]) != set(histogram):
            return None
        histogram.update({k: int(v) for k, v in data["histogram"].items()})
        totals = cls(
            histogram=histogram,
            partitions={k: int(v) for k, v in data["partitions"].items()},
            data_mins=parse_mins(data["data_mins"]),
            deletes=parse_groups(data["deletes"]),
            groups_dropped=bool(data["groups_dropped"]),
        )
        for name in _COUNTS:
            setattr(totals, name, int(data[name]))
        return totals
