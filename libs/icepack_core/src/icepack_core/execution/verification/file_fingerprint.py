"""The touched partitions compared in this process, from the files the manifests list.

A rewrite verification compares the live rows of the touched partitions at two snapshots
(``verification_scope``). When no delete file applies to those partitions at either snapshot,
those rows are exactly the rows of the live data files listed there, so they can be read
straight from the files without Spark. A file listed at both snapshots adds the same rows to
both, so only the files one side lists and the other does not are read (``one_sided``):
``compare_files`` hands them to an in-process DuckDB, which reads Parquet by Iceberg field id
(``read_parquet``'s ``schema`` map: a renamed column is found by its id, a column a file lacks
reads NULL, an older narrower type is cast to the current one) and returns each file's row
count (which must be its manifest's record count) and a checksum of its rows: DuckDB's 64-bit
``hash`` over all current columns in schema order (NULL
hashes as itself; the sign of a float or double is hashed too, as DuckDB hashes ``-0.0`` like
``0.0``), summed as a 128-bit integer, so order-independent like ``fingerprint``'s
Spark checksum (the two are not equal to each other).

Files are immutable, so a file's fingerprint taken earlier with the same schema
(``FileFingerprints``: ``replaced_files`` takes a compaction's inputs' while it runs) is used
instead of reading the file again.

This reader only ever *proves equality*: every touched partition (spec id and partition tuple)
must have the same row count and checksum at both snapshots. Anything else -- a difference, a
record count the manifests contradict, an error -- is never a verdict: the Spark scan, whose
reader is the table's own, decides instead. Comparing per partition also catches a file labelled
with another partition than its rows (Spark shows an identity column's value from the label,
this reader from the file), and makes a rewrite that moves rows across specs a Spark decision.

An identity partition source column of the partition's spec is not read: Iceberg's readers
show its value from the partition tuple, the same at both sides of one partition.

A file on one side only must be stored as Iceberg reads it (``parquet_encoding``): field ids on
every column, and each column's Parquet type Iceberg's encoding of its current type or of one
Iceberg promotes to it, so DuckDB's cast is never lossy. A file on both sides adds the same rows
to both sides however it is read.

Why: the Spark scan re-opens every replaced file through Iceberg's reader, about 0.9 ms of CPU
a small file; this reader reads and hashes the same files about 4x faster, which is what keeps a
compaction's verification short next to the compaction itself (``bench/maintain``).

``reader_blocker`` says when the rows are not just the files' rows, or this reader cannot read
them exactly, and the caller then scans with Spark (the reason goes into the evidence): a delete
file in a touched partition, of an unpartitioned spec or naming a touched file, at either
snapshot, or a position delete file without ``referenced_data_file`` anywhere (readers match it
by equal ``file_path`` bounds too); a data file not in Parquet; a column of a type the ``schema``
map cannot declare (nested types, nanosecond timestamps, v3 unknown/variant/geo types) or with
an initial default (a file without the column must read the default, not NULL); a name mapping
(files written without field ids); a location outside the local file system or one DuckDB or
URL parsing could read as another file (a glob character, ``?``, ``#``, a backslash).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import ChainMap, Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from icepack_core.errors import InProcessUnsupported
from icepack_core.execution.verification.fingerprint import Fingerprint, as_int
from icepack_core.execution.verification.parquet_encoding import check_encodings

# What DuckDB declares for each Iceberg primitive (the cast a narrower file type gets).
_DUCKDB_TYPES: dict[type[IcebergType], str] = {
    BooleanType: "BOOLEAN",
    IntegerType: "INTEGER",
    LongType: "BIGINT",
    FloatType: "FLOAT",
    DoubleType: "DOUBLE",
    DateType: "DATE",
    TimeType: "TIME",
    TimestampType: "TIMESTAMP",
    TimestamptzType: "TIMESTAMPTZ",
    StringType: "VARCHAR",
    UUIDType: "UUID",
    FixedType: "BLOB",
    BinaryType: "BLOB",
}
NAME_MAPPING = "schema.name-mapping.default"
_NOT_PLAIN = re.compile(r"[?#*\[\]{}\\]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")  # RFC 3986's scheme, as ``re.match`` anchors
MEMORY_LIMIT = "1GB"


@dataclass(frozen=True)
class ListedFile:
    """A live file of a touched partition as its manifest lists it."""

    path: str
    records: int
    file_format: str


@dataclass(frozen=True)
class PartitionFiles:
    """One touched partition's live data files at ``before`` and at ``after``; ``key`` names
    it in messages (spec id and partition tuple). ``constant`` holds the field ids of its
    spec's identity partition sources: Iceberg's readers take those values from the partition
    tuple, the same at both sides of one partition, not from the files, so they are not read."""

    key: str
    before: tuple[ListedFile, ...]
    after: tuple[ListedFile, ...]
    constant: frozenset[int] = frozenset()


@dataclass(frozen=True)
class TouchedFiles:
    """The touched partitions' live data files; ``blocker``: why their rows are not just the
    files' rows (delete files apply), else None."""

    partitions: tuple[PartitionFiles, ...]
    blocker: str | None

    def listed(self) -> list[ListedFile]:
        return [f for p in self.partitions for f in (*p.before, *p.after)]


@dataclass(frozen=True)
class FileComparison:
    """The touched partitions' totals at each snapshot, read in process: their rows, and the
    checksum of the files on one side only (``one_sided``; a file on both sides adds its
    record count to both sides' rows and is not read); ``differs`` names the first partition
    whose count or checksum differs (None: every one is equal). ``files_read``: files read for this
    comparison; ``files_prefetched``: files whose fingerprint was known already."""

    before: Fingerprint
    after: Fingerprint
    differs: str | None
    files_read: int = 0
    files_prefetched: int = 0


def duckdb_type(kind: IcebergType) -> str:
    """The DuckDB type that reads ``kind`` exactly.

    Raises:
        InProcessUnsupported: nested, or a primitive without one.
    """
    if isinstance(kind, DecimalType):
        return f"DECIMAL({int(kind.precision)}, {int(kind.scale)})"
    found = _DUCKDB_TYPES.get(type(kind))
    if found is None:
        raise InProcessUnsupported(f"column type {kind} is not read in process")
    return found


def local_path(location: str) -> str:
    """The local file system path of a data file location: ``/p``, ``file:/p``,
    ``file:///p`` or ``file://localhost/p`` give ``/p``, the rest of the text as written, ``%``
    kept (Iceberg's Hadoop and PyArrow file IO name the file by the location's text, and Spark
    writes an identity partition value such as ``it's`` as the directory ``p=it%27s``).

    Parsed by hand, not with ``urlsplit``: that drops tabs and newlines anywhere and leading
    spaces, and cuts a query or fragment off, so it could name another file than Iceberg does.

    Raises:
        InProcessUnsupported: not a local location, or one that DuckDB could read as another
            file (a glob character, ``?``, ``#``, a backslash, a control character, ``//``,
            a ``.`` or ``..`` segment).
    """
    if _NOT_PLAIN.search(location) or _CONTROL.search(location):
        raise InProcessUnsupported(f"location {location!r:.120} is not a plain absolute path")
    scheme = _SCHEME.match(location)
    rest = location
    if scheme is not None:
        if scheme.group(0) != "file:":
            raise InProcessUnsupported(
                f"location {location!r:.120} is not on the local file system"
            )
        rest = location[len("file:") :]
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if authority not in ("", "localhost") or not slash:
            raise InProcessUnsupported(
                f"location {location!r:.120} is not on the local file system"
            )
        rest = "/" + path
    # Hadoop resolves ``.``/``..`` segments as text, the operating system through symlinks.
    plain = rest.startswith("/") and not rest.startswith("//")
    if not plain or posixpath.normpath(rest) != rest:
        raise InProcessUnsupported(f"location {location!r:.120} is not a plain absolute path")
    return rest


def duckdb_string_literal(text: str) -> str:
    """``text`` as a DuckDB string literal: quoted, each quote doubled (DuckDB strings have no
    backslash escapes).

    Raises:
        InProcessUnsupported: ``text`` holds a NUL or another control character.
    """
    if _CONTROL.search(text):
        raise InProcessUnsupported(f"path {text!r:.120} holds a control character")
    return "'" + text.replace("'", "''") + "'"


def reader_blocker(
    schema: Schema, properties: Mapping[str, str], files: TouchedFiles
) -> str | None:
    """Why ``compare_files`` cannot compare these files exactly, or None."""
    return _blocker(schema, properties, files, {})


def _blocker(
    schema: Schema, properties: Mapping[str, str], files: TouchedFiles, local: dict[str, str]
) -> str | None:
    """``reader_blocker``, filling ``local`` with each listed location's local path."""
    if files.blocker is not None:
        return files.blocker
    if NAME_MAPPING in properties:
        return "the table has a name mapping (files may lack field ids)"
    for column in schema.fields:
        if column.initial_default is not None:
            return f"column {column.name!r} has an initial default"
        try:
            duckdb_type(column.field_type)
        except InProcessUnsupported as exc:
            return f"column {column.name!r}: {exc.reason}"
    for listed in files.listed():
        if listed.file_format.upper() != "PARQUET":
            return f"data file format {listed.file_format}"
        if listed.path not in local:
            try:
                local[listed.path] = local_path(listed.path)
            except InProcessUnsupported as exc:
                return exc.reason
    return None


def _query(schema: Schema, constant: frozenset[int], checksum: bool) -> str:
    """``SELECT file, count, checksum FROM read_parquet(%s, schema = <map>) GROUP BY file`` over
    the columns of ``schema`` not in ``constant``; ``%s`` is for the file list. The schema map
    names each field id's column ``c<position>`` with its declared type: only integers and
    this module's type names reach the SQL, never a name from the catalog."""
    read = [(i, c) for i, c in enumerate(schema.fields) if c.field_id not in constant]
    entries = [
        f"{int(c.field_id)}: {{name: 'c{i}', type: '{duckdb_type(c.field_type)}', "
        "default_value: NULL}"
        for i, c in read
    ]
    names = [f"c{i}" for i, _ in read]
    # DuckDB hashes -0.0 like 0.0 (they compare equal); a sign is a value, so it is hashed too.
    names += [f"signbit(c{i})" for i, c in read if isinstance(c.field_type, FloatType | DoubleType)]
    hashed = f"coalesce(sum(hash({', '.join(names)})::HUGEINT), 0)" if checksum and names else "0"
    schema_map = "MAP {" + ", ".join(entries) + "}" if entries else "MAP {}"
    # The file name column is ``file``: no ``c<position>`` column is named so.
    return (
        f"SELECT file, count(*) AS n, {hashed} AS h "
        f"FROM read_parquet(%s, schema = {schema_map}, filename = 'file') GROUP BY file"
    )


@dataclass(frozen=True)
class FileFingerprints:
    """Row count and checksum of single data files read with ``schema`` and ``checksum``, by
    the identity partition sources left out (``PartitionFiles.constant``) and path; every file
    here passed ``check_encodings`` against ``schema``. A data file never changes once
    written, so its fingerprint is the same whenever it is read: a comparison with an equal
    schema and the same ``checksum`` takes a file's from here instead of reading it.
    (``replaced_files`` fills one while a compaction runs.)"""

    schema: Schema
    checksum: bool
    found: dict[tuple[frozenset[int], str], Fingerprint]

    def usable(self, schema: Schema, checksum: bool) -> bool:
        return self.checksum == checksum and self.schema == schema


def one_sided(
    before: Sequence[ListedFile], after: Sequence[ListedFile]
) -> tuple[list[ListedFile], list[ListedFile]]:
    """The files of each side without those the other side lists too (the same location,
    record count and format), as multisets: a file listed on both sides adds the same rows to
    both, so the sides' totals are equal exactly when the remaining ones' are (a file listed
    twice on one side and once on the other remains once)."""
    return _without(before, Counter(after)), _without(after, Counter(before))


def _without(side: Sequence[ListedFile], other: Counter[ListedFile]) -> list[ListedFile]:
    kept = []
    for listed in side:
        if other[listed] > 0:
            other[listed] -= 1
        else:
            kept.append(listed)
    return kept


def compare_files(
    schema: Schema,
    files: TouchedFiles,
    *,
    properties: Mapping[str, str] | None = None,
    checksum: bool = True,
    known: FileFingerprints | None = None,
) -> FileComparison:
    """Each touched partition's row count and the checksum (0 without ``checksum``) of its
    files on one side only (``one_sided``) at both snapshots, read with ``schema`` and
    ``properties`` (the table's current ones), compared partition by partition; a file in
    ``known`` (when it is usable for ``schema``) is not read again. Blocking.

    Raises:
        InProcessUnsupported: ``reader_blocker`` found a reason, a file read here is not
            stored as Iceberg would read it (``parquet_encoding.check_encodings``), or the
            rows read from a file differ from its manifest's record count.
        Exception: PyArrow's or DuckDB's error (a missing or unreadable file, a value that
            does not cast).
    """
    local: dict[str, str] = {}
    blocker = _blocker(schema, properties or {}, files, local)
    if blocker is not None:
        raise InProcessUnsupported(blocker)
    usable = known.found if known is not None and known.usable(schema, checksum) else {}
    sides = [(p, *one_sided(p.before, p.after)) for p in files.partitions]
    needed: dict[frozenset[int], dict[str, ListedFile]] = {}
    for partition, *one_side in sides:
        for listed in (*one_side[0], *one_side[1]):
            if (partition.constant, listed.path) not in usable:
                needed.setdefault(partition.constant, {})[listed.path] = listed
    # A file on one side only must be read exactly as Iceberg reads it.
    check_encodings(schema, sorted({local[p] for group in needed.values() for p in group}))
    read = fingerprint_files(schema, needed, local, checksum)
    found = ChainMap(read, usable)
    totals = [Fingerprint(0, 0), Fingerprint(0, 0)]
    differs = None
    for partition, before_files, after_files in sides:
        # The files on both sides are not read; their rows (their record counts, the same on
        # both sides) still count, so the rows are the partition's.
        shared = Fingerprint(
            sum(f.records for f in partition.before) - sum(f.records for f in before_files), 0
        )
        before = _sum([shared, *(found[(partition.constant, f.path)] for f in before_files)])
        after = _sum([shared, *(found[(partition.constant, f.path)] for f in after_files)])
        totals = [_plus(totals[0], before), _plus(totals[1], after)]
        if before != after and differs is None:  # not a verdict: the Spark scan decides
            differs = f"partition {partition.key}: {before.rows} rows -> {after.rows} rows"
            differs += ", checksum differs" if before.rows == after.rows else ""
    compared = {(p.constant, f.path) for p, before, after in sides for f in (*before, *after)}
    return FileComparison(totals[0], totals[1], differs, len(read), len(compared - read.keys()))


def fingerprint_files(
    schema: Schema,
    needed: Mapping[frozenset[int], Mapping[str, ListedFile]],
    local: Mapping[str, str],
    checksum: bool,
    *,
    threads: int | None = None,
) -> dict[tuple[frozenset[int], str], Fingerprint]:
    """Each file's row count and checksum, read with ``schema`` leaving out each group's
    columns (its key: ``PartitionFiles.constant``); ``local``: each location's local path;
    ``threads``: DuckDB's (default: one per CPU). Blocking.

    Raises:
        InProcessUnsupported: a file's rows differ from its manifest's record count.
        Exception: DuckDB's error.
    """
    found: dict[tuple[frozenset[int], str], Fingerprint] = {}
    if not any(needed.values()):
        return found
    connection = _connect(threads or max(os.cpu_count() or 1, 1))
    try:
        for constant, group in needed.items():
            if group:
                query = _query(schema, constant, checksum)
                for path, fingerprint in _read(connection, query, group, local).items():
                    found[(constant, path)] = fingerprint
    finally:
        connection.close()
    return found


def _connect(threads: int) -> Any:
    """An in-memory DuckDB connection set up for ``compare_files``'s reads."""
    import duckdb  # the executor's dependency (icepack-core[spark]); imported when used

    connection = duckdb.connect(":memory:")
    try:
        # Local files only: no extension is fetched or loaded behind this reader's back.
        connection.execute("SET autoinstall_known_extensions = false")
        connection.execute("SET autoload_known_extensions = false")
        connection.execute(f"SET threads = {int(threads)}")
        # An aggregate over streamed row groups needs little; past this DuckDB fails the read
        # (the Spark scan decides) instead of growing the executor.
        connection.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        # A timestamp without zone is cast to TIMESTAMPTZ through the session zone.
        connection.execute("SET TimeZone = 'UTC'")
        # Each file is read once per side: caching its blocks only costs, and one read of a
        # small file's whole row groups beats one per column (17 % less on ``bench/maintain``).
        connection.execute("SET enable_external_file_cache = false")
        connection.execute("SET prefetch_all_parquet_files = true")
    except BaseException:
        connection.close()
        raise
    return connection


def _plus(a: Fingerprint, b: Fingerprint) -> Fingerprint:
    return Fingerprint(a.rows + b.rows, a.checksum + b.checksum)


def _read(
    connection: Any, query: str, group: Mapping[str, ListedFile], local: Mapping[str, str]
) -> dict[str, Fingerprint]:
    """Row count and checksum of each file of ``group`` (by location; ``query`` from
    ``_query``, ``local``: each location's local path).

    Raises:
        InProcessUnsupported: a file's rows differ from its manifest's record count, or
            DuckDB named a file that was not asked for.
    """
    by_local = {local[path]: path for path in group}
    # The list is written into the statement, quoted, instead of bound: binding any Python
    # value makes DuckDB import pandas first (1.1 s, once per process).
    paths = "[" + ", ".join(duckdb_string_literal(p) for p in sorted(by_local)) + "]"
    read = {path: Fingerprint(0, 0) for path in group}  # a file without rows has no group
    for name, rows, checksum in connection.execute(query.replace("%s", paths, 1)).fetchall():
        path = by_local.get(str(name))
        if path is None:
            raise InProcessUnsupported(f"DuckDB read a file that was not listed: {name!r:.120}")
        read[path] = Fingerprint(as_int(rows), as_int(checksum))
    for path, fingerprint in read.items():
        if fingerprint.rows != group[path].records:
            raise InProcessUnsupported(
                f"{fingerprint.rows} rows read from a data file whose manifest lists "
                f"{group[path].records}: {path!r:.120}"
            )
    return read


def _sum(fingerprints: Iterable[Fingerprint]) -> Fingerprint:
    total = Fingerprint(0, 0)
    for fingerprint in fingerprints:
        total = _plus(total, fingerprint)
    return total
