"""The files a binpack compaction is about to replace, fingerprinted while it runs.

A binpack rewrite's inputs are the small data files (under ``ScopedRun.undersized_bytes``) of
the partitions it compacts, as its start snapshot lists them; its verification must read every
one of them (``file_fingerprint``), and on a table of small files those reads are most of the
verification's time. A data file never changes once written, so they can be read while the
``CALL`` runs instead of after it: ``prefetch`` lists them from the start snapshot's manifests
and fingerprints them (``FileFingerprints``), and the verification then reads only what is not
there: the files the rewrite wrote, and any input this guess missed.

The guess decides time only, never a verdict: a file here that the rewrite kept is never
looked at, one it replaced that is not here is read afterwards, and a fingerprint is used only
by a comparison with an equal schema (``FileFingerprints.usable``). Nothing is prefetched where
the in-process reader would not read the files anyway: a table off the local file system, a
live delete file in the table (its partitions' rows are then not just the files' rows), a
schema or property ``reader_blocker`` names. At most ``MAX_FILES`` files are prefetched (the
rest are read afterwards), so memory stays bounded on any table; they are read in chunks of
``CHUNK_FILES``, and the job stops the reading when it wants the result (``Prefetch.result``),
so it never waits for more than one chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import structlog
from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from icepack_core.errors import brief
from icepack_core.execution.scoping.left_behind import PartitionKey, ScopedRun
from icepack_core.execution.verification.file_fingerprint import (
    FileFingerprints,
    ListedFile,
    PartitionFiles,
    TouchedFiles,
    fingerprint_files,
    local_path,
    reader_blocker,
)
from icepack_core.execution.verification.fingerprint import Fingerprint
from icepack_core.execution.verification.metadata_diff import (
    checked_manifests,
    identity_sources,
    read_live_entries,
)
from icepack_core.execution.verification.parquet_encoding import check_encodings
from icepack_core.execution.verification.stored_fingerprints import (
    StoredFingerprint,
    StoredSource,
)
from icepack_core.safety.locations import object_store_scheme

DATA = 0  # a manifest entry's content: data file
MAX_FILES = 20_000
CHUNK_FILES = 500  # files per query: the most a job waits for once its CALL ended

log = structlog.get_logger("icepack.verification")
T = TypeVar("T")


@dataclass(frozen=True)
class SmallFile:
    """A small live data file: as its manifest lists it, its size, and its partition."""

    listed: ListedFile
    size: int
    partition: PartitionKey


def small_files(
    table: Table,
    undersized_bytes: int,
    *,
    wanted: frozenset[PartitionKey] | None = None,
    added_in: frozenset[int] | None = None,
) -> list[SmallFile] | None:
    """The live data files under ``undersized_bytes`` at ``table``'s current snapshot, of the
    ``wanted`` partitions (None: every one), listed by manifests added by a snapshot in
    ``added_in`` (None: every manifest), at most ``MAX_FILES``; None when the table holds live
    delete files or no snapshot. Blocking (reads the manifests).

    Raises:
        MetadataDiffUnsupported | Exception: a manifest read's error.
    """
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return None
    manifests = checked_manifests(snapshot, table.io)
    if any(m.content == ManifestContent.DELETES and _live(m) for m in manifests):
        return None
    found: list[SmallFile] = []
    for manifest in manifests:
        if manifest.content != ManifestContent.DATA:
            continue
        if added_in is not None and manifest.added_snapshot_id not in added_in:
            continue
        live = read_live_entries(table.io, manifest, partitioned=True)
        for identity in live.identities:
            content, path, records, size = identity[0], identity[1], identity[4], identity[5]
            part = (int(identity[2]), identity[3])
            small = content == DATA and size < undersized_bytes
            if small and len(found) < MAX_FILES and (wanted is None or part in wanted):
                listed = ListedFile(path, records, live.formats[path])
                found.append(SmallFile(listed, int(size), part))
    return found


def likely_replaced(table: Table, scoped: ScopedRun) -> TouchedFiles | None:
    """The small data files of ``scoped``'s partitions at ``table``'s current snapshot (every
    partition with at least ``min_files`` of them when ``scoped.keys`` is None), one
    ``PartitionFiles`` per partition with the files on its ``before`` side, at most
    ``MAX_FILES`` in all; None when the table holds live delete files or no snapshot.
    Blocking (reads the manifests).

    Raises:
        MetadataDiffUnsupported | Exception: a manifest read's error.
    """
    listing = _listing(table, scoped)
    return None if listing is None else listing[1]


def _listing(table: Table, scoped: ScopedRun) -> tuple[list[SmallFile], TouchedFiles] | None:
    """``scoped``'s small files, and as ``likely_replaced`` groups them; None as there."""
    wanted = None if scoped.keys is None else frozenset(scoped.keys)
    small = small_files(table, scoped.undersized_bytes, wanted=wanted)
    return None if small is None else (small, grouped(table, small, _min_files(scoped)))


def grouped(table: Table, small: Sequence[SmallFile], min_files: int = 1) -> TouchedFiles:
    """``small`` by partition, on the ``before`` side, each partition with at least
    ``min_files`` of them."""
    found: dict[PartitionKey, list[ListedFile]] = {}
    for each in small:
        found.setdefault(each.partition, []).append(each.listed)
    found = {k: v for k, v in found.items() if len(v) >= max(1, min_files)}
    return TouchedFiles(partitions(table, found), None)


def _min_files(scoped: ScopedRun) -> int:
    """The files a partition needs to be replaced: a scoped run's were selected already."""
    return 1 if scoped.keys is not None else scoped.min_files


def _live(manifest: ManifestFile) -> bool:
    """Whether a manifest may hold live entries (a count it does not record counts as some)."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added is None or existing is None or added + existing > 0


def partitions(
    table: Table, found: Mapping[PartitionKey, Sequence[ListedFile]]
) -> tuple[PartitionFiles, ...]:
    """``found`` as ``PartitionFiles``, each with its spec's identity partition sources as
    ``constant`` (the columns the verification leaves out)."""
    constants = identity_sources(table)
    return tuple(
        PartitionFiles(f"spec {spec_id} {key!r}", tuple(files), (), constants[spec_id])
        for (spec_id, key), files in found.items()
    )


def prefetch(
    table: Table,
    scoped: ScopedRun,
    *,
    checksum: bool,
    stop: threading.Event | None = None,
    stored: StoredSource | None = None,
) -> FileFingerprints | None:
    """Fingerprints of ``likely_replaced``'s files, read with ``table``'s current schema:
    those ``stored()`` holds for the same file read the same way (``stored_fingerprints``;
    called in this thread, so the fetch is off the job's path) taken from there, the rest
    read in chunks of ``CHUNK_FILES``; once ``stop`` is set, what
    the chunks read so far (checked between chunks). None when nothing is to be read (see the
    module docstring). Blocking: run it off the event loop, beside the ``CALL``. A chunk that
    fails ends the reading with what the others found (logged): the verification reads that
    file itself and meets the error where it is evidence.

    Raises:
        Exception: a manifest read's error.
    """
    if object_store_scheme(table.metadata.location) is not None:
        return None
    listing = _listing(table, scoped)
    if listing is None or not listing[1].partitions:
        return None
    small, files = listing
    schema = table.metadata.schema()
    if reader_blocker(schema, table.metadata.properties, files) is not None:
        return None
    fingerprints = FileFingerprints(schema, checksum, {})
    sizes = {each.listed.path: each.size for each in small}
    fingerprints.found.update(from_store(files, sizes, _stored(stored)))
    read = read_chunks(schema, files, checksum, stop=stop, skip=fingerprints.found)
    fingerprints.found.update(read)
    log.info("verification.prefetched", stored=len(fingerprints.found) - len(read), read=len(read))
    return fingerprints


def _stored(source: StoredSource | None) -> Mapping[str, StoredFingerprint]:
    """What ``source`` gives; nothing when it fails (logged): the files are read instead."""
    if source is None:
        return {}
    try:
        return source()
    except Exception as exc:
        log.info("verification.stored_fingerprints_skipped", error=brief(exc))
        return {}


def from_store(
    files: TouchedFiles, sizes: Mapping[str, int], stored: Mapping[str, StoredFingerprint]
) -> dict[tuple[frozenset[int], str], Fingerprint]:
    """The stored fingerprints of ``files`` taken of the same file (path, size, record count)
    with the same identity columns left out."""
    found = {}
    for partition in files.partitions:
        for listed in partition.before:
            kept = stored.get(listed.path)
            same_file = kept is not None and (kept.size, kept.records) == (
                sizes.get(listed.path),
                listed.records,
            )
            if kept is not None and same_file and kept.constant == partition.constant:
                found[(partition.constant, listed.path)] = kept.fingerprint
    return found


def read_chunks(
    schema: Schema,
    files: TouchedFiles,
    checksum: bool,
    *,
    stop: threading.Event | None = None,
    skip: Container[tuple[frozenset[int], str]] = (),
) -> dict[tuple[frozenset[int], str], Fingerprint]:
    """Fingerprints of the ``before`` files of ``files`` not in ``skip``, read with ``schema``
    in chunks of ``CHUNK_FILES`` by one DuckDB thread, each chunk's encodings checked first
    (``check_encodings``); what was read until ``stop`` was set, or until a chunk failed
    (logged). ``reader_blocker`` must have found nothing. Blocking."""
    local = {f.path: local_path(f.path) for f in files.listed()}
    found: dict[tuple[frozenset[int], str], Fingerprint] = {}
    for constant, chunk in _chunks(files, skip):
        if stop is not None and stop.is_set():
            break
        try:
            check_encodings(schema, sorted({local[f.path] for f in chunk}))
            # One DuckDB thread: the CALL beside it needs the CPUs, and small files are read
            # about as fast by one thread as by two (their cost is per file, not per byte).
            read = fingerprint_files(
                schema, {constant: {f.path: f for f in chunk}}, local, checksum, threads=1
            )
        except Exception as exc:
            log.info("verification.prefetch_stopped", error=brief(exc))
            break
        found.update(read)
    return found


def _chunks(
    files: TouchedFiles, skip: Container[tuple[frozenset[int], str]]
) -> Iterator[tuple[frozenset[int], list[ListedFile]]]:
    """The files of each partition not in ``skip``, in chunks of at most ``CHUNK_FILES``, with
    the partition's identity columns (one query reads one chunk)."""
    for partition in files.partitions:
        listed = [f for f in partition.before if (partition.constant, f.path) not in skip]
        for first in range(0, len(listed), CHUNK_FILES):
            yield partition.constant, listed[first : first + CHUNK_FILES]


class Prefetch:
    """``prefetch`` running in a thread of its own at the lowest CPU priority
    (``at_lowest_priority``) beside a ``CALL``: ``result`` stops it after the chunk it is
    reading and gives what it fingerprinted, so a job never waits for more than one chunk;
    ``cancel`` drops it."""

    def __init__(
        self,
        table: Table,
        scoped: ScopedRun,
        *,
        checksum: bool,
        stored: StoredSource | None = None,
    ) -> None:
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        work = functools.partial(
            prefetch, table, scoped, checksum=checksum, stop=self._stop, stored=stored
        )
        self._future = asyncio.get_running_loop().run_in_executor(
            self._pool, at_lowest_priority, work
        )

    async def result(self) -> FileFingerprints | None:
        """What was fingerprinted until now (None: nothing, or an error, logged)."""
        self._stop.set()
        try:
            return await self._future
        except Exception as exc:
            log.info("verification.prefetch_skipped", error=brief(exc))
            return None
        finally:
            self._pool.shutdown(wait=False)

    def cancel(self) -> None:
        """Stop and drop it; its thread ends after its chunk, nothing waits for it."""
        self._stop.set()
        self._future.cancel()
        self._pool.shutdown(wait=False)


def at_lowest_priority(work: Callable[[], T]) -> T:
    """``work()`` at nice 19 for the calling thread only (Linux schedules threads apart): it
    runs beside Spark, whose tasks must keep the CPUs. Call it in a thread of its own, so no
    later work inherits its priority."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: as is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    return work()
