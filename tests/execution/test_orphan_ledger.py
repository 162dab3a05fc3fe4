"""The deletion ledger's file side without Spark: a quarantine killed with SIGKILL mid-way resumes
from the ledger and moves every file exactly once; quarantine and restore work the same on
SeaweedFS S3 through a PyIceberg table's own FileIO."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from icepack_core.db.queries import load_query
from icepack_core.discovery.catalogs import load_catalog
from icepack_core.errors import PermanentError, StaleFence
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import (
    QUARANTINE_PREFIX,
    OrphanQuarantine,
    is_quarantined,
    movable,
    quarantine_path,
    relative_path,
)
from icepack_core.intents import RemoveOrphanFiles, RemoveOrphanFilesParams
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.safety.locations import normalize_location
from icepack_core.settings import CatalogConfig
from tests.plugins.catalogs import SCHEMA, Seaweed, rows

REPO = Path(__file__).resolve().parents[2]
REASON = "not referenced by any snapshot; older than 2020-01-01T00:00:00+00:00"


class CountingMover(FileMover):
    """A FileMover that remembers every move it made."""

    def __init__(self, io: PyArrowFileIO) -> None:
        super().__init__(io)
        self.moves: list[str] = []

    def move(self, source: str, target: str) -> None:
        self.moves.append(source)
        super().move(source, target)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def running_job(db: asyncpg.Pool, table_id: int) -> Job:
    queue = JobQueue(db)
    await queue.enqueue(
        table_id,
        [
            RemoveOrphanFiles(
                params=RemoveOrphanFilesParams(older_than=datetime(2020, 1, 1, tzinfo=UTC))
            )
        ],
    )
    job = await queue.claim("executor@test", 60)
    assert job is not None
    return job


async def table_row(db: asyncpg.Pool, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', $1) RETURNING id",
        name,
    )
    return table_id


def ledger(
    db: asyncpg.Pool, job: Job, table_id: int, location: str, mover: FileMover
) -> OrphanQuarantine:
    return OrphanQuarantine(
        db, job.id, job.fence, table_id, location, mover, lambda: datetime.now(UTC), batch_size=7
    )


@given(
    st.lists(st.text(alphabet="abc._-", min_size=1, max_size=6), min_size=1, max_size=4),
    st.sampled_from(["file:/w/t", "file:///w/t/", "/w/t", "s3a://b/w/t", "s3://B/w/t/"]),
)
def test_quarantine_paths_stay_under_the_table_and_are_recognised(
    parts: list[str], location: str
) -> None:
    parts = [p for p in parts if p not in {".", ".."}] or ["x"]
    scheme = "s3://b" if location.startswith("s3") else "file://"
    path = f"{scheme}/w/t/" + "/".join(parts)
    target = quarantine_path(location, 9, path)
    assert is_quarantined(location, target) and not is_quarantined(location, path)
    assert relative_path(location, target) == f"{QUARANTINE_PREFIX}/job-9/" + "/".join(parts)
    with pytest.raises(PermanentError, match="not under the table location"):
        relative_path(location, f"{scheme}/w/t_v2/x")


async def test_killed_quarantine_resumes_and_moves_each_file_exactly_once(
    db: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    location = f"file://{tmp_path}/wh/t"
    files = {}
    for i in range(30):
        path = tmp_path / "wh" / "t" / "data" / f"p={i % 3}" / f"orphan-{i}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(100 + i))
        files[f"file://{path}"] = sha(path.read_bytes())
    table_id = await table_row(db, "killed")
    job = await running_job(db, table_id)
    first = ledger(db, job, table_id, location, FileMover(PyArrowFileIO()))
    assert await first.record(sorted(files), REASON) == 30
    assert await first.record(sorted(files), REASON) == 0  # a retried listing adds nothing

    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.execution.quarantine_child",
        database_url,
        str(job.id),
        str(job.fence),
        str(table_id),
        location,
        "12",
        cwd=REPO,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(child.communicate(), timeout=120)
    assert child.returncode == -9, err.decode()[-2000:]
    states: dict[str, int] = {
        r[0]: r[1]
        for r in await db.fetch(
            "SELECT state, count(*) FROM icepack.deletions WHERE job_id = $1 GROUP BY 1", job.id
        )
    }
    # The 12th file was moved, its mark never written.
    assert states == {"quarantined": 11, "recorded": 19}

    # The job is re-claimed (new fence): the killed attempt's fence writes nothing any more.
    await db.execute("UPDATE icepack.jobs SET fence = fence + 1 WHERE id = $1", job.id)
    with pytest.raises(StaleFence):
        await first.quarantine(timedelta(days=7))
    resumed = dataclasses.replace(job, fence=job.fence + 1)
    mover = CountingMover(PyArrowFileIO())
    report = await ledger(db, resumed, table_id, location, mover).quarantine(timedelta(days=7))

    assert report.resumed == 1 and len(mover.moves) == 18 and report.moved == 19
    rows = await db.fetch("SELECT * FROM icepack.deletions WHERE job_id = $1", job.id)
    assert {r["state"] for r in rows} == {"quarantined"}
    moved_before = {r["path"] for r in rows} - set(mover.moves)
    assert len(moved_before) == 12 and not moved_before & set(mover.moves)  # none moved twice
    for row in rows:
        source = Path(row["path"].removeprefix("file://"))
        held = Path(row["quarantine_path"].removeprefix("file://"))
        assert not source.exists() and held.exists()  # in exactly one place
        assert sha(held.read_bytes()) == files[row["path"]]
        assert f"/{QUARANTINE_PREFIX}/job-{job.id}/data/" in row["quarantine_path"]
        assert row["size_bytes"] == held.stat().st_size


async def test_quarantine_and_restore_on_seaweedfs_s3(db: asyncpg.Pool, seaweed: Seaweed) -> None:
    cfg = CatalogConfig(
        name="weed",
        type="rest",
        uri=seaweed.rest_uri,
        credential=f"{seaweed.access_key}:{seaweed.secret_key}",
        warehouse="s3://warehouse",
        s3_endpoint=seaweed.s3_endpoint,
        s3_access_key_id=seaweed.access_key,
        s3_secret_access_key=seaweed.secret_key,
        region="us-east-1",
    )
    catalog = load_catalog(cfg)
    namespace = f"ledger_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.events", SCHEMA)
    table.append(rows(3))
    table.append(rows(4, start=3))
    before = table.scan().to_arrow().sort_by("id")
    referenced = {f.file.file_path for f in table.scan().plan_files()}
    location = table.location()
    assert location.startswith("s3://")
    io = table.io
    orphans = {}
    for i in range(5):
        path = f"{location}/data/orphan-{i}.parquet"
        data = os.urandom(1000 + i)
        with io.new_output(path).create(overwrite=True) as out:
            out.write(data)
        orphans[path] = sha(data)

    table_id = await table_row(db, "s3")
    job = await running_job(db, table_id)
    quarantine = ledger(db, job, table_id, location, FileMover(io))
    assert await quarantine.record(sorted(orphans), REASON) == 5
    report = await quarantine.quarantine(timedelta(days=7))
    assert report.moved == 5 and report.missing == []
    rows_ = await db.fetch("SELECT * FROM icepack.deletions WHERE job_id = $1", job.id)
    for row in rows_:
        assert row["state"] == "quarantined" and row["quarantine_path"].startswith(location)
        assert not io.new_input(row["path"]).exists()
        with io.new_input(row["quarantine_path"]).open() as stream:
            assert sha(stream.read()) == orphans[row["path"]]
    fresh = catalog.load_table(f"{namespace}.events")
    assert fresh.scan().to_arrow().sort_by("id") == before
    assert all(io.new_input(p).exists() for p in referenced)

    restorer = await running_job(db, table_id)
    restored = await ledger(db, restorer, table_id, location, FileMover(io)).restore(job.id)
    assert restored.moved == 5 and restored.refused == []
    for path, digest in orphans.items():
        with io.new_input(path).open() as stream:
            assert sha(stream.read()) == digest
    assert {
        r["state"]
        for r in await db.fetch("SELECT state FROM icepack.deletions WHERE job_id = $1", job.id)
    } == {"restored"}


async def test_resume_finishes_a_half_done_move_and_reports_a_vanished_file(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    (root / "data").mkdir(parents=True)
    location = f"file://{root}"
    copied, vanished, plain = (root / "data" / f"{n}.parquet" for n in ("copied", "gone", "plain"))
    for path in (copied, vanished, plain):
        path.write_bytes(os.urandom(64))
    digest = sha(copied.read_bytes())
    table_id = await table_row(db, "half")
    job = await running_job(db, table_id)
    mover = CountingMover(PyArrowFileIO())
    quarantine = ledger(db, job, table_id, location, mover)
    await quarantine.record([f"file://{p}" for p in (copied, vanished, plain)], REASON)
    # An object store's move copied the file, then the process died before deleting the source.
    target = Path(quarantine_path(location, job.id, f"file://{copied}").removeprefix("file://"))
    target.parent.mkdir(parents=True)
    target.write_bytes(copied.read_bytes())
    vanished.unlink()  # someone else deleted it meanwhile

    report = await quarantine.quarantine(timedelta(days=7))

    assert report.resumed == 1 and report.moved == 2
    assert report.missing == [f"file://{vanished}"]
    assert mover.moves == [f"file://{plain}"]  # the copied one was not moved again
    assert not copied.exists() and sha(target.read_bytes()) == digest
    states = {
        r["path"]: r["state"]
        for r in await db.fetch(
            "SELECT path, state FROM icepack.deletions WHERE job_id = $1", job.id
        )
    }
    assert states == {
        f"file://{copied}": "quarantined",
        f"file://{plain}": "quarantined",
        f"file://{vanished}": "recorded",  # never claimed as quarantined
    }


class CountingPool:
    """The test's pool, counting the statements the quarantine sends through it."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.calls = pool, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.pool, name)

        async def counted(*args: Any) -> Any:
            self.calls += 1
            return await method(*args)

        return counted


async def test_a_job_that_loses_its_fence_mid_quarantine_moves_at_most_one_more_file(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    """Each file costs one round trip (the fenced mark proves the fence for the next move),
    and a fence lost mid-run stops the quarantine: the move already under way lands, its mark
    is refused, nothing after it moves."""
    location = f"file://{tmp_path}/wh/t"
    paths = []
    for i in range(12):
        path = tmp_path / "wh" / "t" / "data" / f"orphan-{i:02}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(64))
        paths.append(f"file://{path}")
    table_id = await table_row(db, "fenced")
    job = await running_job(db, table_id)
    pool = CountingPool(db)
    mover = CountingMover(PyArrowFileIO())
    quarantine = OrphanQuarantine(
        pool,  # type: ignore[arg-type]  # a counting stand-in for the pool (see CountingPool)
        job.id,
        job.fence,
        table_id,
        location,
        mover,
        lambda: datetime.now(UTC),
    )
    assert await quarantine.record(paths, REASON) == 12
    pool.calls = 0

    async def steal_after_the_fifth(_path: str) -> None:
        if len(mover.moves) == 5:  # another executor re-claims the job now
            await db.execute("UPDATE icepack.jobs SET fence = fence + 1 WHERE id = $1", job.id)

    quarantine.after_move = steal_after_the_fifth
    with pytest.raises(StaleFence):
        await quarantine.quarantine(timedelta(days=7))

    assert len(mover.moves) == 5  # none after the loss
    # One batch read, one fence check, then one fenced mark per file (the 5th refused).
    assert pool.calls == 1 + 1 + 5
    states: dict[str, int] = {
        r[0]: r[1]
        for r in await db.fetch(
            "SELECT state, count(*) FROM icepack.deletions WHERE job_id = $1 GROUP BY 1", job.id
        )
    }
    assert states == {"quarantined": 4, "recorded": 8}


async def test_the_quarantine_moves_only_orphan_rows_and_never_a_referenced_one(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    """One job can expire snapshots and remove orphans: the expiry's ``recorded`` rows (left by
    an attempt that died before its CALL) are the expiry's, never the quarantine's to move. And
    a row an earlier attempt recorded is checked against the current references like a new
    listing: a writer may have committed the file since."""
    location = (tmp_path / "t").as_uri()
    data = tmp_path / "t" / "data"
    data.mkdir(parents=True)
    files = {name: data / f"{name}.parquet" for name in ("orphan", "now-referenced", "expiring")}
    for path in files.values():
        path.write_bytes(os.urandom(300))
    table_id = await table_row(db, "mixed")
    job = await running_job(db, table_id)
    expiring = files["expiring"].as_uri()
    await db.fetch(  # the expiry ledger's own query, as ExpiryLedger._record sends it
        load_query("deletion_expiry_record"),
        job.id,
        job.fence,
        table_id,
        [expiring],
        [300],
        ["data"],
        "expired by a snapshot expiry",
    )
    mover = CountingMover(PyArrowFileIO())
    quarantine = ledger(db, job, table_id, location, mover)
    orphans = [files["orphan"].as_uri(), files["now-referenced"].as_uri()]
    assert await quarantine.record(orphans, REASON) == 2
    referenced = frozenset({normalize_location(files["now-referenced"].as_uri())})

    report = await quarantine.quarantine(timedelta(days=7), referenced)

    assert mover.moves == [files["orphan"].as_uri()]
    assert report.kept_referenced == [files["now-referenced"].as_uri()]
    assert files["now-referenced"].exists() and files["expiring"].exists()
    states = {
        r["path"]: (r["action"], r["state"])
        for r in await db.fetch("SELECT * FROM icepack.deletions WHERE job_id = $1", job.id)
    }
    assert states == {
        files["orphan"].as_uri(): ("remove_orphan_files", "quarantined"),
        files["now-referenced"].as_uri(): ("remove_orphan_files", "recorded"),
        expiring: ("expire_snapshots", "recorded"),
    }


async def test_a_cancel_mid_move_still_marks_the_moved_file(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    """Cancelling the work (an operator's cancel, a lost lease) cannot stop the thread moving a
    file. The mark must follow the move, or the ledger would say ``recorded`` (untouched) for a
    file sitting in quarantine, where neither restore nor purge looks."""
    location = (tmp_path / "t").as_uri()
    data = tmp_path / "t" / "data"
    data.mkdir(parents=True)
    orphans = [data / f"orphan-{i}.parquet" for i in range(3)]
    for path in orphans:
        path.write_bytes(os.urandom(200))
    table_id = await table_row(db, "cancelled")
    job = await running_job(db, table_id)
    quarantine = ledger(db, job, table_id, location, FileMover(PyArrowFileIO()))
    assert await quarantine.record([p.as_uri() for p in orphans], REASON) == 3
    task: asyncio.Task[Any] | None = None

    async def cancel_between_move_and_mark(_path: str) -> None:
        assert task is not None
        task.cancel()
        await asyncio.sleep(0.2)  # the cancel lands while this file's step is under way

    quarantine.after_move = cancel_between_move_and_mark
    task = asyncio.create_task(quarantine.quarantine(timedelta(days=7)))
    with pytest.raises(asyncio.CancelledError):
        await task

    rows = await db.fetch("SELECT * FROM icepack.deletions WHERE job_id = $1", job.id)
    moved = [r for r in rows if not local_file(r["path"]).exists()]
    assert len(moved) == 1 and moved[0]["state"] == "quarantined"
    assert local_file(moved[0]["quarantine_path"]).exists()
    assert sorted(r["state"] for r in rows) == ["quarantined", "recorded", "recorded"]


def local_file(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


async def test_restore_finishes_a_copy_back_whose_delete_was_lost(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    """On an object store a move is a copy then a delete. A restore killed between the two
    leaves the file at its path and in quarantine: the next restore finishes it (the bytes are
    the same) instead of refusing it for ever, and the purge never sees the row afterwards. A
    different file at the path is still refused."""
    location = (tmp_path / "t").as_uri()
    data = tmp_path / "t" / "data"
    data.mkdir(parents=True)
    back, taken = data / "copied-back.parquet", data / "taken.parquet"
    for path in (back, taken):
        path.write_bytes(os.urandom(256))
    original = back.read_bytes()
    table_id = await table_row(db, "copied")
    job = await running_job(db, table_id)
    mover = FileMover(PyArrowFileIO())
    quarantine = ledger(db, job, table_id, location, mover)
    assert await quarantine.record([back.as_uri(), taken.as_uri()], REASON) == 2
    assert (await quarantine.quarantine(timedelta(days=7))).moved == 2
    held = {
        r["path"]: local_file(r["quarantine_path"])
        for r in await db.fetch("SELECT * FROM icepack.deletions WHERE job_id = $1", job.id)
    }
    back.write_bytes(held[back.as_uri()].read_bytes())  # the copy back, its delete lost
    taken.write_bytes(os.urandom(256))  # another file, same size, now at the path

    report = await quarantine.restore(job.id)

    assert report.resumed == 1 and [r["path"] for r in report.refused] == [taken.as_uri()]
    assert back.read_bytes() == original and not held[back.as_uri()].exists()
    assert held[taken.as_uri()].exists()
    states = {
        r["path"]: r["state"]
        for r in await db.fetch("SELECT * FROM icepack.deletions WHERE job_id = $1", job.id)
    }
    assert states == {back.as_uri(): "restored", taken.as_uri(): "quarantined"}


async def test_names_the_quarantine_path_cannot_carry_exactly_are_kept(
    db: asyncpg.Pool, tmp_path: Path
) -> None:
    """The quarantine path comes from the normalised location, which strips whitespace and
    drops a URL's ``?query`` and ``#fragment``: ``x.bin`` and ``x.bin `` would share one copy
    (the second move overwriting the first, or deleting its source as "already copied"). Such
    names are kept where they are and reported; the others move."""
    location = f"file://{tmp_path / 't'}"
    data = tmp_path / "t" / "data"
    data.mkdir(parents=True)
    names = ["plain.bin", "x.bin", "x.bin ", "y.bin?v=1", "z.bin#frag"]
    for name in names:
        (data / name).write_bytes(os.urandom(100 + len(name)))
    listed = [f"file://{data / name}" for name in names]
    table_id = await table_row(db, "odd")
    job = await running_job(db, table_id)
    mover = CountingMover(PyArrowFileIO())
    quarantine = ledger(db, job, table_id, location, mover)

    assert await quarantine.record(listed, REASON) == 1
    assert sorted(quarantine.unusual) == sorted(listed[1:])
    report = await quarantine.quarantine(timedelta(days=7))

    assert mover.moves == [listed[0]] and report.moved == 1
    assert all((data / name).exists() for name in names[1:])


@given(st.lists(st.text(alphabet="ab ?#/.%\t", min_size=1, max_size=6), max_size=8))
def test_movable_paths_never_share_a_quarantine_path(names: list[str]) -> None:
    location = "s3://bucket/t"
    paths = [f"{location}/data/{name}" for name in names]
    ok, kept = movable(location, paths)
    assert sorted(ok + kept) == sorted(paths)
    targets = [quarantine_path(location, 1, p) for p in ok]
    assert len(set(targets)) == len(targets)
    for target, path in zip(targets, ok, strict=True):  # the name exactly, nothing dropped
        assert target.endswith("/" + path.removeprefix(f"{location}/"))
