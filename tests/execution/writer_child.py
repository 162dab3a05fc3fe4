"""A writer process committing to a table while Icepack maintains it (``test_commit_conflicts``).

It is what a streaming writer or a batch job is to Icepack: another process with its own
catalog client (PyIceberg's SQL catalog, as Icepack loads it, on the same catalog database as
Spark's JDBC catalog)
committing appends and copy-on-write deletes. It prints the id of the snapshot its last commit
made, so the test knows the contents a maintenance run must leave exactly as they are.

Usage: ``python -m tests.execution.writer_child CATALOG_JSON NAMESPACE TABLE DELETE_BELOW APPEND``
deletes the rows with ``id < DELETE_BELOW`` (copy-on-write: the files holding them are
rewritten and their manifests replaced), then appends ``APPEND`` rows, one commit each.
"""

from __future__ import annotations

import sys

import pyarrow as pa
from pyiceberg.expressions import LessThan

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.settings import CatalogConfig

FIRST_APPENDED_ID = 1_000_000


def main(config: str, namespace: str, name: str, below: int, append: int) -> None:
    catalog = load_catalog(CatalogConfig.model_validate_json(config))
    table = catalog.load_table((namespace, name))
    if below > 0:
        table.delete(LessThan(term="id", value=below))
    if append > 0:
        table.refresh()
        rows = pa.table(
            {
                "id": pa.array(range(FIRST_APPENDED_ID, FIRST_APPENDED_ID + append), pa.int64()),
                "part": pa.array(["a"] * append, pa.string()),
                "payload": pa.array([f"writer-{i}" for i in range(append)], pa.string()),
            }
        )
        table.append(rows)
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None
    print(snapshot.snapshot_id, flush=True)


if __name__ == "__main__":
    config, namespace, name, below, append = sys.argv[1:6]
    main(config, namespace, name, int(below), int(append))
