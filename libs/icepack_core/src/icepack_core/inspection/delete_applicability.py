"""Which live delete files can still apply: Iceberg's sequence-number rule, in bounded memory.

A delete file stays in a table's metadata after the rows it deleted were rewritten away: Spark's
``rewrite_data_files`` gives the new data files the data sequence number of the snapshot it
started from, and Iceberg's dangling-delete removal skips unpartitioned tables (their commits'
own table-wide filter keeps deletes whose sequence number equals the oldest data file's). Such a
delete file deletes nothing, yet counting it made the table look unhealthy and delete
application was proposed again after every compaction. The inspector therefore counts a delete
file only when the rule Iceberg's readers apply (``DeleteFileIndex``) lets it match a live data
file:

* an **equality delete** with data sequence number ``S`` applies to data files whose data
  sequence number is ``< S``, in the same partition of the same spec, or to every data file of
  every spec when its own spec is unpartitioned (a *global* delete);
* a **position delete** or **deletion vector** with data sequence number ``S`` applies to data
  files whose data sequence number is ``<= S`` in the same partition of the same spec.

So the inspector keeps, per partition (``manifests.partition_key``: spec id and values), the
smallest data sequence number of a live data file there and how many files have it
(``DataMins``), and groups live delete files by (kind, sequence number, partition)
(``DeleteGroups``). Both are sums over manifests that can be taken apart again when a manifest
leaves the snapshot (the incremental totals of ``pyiceberg_inspector``): a partition whose
minimum lost all its files is marked unknown (count 0) and the totals are recomputed from the
cached manifest aggregates. The groups are at most one per delete file; past ``MAX_GROUPS`` in a
table they are dropped and every live delete file is counted (the documented fallback: the count
is then the one before this rule, never lower than the truth). A position delete whose data file
is gone but whose partition still holds an older file is counted (that needs the path, which is
not aggregated).

A spec whose every field is ``void`` is unpartitioned to Iceberg but has partition values here
(nulls): its equality deletes are matched within that tuple only (metadata does not tell the
aggregate which specs are void).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

EQUALITY, POSITION, VECTOR = "e", "p", "d"
MAX_GROUPS = 100_000  # delete groups kept per table's totals before the fallback


def applies(kind: str, delete_seq: int, data_min_seq: int | None) -> bool:
    """Whether a delete file of ``kind`` with data sequence number ``delete_seq`` can match a
    data file in a scope whose oldest live data file has ``data_min_seq`` (None: no data)."""
    if data_min_seq is None:
        return False
    if kind == EQUALITY:
        return data_min_seq < delete_seq
    return data_min_seq <= delete_seq


def group_key(kind: str, seq: int, partition: str) -> str:
    """The ``DeleteGroups`` key of delete files of ``kind`` and ``seq`` in ``partition``."""
    return f"{kind}|{seq}|{partition}"


def _split(key: str) -> tuple[str, int, str]:
    kind, seq, partition = key.split("|", 2)
    return kind, int(seq), partition


def is_global(partition: str) -> bool:
    """A partition key of an unpartitioned spec (``[spec_id, []]``)."""
    return partition.endswith(",[]]")


# partition key -> [smallest data sequence number of a live data file, files with it]
DataMins = dict[str, list[int]]
# group_key -> [delete files, their records]
DeleteGroups = dict[str, list[int]]


def add_min(mins: DataMins, partition: str, seq: int, count: int, sign: int = 1) -> None:
    """Fold ``count`` data files of minimum ``seq`` in ``partition`` into ``mins`` (``sign``
    -1: take them out). Taking out the last files of the minimum leaves ``[seq, 0]`` (unknown
    until files of that minimum or a lower one come back); taking out files below the minimum
    leaves a negative count: both make ``mins_known`` false."""
    found = mins.get(partition)
    if sign > 0:
        if found is None or (seq < found[0] and found[1] >= 0):
            mins[partition] = [seq, count]
        elif seq == found[0] and found[1] >= 0:
            found[1] += count
        return
    if found is None or seq < found[0]:
        mins[partition] = [seq, -1]
    elif seq == found[0]:
        found[1] -= count


def mins_known(mins: DataMins) -> bool:
    """Every partition's minimum is exact (no file of it was taken out without coming back)."""
    return all(count > 0 for _, count in mins.values())


def add_groups(groups: DeleteGroups, other: DeleteGroups, sign: int = 1) -> None:
    """Fold ``other``'s delete groups into ``groups`` (``sign`` -1: take them out); a group
    whose file count falls to 0 is dropped."""
    for key, (files, records) in other.items():
        found = groups.get(key)
        if found is None:
            groups[key] = [sign * files, sign * records]
            continue
        found[0] += sign * files
        found[1] += sign * records
        if found[0] == 0:
            del groups[key]


@dataclass(frozen=True, slots=True)
class Applicable:
    """Live delete files that can still apply, by kind, and their records."""

    equality: int
    position: int
    vectors: int
    records: int


def applicable(mins: DataMins, groups: DeleteGroups) -> Applicable:
    """The delete files of ``groups`` that can match a live data file of ``mins``."""
    lowest = min((seq for seq, _ in mins.values()), default=None)
    counts = {EQUALITY: 0, POSITION: 0, VECTOR: 0}
    records = 0
    for key, (files, recs) in groups.items():
        kind, seq, partition = _split(key)
        if kind == EQUALITY and is_global(partition):
            scope: int | None = lowest
        else:
            found = mins.get(partition)
            scope = found[0] if found is not None else None
        if applies(kind, seq, scope):
            counts[kind] += files
            records += recs
    return Applicable(counts[EQUALITY], counts[POSITION], counts[VECTOR], records)


def groups_to_json(groups: DeleteGroups) -> dict[str, list[int]]:
    return {k: list(v) for k, v in groups.items()}


def parse_groups(data: object) -> DeleteGroups:
    """Groups from their JSON form (``ValueError`` for another shape)."""
    if not isinstance(data, dict):
        raise ValueError("delete groups are not an object")
    out: DeleteGroups = {}
    for key, value in data.items():
        _split(key)
        files, records = value
        out[key] = [int(files), int(records)]
    return out


def parse_mins(data: object) -> DataMins:
    """Minimums from their JSON form (``ValueError`` for another shape)."""
    if not isinstance(data, dict):
        raise ValueError("data minimums are not an object")
    out: DataMins = {}
    for key, value in data.items():
        json.loads(key)
        seq, count = value
        out[key] = [int(seq), int(count)]
    return out
