"""Baseline worker: the headline metrics from PyIceberg's ``table.inspect.files()``.

Run as a child process by ``bench.inspect`` (so it can be stopped at a deadline)::

    python -m bench.inspect.baseline CATALOG_NAME CATALOG_URI NAMESPACE TABLE

Prints one JSON object: ``seconds`` (load + ``inspect.files()`` + the arithmetic; the
interpreter's start and imports are not counted), ``cpu_seconds`` (the same span, CPU time),
``files_seconds`` (``inspect.files()`` alone) and ``metrics``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyiceberg.io.pyarrow  # noqa: F401 - imported up front: the FileIO import (pandas) is not timed
from pyiceberg.catalog.sql import SqlCatalog

DEFAULT_TARGET_FILE_SIZE = 536870912


def headline_metrics(files: pa.Table, threshold: int) -> dict[str, Any]:
    """The headline ``TableStatus`` metrics from an ``inspect.files()`` table."""
    data = files.filter(pc.equal(files["content"], 0))
    sizes = data["file_size_in_bytes"]
    partition_columns = [c for c in data.flatten().column_names if c.startswith("partition.")]
    per_partition = (
        data.flatten()
        .group_by(["spec_id", *partition_columns], use_threads=False)
        .aggregate([("file_path", "count")])
    )
    counts = per_partition["file_path_count"]
    return {
        "data_file_count": data.num_rows,
        "data_file_bytes": int(pc.sum(sizes).as_py() or 0),
        "record_count": int(pc.sum(data["record_count"]).as_py() or 0),
        "small_file_count": int(pc.sum(pc.less(sizes, threshold).cast(pa.int64())).as_py() or 0),
        "partition_count": per_partition.num_rows,
        "max_files_in_partition": int(pc.max(counts).as_py() or 0) if len(counts) else 0,
    }


def main(catalog: str, uri: str, namespace: str, name: str) -> None:
    t0 = time.perf_counter()
    c0 = time.process_time()
    table = SqlCatalog(catalog, uri=uri).load_table((namespace, name))
    target = int(table.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
    t1 = time.perf_counter()
    files = table.inspect.files()
    t2 = time.perf_counter()
    metrics = headline_metrics(files, target // 8)
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    print(
        json.dumps(
            {"seconds": t3 - t0, "cpu_seconds": cpu, "files_seconds": t2 - t1, "metrics": metrics}
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
