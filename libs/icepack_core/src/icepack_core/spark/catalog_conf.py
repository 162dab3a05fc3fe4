"""Spark confs derived from Icepack's catalog settings, so Spark sees the catalogs PyIceberg sees.

One ``CatalogConfig`` becomes ``spark.sql.catalog.<name>.*`` for Iceberg's ``SparkCatalog``:

- ``sql``  -> Iceberg's ``JdbcCatalog`` (``type=jdbc``) on the same Postgres. PyIceberg's
  ``SqlCatalog`` and the JDBC catalog share the ``iceberg_tables`` and
  ``iceberg_namespace_properties`` tables and key rows by ``catalog_name``, so the Spark catalog
  name must equal the Icepack catalog name (it does: both are ``cfg.name``).
  ``jdbc.schema-version=V1`` matches PyIceberg 0.12, which creates the ``iceberg_type`` column.
- ``rest`` -> ``type=rest`` with the OAuth2 credential or bearer token, scope and headers, and
  ``header.X-Iceberg-Access-Delegation=vended-credentials`` when the catalog vends credentials.
- ``glue`` -> ``type=glue`` with ``glue.endpoint`` and ``client.region``. Iceberg's Glue client
  takes no static keys: its credentials come from the AWS default chain of Spark's JVM (an IAM
  role, ``AWS_ACCESS_KEY_ID``...), while the settings' S3 keys go to ``S3FileIO``.

Any catalog with S3 settings or an ``s3://`` warehouse also gets ``S3FileIO``.

Secrets (JDBC password, OAuth2 credential, token, S3 secret key) appear only in the returned
dicts. Nothing here logs; callers that log a conf use ``redact_conf``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from icepack_core.errors import ConfigError
from icepack_core.settings import ACCESS_DELEGATION_HEADER, VENDED_CREDENTIALS, CatalogConfig

SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"

# Conf keys (by suffix) whose values are secrets; ``redact_conf`` masks them.
_SECRET_SUFFIXES = (
    ".jdbc.password",
    ".credential",
    ".token",
    ".s3.secret-access-key",
    ".s3.session-token",
)
# libpq URL parameters and their pgjdbc names. Anything else is refused rather than dropped,
# because silently losing e.g. an ssl setting would weaken the connection.
_JDBC_PARAMS = {
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "options": "options",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
}
# Jar name prefixes in the jars directory (see tools/jars/pom.xml).
ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-"
POSTGRES_JAR = "postgresql-"
AWS_BUNDLE_JAR = "iceberg-aws-bundle-"
CONNECT_JAR = "spark-connect_"


def jdbc_url_and_credentials(url: str, catalog: str = "?") -> tuple[str, str | None, str | None]:
    """Split a ``postgresql://user:pw@host:port/db?sslmode=...`` URL for pgjdbc.

    Returns:
        ``(jdbc:postgresql://host:port/db?..., user, password)``; user and password are
        URL-decoded, ``None`` when absent.

    Raises:
        ConfigError: the URL is not postgresql://, uses a Unix socket (pgjdbc cannot), or has a
            query parameter pgjdbc would not understand.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]  # SQLAlchemy style postgresql+psycopg2://
    if scheme not in ("postgresql", "postgres"):
        raise ConfigError(
            f"catalog {catalog!r}: the sql catalog uri must be postgresql:// for Spark's "
            f"JDBC catalog, got scheme {parts.scheme!r}"
        )
    host = parts.hostname
    if not host:
        raise ConfigError(
            f"catalog {catalog!r}: Spark's JDBC catalog needs a TCP host in the sql catalog uri "
            "(Unix sockets are not supported by pgjdbc)"
        )
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    params: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _JDBC_PARAMS:
            raise ConfigError(
                f"catalog {catalog!r}: URL parameter {key!r} has no pgjdbc equivalent; "
                f"supported: {sorted(_JDBC_PARAMS)}"
            )
        params.append((_JDBC_PARAMS[key], value))
    query = f"?{urlencode(params)}" if params else ""
    jdbc = f"jdbc:postgresql://{netloc}{parts.path}{query}"
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return jdbc, user, password


def _s3_conf(cfg: CatalogConfig) -> dict[str, str]:
    uses_s3 = (
        cfg.s3_endpoint is not None
        or cfg.s3_access_key_id is not None
        or (cfg.warehouse or "").startswith(("s3://", "s3a://"))
        or cfg.type == "glue"
    )
    if not uses_s3:
        return {}
    conf = {"io-impl": S3_FILE_IO}
    if cfg.s3_endpoint:
        # Custom endpoints (MinIO, SeaweedFS, LocalStack) serve buckets by path, not vhost.
        conf["s3.endpoint"] = cfg.s3_endpoint
        conf["s3.path-style-access"] = "true"
    if cfg.s3_access_key_id and cfg.s3_secret_access_key:
        conf["s3.access-key-id"] = cfg.s3_access_key_id
        conf["s3.secret-access-key"] = cfg.s3_secret_access_key.get_secret_value()
    if cfg.region:
        conf["client.region"] = cfg.region
    return conf


def _type_conf(cfg: CatalogConfig) -> dict[str, str]:
    conf: dict[str, str] = {}
    if cfg.type == "sql":
        assert cfg.uri is not None  # CatalogConfig validates this
        jdbc, user, password = jdbc_url_and_credentials(cfg.uri, cfg.name)
        conf |= {"type": "jdbc", "uri": jdbc, "jdbc.schema-version": "V1"}
        if user is not None:
            conf["jdbc.user"] = user
        if password is not None:
            conf["jdbc.password"] = password
    elif cfg.type == "rest":
        assert cfg.uri is not None
        conf |= {"type": "rest", "uri": cfg.uri}
        if cfg.credential is not None:
            conf["credential"] = cfg.credential.get_secret_value()
            conf["scope"] = cfg.scope
        if cfg.token is not None:
            conf["token"] = cfg.token.get_secret_value()
        if cfg.oauth2_server_uri:
            conf["oauth2-server-uri"] = cfg.oauth2_server_uri
        if cfg.vended_credentials:
            # Spark's REST catalog then builds each table's S3FileIO from what loadTable vends.
            conf[f"header.{ACCESS_DELEGATION_HEADER}"] = VENDED_CREDENTIALS
        for name, value in cfg.headers.items():
            conf[f"header.{name}"] = value
    else:
        conf["type"] = "glue"
        if cfg.endpoint:
            conf["glue.endpoint"] = cfg.endpoint
        if cfg.region:
            conf["client.region"] = cfg.region
    return conf


def spark_catalog_conf(cfg: CatalogConfig) -> dict[str, str]:
    """``spark.sql.catalog.<name>*`` confs for one Icepack catalog.

    ``cfg.properties`` are passed through first (except PyIceberg-only ``py-*`` keys), so the
    derived keys win over them.

    Returns:
        Conf key -> value, including secrets; never log it unredacted (see ``redact_conf``).

    Raises:
        ConfigError: a sql catalog URI Spark's JDBC catalog cannot use.
    """
    props: dict[str, str] = {
        key: value for key, value in cfg.properties.items() if not key.startswith("py-")
    }
    props |= _type_conf(cfg)
    if cfg.warehouse:
        props["warehouse"] = cfg.warehouse
    props |= _s3_conf(cfg)
    prefix = f"spark.sql.catalog.{cfg.name}"
    conf = {prefix: SPARK_CATALOG_CLASS}
    conf |= {f"{prefix}.{key}": value for key, value in props.items()}
    return conf


def jars_for(
    jars_dir: Path, catalogs: Iterable[CatalogConfig], connect: bool = False
) -> list[Path]:
    """The jars Spark needs for these catalogs, from the ``scripts/fetch-maven.sh jars`` cache.

    Always the Iceberg runtime; the Postgres driver for sql catalogs; the AWS bundle when any
    catalog uses S3 or Glue; the Spark Connect server jar when ``connect``.

    Raises:
        ConfigError: the directory or a needed jar is missing; the message names the fix.
    """
    needed = {ICEBERG_RUNTIME_JAR}
    for cfg in catalogs:
        if cfg.type == "sql":
            needed.add(POSTGRES_JAR)
        if _s3_conf(cfg):
            needed.add(AWS_BUNDLE_JAR)
    if connect:
        needed.add(CONNECT_JAR)
    present = sorted(jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    chosen: list[Path] = []
    for prefix in sorted(needed):
        matches = [jar for jar in present if jar.name.startswith(prefix)]
        if not matches:
            raise ConfigError(
                f"Spark jar {prefix}*.jar not found in {jars_dir}; run `make setup` (or "
                f"`scripts/fetch-maven.sh jars {jars_dir}`), or point ICEPACK_SPARK_JARS_DIR at "
                "the directory that holds the jars"
            )
        chosen.append(matches[-1])
    return chosen


def common_spark_conf(jars: Iterable[Path]) -> dict[str, str]:
    """Confs every Icepack Spark session gets: Iceberg extensions, jars, no UI, UTC, loopback.

    Four shuffle partitions suit the embedded 2-core default; deployments override through
    ``ICEPACK_SPARK_CONF`` or per table via ``icepack.spark.sql.shuffle.partitions``.
    """
    return {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.jars": ",".join(str(jar.resolve()) for jar in jars),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
    }


def redact_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``conf`` safe to log: secret values become ``***``."""
    return {key: "***" if _is_secret(key) else value for key, value in conf.items()}


def _is_secret(key: str) -> bool:
    # Any REST header may carry an API key, so header values are all treated as secrets.
    lowered = key.lower()
    return lowered.endswith(_SECRET_SUFFIXES) or ".header." in lowered
