"""Fixtures of the object-store tests: one SeaweedFS (with a planted S3 secret) and one Spark
Connect server configured for it, shared by each module."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from icepack_core.local.object_store import LocalSeaweed, WeedNotInstalled
from icepack_core.local.ports import free_port
from icepack_core.settings import load_settings
from tests.objectstore.lake import Lake, StoreAdmin
from tests.plugins.spark import _start_server

# Distinct, searchable secrets: the S3 secret key (also the REST catalog's client secret, as
# SeaweedFS takes its S3 credentials for the catalog's OAuth2 exchange).
S3_ACCESS_KEY = "icepack-lake"
PLANTED_S3_SECRET = f"plantedS3Secret-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def lake(spark_jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """SeaweedFS and a Spark Connect server (``local[1]``) whose only catalog is the S3 one."""
    weed = LocalSeaweed(tmp_path_factory.mktemp("lake-weed"), S3_ACCESS_KEY, PLANTED_S3_SECRET)
    try:
        store = weed.start()
    except WeedNotInstalled as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        assert weed.proc is not None
        admin = StoreAdmin.of(weed.proc.args)
        workdir = tmp_path_factory.mktemp("lake-spark")
        probe = Lake(store, admin, "", workdir / "connect-server.log", weed.log_path)
        settings = load_settings(
            data_dir=workdir / "data",
            spark_jars_dir=spark_jars,
            catalogs=[probe.catalog()],
            spark_conf={"spark.sql.shuffle.partitions": "2"},
        )
        for server in _start_server("connect", settings, workdir, free_port()):
            yield Lake(store, admin, f"sc://{server.host}:{server.port}", server.log, weed.log_path)
    finally:
        weed.stop()
