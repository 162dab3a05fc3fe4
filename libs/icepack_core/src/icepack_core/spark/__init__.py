"""Spark for Icepack: confs derived from catalog settings, sessions, and the engine interface.

Maintenance runs as Iceberg procedures (``CALL <catalog>.system.*``) on one of three engines
(docs/architecture.md, "Spark execution"). Importing this package does not import PySpark or
PyHive; they load when an engine or session is first used.
"""

from icepack_core.spark.catalog_conf import redact_conf, spark_catalog_conf
from icepack_core.spark.engine import (
    ConnectEngine,
    LocalEngine,
    SparkEngine,
    ThriftEngine,
    engine_for,
)
from icepack_core.spark.session import local_session, session_conf

__all__ = [
    "ConnectEngine",
    "LocalEngine",
    "SparkEngine",
    "ThriftEngine",
    "engine_for",
    "local_session",
    "redact_conf",
    "session_conf",
    "spark_catalog_conf",
]
