"""Icepack without the ``icepack-core[spark]`` extra, as in the general service image.

Each check runs in a subprocess whose ``sitecustomize`` refuses to import every module the
general image lacks (computed from uv.lock and the Dockerfiles, tests/support/image_deps.py:
PySpark, Py4J, PyHive, Thrift, gRPC, pandas, ...). There every non-executor module imports, the
gateway serves requests on a real database, the discovery/inspector/planner services load, and
``recommend``/``maintain --dry-run`` work on a real table; the commands that need Spark
(``maintain``, ``demo``, ``up``, the executor) stop with a message naming the extra, having
written nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from icepack_core.spark.extra import ENGINE_MODULES, spark_available
from icepack_core.types import PolicyType
from tests.plugins.catalogs import Zoo
from tests.support.image_deps import modules_missing_from_general_image

INSTALL_HINT = "pip install 'icepack-core[spark]'"
BLOCKER = textwrap.dedent('''
    """Test harness: imports of the modules in ICEPACK_TEST_BLOCKED_MODULES fail."""
    import importlib.abc
    import json
    import os
    import sys

    _BLOCKED = frozenset(json.loads(os.environ["ICEPACK_TEST_BLOCKED_MODULES"]))


    class _Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in _BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None


    sys.meta_path.insert(0, _Blocker())
''')


@pytest.fixture(scope="module")
def blocked() -> frozenset[str]:
    modules = modules_missing_from_general_image()
    # The harness is only as good as this set: it must hold the Spark stack.
    assert {"pyspark", "py4j", "pyhive", "thrift", "grpc", "pandas"} <= modules
    return modules


@pytest.fixture
def run(blocked: frozenset[str], tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(args, **env)``: a Python subprocess (``python ARGS``) without the Spark extra."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    base = {
        **os.environ,
        "PYTHONPATH": str(site),
        "COLUMNS": "300",
        "ICEPACK_TEST_BLOCKED_MODULES": json.dumps(sorted(blocked)),
        "ICEPACK_DATA_DIR": str(tmp_path / "data"),
    }

    def go(args: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            env=base | env,
            cwd=tmp_path,
            timeout=timeout,
            check=False,
        )

    return go


def icepack(*args: str) -> list[str]:
    return ["-m", "icepack_core.cli.app", *args]


def test_the_harness_blocks_the_spark_stack(
    run: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    probe = run(["-c", "import pyspark"])
    assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr
    probe = run(["-c", "from pyhive import hive"])
    assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr


def test_every_engine_client_is_present_in_the_dev_environment() -> None:
    # The module lists behind the error messages name real modules (no typo makes an
    # installed engine look missing).
    assert all(spark_available(engine) for engine in ENGINE_MODULES)


IMPORT_ALL = textwrap.dedent("""
    import importlib, pkgutil, sys
    from icepack_core.cli.services import load_service
    failed = []
    for package in ("icepack_core", "icepack_discovery", "icepack_inspector",
                    "icepack_planner", "icepack_gateway"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
    services = {n: type(load_service(n)).__name__
                for n in ("discovery", "inspector", "planner", "gateway")}
    print(json.dumps({"failed": failed, "services": services,
                      "modules": len(sys.modules)}))
""")


def test_every_non_executor_module_imports_and_the_services_load(
    run: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    result = run(["-c", "import json\n" + IMPORT_ALL])
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["failed"] == []
    assert answer["services"] == {
        "discovery": "DiscoveryService",
        "inspector": "InspectorService",
        "planner": "PlannerService",
        "gateway": "GatewayService",
    }


GATEWAY = textwrap.dedent("""
    import asyncio, json, sys
    import httpx
    from icepack_core.db import pool as db
    from icepack_core.settings import load_settings
    from icepack_gateway.app import create_app

    async def main():
        settings = load_settings()
        pool = await db.create_pool(settings, "gateway")
        try:
            app = create_app(pool, settings=settings)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                answers = {path: (await client.get(path)).status_code
                           for path in ("/healthz", "/readyz", "/tables",
                                        "/jobs")}
        finally:
            await pool.close()
        print(json.dumps(answers))
        print("pyspark" in sys.modules, file=sys.stderr)

    asyncio.run(main())
""")


def test_gateway_app_builds_and_serves_without_spark(
    run: Callable[..., subprocess.CompletedProcess[str]], database_url: str
) -> None:
    result = run(["-c", GATEWAY], ICEPACK_DATABASE_URL=database_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "/healthz": 200,
        "/readyz": 200,
        "/tables": 200,
        "/jobs": 200,
    }


def rows(url: str, sql: str) -> list[asyncpg.Record]:
    async def go() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetch(sql)
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture
def zoo_env(zoo: Zoo, database_url: str) -> dict[str, str]:
    config = zoo.config
    catalogs = [
        {"name": config.name, "type": "sql", "uri": config.uri, "warehouse": config.warehouse}
    ]
    return {"ICEPACK_DATABASE_URL": database_url, "ICEPACK_CATALOGS": json.dumps(catalogs)}


def test_recommend_and_dry_run_work_and_maintain_names_the_extra(
    run: Callable[..., subprocess.CompletedProcess[str]], zoo_env: dict[str, str], database_url: str
) -> None:
    table = "zoo.zoo.small_files"
    rec = run(icepack("recommend", table, "--json"), **zoo_env)
    assert rec.returncode == 0, rec.stderr
    assert "rewrite_data_files" in {
        a["action"] for a in json.loads(rec.stdout)["recommendation"]["actions"]
    }
    # Each policy type's source, here the defaults (no policy attached anywhere).
    sources = json.loads(rec.stdout)["recommendation"]["policy_sources"]
    assert sources == dict.fromkeys(PolicyType, "default")
    text = run(icepack("recommend", table), **zoo_env)
    assert text.returncode == 0, text.stderr
    assert "policy system.snapshot-expiry: default" in text.stdout
    dry = run(icepack("maintain", table, "--dry-run"), **zoo_env)
    assert dry.returncode == 0, dry.stderr
    assert "CALL `zoo`.`system`.`rewrite_data_files`" in dry.stdout

    for engine, extra_env, module in (
        ("local", {}, "pyspark"),
        ("connect", {"ICEPACK_SPARK_CONNECT_URL": "sc://127.0.0.1:1"}, "pyspark"),
        ("thrift", {"ICEPACK_SPARK_THRIFT_HOST": "127.0.0.1"}, "pyhive"),
    ):
        done = run(icepack("maintain", table, "--engine", engine), **zoo_env, **extra_env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "icepack maintain" in done.stderr and INSTALL_HINT in done.stderr
        assert f"ICEPACK_SPARK_ENGINE={engine}" in done.stderr and module in done.stderr
    # Refused before anything was read or written: no table row, no job.
    assert rows(database_url, "SELECT id FROM icepack.tables") == []
    assert rows(database_url, "SELECT id FROM icepack.jobs") == []


def test_demo_and_up_name_the_extra_before_starting_anything(
    run: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    demo = run(icepack("demo", "--until-healthy"))
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert "icepack demo" in demo.stderr and INSTALL_HINT in demo.stderr
    assert not (tmp_path / "data" / "pg").exists()  # no Postgres was started
    up = run(icepack("up"), ICEPACK_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
    assert up.returncode == 2, up.stdout + up.stderr
    assert "icepack up" in up.stderr and INSTALL_HINT in up.stderr
    assert "started" not in up.stderr


def test_engines_raise_missing_extra_not_import_error(
    run: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    code = textwrap.dedent("""
        import asyncio
        from icepack_core.errors import MissingExtra
        from icepack_core.settings import load_settings
        from icepack_core.spark.engine import LocalEngine, engine_for

        settings = load_settings(database_url="postgresql://x@127.0.0.1:1/x")
        for make in (lambda: engine_for(settings),
                     lambda: asyncio.run(LocalEngine(settings).sql("SELECT 1"))):
            try:
                make()
            except MissingExtra as exc:
                assert isinstance(exc, ImportError) and exc.extra == "spark", exc
                print(exc.modules)
            else:
                raise SystemExit("no MissingExtra")
    """)
    result = run(["-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["['pyspark', 'py4j']", "['pyspark', 'py4j']"]


@pytest.mark.slow
def test_executor_service_exits_with_the_message(
    run: Callable[..., subprocess.CompletedProcess[str]], database_url: str
) -> None:
    result = run(
        icepack("service", "executor", "--once"),
        ICEPACK_DATABASE_URL=database_url,
        ICEPACK_HTTP_PORT="0",
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert INSTALL_HINT in result.stderr and "Traceback" not in result.stderr
