"""What a scoped rewrite left behind: the selected partitions whose file groups did not commit.

With ``partial-progress.enabled`` (the planner's default) Iceberg commits a rewrite's file groups
in batches; a batch that a concurrent commit invalidates (a writer's copy-on-write delete, or
Iceberg's commit retries running out while a writer commits every second) is dropped, the others
stay, and the procedure succeeds. Iceberg only logs the dropped batches: its output counts what
committed. A rewrite that lost most of its groups to a writer read as a success, and the
partitions it left kept growing until the next run the schedule allowed.

After a binpack rewrite, scoped (``metadata_scope``, which knows the partitions it selected) or
table-wide without a ``where`` (every partition with ``min-input-files`` small files forms a
group), the executor reads the manifests again: a selected partition that still holds
``min-input-files`` small files that were live when the rewrite started was not compacted (a
committed group replaces every one of them; files a writer added since are new and not
counted). ``JobExecution`` then records the
action (what committed is verified and kept) and gives the job back as a commit conflict for
the lost part (``execution.conflicts``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from icepack_core.errors import brief
from icepack_core.execution.verification.metadata_diff import checked_manifests, read_live_entries

DATA = 0  # a manifest entry's content: data file
PartitionKey = tuple[int, tuple[Any, ...]]  # (spec id, partition tuple)


@dataclass(frozen=True)
class ScopedRun:
    """What a rewrite set out to compact: the partitions a scoped run selected (None: a
    table-wide binpack, where every partition with ``min_files`` small files forms a group),
    the small-file size and the ``min-input-files`` that qualified them."""

    keys: tuple[PartitionKey, ...] | None
    undersized_bytes: int
    min_files: int


def whole_table_run(options: Mapping[str, str], target_bytes: int) -> ScopedRun:
    """A table-wide binpack's ``ScopedRun`` from its options (Iceberg's ``min-input-files``
    default 5; a value that is not a number counts as 5: Iceberg refuses it anyway)."""
    raw = options.get("min-input-files", "5")
    min_files = int(raw) if raw.strip().isdigit() else 5
    return ScopedRun(None, int(target_bytes * 0.75), min_files)


def snapshots_after(table: Table, start: int | None) -> frozenset[int]:
    """The snapshots committed after ``start``: the current snapshot and its ancestors down to,
    not including, ``start`` (every ancestor when ``start`` is None or not among them)."""
    parents = {s.snapshot_id: s.parent_snapshot_id for s in table.metadata.snapshots}
    found: set[int] = set()
    current = table.metadata.current_snapshot_id
    while current is not None and current != start and current not in found:
        found.add(current)
        current = parents.get(current)
    return frozenset(found)


def left_behind(
    table: Table,
    start: int | None,
    keys: Collection[PartitionKey] | None,
    undersized_bytes: int,
) -> dict[PartitionKey, int]:
    """Per partition of ``keys`` (spec id, partition tuple; None: every partition), how many of
    its live small data files at ``table``'s current snapshot were already live at ``start``
    (added by no snapshot after it). Blocking (reads the manifests).

    A rewrite started at ``start`` that committed a partition's file group replaced every such
    file of that partition; files a writer added since are not counted. So a selected partition
    that still holds them was not compacted: its group's commit was lost (with partial
    progress Iceberg drops a batch a concurrent commit invalidated, and only logs it).

    Raises:
        MetadataDiffUnsupported | Exception: a manifest read's error.
    """
    wanted = None if keys is None else set(keys)
    found: dict[PartitionKey, int] = dict.fromkeys(wanted or (), 0)
    snapshot = table.metadata.current_snapshot()
    if snapshot is None or wanted == set():
        return found
    since = snapshots_after(table, start)
    for manifest in checked_manifests(snapshot, table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        live = read_live_entries(table.io, manifest, partitioned=True)
        for identity in live.identities:
            content, path, size = identity[0], identity[1], identity[5]
            part = (int(identity[2]), identity[3])
            if content != DATA or size >= undersized_bytes:
                continue
            if (wanted is None or part in wanted) and live.added_by.get(path) not in since:
                found[part] = found.get(part, 0) + 1
    return found


async def partitions_lost(
    load: Callable[[], Awaitable[Table | None]], start: int | None, scoped: ScopedRun
) -> int:
    """How many of ``scoped``'s partitions still hold at least ``min_files`` of the small files
    live at ``start`` on the table as ``load`` gives it now (0 without a table).

    Raises:
        Exception: the load's or a manifest read's error (the caller keeps it as evidence).
    """
    if scoped.keys == ():
        return 0
    table = await load()
    if table is None:
        return 0
    found = await asyncio.to_thread(left_behind, table, start, scoped.keys, scoped.undersized_bytes)
    return sum(1 for n in found.values() if n >= max(1, scoped.min_files))


async def record_lost(
    load: Callable[[], Awaitable[Table | None]] | None,
    start: int | None,
    scoped: ScopedRun | None,
    output: MutableMapping[str, object],
) -> None:
    """``partitions_lost`` in a rewrite's ``output`` (``partitions_lost``; absent when none
    were); evidence only, never a reason to fail: an error is kept as
    ``partitions_lost_error``."""
    if scoped is None or load is None:
        return
    try:
        lost = await partitions_lost(load, start, scoped)
    except Exception as exc:
        output["partitions_lost_error"] = brief(exc)
        return
    if lost:
        output["partitions_lost"] = lost
