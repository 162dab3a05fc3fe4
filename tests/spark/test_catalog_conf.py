"""Spark catalog confs derived from Icepack catalog settings (no JVM needed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import structlog

from icepack_core.errors import ConfigError
from icepack_core.settings import CatalogConfig, load_settings
from icepack_core.spark.catalog_conf import (
    jars_for,
    jdbc_url_and_credentials,
    redact_conf,
    spark_catalog_conf,
)
from icepack_core.spark.engine import ConnectEngine, LocalEngine, ThriftEngine, engine_for
from icepack_core.spark.session import session_conf, spark_properties

CLIENT_SECRET = "s3cr3t-client-value"
TOKEN = "bearer-token-value"
S3_SECRET = "s3-secret-key-value"
SECRETS = (CLIENT_SECRET, TOKEN, S3_SECRET, "pg-pass-value")


def rest_catalog() -> CatalogConfig:
    return CatalogConfig(
        name="polaris",
        type="rest",
        uri="https://polaris.example.com/api/catalog",
        warehouse="analytics",
        credential=f"icepack-client:{CLIENT_SECRET}",
        scope="PRINCIPAL_ROLE:ALL",
        oauth2_server_uri="https://polaris.example.com/api/catalog/v1/oauth/tokens",
        headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
        s3_endpoint="http://127.0.0.1:8333",
        s3_access_key_id="AKIAICEPACK",
        s3_secret_access_key=S3_SECRET,
        region="us-east-1",
    )


@pytest.fixture
def jars(tmp_path: Path) -> Path:
    for name in (
        "iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
        "postgresql-42.7.8.jar",
        "iceberg-aws-bundle-1.10.1.jar",
        "spark-connect_2.12-3.5.7.jar",
    ):
        (tmp_path / name).write_bytes(b"PK")
    return tmp_path


def test_rest_catalog_gets_credential_scope_headers_and_s3_file_io() -> None:
    conf = spark_catalog_conf(rest_catalog())
    prefix = "spark.sql.catalog.polaris"
    assert conf == {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": "https://polaris.example.com/api/catalog",
        f"{prefix}.credential": f"icepack-client:{CLIENT_SECRET}",
        f"{prefix}.scope": "PRINCIPAL_ROLE:ALL",
        f"{prefix}.oauth2-server-uri": "https://polaris.example.com/api/catalog/v1/oauth/tokens",
        f"{prefix}.header.X-Iceberg-Access-Delegation": "vended-credentials",
        f"{prefix}.warehouse": "analytics",
        f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{prefix}.s3.endpoint": "http://127.0.0.1:8333",
        f"{prefix}.s3.path-style-access": "true",
        f"{prefix}.s3.access-key-id": "AKIAICEPACK",
        f"{prefix}.s3.secret-access-key": S3_SECRET,
        f"{prefix}.client.region": "us-east-1",
    }


def test_rest_catalog_with_a_bearer_token() -> None:
    cfg = CatalogConfig(name="r", type="rest", uri="http://127.0.0.1:8181", token=TOKEN)
    conf = spark_catalog_conf(cfg)
    assert conf["spark.sql.catalog.r.token"] == TOKEN
    assert "spark.sql.catalog.r.credential" not in conf
    assert "spark.sql.catalog.r.io-impl" not in conf


def test_sql_catalog_becomes_jdbc_on_the_same_database() -> None:
    cfg = CatalogConfig(
        name="icepack",
        type="sql",
        uri="postgresql://ice%40pack:pg-pass-value@db.internal:6432/icepack?sslmode=require",
        warehouse="file:///var/lib/icepack/warehouse",
    )
    conf = spark_catalog_conf(cfg)
    assert conf["spark.sql.catalog.icepack.type"] == "jdbc"
    assert conf["spark.sql.catalog.icepack.uri"] == (
        "jdbc:postgresql://db.internal:6432/icepack?sslmode=require"
    )
    assert conf["spark.sql.catalog.icepack.jdbc.user"] == "ice@pack"
    assert conf["spark.sql.catalog.icepack.jdbc.password"] == "pg-pass-value"
    assert conf["spark.sql.catalog.icepack.jdbc.schema-version"] == "V1"
    assert conf["spark.sql.catalog.icepack.warehouse"] == "file:///var/lib/icepack/warehouse"
    assert "spark.sql.catalog.icepack.io-impl" not in conf


def test_glue_catalog_gets_endpoint_region_and_s3() -> None:
    cfg = CatalogConfig(
        name="glue", type="glue", endpoint="http://127.0.0.1:5000", region="eu-west-1",
        warehouse="s3://bucket/wh",
    )  # fmt: skip
    conf = spark_catalog_conf(cfg)
    assert conf["spark.sql.catalog.glue.type"] == "glue"
    assert conf["spark.sql.catalog.glue.glue.endpoint"] == "http://127.0.0.1:5000"
    assert conf["spark.sql.catalog.glue.client.region"] == "eu-west-1"
    assert conf["spark.sql.catalog.glue.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"


def test_passthrough_properties_lose_to_derived_keys_and_skip_pyiceberg_only_ones() -> None:
    cfg = CatalogConfig(
        name="r", type="rest", uri="http://127.0.0.1:8181",
        properties={"type": "hive", "py-io-impl": "x", "rest.sigv4-enabled": "false"},
    )  # fmt: skip
    conf = spark_catalog_conf(cfg)
    assert conf["spark.sql.catalog.r.type"] == "rest"
    assert conf["spark.sql.catalog.r.rest.sigv4-enabled"] == "false"
    assert "spark.sql.catalog.r.py-io-impl" not in conf


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql:///icepack?host=/var/run/postgresql", "Unix sockets"),
        ("postgresql://u@h/db?target_session_attrs=any", "target_session_attrs"),
        ("mysql://u@h/db", "postgresql://"),
    ],
)
def test_jdbc_url_refuses_what_pgjdbc_cannot_use(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        jdbc_url_and_credentials(url, "icepack")


def test_jdbc_url_keeps_ipv6_hosts_and_sqlalchemy_drivers() -> None:
    url, user, password = jdbc_url_and_credentials("postgresql+psycopg2://u@[::1]:5433/db")
    assert (url, user, password) == ("jdbc:postgresql://[::1]:5433/db", "u", None)


def test_redaction_masks_every_secret_and_header() -> None:
    redacted = redact_conf(spark_catalog_conf(rest_catalog()))
    assert not any(secret in str(redacted) for secret in SECRETS)
    assert redacted["spark.sql.catalog.polaris.header.X-Iceberg-Access-Delegation"] == "***"
    assert redacted["spark.sql.catalog.polaris.uri"].startswith("https://")


def test_building_confs_and_engines_logs_no_secret(
    jars: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = load_settings(
        database_url="postgresql://icepack:pg-pass-value@127.0.0.1:5432/icepack",
        data_dir=tmp_path / "data",
        spark_jars_dir=jars,
        catalogs=[rest_catalog().model_dump(mode="json") | {"credential": f"c:{CLIENT_SECRET}",
                                                             "s3_secret_access_key": S3_SECRET}],
        spark_engine="thrift",
        spark_thrift_host="127.0.0.1",
    )  # fmt: skip
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        conf = session_conf(settings)
        engine_for(settings)
        embedded = session_conf(load_settings(database_url=settings.dsn, spark_jars_dir=jars))
    assert S3_SECRET in str(conf) and "pg-pass-value" in str(embedded)  # the conf has them...
    captured = capsys.readouterr()
    logged = f"{logs}{caplog.text}{captured.out}{captured.err}"
    assert not any(secret in logged for secret in SECRETS)  # ...nothing printed has


def test_session_conf_layers_common_catalog_and_operator_confs(jars: Path, tmp_path: Path) -> None:
    settings = load_settings(
        database_url="postgresql://p@127.0.0.1:5432/icepack",
        data_dir=tmp_path,
        spark_jars_dir=jars,
        spark_conf={"spark.sql.shuffle.partitions": "64"},
    )
    conf = session_conf(settings)
    assert conf["spark.sql.extensions"] == (
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    )
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.shuffle.partitions"] == "64"  # the operator wins
    assert [Path(j).name for j in conf["spark.jars"].split(",")] == [
        "iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
        "postgresql-42.7.8.jar",
    ]
    assert conf["spark.sql.catalog.icepack.warehouse"] == (tmp_path / "warehouse").as_uri()
    connect = session_conf(settings, connect_server=True)["spark.jars"]
    assert "spark-connect_2.12-3.5.7.jar" in connect


def test_missing_jars_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"make setup.*scripts/fetch-maven\.sh jars"):
        jars_for(tmp_path / "nowhere", [rest_catalog()])


def test_engine_for_follows_the_engine_setting(tmp_path: Path) -> None:
    base = {"database_url": "postgresql://p@127.0.0.1:5432/icepack", "data_dir": tmp_path}
    assert isinstance(engine_for(load_settings(**base)), LocalEngine)
    connect = load_settings(**base, spark_engine="connect", spark_connect_url="sc://h:15002")
    assert isinstance(engine_for(connect), ConnectEngine)
    thrift = load_settings(**base, spark_engine="thrift", spark_thrift_host="kyuubi")
    assert isinstance(engine_for(thrift), ThriftEngine)


async def test_a_closed_engine_refuses_statements(tmp_path: Path) -> None:
    engine = ConnectEngine("sc://127.0.0.1:1")
    await engine.close()
    await engine.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await engine.sql("SELECT 1")


def test_properties_file_escapes_separators_and_comments() -> None:
    text = spark_properties({"a:b=c d": " v\\x", "#k": "1"})
    assert text == "a\\:b\\=c\\ d=\\ v\\\\x\n\\#k=1\n"
