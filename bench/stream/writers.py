"""The streaming writers of ``bench.stream``: one thread per table, one commit a second each.

Run as its own process (``python -m bench.stream.writers SPEC.json``) so its commit latencies
are not those of the sampling process. Writes with PyIceberg through the SQL catalog, as a Kafka
Connect or segment-processor sink would:

* ``hourly``: ``hour(ts)``, 50 rows a commit stamped now (one small file a commit, all in the
  open hour); with the spec's ``hour_minutes`` below 60 the stamps follow an event clock on
  which that many wall minutes make an hour, so a short run closes hours;
* ``bucketed``: ``bucket(16, id)``, 50 random ids a commit (up to 16 small files a commit);
* ``upsert``: unpartitioned, 20 rows a commit upserted on ``id`` (10 new ids, 10 updates of
  earlier ones). **Copy-on-write**: PyIceberg's ``upsert`` rewrites the data files holding the
  updated ids (an overwrite); Icepack's equality-delete writer (through the Spark JVM) was not
  in main when this bench was written, so the equality-delete upsert sink is not measured.

PyIceberg 0.12 computes ``bucket`` and ``hour`` for writes with ``pyiceberg-core`` only, which
Icepack does not depend on; the writer computes them with PyIceberg's own Python transforms
(``mmh3`` for the bucket, the Iceberg spec's hash), so the files carry exactly the partition
values Iceberg's writers give.

A commit that fails (``CommitFailedException``: another committer won, e.g. Icepack's rewrite;
``ValidationException``: an upsert's files were replaced meanwhile) is redone on refreshed
metadata and counted. At the end the process writes, per table, every
commit's latency, the failures, and the contents it expects (row count and checksum), to the
spec's ``out`` file.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, HourTransform, Transform
from pyiceberg.types import IcebergType, LongType, NestedField, StringType, TimestamptzType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "v", StringType(), required=False),
)
ARROW = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("v", pa.string())])
KINDS = ("hourly", "bucketed", "upsert")
MAX_REDO = 20


def _python_transform(self: Transform[Any, Any], source: IcebergType) -> Callable[[Any], pa.Array]:
    """``pyarrow_transform`` without pyiceberg-core: PyIceberg's own Python transform (for
    ``bucket``, mmh3 of the value's Iceberg byte form), element by element; timestamps as the
    microseconds the Python transforms take."""
    one = self.transform(source)

    def apply(values: Any) -> pa.Array:
        if pa.types.is_timestamp(values.type):
            values = values.cast(pa.int64())  # the writers' timestamps are microseconds
        return pa.array([None if v is None else one(v) for v in values.to_pylist()], pa.int32())

    return apply


BucketTransform.pyarrow_transform = _python_transform  # type: ignore[method-assign,assignment]
HourTransform.pyarrow_transform = _python_transform  # type: ignore[method-assign,assignment]


def spec_for(kind: str) -> PartitionSpec:
    if kind == "hourly":
        return PartitionSpec(PartitionField(2, 1000, HourTransform(), "ts_hour"))
    if kind == "bucketed":
        return PartitionSpec(PartitionField(1, 1000, BucketTransform(16), "id_bucket"))
    return PartitionSpec()


def create_tables(catalog: Catalog, namespace: str) -> list[str]:
    """The three tables (dropped first if a previous run left them); their identifiers."""
    catalog.create_namespace_if_not_exists(namespace)
    names = []
    for kind in KINDS:
        ident = f"{namespace}.{kind}"
        if catalog.table_exists(ident):
            catalog.drop_table(ident)
        catalog.create_table(ident, SCHEMA, partition_spec=spec_for(kind))
        names.append(ident)
    return names


def checksum(rows: pa.Table) -> tuple[int, int]:
    """Row count and an order-independent checksum of (id, v), the same in every process."""
    total = 0
    for i, v in zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True):
        digest = hashlib.blake2b(f"{i}\x00{v}".encode(), digest_size=8).digest()
        total = (total + int.from_bytes(digest, "big")) % (1 << 64)
    return rows.num_rows, total


@dataclass
class Written:
    """What one writer did: latencies (s), redone commits, and the contents it expects."""

    table: str
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    gave_up: int = 0
    expected_rows: int = 0
    expected_checksum: int = 0


class Writer:
    """One table's writer: ``step`` makes one commit (redone on a conflict)."""

    def __init__(self, table: Table, kind: str, seed: int, event_speed: float = 1.0) -> None:
        self.table, self.kind = table, kind
        # The hourly writer's event clock runs ``event_speed`` times as fast as the wall clock
        # from its start (``--hour-minutes``), so a short run crosses hours; 1: wall time.
        self.event_speed = event_speed
        self.started = datetime.now(UTC)
        self.rng = random.Random(seed)
        self.next_id = 0
        self.rows: dict[int, str] = {}
        self.appended: list[tuple[int, str]] = []

    def batch(self, n: int) -> pa.Table:
        now = datetime.now(UTC)
        if self.kind == "hourly" and self.event_speed != 1.0:
            now = self.started + (now - self.started) * self.event_speed
        if self.kind == "upsert":
            fresh = list(range(self.next_id, self.next_id + n // 2))
            self.next_id += n // 2
            old = self.rng.sample(sorted(self.rows), min(len(self.rows), n - len(fresh)))
            ids = fresh + old
        elif self.kind == "bucketed":
            ids = [self.next_id + self.rng.randrange(1_000_000_000) * 1000 for _ in range(n)]
            self.next_id += 1
        else:
            ids = list(range(self.next_id, self.next_id + n))
            self.next_id += n
        values = [f"{i}-{self.rng.random():.6f}" for i in ids]
        return pa.table({"id": ids, "ts": [now] * len(ids), "v": values}, schema=ARROW)

    def commit(self, rows: pa.Table) -> None:
        if self.kind == "upsert":
            self.table.upsert(rows, join_cols=["id"])
        else:
            self.table.append(rows)

    def step(self, out: Written) -> None:
        rows = self.batch(20 if self.kind == "upsert" else 50)
        started = time.perf_counter()
        for _ in range(MAX_REDO):
            try:
                self.commit(rows)
                break
            except (CommitFailedException, ValidationException):
                # ValidationException: a copy-on-write upsert whose files a rewrite replaced
                # meanwhile (PyIceberg validates the files it deletes): redone on fresh
                # metadata, as a sink does; it used to end the writer's thread.
                out.failures += 1
                self.table.refresh()
        else:
            out.gave_up += 1
            return
        out.latencies.append(time.perf_counter() - started)
        for i, v in zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True):
            if self.kind == "upsert":
                self.rows[i] = v
            else:
                self.appended.append((i, v))

    def expected(self, out: Written) -> None:
        pairs = list(self.rows.items()) if self.kind == "upsert" else self.appended
        table = pa.table({"id": [p[0] for p in pairs], "v": [p[1] for p in pairs]})
        out.expected_rows, out.expected_checksum = checksum(table)


def run(
    catalog: Catalog, tables: list[str], seconds: float, event_speed: float = 1.0
) -> list[Written]:
    """Every table's writer committing once a second (on the second) for ``seconds``; the
    hourly writer's event clock runs ``event_speed`` times as fast as the wall clock."""
    results = [Written(t) for t in tables]
    stop_at = time.monotonic() + seconds

    def loop(ident: str, out: Written, seed: int) -> None:
        kind = ident.rsplit(".", 1)[1]
        writer = Writer(catalog.load_table(ident), kind, seed, event_speed)
        tick = time.monotonic()
        while tick < stop_at:
            writer.step(out)
            # Once a second; a commit that took longer is followed at once (no catching up).
            tick = max(tick + 1.0, time.monotonic())
            time.sleep(max(0.0, tick - time.monotonic()))
        writer.expected(out)

    threads = [
        threading.Thread(target=loop, args=(t, r, i), daemon=True)
        for i, (t, r) in enumerate(zip(tables, results, strict=True))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    catalog = SqlCatalog(spec["catalog"], uri=spec["uri"], warehouse=spec["warehouse"])
    speed = 60.0 / float(spec.get("hour_minutes", 60.0))
    results = run(catalog, spec["tables"], float(spec["seconds"]), speed)
    Path(spec["out"]).write_text(json.dumps([asdict(r) for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
