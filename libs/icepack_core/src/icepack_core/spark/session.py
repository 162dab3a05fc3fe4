"""Building the Spark confs and the in-process (local) SparkSession from Icepack settings.

``session_conf`` is the single source of the Spark configuration: the local engine builds its
session from it, and a Spark Connect or Thrift server started for Icepack is given the same confs
(``spark-submit --conf``), so every engine sees the same catalogs under the same names.

All functions here block (the JVM starts in ``local_session``); async callers go through the
engines, which cross into a thread once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from icepack_core.settings import Settings
from icepack_core.spark.catalog_conf import (
    common_spark_conf,
    jars_for,
    redact_conf,
    spark_catalog_conf,
)
from icepack_core.spark.extra import spark_imports

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("icepack.spark")

# Where `make setup` / scripts/fetch-maven.sh jars put the jars, relative to the working directory
# (the repository root in development; images set ICEPACK_SPARK_JARS_DIR).
DEFAULT_JARS_DIR = Path(".cache/jars")
APP_NAME = "icepack"


def jars_dir(settings: Settings) -> Path:
    """``ICEPACK_SPARK_JARS_DIR`` or the development default ``.cache/jars``."""
    return (settings.spark_jars_dir or DEFAULT_JARS_DIR).resolve()


def session_conf(settings: Settings, *, connect_server: bool = False) -> dict[str, str]:
    """Every Spark conf an Icepack session needs, in the order they apply.

    Common confs, then one ``spark.sql.catalog.<name>`` block per effective catalog, then the
    operator's ``ICEPACK_SPARK_CONF`` (which wins).

    Args:
        settings: validated Icepack settings.
        connect_server: also put the Spark Connect server jar on ``spark.jars``.

    Returns:
        Conf key -> value, secrets included: log only ``redact_conf`` of it.

    Raises:
        ConfigError: a needed jar is missing (the message names ``make setup``) or a catalog
            cannot be expressed as Spark confs.
    """
    catalogs = settings.effective_catalogs()
    jars = jars_for(jars_dir(settings), catalogs, connect=connect_server)
    conf = common_spark_conf(jars)
    for cfg in catalogs:
        conf |= spark_catalog_conf(cfg)
    conf |= settings.spark_conf
    return conf


def spark_properties(conf: dict[str, str]) -> str:
    """``conf`` as a ``spark-submit --properties-file`` (Java properties) text.

    Servers (Spark Connect, Thrift) get their confs this way rather than as ``--conf`` arguments,
    so catalog secrets never show up in the process list; write the file with mode 0600.
    """

    def escape(text: str, key: bool) -> str:
        out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        if key:
            out = out.replace(" ", "\\ ").replace("=", "\\=").replace(":", "\\:")
            if out.startswith(("#", "!")):  # would start a comment line
                out = "\\" + out
        elif out.startswith((" ", "\t")):  # leading blanks of a value are dropped
            out = "\\" + out
        return out

    lines = [f"{escape(key, True)}={escape(value, False)}" for key, value in conf.items()]
    return "\n".join(lines) + "\n"


def build_local_session(settings: Settings) -> tuple[SparkSession, bool]:
    """The process's classic SparkSession, created if none is running.

    Returns:
        ``(session, created)``. When a session already runs (a notebook, the test suite), it is
        reused: only runtime confs, including the ``spark.sql.catalog.*`` blocks, are applied to
        it; static ones such as ``spark.jars`` keep the values it started with. ``created`` tells
        the caller whether stopping it is theirs to do.

    Raises:
        ConfigError: jars are missing (see ``session_conf``).
        MissingExtra: PySpark is not installed (the ``icepack-core[spark]`` extra).
    """
    with spark_imports("local"):
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

    conf = session_conf(settings)
    running = SparkContext._active_spark_context is not None
    builder = SparkSession.builder.master(settings.spark_master).appName(APP_NAME)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if running:
        log.info("spark.session.reused", master=settings.spark_master)
    else:
        log.info("spark.session.starting", master=settings.spark_master, conf=redact_conf(conf))
    session = builder.getOrCreate()
    return session, not running


def local_session(settings: Settings) -> SparkSession:
    """An in-process SparkSession with Icepack's catalogs, reusing one that already runs.

    Blocks for the JVM start (about 10 s on two cores) when none runs yet.

    Raises:
        ConfigError: the Iceberg runtime or JDBC driver jar is missing; run ``make setup`` or
            ``scripts/fetch-maven.sh jars`` (or set ``ICEPACK_SPARK_JARS_DIR``).
        MissingExtra: PySpark is not installed (the ``icepack-core[spark]`` extra).
    """
    session, _created = build_local_session(settings)
    return session
