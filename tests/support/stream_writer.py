"""A writer in another OS process that keeps committing to one table, for race tests.

The child (``python -m tests.support.stream_writer CONFIG``) starts its own Spark JVM on the
same catalog as the tests (``local[1]``, its own app id), reads the table's live rows as its
starting model, then commits one round after another until the stop file appears or
``max_rounds`` is reached. Each round is one commit of its ``kind``:

- ``append``: a few new rows (``INSERT``), as a batch or segment appender does;
- ``upsert``: an equality delete on the keys plus the new rows in one ``RowDelta``
  (``bench.upserts``), as a Flink or Kafka Connect upsert sink does;
- ``cow_delete``: a new row, and every third round a ``DELETE`` of an older key on a
  copy-on-write table (data files rewritten);
- ``mor_delete``: a ``DELETE`` of one older key every round on a merge-on-read table
  (position deletes on v2, deletion vectors on v3).

One child can write several tables (``targets``), one commit to each per round. It updates a
table's model only when a commit returned. It writes ``ready.json`` (its app id), and per table
(in ``OUT/<table name>/``) one ``commits.jsonl`` line per round (the snapshot id, or the error
of a failed commit) and at the end ``model.json`` (its live rows). A commit whose outcome is
unknown ends the child with status 3. ``StreamWriter`` is the parent's handle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.upserts import (
    Row,
    UpsertTable,
    java_table,
    logical_rows,
    row,
)

KINDS = ("append", "upsert", "cow_delete", "mor_delete")
START_DEADLINE_S = 180.0  # a JVM start on a loaded two-core machine
STOP_DEADLINE_S = 120.0


@dataclass(frozen=True)
class WriterConfig:
    """What the child needs: the catalog (as the Spark fixtures build it) and its work."""

    database_url: str
    data_dir: str
    jars_dir: str
    namespace: str
    targets: list[tuple[str, str]]  # (table name, kind): each round commits to each in turn
    out_dir: str
    max_rounds: int = 1000
    keys_per_round: int = 3
    # Seconds between rounds: 0 commits as fast as the JVM can (a stress), 1 is the
    # once-a-second sink the streaming issue describes.
    pause_seconds: float = 0.0


def _settings(config: WriterConfig) -> Any:
    from icepack_core.settings import load_settings

    return load_settings(
        database_url=config.database_url,
        data_dir=Path(config.data_dir),
        spark_jars_dir=Path(config.jars_dir),
        spark_master="local[1]",
        spark_conf={
            "spark.driver.memory": "512m",
            "spark.sql.warehouse.dir": str(Path(config.out_dir) / "spark-warehouse"),
        },
    )


class _Child:
    """The writer's state in the child process."""

    def __init__(self, spark: Any, config: WriterConfig, name: str, kind: str) -> None:
        self.spark = spark
        self.config = config
        self.name, self.kind = name, kind
        self.out = Path(config.out_dir) / name
        self.out.mkdir(parents=True, exist_ok=True)
        self.sink = UpsertTable(spark, config.namespace, name, writer="stream-writer")
        self.qualified = self.sink.qualified
        for key, part, value, seconds in logical_rows(spark, self.qualified):
            self.sink.model[key] = Row(key, part, value, seconds)
        self.next_key = max(self.sink.model, default=-1) + 1
        self.app_id = str(spark.sparkContext.applicationId)

    def round(self, number: int) -> int:
        """One commit of this writer's kind; returns its snapshot id."""
        kind, n = self.kind, self.config.keys_per_round
        if kind == "upsert":
            old = sorted(self.sink.model)[number % max(len(self.sink.model), 1) :][: n - 1]
            fresh = [self._fresh()]
            return self.sink.upsert([row(k, number) for k in [*old, *fresh]])
        if kind == "append":
            return self._insert([row(self._fresh(), number) for _ in range(n)])
        if (kind == "cow_delete" and number % 3 == 0) or kind == "mor_delete":
            victim = sorted(self.sink.model)[number % len(self.sink.model)]
            self.spark.sql(f"DELETE FROM {self.qualified} WHERE id = {victim}")
            del self.sink.model[victim]
            return self._own_newest()
        return self._insert([row(self._fresh(), number)])

    def _fresh(self) -> int:
        self.next_key += 1
        return self.next_key - 1

    def _insert(self, rows: list[Row]) -> int:
        self.spark.sql(f"INSERT INTO {self.qualified} VALUES {', '.join(r.sql() for r in rows)}")
        self.sink.model.update({r.id: r for r in rows})
        return self._own_newest()

    def _own_newest(self) -> int:
        """This process's newest snapshot: Iceberg stamps each commit with the app id."""
        table = java_table(self.spark, self.config.namespace, self.name)
        newest = None
        for snapshot in table.snapshots():
            if snapshot.summary().get("app-id") != self.app_id:
                continue
            if newest is None or snapshot.sequenceNumber() > newest.sequenceNumber():
                newest = snapshot
        if newest is None:
            raise AssertionError("the writer's commit is not in the table")
        return int(newest.snapshotId())

    def one(self, number: int) -> bool:
        """Commit round ``number`` and log it; False when its outcome is unknown."""
        entry: dict[str, Any] = {"round": number, "at": time.time()}
        try:
            entry["snapshot_id"] = self.round(number)
        except Exception as exc:  # a failed commit changes nothing; say what it was
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        with (self.out / "commits.jsonl").open("a") as log:
            log.write(json.dumps(entry) + "\n")
        return "CommitStateUnknown" not in entry.get("error", "")

    def finish(self) -> None:
        rows = [asdict(r) for r in self.sink.model.values()]
        (self.out / "model.json").write_text(json.dumps(rows))


def run(spark: Any, config: WriterConfig) -> int:
    """Round after round over every target until the stop file appears; 3 when a commit's
    outcome is unknown (the model can no longer be trusted)."""
    children = [_Child(spark, config, name, kind) for name, kind in config.targets]
    out = Path(config.out_dir)
    (out / "ready.json").write_text(json.dumps({"app_id": children[0].app_id}))
    for number in range(1, config.max_rounds + 1):
        if (out / "stop").exists():
            break
        for child in children:
            if not child.one(number):
                return 3
        time.sleep(config.pause_seconds)
    for child in children:
        child.finish()
    return 0


def child_main(config_path: str) -> int:
    from icepack_core.spark.session import build_local_session

    config = WriterConfig(**json.loads(Path(config_path).read_text()))
    if bad := [k for _, k in config.targets if k not in KINDS]:
        raise SystemExit(f"unknown writer kinds {bad!r}; each one of {KINDS}")
    spark, _ = build_local_session(_settings(config))
    try:
        return run(spark, config)
    finally:
        spark.stop()


@dataclass(frozen=True)
class TargetLog:
    """What the writer recorded for one table (in ``out``)."""

    name: str
    out: Path

    def commits(self) -> list[dict[str, Any]]:
        path = self.out / "commits.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def committed(self) -> list[int]:
        return [c["snapshot_id"] for c in self.commits() if "snapshot_id" in c]

    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.commits() if "error" in c]

    def model(self) -> list[tuple[int, str, str, int]]:
        """The writer's final rows, sorted (after ``StreamWriter.stop``)."""
        rows = json.loads((self.out / "model.json").read_text())
        return sorted((r["id"], r["part"], r["v"], r["ts_seconds"]) for r in rows)


@dataclass
class StreamWriter:
    """The parent's handle on one writer process (``start`` it, ``stop`` it, read it). The
    one-table accessors (``commits``, ``committed``, ``failed``) read its first table."""

    config: WriterConfig
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_tables(
        cls,
        settings: Any,
        namespace: str,
        targets: list[tuple[str, str]],
        out_dir: Path,
        **extra: Any,
    ) -> StreamWriter:
        """A writer on the Spark fixtures' catalog (``settings``: ``spark_catalog_settings``)
        committing to each (table name, kind) of ``targets`` in turn."""
        out_dir.mkdir(parents=True, exist_ok=True)
        return cls(
            WriterConfig(
                database_url=settings.database_url.get_secret_value(),
                data_dir=str(settings.data_dir),
                jars_dir=str(settings.spark_jars_dir),
                namespace=namespace,
                targets=list(targets),
                out_dir=str(out_dir),
                **extra,
            )
        )

    @classmethod
    def for_table(
        cls, settings: Any, namespace: str, name: str, kind: str, out_dir: Path, **extra: Any
    ) -> StreamWriter:
        return cls.for_tables(settings, namespace, [(name, kind)], out_dir, **extra)

    @property
    def out(self) -> Path:
        return Path(self.config.out_dir)

    def target(self, name: str) -> TargetLog:
        return TargetLog(name, self.out / name)

    def _first(self) -> TargetLog:
        return self.target(self.config.targets[0][0])

    def start(self) -> StreamWriter:
        config = self.out / "config.json"
        config.write_text(json.dumps(asdict(self.config)))
        config.chmod(0o600)  # the catalog URL may carry a password
        root = Path(__file__).resolve().parents[2]
        with (self.out / "writer.log").open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.stream_writer", str(config)],
                cwd=root,
                env=dict(os.environ, PYTHONPATH=str(root)),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def log_tail(self, chars: int = 3000) -> str:
        path = self.out / "writer.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def commits(self) -> list[dict[str, Any]]:
        return self._first().commits()

    def committed(self) -> list[int]:
        return self._first().committed()

    def failed(self) -> list[dict[str, Any]]:
        return self._first().failed()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            code = self.process.returncode if self.process else None
            raise AssertionError(f"the writer exited ({code}); log tail:\n{self.log_tail()}")

    def stop(self) -> list[tuple[int, str, str, int]]:
        """Ask the writer to stop after its current round; its first table's final rows."""
        (self.out / "stop").touch()
        if self.process is not None:
            try:
                code = self.process.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"the writer did not stop:\n{self.log_tail()}") from None
            if code != 0:
                raise AssertionError(f"the writer exited {code}:\n{self.log_tail()}")
        return self._first().model()

    def kill(self) -> None:
        """End the writer now (its process group: the JVM it started with it)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
