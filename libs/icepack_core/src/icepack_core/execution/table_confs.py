"""A table's Spark confs (``icepack.spark.sql.*`` properties) for the length of one action.

The session is shared by every table an engine maintains: each conf set for an action goes back
to its previous value afterwards, whatever happens (``table_confs``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import structlog

from icepack_core.errors import InvalidIdentifier
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import (
    SPARK_CONF_UNDEFINED,
    spark_conf_reset,
    spark_conf_set,
    spark_conf_settings,
    spark_conf_show,
)

log = structlog.get_logger("icepack.maintenance")


@asynccontextmanager
async def table_confs(engine: SparkEngine, properties: Mapping[str, str]) -> AsyncIterator[None]:
    """``SET`` the confs ``properties`` allow for the block, then put each back (also when
    setting one of them failed: those already set are restored)."""
    previous: dict[str, str] = {}
    try:
        for key, value in spark_conf_settings(properties):
            previous[key] = await conf_value(engine, key)
            await engine.sql(spark_conf_set(key, value))
        yield
    finally:
        await restore_confs(engine, previous)


async def conf_value(engine: SparkEngine, key: str) -> str:
    """The session's current value of an allowlisted conf (``SPARK_CONF_UNDEFINED``)."""
    rows = await engine.sql(spark_conf_show(key))
    if not rows:
        return SPARK_CONF_UNDEFINED
    row = rows[0]
    return str(row["value"] if "value" in row else list(row.values())[-1])


async def restore_confs(engine: SparkEngine, previous: Mapping[str, str]) -> None:
    """Put each conf back: ``SET`` its previous value, or ``RESET`` it when it had none (or one
    ``SET`` cannot carry). Never raises: a failed restore is logged, and must not hide the
    action's own outcome or error."""
    for key, value in previous.items():
        try:
            statement = spark_conf_set(key, value)  # refuses SPARK_CONF_UNDEFINED too
        except InvalidIdentifier:
            statement = spark_conf_reset(key)
        try:
            await engine.sql(statement)
        except Exception as exc:
            log.error(
                "maintenance.conf_restore_failed",
                conf=key,
                error=f"{type(exc).__name__}: {exc}",
            )
