"""The Python inspector's own metadata reader sees what PyIceberg's model sees.

``metadata.parse_metadata`` serves the files PyIceberg's model rejects; on every file the model
accepts, the two views must be equal (otherwise a table's status would change with the path it
was read by). Hypothesis varies a real Spark-written v2 metadata file: which snapshots are kept,
the current snapshot (one of them, -1, absent, or an id no snapshot has), whether ``refs`` names
``main``, the properties, the metadata log, and gzip on or off.
"""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.table.metadata import TableMetadataUtil

from icepack_core.inspection.metadata import MetadataError, MetadataView, parse_metadata
from tests.inspection.test_tables_icepack import BY_NAME, TABLES, raw_metadata

BASE = raw_metadata(str(TABLES / BY_NAME["spark_v2"]["metadata"]))
V1 = raw_metadata(str(TABLES / BY_NAME["spark_v1_inline"]["metadata"]))


@st.composite
def variants(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    snaps = doc["snapshots"]
    kept = draw(st.lists(st.sampled_from(range(len(snaps))), unique=True, max_size=len(snaps)))
    doc["snapshots"] = [snaps[i] for i in sorted(kept)]
    for s in doc["snapshots"]:  # parents that were dropped are not PyIceberg's concern
        s.pop("parent-snapshot-id", None)
    ids = [s["snapshot-id"] for s in doc["snapshots"]]
    choice = draw(st.sampled_from(["one", "minus-one", "absent", "unknown"]))
    if choice == "one" and ids:
        doc["current-snapshot-id"] = draw(st.sampled_from(ids))
    elif choice == "minus-one":
        doc["current-snapshot-id"] = -1
    elif choice == "absent":
        doc.pop("current-snapshot-id")
    else:
        doc["current-snapshot-id"] = 123456789
    current = doc.get("current-snapshot-id")
    doc["snapshot-log"] = []
    doc["refs"] = {}
    if current in ids and draw(st.booleans()):
        doc["refs"]["main"] = {"snapshot-id": current, "type": "branch"}
    if bool(ids) and draw(st.booleans()):
        doc["refs"]["tag1"] = {"snapshot-id": draw(st.sampled_from(ids)), "type": "tag"}
    doc["properties"] = draw(
        st.dictionaries(st.text("abc.-", min_size=1, max_size=5), st.text(max_size=5), max_size=3)
    )
    doc["metadata-log"] = doc["metadata-log"][: draw(st.integers(0, len(doc["metadata-log"])))]
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=variants(), compress=st.booleans())
def test_own_reader_equals_the_pyiceberg_model(doc: dict[str, Any], compress: bool) -> None:
    raw = json.dumps(doc).encode()
    try:
        model = TableMetadataUtil.parse_raw(raw.decode())
    except Exception:  # a combination the model refuses: not what this test compares
        return
    ours = parse_metadata(gzip.compress(raw) if compress else raw)
    assert ours == MetadataView.of(model)


def test_v1_inline_snapshot_lists_its_manifests() -> None:
    view = parse_metadata(json.dumps(V1).encode())
    assert view.current is not None and view.current.manifest_list is None
    current = next(s for s in V1["snapshots"] if s["snapshot-id"] == V1["current-snapshot-id"])
    assert view.current.inline_manifests == tuple(current["manifests"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update({"format-version": 4}), "unsupported format-version 4"),
        (lambda d: d.update({"format-version": True}), "unsupported format-version True"),
        (lambda d: d["snapshots"][0].update({"snapshot-id": "7"}), "not an integer"),
        (lambda d: d["snapshots"][-1].pop("manifest-list"), "has no manifest-list"),
        (lambda d: d.update({"current-snapshot-id": 1.5}), "current-snapshot-id"),
        (lambda d: d.update({"snapshots": {}}), "snapshots is not a list"),
    ],
)
def test_invalid_metadata_names_the_reason(
    change: Callable[[dict[str, Any]], object], message: str
) -> None:
    doc = copy.deepcopy(BASE)
    change(doc)
    with pytest.raises(MetadataError, match=message):
        parse_metadata(json.dumps(doc).encode())


def test_not_json_and_broken_gzip() -> None:
    with pytest.raises(MetadataError, match="not valid table metadata JSON"):
        parse_metadata(b"\xff\xfe{")
    with pytest.raises(MetadataError, match="gzip"):
        parse_metadata(gzip.compress(b"{}")[:10])
    with pytest.raises(MetadataError, match="not an object"):
        parse_metadata(b"[1]")
