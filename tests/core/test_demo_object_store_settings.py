"""``icepack demo --object-store`` without starting anything: the settings its services get, and
what "healthy" waits for when there are no stray files to quarantine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icepack_core.local.demo_lake import DEMO_TABLE_NAMES, STRAY_FILES, DemoState
from icepack_core.local.object_store import ObjectStore, embedded_catalog_env
from icepack_core.settings import load_settings
from icepack_core.spark.catalog_conf import redact_conf, spark_catalog_conf

STORE = ObjectStore(
    "http://127.0.0.1:8333", "http://127.0.0.1:8181", "demo-key", "demoSecret-9f2Xk"
)


def test_the_embedded_catalog_moves_to_the_bucket_its_secret_stays_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = embedded_catalog_env(STORE, "postgresql://postgres@127.0.0.1:5432/icepack", "lake")
    assert STORE.secret_key not in env["ICEPACK_CATALOGS"]  # only in the secret variable
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(data_dir=tmp_path)
    (catalog,) = settings.effective_catalogs()
    assert (catalog.name, catalog.type, catalog.warehouse) == (
        "icepack",
        "sql",
        "s3://lake/warehouse",
    )
    assert catalog.s3_secret_access_key is not None
    assert catalog.s3_secret_access_key.get_secret_value() == STORE.secret_key
    assert STORE.secret_key in settings.secret_values()
    conf = spark_catalog_conf(catalog)
    prefix = "spark.sql.catalog.icepack"
    assert conf[f"{prefix}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf[f"{prefix}.s3.endpoint"] == STORE.s3_endpoint
    assert conf[f"{prefix}.s3.path-style-access"] == "true"
    assert conf[f"{prefix}.type"] == "jdbc"
    assert STORE.secret_key not in str(redact_conf(conf))


def demo_state(
    ledger: tuple[tuple[Any, ...], ...] = (), strays: int = len(STRAY_FILES)
) -> DemoState:
    tables = tuple((name, "healthy", 99, "", 1, 0, 1, 0) for name in DEMO_TABLE_NAMES)
    return DemoState(tables, (), (), (), ledger, strays)


def test_without_stray_files_healthy_needs_no_quarantine() -> None:
    assert not demo_state().healthy  # on local disk the stray files must be quarantined first
    assert demo_state(strays=0).healthy
    quarantined = ((7, "customers", "remove_orphan_files", "quarantined", 2, 128, None),)
    assert demo_state(quarantined).healthy
