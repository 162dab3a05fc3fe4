"""The streaming writers of ``bench.stream``: one thread per table, one commit a second each.

Run as its own process (``python -m bench.stream.writers SPEC.json``) so its commit latencies
are not those of the sampling process. Writes with PyIceberg through the SQL catalog, as a Kafka
Connect or segment-processor sink would:

* ``hourly``: ``hour(ts)``, 50 rows a commit stamped now (one small file a commit, all in the
  open hour); with the spec's ``hour_minutes`` below 60 the stamps follow an event clock on
  which that many wall minutes make an hour, so a short run closes hours;
* ``bucketed``: ``bucket(16, id)``, 50 random ids a commit (up to 16 small files a commit);
* ``upsert``: unpartitioned, 20 rows a commit upserted on ``id`` (10 new ids, 10 updates of
  earlier ones) **with equality deletes**, as a Flink or Kafka Connect upsert sink writes them:
  an equality delete on the key plus the new rows in one ``RowDelta``, by Iceberg's Java
  writers through a Spark JVM in this process (``bench.upserts``, on the same catalog through
  Iceberg's JDBC catalog; its schema is ``bench.upserts``' ``(id, part, v, ts)``). PyIceberg
  cannot read equality deletes, so this table's contents are read back through Spark at the
  end (``Written.read_rows``/``read_checksum``).

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

from bench.upserts import UpsertTable, logical_rows, row

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "v", StringType(), required=False),
)
ARROW = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("v", pa.string())])
# The upsert table: ``bench.upserts``' columns, merge-on-read (its deletes are equality deletes).
UPSERT_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "part", StringType(), required=False),
    NestedField(3, "v", StringType(), required=False),
    NestedField(4, "ts", TimestamptzType(), required=False),
)
UPSERT_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
}
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


BucketTransform.pyarrow_transform = _python_transform  # type: ignore[method-assign]
HourTransform.pyarrow_transform = _python_transform  # type: ignore[method-assign]


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
        if kind == "upsert":
            catalog.create_table(ident, UPSERT_SCHEMA, properties=UPSERT_PROPERTIES)
        else:
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
    # The table as read back at the end when PyIceberg cannot read it (equality deletes).
    read_rows: int | None = None
    read_checksum: int | None = None


class Writer:
    """An appending table's writer (``hourly``, ``bucketed``): ``step`` makes one commit
    (redone on a conflict)."""

    def __init__(self, table: Table, kind: str, seed: int, event_speed: float = 1.0) -> None:
        self.table, self.kind = table, kind
        # The hourly writer's event clock runs ``event_speed`` times as fast as the wall clock
        # from its start (``--hour-minutes``), so a short run crosses hours; 1: wall time.
        self.event_speed = event_speed
        self.started = datetime.now(UTC)
        self.rng = random.Random(seed)
        self.next_id = 0
        self.appended: list[tuple[int, str]] = []

    def batch(self, n: int) -> pa.Table:
        now = datetime.now(UTC)
        if self.kind == "hourly" and self.event_speed != 1.0:
            now = self.started + (now - self.started) * self.event_speed
        if self.kind == "bucketed":
            ids = [self.next_id + self.rng.randrange(1_000_000_000) * 1000 for _ in range(n)]
            self.next_id += 1
        else:
            ids = list(range(self.next_id, self.next_id + n))
            self.next_id += n
        values = [f"{i}-{self.rng.random():.6f}" for i in ids]
        return pa.table({"id": ids, "ts": [now] * len(ids), "v": values}, schema=ARROW)

    def step(self, out: Written) -> None:
        rows = self.batch(50)
        started = time.perf_counter()
        for _ in range(MAX_REDO):
            try:
                self.table.append(rows)
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
        self.appended += zip(
            rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True
        )

    def expected(self, out: Written) -> None:
        pairs = self.appended
        table = pa.table({"id": [p[0] for p in pairs], "v": [p[1] for p in pairs]})
        out.expected_rows, out.expected_checksum = checksum(table)


class UpsertWriter:
    """The upsert table's writer: 10 new keys and 10 earlier ones a commit, each an equality
    delete on ``id`` plus the new row, in one ``RowDelta`` (``bench.upserts``). Iceberg's own
    commit retries (``commit.retry.num-retries``) run first; a commit that still fails on a
    conflict is redone and counted, as ``Writer.step`` does."""

    def __init__(self, spark: Any, catalog_name: str, ident: str, seed: int) -> None:
        namespace, name = ident.rsplit(".", 1)
        # Spark resolves catalogs through the calling JVM thread's active session (its
        # ``SQLConf``); PySpark gives this Python thread a JVM thread of its own, with none.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        self.sink = UpsertTable(spark, namespace, name, writer="bench-stream", catalog=catalog_name)
        self.rng = random.Random(seed)
        self.next_id = 0
        self.version = 0

    def step(self, out: Written) -> None:
        self.version += 1
        fresh = list(range(self.next_id, self.next_id + 10))
        self.next_id += 10
        old = self.rng.sample(sorted(self.sink.model), min(len(self.sink.model), 10))
        rows = [row(k, self.version) for k in fresh + old]
        started = time.perf_counter()
        for _ in range(MAX_REDO):
            try:
                self.sink.upsert(rows)
                break
            except Exception as exc:  # Py4J's error carries the Java exception's name
                if "CommitFailedException" not in str(exc):
                    raise
                out.failures += 1
        else:
            out.gave_up += 1
            return
        out.latencies.append(time.perf_counter() - started)

    def expected(self, out: Written) -> None:
        model = list(self.sink.model.values())
        table = pa.table({"id": [r.id for r in model], "v": [r.v for r in model]})
        out.expected_rows, out.expected_checksum = checksum(table)
        read = logical_rows(self.sink.spark, self.sink.qualified)  # every delete applied
        back = pa.table({"id": [r[0] for r in read], "v": [r[2] for r in read]})
        out.read_rows, out.read_checksum = checksum(back)


def upsert_session(spec: dict[str, Any]) -> Any:
    """A local Spark session (one core) whose Iceberg JDBC catalog is the bench's SQL catalog
    (``spec['catalog']``, Postgres at ``spec['catalog_dsn']``), for ``UpsertWriter``."""
    from icepack_core.settings import load_settings
    from icepack_core.spark.session import build_local_session

    out = Path(spec["out"]).parent / "writers-spark"
    settings = load_settings(
        database_url=spec["catalog_dsn"],
        data_dir=out,
        spark_master="local[1]",
        catalogs=[
            {
                "name": spec["catalog"],
                "type": "sql",
                "uri": spec["catalog_dsn"],
                "warehouse": spec["warehouse"],
            }
        ],
        spark_conf={"spark.driver.memory": "512m", "spark.sql.warehouse.dir": str(out / "wh")},
    )
    spark, _ = build_local_session(settings)
    return spark


def run(
    catalog: Catalog,
    tables: list[str],
    seconds: float,
    spark: Any = None,
    catalog_name: str = "",
    event_speed: float = 1.0,
) -> list[Written]:
    """Every table's writer committing once a second (on the second) for ``seconds``; the
    upsert table's through ``spark`` (its catalog named ``catalog_name``); the hourly writer's
    event clock runs ``event_speed`` times as fast as the wall clock."""
    results = [Written(t) for t in tables]
    stop_at = time.monotonic() + seconds
    crashed: list[str] = []

    def loop(ident: str, out: Written, seed: int) -> None:
        try:
            write_table(ident, out, seed)
        except Exception as exc:  # reported after the other writers finished
            crashed.append(f"{ident}: {type(exc).__name__}: {str(exc)[:2000]}")

    def write_table(ident: str, out: Written, seed: int) -> None:
        kind = ident.rsplit(".", 1)[1]
        writer: Writer | UpsertWriter = (
            UpsertWriter(spark, catalog_name, ident, seed)
            if kind == "upsert"
            else Writer(catalog.load_table(ident), kind, seed, event_speed)
        )
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
    if crashed:
        raise RuntimeError("writers crashed:\n" + "\n".join(crashed))
    return results


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    catalog = SqlCatalog(spec["catalog"], uri=spec["uri"], warehouse=spec["warehouse"])
    speed = 60.0 / float(spec.get("hour_minutes", 60.0))
    upserts = any(t.rsplit(".", 1)[1] == "upsert" for t in spec["tables"])
    spark = upsert_session(spec) if upserts else None
    try:
        results = run(
            catalog, spec["tables"], float(spec["seconds"]), spark, spec["catalog"], speed
        )
    finally:
        if spark is not None:
            spark.stop()
    Path(spec["out"]).write_text(json.dumps([asdict(r) for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
