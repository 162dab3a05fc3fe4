"""Which delete files the inspector counts: Iceberg's sequence-number rule, checked against a
brute-force oracle over every (delete file, data file) pair, through the manifest aggregates and
the incremental totals exactly as the inspector folds them (pure computation: no table needed).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from icepack_core.inspection.delete_applicability import EQUALITY, POSITION, VECTOR, applies
from icepack_core.inspection.manifests import ManifestAggregate, Totals

# Partition keys as manifests.partition_key renders them: spec 0 unpartitioned, spec 1 by part.
UNPARTITIONED = "[0,[]]"
PARTITIONS = [UNPARTITIONED, '[1,["a"]]', '[1,["b"]]', '[2,["a"]]']


@dataclass(frozen=True)
class File:
    kind: str  # "data", or a delete kind of delete_applicability
    partition: str
    seq: int
    records: int = 1


def oracle_applies(delete: File, data: list[File]) -> bool:
    """Iceberg's DeleteFileIndex rule, pair by pair."""
    for d in data:
        if delete.kind == EQUALITY:
            scoped = delete.partition == UNPARTITIONED or d.partition == delete.partition
            if scoped and d.seq < delete.seq:
                return True
        elif d.partition == delete.partition and d.seq <= delete.seq:
            return True
    return False


def aggregate(files: list[File]) -> ManifestAggregate:
    agg = ManifestAggregate(small_threshold=1)
    for f in files:
        if f.kind == "data":
            agg.data_files += 1
            agg.partitions[f.partition] += 1
            agg.add_data_seq(f.partition, f.seq)
            continue
        if f.kind == EQUALITY:
            agg.equality_deletes += 1
        elif f.kind == VECTOR:
            agg.deletion_vectors += 1
        else:
            agg.position_deletes += 1
        agg.delete_records += f.records
        agg.add_delete(f.kind, f.seq, f.partition, f.records)
    return agg


files = st.builds(
    File,
    st.sampled_from(["data", "data", EQUALITY, POSITION, VECTOR]),
    st.sampled_from(PARTITIONS),
    st.integers(0, 6),
    st.integers(1, 5),
)
manifests = st.lists(st.lists(files, max_size=6), max_size=6)


def expected(manifest_files: list[list[File]]) -> tuple[int, int, int, int]:
    everything = [f for m in manifest_files for f in m]
    data = [f for f in everything if f.kind == "data"]
    live = [f for f in everything if f.kind != "data" and oracle_applies(f, data)]
    return (
        sum(f.kind == EQUALITY for f in live),
        sum(f.kind == POSITION for f in live),
        sum(f.kind == VECTOR for f in live),
        sum(f.records for f in live),
    )


def counted(totals: Totals) -> tuple[int, int, int, int]:
    a = totals.applicable()
    return a.equality, a.position, a.vectors, a.records


@settings(max_examples=300, deadline=None)
@given(manifests)
def test_counted_delete_files_are_exactly_those_that_can_match_a_data_file(
    ms: list[list[File]],
) -> None:
    totals = Totals()
    for m in ms:
        totals.add(aggregate(m))
    assert totals.consistent()
    assert counted(totals) == expected(ms)


@settings(max_examples=300, deadline=None)
@given(manifests, manifests, st.data())
def test_incremental_totals_agree_with_the_oracle_or_ask_for_a_recompute(
    before: list[list[File]], added: list[list[File]], data: st.DataObject
) -> None:
    """Totals of ``before``, minus some of its manifests, plus ``added`` (a commit that removes
    and adds manifests), are exact whenever they call themselves consistent; and taking a
    manifest out and putting it back is always consistent and exact."""
    totals = Totals()
    for m in before:
        totals.add(aggregate(m))
    removed = data.draw(st.sets(st.integers(0, max(len(before) - 1, 0))))
    removed = {i for i in removed if i < len(before)}
    for i in sorted(removed):
        totals.add(aggregate(before[i]), -1)
    for m in added:
        totals.add(aggregate(m))
    now = [m for i, m in enumerate(before) if i not in removed] + added
    if totals.consistent():
        assert counted(totals) == expected(now)
    # A round trip through the cache format keeps the answer.
    again = Totals.from_json(totals.to_json())
    assert again is not None and counted(again) == counted(totals)
    # Re-adding what was taken out restores consistency exactly.
    for i in sorted(removed):
        totals.add(aggregate(before[i]))
    if removed and not added:
        assert totals.consistent()
        assert counted(totals) == expected(before)


@given(st.sampled_from([EQUALITY, POSITION, VECTOR]), st.integers(0, 9), st.integers(0, 9))
def test_the_rule_itself(kind: str, delete_seq: int, data_seq: int) -> None:
    """Equality deletes apply strictly below their sequence number, position deletes and
    deletion vectors at or below it; no data, nothing applies."""
    assert applies(kind, delete_seq, None) is False
    if kind == EQUALITY:
        assert applies(kind, delete_seq, data_seq) is (data_seq < delete_seq)
    else:
        assert applies(kind, delete_seq, data_seq) is (data_seq <= delete_seq)
