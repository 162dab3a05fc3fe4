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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import structlog
from pyiceberg.manifest import ManifestContent, ManifestFile
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
from icepack_core.execution.verification.metadata_diff import (
    checked_manifests,
    identity_sources,
    read_live_entries,
)
from icepack_core.execution.verification.parquet_encoding import check_encodings
from icepack_core.safety.locations import object_store_scheme

DATA = 0  # a manifest entry's content: data file
MAX_FILES = 20_000
CHUNK_FILES = 500  # files per query: the most a job waits for once its CALL ended

log = structlog.get_logger("icepack.verification")


def likely_replaced(table: Table, scoped: ScopedRun) -> TouchedFiles | None:
    """The small data files of ``scoped``'s partitions at ``table``'s current snapshot (every
    partition with at least ``min_files`` of them when ``scoped.keys`` is None), one
    ``PartitionFiles`` per partition with the files on its ``before`` side, at most
    ``MAX_FILES`` in all; None when the table holds live delete files or no snapshot.
    Blocking (reads the manifests).

    Raises:
        MetadataDiffUnsupported | Exception: a manifest read's error.
    """
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return None
    wanted = None if scoped.keys is None else set(scoped.keys)
    manifests = checked_manifests(snapshot, table.io)
    if any(m.content == ManifestContent.DELETES and _live(m) for m in manifests):
        return None
    found: dict[PartitionKey, list[ListedFile]] = {}
    room = MAX_FILES
    for manifest in manifests:
        if manifest.content != ManifestContent.DATA:
            continue
        live = read_live_entries(table.io, manifest, partitioned=True)
        for identity in live.identities:
            content, path, records, size = identity[0], identity[1], identity[4], identity[5]
            part = (int(identity[2]), identity[3])
            small = content == DATA and size < scoped.undersized_bytes
            if small and room > 0 and (wanted is None or part in wanted):
                found.setdefault(part, []).append(ListedFile(path, records, live.formats[path]))
                room -= 1
    if wanted is None:
        found = {k: v for k, v in found.items() if len(v) >= max(1, scoped.min_files)}
    return TouchedFiles(_partitions(table, found), None)


def _live(manifest: ManifestFile) -> bool:
    """Whether a manifest may hold live entries (a count it does not record counts as some)."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added is None or existing is None or added + existing > 0


def _partitions(
    table: Table, found: dict[PartitionKey, list[ListedFile]]
) -> tuple[PartitionFiles, ...]:
    """``found`` as ``PartitionFiles``, each with its spec's identity partition sources as
    ``constant`` (the columns the verification leaves out)."""
    constants = identity_sources(table)
    return tuple(
        PartitionFiles(f"spec {spec_id} {key!r}", tuple(files), (), constants[spec_id])
        for (spec_id, key), files in found.items()
    )


def prefetch(
    table: Table, scoped: ScopedRun, *, checksum: bool, stop: threading.Event | None = None
) -> FileFingerprints | None:
    """Fingerprints of ``likely_replaced``'s files, read with ``table``'s current schema, in
    chunks of ``CHUNK_FILES``; once ``stop`` is set, what the chunks read so far (checked
    between chunks and manifests). None when nothing is to be read (see the module
    docstring). Blocking: run it off the event loop, beside the ``CALL``. A chunk that
    fails ends the reading with what the others found (logged): the verification reads
    that file itself and meets the error where it is evidence.

    Raises:
        Exception: a manifest read's error.
    """
    if object_store_scheme(table.metadata.location) is not None:
        return None
    files = likely_replaced(table, scoped)
    if files is None or not files.partitions:
        return None
    schema = table.metadata.schema()
    if reader_blocker(schema, table.metadata.properties, files) is not None:
        return None
    local = {f.path: local_path(f.path) for f in files.listed()}
    fingerprints = FileFingerprints(schema, checksum, {})
    for constant, chunk in _chunks(files):
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
        fingerprints.found.update(read)
    return fingerprints


def _chunks(files: TouchedFiles) -> Iterator[tuple[frozenset[int], list[ListedFile]]]:
    """The files of each partition in chunks of at most ``CHUNK_FILES``, with the partition's
    identity columns (one query reads one chunk)."""
    for partition in files.partitions:
        listed = list(partition.before)
        for first in range(0, len(listed), CHUNK_FILES):
            yield partition.constant, listed[first : first + CHUNK_FILES]


class Prefetch:
    """``prefetch`` running in a thread of its own at the lowest CPU priority (``_background``)
    beside a ``CALL``: ``result`` stops it after the chunk it is reading and gives what it
    fingerprinted, so a job never waits for more than one chunk; ``cancel`` drops it."""

    def __init__(self, table: Table, scoped: ScopedRun, *, checksum: bool) -> None:
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        work = functools.partial(_background, table, scoped, checksum, self._stop)
        self._future = asyncio.get_running_loop().run_in_executor(self._pool, work)

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


def _background(
    table: Table, scoped: ScopedRun, checksum: bool, stop: threading.Event
) -> FileFingerprints | None:
    """``prefetch`` at nice 19 for this thread only (Linux schedules threads apart): it runs
    beside the CALL, whose Spark tasks must keep the CPUs. The thread is this prefetch's own,
    so no later work inherits its priority."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: as is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    return prefetch(table, scoped, checksum=checksum, stop=stop)
