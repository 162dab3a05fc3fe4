"""Write the tables of this folder with the real writers, then make their locations relative.

Run from the repository root (after ``make setup``, which fetches the Iceberg Spark runtime into
``.cache/jars``)::

    uv run python tests/data/tables-icepack/generate.py

It replaces ``warehouse/`` and ``tables.json`` beside this file. See ``README.md`` for what each
table is and how its files were changed after writing (locations only, plus the derived cases).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from avro_rewrite import field_index, read_container, rewrite_file  # noqa: E402

REPO = HERE.parents[2]
NAMESPACE = "db"


def spark_session(warehouse: Path) -> Any:
    from pyspark.sql import SparkSession

    jars_dir = Path(os.environ.get("ICEPACK_SPARK_JARS_DIR") or REPO / ".cache" / "jars")
    runtime = sorted(jars_dir.glob("iceberg-spark-runtime-*.jar"))
    if not runtime:
        raise SystemExit(f"no iceberg-spark-runtime jar in {jars_dir}: run make setup")
    return (
        SparkSession.builder.master("local[1]")
        .appName("icepack-test-tables")
        .config("spark.jars", str(runtime[-1]))
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.gen", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.gen.type", "hadoop")
        .config("spark.sql.catalog.gen.warehouse", str(warehouse))
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    ), runtime[-1].name


def values(ids: range) -> str:
    return ", ".join(f"({i}, '{'ab'[i % 2]}')" for i in ids)


def write_spark(spark: Any) -> None:
    """Three tables, one per format version, each with two appends and a row-level change."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS gen.{NAMESPACE}")
    for version, extra, change in (
        (1, "", "DELETE FROM {t} WHERE id = 3"),  # copy-on-write: a rewritten data file
        (
            2,
            ", 'write.delete.mode'='merge-on-read', 'write.metadata.compression-codec'='gzip'",
            "DELETE FROM {t} WHERE id = 3",
        ),  # a position delete file; *.gz.metadata.json
        (
            3,
            ", 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'",
            "UPDATE {t} SET cat = 'c' WHERE id = 4",
        ),  # a deletion vector; row lineage
    ):
        t = f"gen.{NAMESPACE}.spark_v{version}"
        spark.sql(
            f"CREATE TABLE {t} (id bigint, cat string) USING iceberg PARTITIONED BY (cat) "
            f"TBLPROPERTIES ('format-version'='{version}'{extra})"
        )
        spark.sql(f"INSERT INTO {t} VALUES {values(range(0, 6))}")
        spark.sql(f"INSERT INTO {t} VALUES {values(range(6, 10))}")
        spark.sql(change.format(t=t))


def write_pyiceberg(root: Path, warehouse: Path) -> str:
    """A format v2 table written by PyIceberg: two appends and a (copy-on-write) delete."""
    import pyarrow as pa
    import pyiceberg
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import EqualTo
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = SqlCatalog(
        "gen", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse.as_uri()
    )
    catalog.create_namespace_if_not_exists(NAMESPACE)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "cat", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="cat")
    )
    table = catalog.create_table(
        (NAMESPACE, "pyiceberg_v2"),
        schema,
        partition_spec=spec,
        location=(warehouse / NAMESPACE / "pyiceberg_v2").as_uri(),
        properties={"format-version": "2"},
    )
    arrow = schema.as_arrow()
    for ids in (range(0, 6), range(6, 10)):
        table.append(
            pa.Table.from_pylist([{"id": i, "cat": "ab"[i % 2]} for i in ids], schema=arrow)
        )
    table.delete(EqualTo(term="id", value=3))
    return f"PyIceberg {pyiceberg.__version__}"


def newest_metadata(table_dir: Path) -> Path:
    """The current metadata file: Hadoop tables name it in version-hint.text (vN.*), PyIceberg
    numbers its files (NNNNN-uuid.metadata.json)."""
    metadata = table_dir / "metadata"
    hint = metadata / "version-hint.text"
    if hint.exists():
        prefix = f"v{hint.read_text().strip()}."
        return next(
            p
            for p in metadata.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(".metadata.json")
        )
    return max(p for p in metadata.iterdir() if p.name.endswith(".metadata.json"))


def load_json(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc: dict[str, Any] = json.loads(raw)
    return doc


def dump_json(path: Path, doc: dict[str, Any]) -> None:
    raw = json.dumps(doc, indent=2).encode()
    path.write_bytes(
        gzip.compress(raw, mtime=0) if path.name.endswith(".gz") or ".gz." in path.name else raw
    )


def replace_in_tree(table_dir: Path, old: str, new: str, root: Path) -> None:
    """Replace ``old`` by ``new`` in every location string of a table's files.

    Manifests first, then manifest lists with their ``manifest_length`` set to the rewritten
    manifests' sizes (a relative location is relative to ``root``), then the metadata JSON
    files.
    """

    def rewrite(s: str) -> str:
        return s.replace(old, new)

    metadata = table_dir / "metadata"
    avro = sorted(metadata.glob("*.avro"), key=lambda p: p.name.startswith("snap-"))
    for path in avro:
        fix = None
        if path.name.startswith("snap-"):

            def fix(codec: Any, rec: list[Any]) -> None:
                i, n = field_index(codec, "manifest_path"), field_index(codec, "manifest_length")
                local = Path(rewrite(rec[i]).removeprefix("file://").removeprefix("file:"))
                rec[n] = (root / local).stat().st_size  # root / an absolute path: that path

        path.write_bytes(rewrite_file(path.read_bytes(), rewrite, fix))
    for path in metadata.iterdir():
        if ".metadata.json" in path.name:
            raw = path.read_bytes()
            gz = raw[:2] == b"\x1f\x8b"
            text = (gzip.decompress(raw) if gz else raw).decode().replace(old, new)
            path.write_bytes(gzip.compress(text.encode(), mtime=0) if gz else text.encode())


def inline_manifests(table_dir: Path) -> None:
    """Rewrite every snapshot of a v1 table to list its manifests inline (no manifest list)."""
    metadata = table_dir / "metadata"
    for path in metadata.glob("*.metadata.json"):
        doc = load_json(path)
        for snap in doc.get("snapshots", []):
            listing = Path(snap.pop("manifest-list").removeprefix("file:"))
            _meta, _sync, codec, blocks = read_container(listing.read_bytes())
            i = field_index(codec, "manifest_path")
            snap["manifests"] = [rec[i] for block in blocks for rec in block]
        dump_json(path, doc)
    for listing in metadata.glob("snap-*.avro"):
        listing.unlink()


def summary(path: Path) -> dict[str, str]:
    doc = load_json(path)
    current = next(s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])
    return dict(current.get("summary", {}))


def main() -> None:
    out = HERE / "warehouse"
    with tempfile.TemporaryDirectory(prefix="icepack-tables-") as tmp:
        root = Path(tmp).resolve()
        warehouse = root / "warehouse"
        spark, runtime = spark_session(warehouse)
        try:
            write_spark(spark)
            spark_writer = f"Spark {spark.version} with {runtime}"
        finally:
            spark.stop()
        pyiceberg_writer = write_pyiceberg(root, warehouse)
        ns = warehouse / NAMESPACE
        for crc in ns.rglob("*.crc"):
            crc.unlink()  # Hadoop's checksums of the files rewritten below
        # Derived: v1 with the manifests inline, from the Spark-written v1 table.
        shutil.copytree(ns / "spark_v1", ns / "spark_v1_inline")
        replace_in_tree(
            ns / "spark_v1_inline", f"/{NAMESPACE}/spark_v1", f"/{NAMESPACE}/spark_v1_inline", root
        )
        inline_manifests(ns / "spark_v1_inline")
        # Locations relative to this folder: plain paths, or relative file:// URIs.
        relative = {
            "spark_v1": "",
            "spark_v1_inline": "",
            "spark_v2": "",
            "spark_v3": "file://",
            "pyiceberg_v2": "file://",
        }
        for name, scheme in relative.items():
            for prefix in (f"file://{warehouse}", f"file:{warehouse}", str(warehouse)):
                replace_in_tree(ns / name, prefix, f"{scheme}warehouse", root)
        # Derived: the v3 table's newest metadata also as *.metadata.json.gz.
        v3 = newest_metadata(ns / "spark_v3")
        v3_gz = v3.with_name(v3.name + ".gz")
        v3_gz.write_bytes(gzip.compress(v3.read_bytes(), mtime=0))
        cases = []
        for name, writer, notes in (
            ("spark_v1", spark_writer, "format v1; a copy-on-write DELETE"),
            (
                "spark_v1_inline",
                spark_writer,
                "derived from spark_v1: every snapshot lists its "
                "manifests inline (`manifests`), manifest lists removed",
            ),
            (
                "spark_v2",
                spark_writer,
                "format v2; merge-on-read DELETE (a position delete "
                "file); metadata gzip-compressed by the writer (*.gz.metadata.json)",
            ),
            (
                "spark_v3",
                spark_writer,
                "format v3 with row lineage; merge-on-read UPDATE "
                "(a deletion vector); relative file:// locations",
            ),
            (
                "spark_v3_gz",
                spark_writer,
                "spark_v3's newest metadata gzip-compressed as *.metadata.json.gz",
            ),
            (
                "pyiceberg_v2",
                pyiceberg_writer,
                "format v2; a copy-on-write delete; relative file:// locations",
            ),
        ):
            table = "spark_v3" if name == "spark_v3_gz" else name
            meta = v3_gz if name == "spark_v3_gz" else newest_metadata(ns / table)
            cases.append(
                {
                    "name": name,
                    "metadata": str(meta.relative_to(root)),
                    "writer": writer,
                    "notes": notes,
                    "summary": summary(meta),
                }
            )
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(warehouse, out)
    (HERE / "tables.json").write_text(json.dumps(cases, indent=2) + "\n")
    print(f"wrote {len(cases)} cases into {out}")


if __name__ == "__main__":
    main()
