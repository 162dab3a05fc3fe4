"""A fleet of Iceberg tables made cheaply: real template tables, cloned metadata-deep.

Writing 100,000 tables with PyIceberg appends takes hours, so a few **templates** are written
with PyIceberg (the real writer) and each fleet table is a **clone** of one: its own copies of
the metadata JSON (new location and uuid), of the current snapshot's manifest list (rewritten
with PyIceberg's manifest-list writer to point at the copies) and of every manifest it lists
(byte copies under a new name: manifests hold data file paths, not their own). Data files are
shared with the template: the services under test read metadata only. Every clone therefore has
its own manifest files, so an inspector's manifest cache gets no hits a real fleet would not
give. Clones are registered in the SQL catalog with one ``COPY`` into ``iceberg_tables``.

Templates (``KINDS``) and their share of the fleet:
* ``healthy``: one append of two files;
* ``small_files``: 12 appends (SMALL_FILES);
* ``stale``: 3 appends whose snapshot timestamps the clone moves 10 days back (OLD_SNAPSHOTS);
* ``many_manifests``: 120 fast appends, 120 manifests (TOO_MANY_MANIFESTS).
Delete build-up is not in the mix: PyIceberg writes no merge-on-read deletes.
"""

from __future__ import annotations

import copy
import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestFile, write_manifest_list
from pyiceberg.table import Table

NAMESPACE_SIZE = 1000  # clones per namespace
TEMPLATE_NAMESPACE = "templates"
TEN_DAYS_MS = 10 * 24 * 3600 * 1000
# (kind, appends, share of the fleet in per mille)
KINDS: tuple[tuple[str, int, int], ...] = (
    ("healthy", 1, 900),
    ("small_files", 12, 50),
    ("stale", 3, 48),
    ("many_manifests", 120, 2),
)


@dataclass
class Template:
    kind: str
    metadata: dict[str, Any]
    manifests: list[tuple[ManifestFile, bytes]]  # the current snapshot's, with their bytes
    snapshot_id: int
    parent_id: int | None
    sequence_number: int | None
    format_version: int


def _rows(n: int, start: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": pa.array([f"n{i}" for i in range(start, start + n)]),
        }
    )


def write_templates(catalog: SqlCatalog) -> list[Template]:
    """Write one template table per kind (PyIceberg appends) and read back what clones need."""
    catalog.create_namespace_if_not_exists(TEMPLATE_NAMESPACE)
    templates = []
    for kind, appends, _share in KINDS:
        ident = f"{TEMPLATE_NAMESPACE}.{kind}"
        if catalog.table_exists(ident):
            catalog.drop_table(ident)
        table = catalog.create_table(ident, _rows(1, 0).schema)
        for i in range(appends):
            table.append(_rows(2 if kind == "healthy" else 1, i * 10))
        templates.append(_read_template(kind, catalog.load_table(ident)))
    return templates


def _read_template(kind: str, table: Table) -> Template:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    io = table.io
    manifests = []
    for manifest in snapshot.manifests(io):
        with io.new_input(manifest.manifest_path).open() as stream:
            manifests.append((manifest, stream.read()))
    metadata = json.loads(io.new_input(table.metadata_location).open().read())
    return Template(
        kind,
        metadata,
        manifests,
        snapshot.snapshot_id,
        snapshot.parent_snapshot_id,
        snapshot.sequence_number,
        table.metadata.format_version,
    )


def plan_kinds(count: int) -> list[str]:
    """The kind of each of ``count`` clones, spread evenly by their per-mille shares."""
    kinds: list[str] = []
    for i in range(count):
        slot = (i * 997) % 1000  # a permutation of 0..999 mixes kinds across namespaces
        acc = 0
        for kind, _appends, share in KINDS:
            acc += share
            if slot < acc:
                kinds.append(kind)
                break
    return kinds


def clone_dir(root: Path, index: int, kind: str) -> tuple[str, str, Path]:
    """Namespace, table name and directory of clone ``index``; for one kind every directory
    path has the same length (zero-padded numbers), which ``CloneRecipe`` relies on."""
    namespace, name = f"fleet{index // NAMESPACE_SIZE:04d}", f"t{index:06d}_{kind}"
    return namespace, name, root / namespace / name


@dataclass
class CloneRecipe:
    """A template's clone files as bytes with a placeholder directory, written once with
    PyIceberg's own writers; a clone is then a byte replacement of the placeholder by its own
    directory (of the same length, so Avro's length-prefixed strings stay valid)."""

    placeholder: bytes
    manifests: list[bytes]
    manifest_list: bytes
    manifest_list_name: str
    metadata: str  # JSON text; the table uuid is replaced per clone too
    table_uuid: str

    @classmethod
    def of(cls, template: Template, root: Path, io: PyArrowFileIO) -> CloneRecipe:
        _, _, sample = clone_dir(root, 0, template.kind)
        placeholder = sample.as_uri()
        meta = f"{placeholder}/metadata"
        copies = []
        for i, (manifest, _data) in enumerate(template.manifests):
            twin = copy.copy(manifest)
            # ManifestFile exposes no setter for its path: replace the record's first field.
            twin._data = [f"{meta}/m{i:04d}.avro", *manifest._data[1:]]
            copies.append(twin)
        list_name = f"snap-{template.snapshot_id}-clone.avro"
        scratch = root / ".recipe" / template.kind
        scratch.mkdir(parents=True, exist_ok=True)
        with write_manifest_list(
            format_version=template.format_version,  # type: ignore[arg-type]
            output_file=io.new_output((scratch / list_name).as_uri()),
            snapshot_id=template.snapshot_id,
            parent_snapshot_id=template.parent_id,
            sequence_number=template.sequence_number,
            avro_compression="null",
        ) as writer:
            writer.add_manifests(copies)
        manifest_list = (scratch / list_name).read_bytes()
        metadata = copy.deepcopy(template.metadata)
        metadata["location"] = placeholder
        metadata["metadata-log"] = []
        for snapshot in metadata.get("snapshots", []):
            if snapshot["snapshot-id"] == template.snapshot_id:
                snapshot["manifest-list"] = f"{meta}/{list_name}"
            if template.kind == "stale":
                snapshot["timestamp-ms"] -= TEN_DAYS_MS
        if template.kind == "stale":
            for entry in metadata.get("snapshot-log", []):
                entry["timestamp-ms"] -= TEN_DAYS_MS
        return cls(
            placeholder.encode(),
            [data for _m, data in template.manifests],
            manifest_list,
            list_name,
            json.dumps(metadata),
            metadata["table-uuid"],
        )

    def write(self, directory: Path) -> str:
        """Write a clone in ``directory``; returns its metadata file's URI."""
        uri = directory.as_uri()
        assert len(uri) == len(self.placeholder), "clone directories must share one length"
        meta = directory / "metadata"
        meta.mkdir(parents=True)
        for i, data in enumerate(self.manifests):
            (meta / f"m{i:04d}.avro").write_bytes(data)
        (meta / self.manifest_list_name).write_bytes(
            self.manifest_list.replace(self.placeholder, uri.encode())
        )
        text = self.metadata.replace(self.placeholder.decode(), uri).replace(
            self.table_uuid, str(uuid.uuid4())
        )
        target = meta / f"00001-{uuid.uuid4()}.metadata.json"
        target.write_text(text)
        return target.as_uri()


def build_fleet(catalog: SqlCatalog, root: Path, count: int, dsn_copy: Any) -> dict[str, int]:
    """Clone ``count`` tables under ``root`` and register them; returns the count per kind.

    ``dsn_copy(rows)`` bulk-inserts ``(catalog, namespace, name, metadata_location)`` rows into
    the catalog's ``iceberg_tables``.
    """
    templates = {t.kind: t for t in write_templates(catalog)}
    shutil.rmtree(root, ignore_errors=True)
    io = PyArrowFileIO()
    recipes = {kind: CloneRecipe.of(t, root, io) for kind, t in templates.items()}
    rows = []
    per_kind: dict[str, int] = {}
    for i, kind in enumerate(plan_kinds(count)):
        namespace, name, directory = clone_dir(root, i, kind)
        rows.append((catalog.name, namespace, name, recipes[kind].write(directory)))
        per_kind[kind] = per_kind.get(kind, 0) + 1
    dsn_copy(rows)
    return per_kind
