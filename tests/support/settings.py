"""Settings for running the real services against the Spark fixtures' catalog in a test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icepack_core.settings import Settings, load_settings

# Secrets stay out of the JSON copy of the catalog: pydantic masks them there anyway.
_SECRETS = {"credential", "client_secret", "token", "s3_secret_access_key"}


def service_settings(
    database_url: str,
    spark_catalog_settings: Settings,
    data_dir: Path,
    *,
    include: list[str] | None = None,
    **overrides: Any,
) -> Settings:
    """The services' settings on this test's database and the Spark fixtures' catalog, limited
    to ``include`` (namespace patterns), with short poll intervals; ``overrides`` win."""
    (catalog,) = spark_catalog_settings.effective_catalogs()
    catalog_json = catalog.model_dump(mode="json", exclude=_SECRETS)
    if include is not None:
        catalog_json["include"] = include
    values: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "catalogs": [catalog_json],
        "spark_jars_dir": spark_catalog_settings.spark_jars_dir,
        "spark_conf": spark_catalog_settings.spark_conf,
        "poll_interval_seconds": 0.5,
        "discovery_interval_seconds": 2,
        "job_lease_seconds": 60,
        "db_pool_max": 6,
    }
    return load_settings(**(values | overrides))
