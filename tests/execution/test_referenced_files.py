"""``referenced_paths`` against Spark's own metadata tables as the oracle: every file a snapshot
references (data, delete files, manifests, manifest lists, metadata files) is in the set, after
appends, merge-on-read deletes, a compaction and an expiry."""

from __future__ import annotations

import pytest

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.execution.referenced_files import referenced_paths, split_referenced
from icepack_core.safety.admission import normalize_location
from tests.execution.spark_tables import make_small_files_table, unique_name

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "referenced"


def spark_references(spark, table: str) -> set[str]:
    paths = [r[0] for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()]
    paths += [r[0] for r in spark.sql(f"SELECT path FROM {table}.all_manifests").collect()]
    paths += [r[0] for r in spark.sql(f"SELECT manifest_list FROM {table}.snapshots").collect()]
    paths += [r[0] for r in spark.sql(f"SELECT file FROM {table}.metadata_log_entries").collect()]
    return {normalize_location(p) for p in paths}


def test_every_file_spark_says_is_referenced_is_in_the_set(spark, spark_catalog_settings):
    name = unique_name("refs")
    table = make_small_files_table(spark, NS, name, batches=3, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")  # position delete files
    spark.sql(f"CALL icepack.system.rewrite_data_files(table => '{NS}.{name}')")
    spark.sql(f"INSERT INTO {table} VALUES (999, 'a', 'late')")
    spark.sql(
        f"CALL icepack.system.expire_snapshots(table => '{NS}.{name}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 2)"
    )
    (catalog_cfg,) = spark_catalog_settings.effective_catalogs()
    loaded = load_catalog(catalog_cfg).load_table((NS, name))

    referenced = referenced_paths(loaded.metadata, loaded.io, loaded.metadata_location)

    oracle = spark_references(spark, table)
    assert len(oracle) > 10
    assert oracle <= referenced, sorted(oracle - referenced)[:5]
    assert normalize_location(loaded.metadata_location) in referenced
    data_dir = loaded.location() + "/data"
    stray = [f"{data_dir}/never-committed.parquet", f"file:{data_dir[7:]}/also-not.parquet"]
    live = sorted(p for p in oracle if p.endswith(".parquet"))[0]
    free, kept = split_referenced(
        [stray[0], live.replace("file:///", "file:/"), stray[1]], referenced
    )
    assert free == stray and kept == [live.replace("file:///", "file:/")]
