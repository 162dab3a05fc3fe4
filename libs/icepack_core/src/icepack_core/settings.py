"""Icepack's configuration: ``ICEPACK_*`` environment variables, validated once at start-up.

``load_settings()`` is the only entry point services use. Every problem is reported in one
``ConfigError`` whose lines each name the variable to fix. Secrets are ``SecretStr`` and the
database URL's password is masked, so printing settings never prints a secret.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from icepack_core.errors import ConfigError
from icepack_core.telemetry.logs import redact_text, register_secrets
from icepack_core.telemetry.logs import secret_key as _secret_key
from icepack_core.types import MAX_HOURS, MIN_CADENCE_HOURS, WEBHOOK_JOB_FAILED, Topic

ENV_PREFIX = "ICEPACK_"
_CATALOG_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def _check_postgres_url(value: str, variable: str) -> SplitResult:
    parts = urlsplit(value)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(
            f"{variable} must be a postgresql:// URL "
            f"(postgresql://USER:PASSWORD@HOST:PORT/DB), got scheme {parts.scheme or '(none)'!r}"
        )
    try:
        parts.port  # noqa: B018 - raises on a non-numeric port
    except ValueError as exc:
        raise ValueError(f"{variable} has an invalid port: {exc}") from None
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ValueError(f"{variable} names no database (…/DBNAME at the end of the URL)")
    if not parts.hostname and "host=" not in parts.query:
        raise ValueError(f"{variable} names no host (postgresql://USER@HOST/DB)")
    return parts


def mask_url(url: str) -> str:
    """The URL with its secrets replaced by ``***`` (for logs and ``repr``): the userinfo
    password, and ``?password=``/``;token=`` style parameters."""
    return redact_text(url)


def _url_secrets(url: str) -> list[str]:
    """The secret values in a URL: the userinfo password, and values of secret-looking query
    (``?password=``) or Spark Connect (``;token=``) parameters."""
    parts = urlsplit(url)
    found = [unquote(parts.password)] if parts.password else []
    for chunk in re.split(r"[?&;/]", f"{parts.path};{parts.query}"):
        key, sep, value = chunk.partition("=")
        if sep and value and _secret_key(key):
            found += [value, unquote(value)]
    return found


def _scheme(uri: str | None) -> str:
    """A URI's scheme only, for messages (the rest may hold a password)."""
    return f"{urlsplit(uri).scheme}://..." if uri else "(none)"


def _is_postgres_uri(uri: str | None) -> bool:
    scheme = urlsplit(uri).scheme if uri else ""
    return scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+")


# The REST spec's request header asking a catalog to delegate storage access, and the value
# asking for vended credentials (as opposed to "remote-signing").
ACCESS_DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
VENDED_CREDENTIALS = "vended-credentials"


class CatalogConfig(BaseModel):
    """One Iceberg catalog Icepack watches. Secrets may come from
    ``ICEPACK_CATALOG_<NAME>_CREDENTIAL`` / ``_TOKEN`` / ``_S3_SECRET_ACCESS_KEY``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: Literal["sql", "rest", "glue"]
    uri: str | None = None
    warehouse: str | None = None
    # REST / Polaris: OAuth2 client credentials `client_id:client_secret`, or a bearer token.
    credential: SecretStr | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    token: SecretStr | None = None
    scope: str = "PRINCIPAL_ROLE:ALL"
    oauth2_server_uri: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # REST: ask the catalog for vended storage credentials (the access-delegation header) in
    # both PyIceberg's and Spark's requests; each then reads and writes data with the keys
    # loadTable's answer carries, so Icepack needs no static S3 keys (Polaris, Unity, Tabular).
    vended_credentials: bool = False
    # Glue and S3 FileIO.
    region: str | None = None
    endpoint: str | None = None
    s3_endpoint: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    # Which namespaces/tables discovery keeps (shell-style patterns on `namespace` / `ns.table`).
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    # Extra catalog properties passed through to PyIceberg as-is (non-secret).
    properties: dict[str, str] = Field(default_factory=dict)
    # SQL catalogs in Postgres: install a trigger on `iceberg_tables` that NOTIFYs discovery of
    # every commit, so it reacts in milliseconds; polling stays the safety net.
    notify: bool = False
    # Limits on what discovery sends this catalog (a large fleet must never flood a catalog).
    max_concurrent_requests: int = Field(default=8, ge=1, le=256)
    max_requests_per_second: float = Field(default=50.0, gt=0)
    # REST: load tables with If-None-Match and the ETag stored from the last full load, so an
    # unchanged table costs a 304 instead of its metadata (no effect on a server without ETags).
    conditional_loads: bool = True
    # REST: the catalog is Apache Polaris, whose system.* policies apply (icepack_core.polaris):
    # true / false, or null to detect it (one request: Polaris answers its policy API).
    polaris: bool | None = None
    # Polaris' catalog name in its URLs (the ``{prefix}``); default ``warehouse``.
    polaris_prefix: str | None = None
    # How long a read of the catalog's / a namespace's applicable policies, and of a table's,
    # stays fresh; at most this many tables are read per pass (icepack_core.polaris.refresh).
    polaris_namespace_ttl_seconds: float = Field(default=300.0, gt=0)
    polaris_table_ttl_seconds: float = Field(default=6 * 3600.0, gt=0)
    polaris_max_table_reads_per_pass: int = Field(default=500, ge=0)
    # Amazon SQS queue carrying this catalog's change events (Glue Data Catalog table state
    # changes from EventBridge, S3 ObjectCreated for *.metadata.json); credentials come from the
    # AWS default chain. `sqs_endpoint` overrides the endpoint (an emulator, a VPC endpoint).
    sqs_queue_url: str | None = None
    sqs_endpoint: str | None = None

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, value: str) -> str:
        if not _CATALOG_NAME.match(value):
            raise ValueError(
                f"catalog name {value!r} must be lower-case letters, digits and _, "
                "starting with a letter"
            )
        return value

    @model_validator(mode="after")
    def _complete(self) -> CatalogConfig:
        label = f"catalog {self.name!r}"
        if self.type in ("sql", "rest") and not self.uri:
            raise ValueError(f"{label}: type {self.type} needs a uri")
        if self.type == "rest":
            assert self.uri is not None
            if urlsplit(self.uri).scheme not in ("http", "https"):
                raise ValueError(f"{label}: uri {self.uri!r} must be http:// or https://")
            if (self.client_id is None) != (self.client_secret is None):
                missing = "client_secret" if self.client_secret is None else "client_id"
                raise ValueError(
                    f"{label}: OAuth2 needs both client_id and client_secret; {missing} is "
                    f"missing (or set ICEPACK_CATALOG_{self.name.upper()}_CREDENTIAL=id:secret)"
                )
            if self.client_id is not None and self.client_secret is not None:
                joined = f"{self.client_id}:{self.client_secret.get_secret_value()}"
                self.credential = SecretStr(joined)
            if self.credential is not None:
                cid, sep, secret = self.credential.get_secret_value().partition(":")
                if not sep or not cid or not secret:
                    raise ValueError(
                        f"{label}: credential must be CLIENT_ID:CLIENT_SECRET with both parts "
                        f"(ICEPACK_CATALOG_{self.name.upper()}_CREDENTIAL)"
                    )
        if self.vended_credentials and self.type != "rest":
            raise ValueError(
                f"{label}: vended_credentials needs a REST catalog (the catalog vends them in "
                f"its loadTable answers); this one is type {self.type}"
            )
        if self.notify and (self.type != "sql" or not _is_postgres_uri(self.uri)):
            raise ValueError(
                f"{label}: notify needs a SQL catalog in Postgres (type sql, a postgresql:// "
                f"uri); it is type {self.type} with uri {_scheme(self.uri)}"
            )
        if (self.s3_access_key_id is None) != (self.s3_secret_access_key is None):
            raise ValueError(
                f"{label}: S3 needs both s3_access_key_id and s3_secret_access_key "
                f"(the secret may come from ICEPACK_CATALOG_{self.name.upper()}"
                "_S3_SECRET_ACCESS_KEY)"
            )
        return self


class Settings(BaseSettings):
    """Every setting of every service. Defaults suit a laptop; deploy overlays set the rest."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", case_sensitive=False)

    database_url: SecretStr = SecretStr("postgresql://postgres@127.0.0.1:5432/icepack")
    data_dir: Path = Path(".icepack")
    http_host: str = "127.0.0.1"
    http_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"

    catalogs: list[CatalogConfig] = Field(default_factory=list)
    # Spark (flat variables, e.g. ICEPACK_SPARK_ENGINE=thrift ICEPACK_SPARK_THRIFT_HOST=kyuubi).
    spark_engine: Literal["local", "connect", "thrift"] = "local"
    spark_connect_url: str | None = None
    spark_thrift_host: str | None = None
    spark_thrift_port: int = Field(10009, ge=1, le=65535)  # Kyuubi's default frontend port
    spark_thrift_username: str | None = None
    spark_thrift_password: SecretStr | None = None
    spark_thrift_auth: Literal["NONE", "NOSASL", "LDAP", "CUSTOM"] = "NONE"
    spark_jars_dir: Path | None = None
    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = Field(default_factory=dict)
    metadata_inspector: Literal["pyiceberg", "iceberg-go"] = "pyiceberg"
    go_inspector_path: Path | None = None
    # The most bytes one compressed Avro block of a manifest (list) may expand to, in both
    # inspectors and the executor's readers; beyond it the file is damaged (``decompression``).
    avro_max_block_bytes: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    # A transient catalog error (dropped connection, REST 5xx/429) is retried this many times,
    # waiting base·2^n seconds, before a table is marked INSPECTION_FAILED.
    inspection_transient_retries: int = Field(4, ge=0, le=10)
    inspection_retry_base_seconds: float = Field(1.0, ge=0)

    # Database sessions: short, so no service can hold the xmin horizon (and event delivery) back.
    db_pool_min: int = Field(1, ge=0)
    db_pool_max: int = Field(8, ge=1)
    db_statement_timeout_ms: int = Field(60_000, ge=0)
    db_idle_in_transaction_timeout_ms: int = Field(60_000, ge=0)

    # Loops. Discovery every minute is what a catalog of thousands of tables tolerates.
    discovery_interval_seconds: float = Field(60.0, gt=0)
    poll_interval_seconds: float = Field(5.0, gt=0)  # event/queue poll if a NOTIFY is missed
    # Work items an inspector or planner process works on at once. Each item is a chain of short
    # queries, so a process with few in flight waits on round trips, not on its CPU.
    worker_concurrency: int = Field(6, ge=1, le=64)
    inspector_refresh_seconds: float = Field(3600.0, gt=0)  # age metrics without new events
    maintenance_cadence_hours: float = Field(24.0, ge=MIN_CADENCE_HOURS, le=MAX_HOURS)
    # Need-based scheduling (planning.due): the least time between two maintenance runs on one
    # table, and the benefit (objects a scan no longer opens) a compaction, delete application
    # or manifest rewrite must reach: min benefit + bytes rewritten / bytes per benefit.
    maintenance_min_interval_minutes: float = Field(5.0, ge=0, le=MAX_HOURS * 60)
    maintenance_min_benefit: float = Field(50.0, ge=0)
    maintenance_bytes_per_benefit: int = Field(128 * 1024 * 1024, ge=1)
    # The interval between compactions of a table whose open partitions threaten their
    # small-file bound (planning.pressure): a floor, so a hot table cannot loop on executors.
    maintenance_pressure_interval_seconds: float = Field(60.0, ge=0, le=MAX_HOURS * 3600)
    # The shortest span between the two statuses that growth is measured over (a table
    # inspected every second would otherwise measure one commit's files as its rate).
    maintenance_growth_span_seconds: float = Field(30.0, gt=0, le=24 * 3600)
    # Safety floor for expire_snapshots, whoever asks: never expire what is younger than this.
    expiry_min_age_hours: float = Field(1.0, ge=0, le=MAX_HOURS)

    # Jobs: a lease long enough to survive a GC pause, heartbeats at a third of it.
    job_lease_seconds: float = Field(120.0, gt=0)
    job_max_attempts: int = Field(3, ge=1)
    job_backoff_base_seconds: float = Field(30.0, ge=0)
    job_backoff_cap_seconds: float = Field(3600.0, ge=0)
    work_lease_seconds: float = Field(300.0, gt=0)
    # A work item whose holder died (lease expired) waits base·2^(n-1) s after its n-th death
    # and is parked at the limit (the inspector records INSPECTION_FAILED for its table).
    work_max_deaths: int = Field(3, ge=1)
    work_death_backoff_seconds: float = Field(60.0, ge=0)
    # A table whose job failed permanently gets no new job for that action for base·2^(n-1)
    # seconds after its n-th consecutive failure, at most cap (15 min doubling to a day).
    failure_backoff_base_seconds: float = Field(900.0, ge=0)
    failure_backoff_cap_seconds: float = Field(86_400.0, ge=0)
    # An action whose last two runs on a table measured under 10 % of their predicted benefit
    # is not proposed there again for this long (or until its prediction doubles).
    throttle_hours: float = Field(168.0, ge=0, le=MAX_HOURS)

    # Gateway: the largest request body it reads (bigger ones get 413 before any parsing), and
    # whether reads need a bearer token too (writes always do; probes and /metrics never).
    gateway_max_body_bytes: int = Field(1_048_576, ge=1)
    gateway_read_auth: bool = False
    # The bearer token catalogs send with change events (POST /hooks/catalog-events); separate
    # from operator tokens, which the hook never accepts. Unset: the hook is disabled (403).
    gateway_hook_token: SecretStr | None = None

    # Webhook notifications (icepack_core.notify): the planner POSTs the chosen outbox topics
    # as CloudEvents. No URL: off. The URL and the bearer token are secrets (receivers often
    # carry a token in the URL). Topics: outbox topics, plus job.failed (a job.finished whose
    # job failed), comma-separated.
    webhook_url: SecretStr | None = None
    webhook_token: SecretStr | None = None
    webhook_topics: str = "table.held,job.failed"
    webhook_timeout_seconds: float = Field(5.0, gt=0, le=60)
    webhook_max_attempts: int = Field(12, ge=1, le=100)
    webhook_backoff_base_seconds: float = Field(10.0, ge=0)
    webhook_backoff_cap_seconds: float = Field(3600.0, ge=0)

    # Retention of hot tables.
    event_retention_hours: float = Field(168.0, gt=0, le=MAX_HOURS)
    job_retention_days: float = Field(30.0, gt=0, le=MAX_HOURS / 24)

    @field_validator("database_url")
    @classmethod
    def _database_url_is_postgres(cls, value: SecretStr) -> SecretStr:
        _check_postgres_url(value.get_secret_value(), "ICEPACK_DATABASE_URL")
        return value

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_is_http(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            scheme = urlsplit(value.get_secret_value()).scheme
            if scheme not in {"http", "https"} or not urlsplit(value.get_secret_value()).netloc:
                raise ValueError(
                    f"ICEPACK_WEBHOOK_URL must be an http(s) URL with a host (scheme {scheme!r})"
                )
        return value

    @field_validator("webhook_topics")
    @classmethod
    def _webhook_topics_known(cls, value: str) -> str:
        topics = [t.strip() for t in value.split(",") if t.strip()]
        known = {t.value for t in Topic} | {WEBHOOK_JOB_FAILED}
        unknown = [t for t in topics if t not in known]
        if unknown or not topics:
            raise ValueError(
                f"ICEPACK_WEBHOOK_TOPICS: unknown topic(s) {unknown or [value]}; known: "
                f"{sorted(known)}"
            )
        return ",".join(topics)

    @model_validator(mode="before")
    @classmethod
    def _catalog_secrets_from_env(cls, data: Any) -> Any:
        """Fill each catalog's secrets from ``ICEPACK_CATALOG_<NAME>_*`` so they can come from a
        Kubernetes Secret while the rest of the catalog list sits in a ConfigMap."""
        if not isinstance(data, dict):
            return data
        catalogs = data.get("catalogs")
        if not isinstance(catalogs, list):
            return data
        for catalog in catalogs:
            if not isinstance(catalog, dict) or not isinstance(catalog.get("name"), str):
                continue
            prefix = f"{ENV_PREFIX}CATALOG_{catalog['name'].upper()}_"
            for field in ("credential", "token", "s3_secret_access_key", "client_secret"):
                value = os.environ.get(prefix + field.upper())
                if value:
                    catalog[field] = value
        return data

    @model_validator(mode="after")
    def _unique_catalogs(self) -> Settings:
        names = [c.name for c in self.catalogs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"ICEPACK_CATALOGS names {duplicates} more than once")
        if self.spark_engine == "connect" and not self.spark_connect_url:
            raise ValueError("ICEPACK_SPARK_ENGINE=connect needs ICEPACK_SPARK_CONNECT_URL")
        if self.spark_engine == "thrift" and not self.spark_thrift_host:
            raise ValueError("ICEPACK_SPARK_ENGINE=thrift needs ICEPACK_SPARK_THRIFT_HOST")
        if self.db_pool_min > self.db_pool_max:
            raise ValueError("ICEPACK_DB_POOL_MIN must not exceed ICEPACK_DB_POOL_MAX")
        return self

    def secret_values(self) -> list[str]:
        """Every secret this configuration holds, for ``logs.register_secrets``: passwords and
        tokens in URLs (userinfo, ``?password=``, Spark Connect's ``;token=``), the Thrift
        password, Spark confs under secret-looking keys (``fs.azure.account.key.*``, S3 secret
        keys), and each catalog's credential, client secret, token, S3 secret key, header
        values and secret-looking properties."""
        values: list[str | None] = [*_url_secrets(self.dsn)]
        if self.spark_connect_url:
            values += _url_secrets(self.spark_connect_url)
        if self.spark_thrift_password is not None:
            values.append(self.spark_thrift_password.get_secret_value())
        if self.gateway_hook_token is not None:
            values.append(self.gateway_hook_token.get_secret_value())
        if self.webhook_url is not None:  # the whole URL, and its secrets wherever they appear
            values += [self.webhook_url.get_secret_value()]
            values += _url_secrets(self.webhook_url.get_secret_value())
        if self.webhook_token is not None:
            values.append(self.webhook_token.get_secret_value())
        values += [v for k, v in self.spark_conf.items() if _secret_key(k)]
        for catalog in self.catalogs:
            for secret in (
                catalog.credential,
                catalog.client_secret,
                catalog.token,
                catalog.s3_secret_access_key,
            ):
                if secret is not None:
                    value = secret.get_secret_value()
                    values += [value, value.partition(":")[2]]
            values += list(catalog.headers.values())
            values += [v for k, v in catalog.properties.items() if _secret_key(k)]
            if catalog.uri:
                values += _url_secrets(catalog.uri)
        return [v for v in values if v]

    @property
    def dsn(self) -> str:
        """The database URL with its secret, for drivers only; never log it."""
        return self.database_url.get_secret_value()

    @property
    def masked_dsn(self) -> str:
        return mask_url(self.dsn)

    def effective_catalogs(self) -> list[CatalogConfig]:
        """The configured catalogs, or the embedded SQL catalog in Icepack's own database."""
        if self.catalogs:
            return list(self.catalogs)
        return [
            CatalogConfig(
                name="icepack",
                type="sql",
                uri=self.dsn,
                warehouse=(self.data_dir.resolve() / "warehouse").as_uri(),
            )
        ]


def _variable_for(loc: tuple[int | str, ...]) -> str:
    head = [str(p) for p in loc if not isinstance(p, int)]
    if not head:
        return f"{ENV_PREFIX}(settings)"
    return f"{ENV_PREFIX}{head[0].upper()}"


def load_settings(**overrides: Any) -> Settings:
    """Read and validate settings from the environment (plus explicit overrides).

    Raises:
        ConfigError: with one line per bad variable, naming it and what is wrong.
    """
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            message = str(err["msg"]).removeprefix("Value error, ")
            variable = _variable_for(tuple(err["loc"]))
            if message.startswith(ENV_PREFIX):
                lines.append(message)
            else:
                lines.append(f"{variable}: {message}")
        # The secrets are not registered yet (the settings did not load): mask what a message
        # may quote, such as a mistyped URI carrying a password.
        text = redact_text("invalid configuration:\n  " + "\n  ".join(lines))
        raise ConfigError(text) from None
    except SettingsError as exc:
        field = re.search(r'field "([a-z_]+)"', str(exc))
        variable = f"{ENV_PREFIX}{field.group(1).upper()}" if field else "an ICEPACK_* variable"
        raise ConfigError(f"invalid configuration:\n  {variable}: not valid JSON") from None
    # From here on, these values are masked in every log line, job row, event and span.
    register_secrets(settings.secret_values())
    return settings
