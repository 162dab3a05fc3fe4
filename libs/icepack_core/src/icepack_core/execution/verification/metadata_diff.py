"""The verification's file diff from the table's metadata, read in this process.

``metadata_diff`` computes the same ``FileDiff`` as ``verification_scope.diff_files`` (whose
docstring states the rules) without a Spark query over the ``entries`` metadata table: it reads
the manifest lists and manifests of both snapshots through the table's PyIceberg ``FileIO``
(each distinct manifest once) and compares the live entries (status EXISTING or ADDED) as
multisets, with the same entry identity: content, file path, spec id, partition tuple, record
count, file size, data sequence number, referenced data file, content offset, content size and
equality ids.

PyIceberg 0.12.0's Cython decoder reads doubles as float32, which would merge distinct
``double`` partition values: the reader tree goes through ``inspection.exact_doubles``
(``tests/execution/test_metadata_diff.py`` guards it).

Manifests are read with their own writer schema, not PyIceberg's v2 read schema (which drops
the v3 fields ``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes`` that
deletion vectors need); fields are found by their Iceberg field ids. The data sequence number
is inherited from the manifest list as the spec says (ADDED entries, and every entry of a
sequence-number-0 manifest).

A partition is keyed by (spec id, its own partition tuple), values normalised so that keys
compare like Spark's text keys: every NaN is one key, ``-0.0`` and ``0.0`` are two. The texts
of the identity columns come from ``partition_text``; float and double texts are rendered by
the engine from exact literals in one ``SELECT`` of constants (Java's text depends on the JVM),
only for the touched partitions. Anything this module cannot do exactly (a layout column that
is not an identity field of the current spec, a source type other than the one ``DESCRIBE``
reported, a type without canonical text, a snapshot missing from the loaded metadata, an
unreadable manifest) raises ``MetadataDiffUnsupported``; the caller then uses ``diff_files``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import NestedField, StructType

from icepack_core.errors import MetadataDiffUnsupported, UnsupportedLiteral
from icepack_core.execution.scoping.transform_predicates import Transform, value_type
from icepack_core.execution.verification.entries_cache import EntriesCache
from icepack_core.execution.verification.file_fingerprint import (
    ListedFile,
    PartitionFiles,
    TouchedFiles,
)
from icepack_core.execution.verification.partition_text import (
    FLOAT_TYPES,
    partition_text,
    spark_type_of,
)
from icepack_core.execution.verification.scope import (
    UNSOUND_GLOBAL_DELETES,
    FileDiff,
    Partition,
    TableLayout,
)
from icepack_core.inspection.avro_scan import checked_input
from icepack_core.inspection.exact_doubles import exact_doubles
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.literals import SparkType, canonical_text_expr, typed_literal

# Manifest entry field ids (Iceberg spec, "Manifests").
STATUS, SNAPSHOT, SEQUENCE, DATA_FILE = 0, 1, 3, 2
CONTENT, PATH, FORMAT, PARTITION, RECORDS, BYTES = 134, 100, 101, 102, 103, 104
EQUALITY_IDS, REFERENCED, OFFSET, LENGTH = 135, 143, 144, 145
DELETED = 2
ADDED = 1

# (content, path, spec id, partition key, records, bytes, data sequence number,
#  referenced data file, content offset, content size, equality ids)
Identity = tuple[
    int, str, int, tuple[Any, ...], int, int, int, str | None, int | None, int | None, Any
]


@dataclass(frozen=True)
class _Live:
    """One manifest's live entries, and each partition key's values by partition field id."""

    identities: list[Identity]
    values: dict[tuple[int, tuple[Any, ...]], dict[int, Any]]
    formats: dict[str, str]  # file path -> file format
    # file path -> the snapshot that added the file (inherited from the manifest when null)
    added_by: dict[str, int | None] = field(default_factory=dict)


LIVE_ENTRIES: EntriesCache[_Live] = EntriesCache(lambda live: len(live.identities) + 1)


@dataclass(frozen=True)
class MetadataColumn:
    """An identity partition column: its partition field id and name, and the Spark type of
    its source column."""

    field_id: int
    field_name: str
    spark_type: SparkType


def _norm(value: Any) -> Any:
    """A hashable key for one partition value that separates what Spark's text key does."""
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("float", value.hex())
    if isinstance(value, list | dict):
        raise MetadataDiffUnsupported(f"partition value {value!r:.80} is not a primitive")
    return value


def _positions(struct_type: StructType) -> dict[int, int]:
    return {f.field_id: i for i, f in enumerate(struct_type.fields)}


def _entry_layout(schema: Schema, path: str) -> tuple[dict[int, int], dict[int, int], list[int]]:
    """Where a manifest's entry fields, its ``data_file`` fields (by field id) and its
    partition fields are, from the manifest's own writer ``schema``.

    Raises:
        MetadataDiffUnsupported: a required field is missing or not a struct.
    """
    top = _positions(schema.as_struct())
    data_field = schema.find_field(DATA_FILE)
    if STATUS not in top or DATA_FILE not in top or not isinstance(data_field, NestedField):
        raise MetadataDiffUnsupported(f"manifest {path}: no entry fields")
    data_type = data_field.field_type
    if not isinstance(data_type, StructType):
        raise MetadataDiffUnsupported(f"manifest {path}: bad data_file")
    fields = _positions(data_type)
    missing = {PATH, PARTITION, RECORDS, BYTES} - set(fields)
    if missing:
        raise MetadataDiffUnsupported(
            f"manifest {path}: data_file lacks field ids {sorted(missing)}"
        )
    partition_type = data_type.fields[fields[PARTITION]].field_type
    if not isinstance(partition_type, StructType):
        raise MetadataDiffUnsupported(f"manifest {path}: bad partition")
    return top, fields, [f.field_id for f in partition_type.fields]


def _sequence(written: int | None, status: int, manifest: ManifestFile) -> int:
    """An entry's data sequence number: as written, else inherited from the manifest (an
    ADDED entry, or a manifest of a v1 table).

    Raises:
        MetadataDiffUnsupported: an EXISTING entry without one.
    """
    if written is None and (manifest.sequence_number == 0 or status == ADDED):
        written = manifest.sequence_number
    if written is None:
        raise MetadataDiffUnsupported(
            f"manifest {manifest.manifest_path}: an EXISTING entry has no sequence number"
        )
    return written


def read_live_entries(io: FileIO, manifest: ManifestFile, partitioned: bool) -> _Live:
    """The live entries of one manifest, read with its own writer schema, or as read before
    by this process (``entries_cache``; a manifest never changes). Callers must not change
    what they get.

    Raises:
        MetadataDiffUnsupported: a required field is missing or a value is not what it must be.
        Exception: the file system's or the Avro reader's error.
    """
    key = (manifest.manifest_path, int(manifest.manifest_length), partitioned)
    return LIVE_ENTRIES.get_or_read(key, lambda: _decode_live(io, manifest, partitioned))


def _decode_live(io: FileIO, manifest: ManifestFile, partitioned: bool) -> _Live:
    """``read_live_entries``, decoded from the file."""
    identities: list[Identity] = []
    values: dict[tuple[int, tuple[Any, ...]], dict[int, Any]] = {}
    formats: dict[str, str] = {}
    added_by: dict[str, int | None] = {}
    spec_id = manifest.partition_spec_id
    # Framing checked before the decoder sees the bytes, which are read once.
    with AvroFile[Record](checked_input(io, manifest.manifest_path)) as reader:
        # ``AvroFile`` reads every block with ``self.reader`` (built on enter).
        reader.reader = exact_doubles(reader.reader)
        top, fields, part_ids = _entry_layout(reader.schema, manifest.manifest_path)
        for entry in reader:
            status = entry[top[STATUS]]
            if status == DELETED:
                continue
            data = entry[top[DATA_FILE]]
            sequence = _sequence(
                entry[top[SEQUENCE]] if SEQUENCE in top else None, status, manifest
            )
            raw = data[fields[PARTITION]]
            tuple_values = [raw[i] for i in range(len(part_ids))] if partitioned else []
            key = tuple(_norm(v) for v in tuple_values)
            values.setdefault((spec_id, key), dict(zip(part_ids, tuple_values, strict=False)))
            formats[str(data[fields[PATH]])] = str(_optional(data, fields, FORMAT) or "")
            snapshot = entry[top[SNAPSHOT]] if SNAPSHOT in top else None
            added_by[str(data[fields[PATH]])] = (
                snapshot if snapshot is not None else manifest.added_snapshot_id
            )
            identities.append(_identity(data, fields, spec_id, key, int(sequence)))
    return _Live(identities, values, formats, added_by)


def _optional(record: Any, fields: dict[int, int], field_id: int) -> Any:
    """The ``data_file`` field ``field_id`` of ``record``; None when the writer schema has none."""
    return record[fields[field_id]] if field_id in fields else None


def _identity(
    data: Any, fields: dict[int, int], spec_id: int, key: tuple[Any, ...], sequence: int
) -> Identity:
    """One live entry's identity, from its ``data_file`` record (``fields``: by field id)."""
    equality = _optional(data, fields, EQUALITY_IDS)
    return (
        int(_optional(data, fields, CONTENT) or 0),
        str(data[fields[PATH]]),
        spec_id,
        key,
        int(data[fields[RECORDS]]),
        int(data[fields[BYTES]]),
        sequence,
        _optional(data, fields, REFERENCED),
        _optional(data, fields, OFFSET),
        _optional(data, fields, LENGTH),
        tuple(equality) if equality is not None else None,
    )


def checked_manifests(snapshot: Snapshot, io: FileIO) -> list[ManifestFile]:
    """``snapshot.manifests(io)``, its manifest list read once and its framing checked before
    PyIceberg's reader decodes it.

    Raises:
        AvroDamaged: the manifest list is damaged (``avro_scan.check_framing``).
    """
    if not snapshot.manifest_list:
        return snapshot.manifests(io)
    return list(read_manifest_list(checked_input(io, snapshot.manifest_list)))


def identity_columns(table: Table, layout: TableLayout) -> list[MetadataColumn]:
    """The layout's columns as fields of the table's current spec, type-checked: identity
    fields, or fields of any transform when the layout names it (``PartitionColumn.transform``),
    each with its partition value's type (``transform_predicates.value_type``).

    Raises:
        MetadataDiffUnsupported: a column is not one field of the current spec by that name and
            transform, or its source type is not the type the layout reported.
    """
    spec = table.metadata.spec()
    schema = table.metadata.schema()
    columns = []
    for column in layout.columns or []:
        found = [
            f
            for f in spec.fields
            if f.name == column.field_name and str(f.transform) == column.transform
        ]
        if len(found) != 1:
            raise MetadataDiffUnsupported(
                f"partition column {column} is not one {column.transform} field of the current spec"
            )
        try:
            source = schema.find_field(found[0].source_id).field_type
            spark_type = spark_type_of(source)
            described = SparkType.parse(column.type_text)
            kind = value_type(Transform.parse(column.transform), spark_type)
        except (UnsupportedLiteral, ValueError) as exc:
            raise MetadataDiffUnsupported(f"partition column {column}: {exc}") from exc
        if str(spark_type) != str(described):
            raise MetadataDiffUnsupported(
                f"partition column {column}: the metadata says {spark_type}"
            )
        columns.append(MetadataColumn(found[0].field_id, column.field_name, kind))
    return columns


@dataclass(frozen=True)
class _Compared:
    partitions: int
    touched: list[tuple[int, tuple[Any, ...]]]
    global_deletes: bool


def compare(before: Iterable[Identity], after: Iterable[Identity], partitioned: bool) -> _Compared:
    """The multiset comparison of ``diff_files``: touched partition keys and the totals."""
    net: Counter[Identity] = Counter(before)
    net.subtract(after)
    keys = {(i[2], i[3]) for i in net}
    changed = [i for i, n in net.items() if n != 0]
    named = {i[7] for i in changed if i[0] > 0 and i[7] is not None}
    touched = {(i[2], i[3]) for i in changed}
    touched |= {(i[2], i[3]) for i in net if i[0] == 0 and i[1] in named}
    global_deletes = any(
        i[0] > 0 and (not partitioned or all(v is None for v in i[3])) for i in changed
    )
    return _Compared(len(keys), sorted(touched, key=repr), global_deletes)


def _label(columns: dict[int, str], values: dict[int, Any]) -> str:
    """The tuple as JSON for evidence, NULL fields left out like Spark's ``to_json``."""
    shown: dict[str, bool | int | float | str] = {}
    for field_id, value in values.items():
        if value is None:
            continue
        name = columns.get(field_id, str(field_id))
        if isinstance(value, bool | int | str) or (
            isinstance(value, float) and math.isfinite(value)
        ):
            shown[name] = value
        else:  # NaN/Infinity (as Spark writes them), decimals exactly, binary as hex
            shown[name] = value.hex() if isinstance(value, bytes) else str(value)
    return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))


def _read(table: Table, before: int, after: int, partitioned: bool) -> tuple[_Live, _Live]:
    io = table.io
    cache: dict[str, _Live] = {}
    sides = []
    for snapshot_id in (before, after):
        snapshot = table.metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise MetadataDiffUnsupported(f"snapshot {snapshot_id} is not in the loaded metadata")
        identities: list[Identity] = []
        values: dict[tuple[int, tuple[Any, ...]], dict[int, Any]] = {}
        formats: dict[str, str] = {}
        for manifest in checked_manifests(snapshot, io):
            live = cache.get(manifest.manifest_path)
            if live is None:
                live = cache[manifest.manifest_path] = read_live_entries(io, manifest, partitioned)
            identities += live.identities
            formats.update(live.formats)
            for key, found in live.values.items():
                values.setdefault(key, found)
        sides.append(_Live(identities, values, formats))
    return sides[0], sides[1]


def is_partitioned(table: Table) -> bool:
    """Whether any partition spec of ``table`` has a field: Spark's ``_partition`` tuple is the
    union of every spec's fields, so this is ``TableLayout.partitioned`` without a ``DESCRIBE``
    (a spec of void transforms only counts as partitioned here; its tuples are all NULL, which
    the delete rules treat as unpartitioned)."""
    return any(spec.fields for spec in table.metadata.specs().values())


def identity_sources(table: Table) -> dict[int, frozenset[int]]:
    """Per partition spec of ``table``: the source column ids of its identity fields (their
    values are constants of a partition, ``PartitionFiles.constant``)."""
    return {
        spec_id: frozenset(
            f.source_id for f in spec.fields if isinstance(f.transform, IdentityTransform)
        )
        for spec_id, spec in table.metadata.specs().items()
    }


def manifest_diff(
    table: Table, before: int, after: int, partitioned: bool
) -> tuple[FileDiff, list[dict[int, Any]]]:
    """``before`` and ``after`` compared from ``table``'s manifests alone, asking no engine:
    the ``FileDiff`` without canonical texts (each ``Partition.texts`` is empty) and each
    touched partition's values by partition field id. Blocking (reads the manifests).

    Raises:
        MetadataDiffUnsupported: a snapshot is not in the loaded metadata.
        Exception: a manifest read's error.
    """
    old, new = _read(table, before, after, partitioned)
    result = compare(old.identities, new.identities, partitioned)
    names = {f.field_id: f.name for spec in table.metadata.specs().values() for f in spec.fields}
    found = {**new.values, **old.values}
    values = [found.get(key, {}) for key in result.touched]
    labels = [_label(names, v) for v in values]
    files = touched_files(
        old,
        new,
        {key: f"spec {key[0]} {label}" for key, label in zip(result.touched, labels, strict=True)},
        partitioned,
        identity_sources(table),
    )
    touched = tuple(
        Partition(spec_id, label, ())
        for (spec_id, _), label in zip(result.touched, labels, strict=True)
    )
    unsound = UNSOUND_GLOBAL_DELETES if result.global_deletes else None
    return FileDiff(result.partitions, touched, unsound, files), values


async def metadata_diff(
    table: Table, engine: SparkEngine, before: int, after: int, layout: TableLayout
) -> FileDiff:
    """``diff_files``'s result for ``before`` and ``after``, from ``table``'s metadata.

    ``table`` must be loaded after both snapshots were committed. ``engine`` is used only to
    render float/double partition texts of touched partitions (one constant ``SELECT``).

    Raises:
        MetadataDiffUnsupported: see the module docstring.
        Exception: a manifest read's or the engine's error.
    """
    columns = identity_columns(table, layout)
    # A snapshot's manifests and manifest list are immutable: read them off the event loop.
    diff, values = await asyncio.to_thread(manifest_diff, table, before, after, layout.partitioned)
    texts = await canonical_texts(
        engine, columns, [[v.get(c.field_id) for c in columns] for v in values]
    )
    return replace(
        diff,
        touched=tuple(
            replace(partition, texts=text)
            for partition, text in zip(diff.touched, texts, strict=True)
        ),
    )


def touched_files(
    old: _Live,
    new: _Live,
    touched: dict[tuple[int, tuple[Any, ...]], str],
    partitioned: bool,
    identity_sources: dict[int, frozenset[int]] | None = None,
) -> TouchedFiles:
    """Each ``touched`` key's live data files at both sides (named by the key's label, with its
    spec's identity partition source ids from ``identity_sources``: their values are constants
    of the partition, ``PartitionFiles.constant``), and
    why delete files make their rows differ from the files' rows (``TouchedFiles.blocker``): a
    live delete file in a touched partition, of an unpartitioned spec (or an all-NULL tuple,
    which cannot be told apart from one), naming a touched data file, or a position delete
    file without ``referenced_data_file`` anywhere, at either snapshot."""
    blocker: str | None = None
    listed: dict[tuple[int, tuple[Any, ...]], tuple[list[ListedFile], list[ListedFile]]] = {
        key: ([], []) for key in touched
    }
    data_paths = {
        i[1]
        for live in (old, new)
        for i in live.identities
        if i[0] == 0 and (i[2], i[3]) in touched
    }
    for side, live in enumerate((old, new)):
        for i in live.identities:
            content, path, key = i[0], i[1], (i[2], i[3])
            if content > 0:
                # Named apart: equality deletes (upsert sinks) match rows by value, which
                # only the table's own reader (the Spark scan) applies.
                kind = "equality delete files" if content == 2 else "delete files"
                if key in touched:
                    blocker = blocker or f"{kind} in a touched partition"
                elif not partitioned or all(v is None for v in key[1]):
                    blocker = blocker or f"{kind} of an unpartitioned spec"
                elif i[7] is not None and i[7] in data_paths:
                    blocker = blocker or "a delete file names a touched data file"
                elif content == 1 and i[7] is None:
                    # Readers also match a position delete to a data file by equal file_path
                    # bounds, in any partition; the bounds are not read here.
                    blocker = blocker or "a position delete file may name a touched data file"
            elif key in touched:
                listed[key][side].append(ListedFile(path, i[4], live.formats.get(path, "")))
    partitions = tuple(
        PartitionFiles(
            touched[key], tuple(b), tuple(a), (identity_sources or {}).get(key[0], frozenset())
        )
        for key, (b, a) in listed.items()
    )
    return TouchedFiles(partitions, blocker)


async def canonical_texts(
    engine: SparkEngine, columns: Sequence[MetadataColumn], rows: Sequence[Sequence[Any]]
) -> list[tuple[str | None, ...]]:
    """Canonical texts (``canonical_text_expr``'s, None for NULL) of partition value rows,
    one value per column; float/double ones rendered by the engine in one constant ``SELECT``.

    Raises:
        MetadataDiffUnsupported: a value without a canonical text of its column's type.
    """
    floats: dict[tuple[str, Any], str] = {}  # (type, normalised value) -> literal
    out: list[list[str | None]] = []
    for row in rows:
        texts: list[str | None] = []
        for column, value in zip(columns, row, strict=True):
            try:
                if value is not None and column.spark_type.name in FLOAT_TYPES:
                    if not isinstance(value, float | int) or isinstance(value, bool):
                        raise UnsupportedLiteral(f"{value!r:.80} is not a number")
                    literal = typed_literal(column.spark_type, float(value))
                    floats.setdefault((column.spark_type.name, _norm(float(value))), literal)
                    texts.append(None)  # filled in below
                else:
                    texts.append(partition_text(column.spark_type, value))
            except UnsupportedLiteral as exc:
                raise MetadataDiffUnsupported(
                    f"partition column {column.field_name}: {exc}"
                ) from exc
        out.append(texts)
    if floats:
        literals = list(floats.items())
        exprs = [
            f"{canonical_text_expr(SparkType(kind), literal)} AS r{i}"
            for i, ((kind, _), literal) in enumerate(literals)
        ]
        (answer,) = await engine.sql("SELECT " + ", ".join(exprs))
        rendered = {key: str(answer[f"r{i}"]) for i, (key, _) in enumerate(literals)}
        for row, texts in zip(rows, out, strict=True):
            for i, (column, value) in enumerate(zip(columns, row, strict=True)):
                if value is not None and column.spark_type.name in FLOAT_TYPES:
                    texts[i] = rendered[(column.spark_type.name, _norm(float(value)))]
    return [tuple(t) for t in out]
