"""The files a binpack will replace are fingerprinted while its CALL runs, and its verification
reads only the rest: real Spark, real Iceberg tables, the executor's metadata loader.

The proof that a prefetched file is not read again: the rewrite's inputs are moved away right
after the CALL, and the in-process verification still proves the rewrite. The proof that the
prefetch never decides a verdict: a corrupt replace committed after the real one is still
caught, and where the prefetch cannot be used (delete files, another schema) it is not.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from pyiceberg.table import Table

from icepack_core.execution.maintenance import TableMaintenance, VerificationFailed
from icepack_core.execution.scoping.left_behind import ScopedRun
from icepack_core.execution.verification import replaced_files
from icepack_core.execution.verification.file_fingerprint import TouchedFiles, local_path
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, metadata_loader, unique_name
from tests.execution.verify_scope_support import (
    HOT,
    HiddenFiles,
    commit_replacing_partitions,
    make_partitioned_table,
)
from tests.execution.verify_support import content, current_snapshot

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "prefetch"
COMPACT = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
SETTINGS: list[Settings] = []


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    SETTINGS[:] = [spark_catalog_settings]
    return LocalEngine(spark_catalog_settings, session=spark)


def maintenance(engine: LocalEngine, name: str, **kwargs: Any) -> TableMaintenance:
    loader = metadata_loader(SETTINGS[0], NS, name)
    return TableMaintenance(engine, TableRef(CATALOG, NS, name), metadata=loader, **kwargs)


async def loaded_partitioned_table(spark: Any, prefix: str) -> Table:
    """A new ``make_partitioned_table`` as the executor's metadata loader gives it."""
    name = unique_name(prefix)
    make_partitioned_table(spark, NS, name)
    loaded: Table = await metadata_loader(SETTINGS[0], NS, name)()
    return loaded


async def test_the_replaced_files_are_read_during_the_call_and_never_again(
    spark: Any, engine: LocalEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("moved")
    table = make_partitioned_table(spark, NS, name)
    before = content(spark, table)
    # The HOT partitions' four small files each: after the CALL they are moved away, so a
    # verification that read them again would fail.
    inputs = HiddenFiles(spark, NS, name, HOT, tmp_path / "aside")
    # The prefetch runs at nice 19: under load it may not be done when the CALL ends (then
    # the verification reads the rest itself). This test waits for it, with a deadline.
    done = threading.Event()
    real = replaced_files.prefetch

    def signalling(*args: Any, **kwargs: Any) -> Any:
        kwargs["stop"] = None  # read everything, whenever the job asks
        try:
            return real(*args, **kwargs)
        finally:
            done.set()

    monkeypatch.setattr(replaced_files, "prefetch", signalling)

    async def move_inputs(_action: str) -> None:
        assert await asyncio.to_thread(done.wait, 120), "the prefetch did not end in 120 s"
        inputs.hide()

    try:
        outcome = await maintenance(engine, name, after_call=move_inputs).run(parse_intent(COMPACT))
    finally:
        inputs.restore()
    assert outcome.output["rewritten_data_files_count"] == 8
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["reader"] == "in_process", record.get("reader_fallback")
    assert (record["reader_files_prefetched"], record["reader_files_read"]) == (8, 2)
    assert record["rows_before"] == record["rows_after"] == 24
    assert content(spark, table) == before


async def test_a_corrupt_replace_after_the_compaction_is_still_caught(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("corrupt")
    table = make_partitioned_table(spark, NS, name)
    start = current_snapshot(spark, table)
    bad: list[int] = []

    async def corrupt(_action: str) -> None:
        # p0 as the compaction left it, one row short.
        rows = f"SELECT * FROM {table} WHERE part = 'p0' AND id <> 0"
        bad.append(commit_replacing_partitions(spark, NS, name, {"p0": rows}))

    with pytest.raises(VerificationFailed) as failed:
        await maintenance(engine, name, after_call=corrupt).run(parse_intent(COMPACT))
    evidence = failed.value.evidence.to_json()
    assert evidence["status"] == "violation"
    assert evidence["violation"]["snapshot_id"] == bad[0]
    assert evidence["rollback"]["status"] == "rolled_back"
    assert current_snapshot(spark, table) != start  # the real compaction's replace is kept


async def test_nothing_is_prefetched_where_delete_files_apply(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("deletes")
    table = make_partitioned_table(spark, NS, name, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id = 1")
    loaded = await metadata_loader(SETTINGS[0], NS, name)()
    scoped = ScopedRun(None, 1 << 30, 2)
    assert await asyncio.to_thread(replaced_files.likely_replaced, loaded, scoped) is None
    before = content(spark, table)
    outcome = await maintenance(engine, name).run(parse_intent(COMPACT))
    assert outcome.verification is not None
    for record in outcome.verification.to_json()["snapshots"]:
        assert record["ok"] and "reader_files_prefetched" not in record
    assert content(spark, table) == before


async def test_the_listing_keeps_the_selected_partitions_small_files_within_its_bound(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = await loaded_partitioned_table(spark, "listing")
    whole_table = ScopedRun(None, 1 << 30, 2)  # every partition with 2 small files: HOT
    listed = replaced_files.likely_replaced(loaded, whole_table)
    assert listed is not None
    assert sorted(len(p.before) for p in listed.partitions) == [4, 4]
    assert all(any(f"/part={hot}/" in f.path for hot in HOT) for f in listed.listed())
    nothing_small = ScopedRun(None, 1, 2)
    assert replaced_files.likely_replaced(loaded, nothing_small) == TouchedFiles((), None)
    monkeypatch.setattr(replaced_files, "MAX_FILES", 3)
    capped = replaced_files.likely_replaced(loaded, ScopedRun(None, 1 << 30, 1))
    assert capped is not None and len(capped.listed()) == 3


async def test_the_prefetch_runs_at_the_lowest_priority_in_a_thread_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int, int]] = []

    def record(_table: Any, _scoped: Any, *, checksum: bool, stop: Any, stored: Any) -> None:
        me = threading.get_native_id()
        seen.append((me, os.getpriority(os.PRIO_PROCESS, me)))

    monkeypatch.setattr(replaced_files, "prefetch", record)
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    for _ in range(2):
        running = replaced_files.Prefetch(
            cast(Table, object()), ScopedRun(None, 1, 1), checksum=True
        )
        await running.result()
    (first, nice), (second, _) = seen
    assert nice == 19 and first != second != threading.get_native_id()
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller
    # The pool the event loop lends to other work is untouched.
    pooled = await asyncio.to_thread(lambda: os.getpriority(os.PRIO_PROCESS, 0))
    assert pooled == caller


async def test_a_stopped_or_failing_prefetch_keeps_what_its_chunks_read(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = await loaded_partitioned_table(spark, "chunks")
    hot = ScopedRun(None, 1 << 30, 2)
    monkeypatch.setattr(replaced_files, "CHUNK_FILES", 3)
    whole = replaced_files.prefetch(loaded, hot, checksum=True)
    assert whole is not None and len(whole.found) == 8
    stopped = threading.Event()
    stopped.set()
    nothing = replaced_files.prefetch(loaded, hot, checksum=True, stop=stopped)
    assert nothing is not None and nothing.found == {}
    # A file gone from the second partition's first chunk: its chunk fails, the reading
    # ends there, and the first partition's two chunks stay.
    listed = replaced_files.likely_replaced(loaded, hot)
    assert listed is not None
    first, second = listed.partitions
    gone = Path(local_path(second.before[0].path))
    aside = gone.with_name(gone.name + ".aside")
    gone.rename(aside)
    try:
        partial = replaced_files.prefetch(loaded, hot, checksum=True)
    finally:
        aside.rename(gone)
    assert partial is not None
    assert {path for _, path in partial.found} == {f.path for f in first.before}
