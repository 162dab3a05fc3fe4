"""Whether the Spark engines' Python clients (the ``icepack-core[spark]`` extra) are installed.

PySpark, PyHive and the Spark Connect client libraries are an optional extra of icepack-core:
the executor depends on it, the discovery, inspector, planner and gateway services (and their
image) do not (docs/architecture.md, "Deploy"). Code that needs an engine checks here first, or
imports inside ``spark_imports``, so a missing extra is a ``MissingExtra`` that names the extra
and how to install it, never a bare ``ImportError`` from deep inside a job.

Nothing here imports PySpark: presence is checked with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from icepack_core.errors import MissingExtra

Engine = Literal["local", "connect", "thrift"]
SPARK_EXTRA = "spark"

# The top-level modules each engine's client imports (from the extra's distributions and
# their dependencies). Spark Connect also needs pyarrow, which PyIceberg brings to everyone.
ENGINE_MODULES: dict[Engine, tuple[str, ...]] = {
    "local": ("pyspark", "py4j"),
    "connect": ("pyspark", "py4j", "pandas", "pyarrow", "grpc", "grpc_status", "google.rpc"),
    "thrift": ("pyhive", "TCLIService", "thrift", "thrift_sasl", "puresasl", "future"),
}
ENGINE_LABELS: dict[Engine, str] = {
    "local": "the local Spark engine (ICEPACK_SPARK_ENGINE=local)",
    "connect": "the Spark Connect engine (ICEPACK_SPARK_ENGINE=connect)",
    "thrift": "the Spark Thrift engine (ICEPACK_SPARK_ENGINE=thrift)",
}


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing, or an import hook refuses it
        return False
    except ValueError:  # in sys.modules without a spec: imported by other means, so present
        return True


def missing_modules(engine: Engine = "local") -> list[str]:
    """The modules ``engine`` needs that cannot be imported here (empty: all present)."""
    return [m for m in ENGINE_MODULES[engine] if not _present(m)]


def spark_available(engine: Engine = "local") -> bool:
    """True when every module ``engine`` needs is installed."""
    return not missing_modules(engine)


def require_spark(engine: Engine, purpose: str | None = None) -> None:
    """Fail fast, before any work, when ``engine``'s client libraries are missing.

    Args:
        engine: the engine about to be used (``ICEPACK_SPARK_ENGINE``).
        purpose: what needs it, for the message (``"icepack maintain"``); defaults to the
            engine's own label.

    Raises:
        MissingExtra: naming ``purpose``, the missing modules and ``icepack-core[spark]``.
    """
    missing = missing_modules(engine)
    if missing:
        raise MissingExtra(SPARK_EXTRA, _purpose(engine, purpose), missing)


@contextmanager
def spark_imports(engine: Engine, purpose: str | None = None) -> Iterator[None]:
    """Import an engine's client inside this block; an ``ImportError`` caused by a missing
    extra module becomes ``MissingExtra``. An ``ImportError`` with every module present (a
    broken installation) is re-raised unchanged."""
    try:
        yield
    except MissingExtra:
        raise
    except ImportError as exc:
        missing = missing_modules(engine)
        if not missing:
            raise
        raise MissingExtra(SPARK_EXTRA, _purpose(engine, purpose), missing) from exc


def _purpose(engine: Engine, purpose: str | None) -> str:
    label = ENGINE_LABELS[engine]
    return label if purpose is None else f"{purpose} with {label}"
