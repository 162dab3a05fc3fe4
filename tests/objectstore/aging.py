"""Ageing objects on SeaweedFS, the object store's counterpart of ``os.utime``.

S3 has no request that sets an object's ``LastModified``: SeaweedFS stamps every write with its
own clock. Orphan removal only lists files older than ``older_than`` (72 h at least), so a test
ages its orphan objects through SeaweedFS's own metadata backup and restore (``weed shell``'s
``fs.meta.save`` of the directory, each named entry's ``mtime`` rewritten, ``fs.meta.load``):
the objects, their bytes and their keys stay the server's; only the modification time moves.

The backup is a sequence of ``<4-byte big-endian length><FullEntry>`` protobuf records
(SeaweedFS's ``filer.proto``: ``FullEntry{dir=1, entry=2}``, ``Entry{name=1, attributes=4}``,
``FuseAttributes{mtime=2}``); the few fields touched are rewritten at the wire level.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.objectstore.lake import StoreAdmin

AGE_DEADLINE_S = 60.0
Field = tuple[int, int, bytes | int]  # (number, wire type, payload or varint)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


def _fields(data: bytes) -> Iterator[Field]:
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            yield number, wire, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield number, wire, data[pos : pos + width]
            pos += width
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _encode(fields: list[Field]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _encode_varint(number << 3 | wire)
        if wire == 0:
            assert isinstance(value, int)
            out += _encode_varint(value)
        else:
            assert isinstance(value, bytes)
            if wire == 2:
                out += _encode_varint(len(value))
            out += value
    return bytes(out)


def _set(fields: list[Field], number: int, value: bytes | int) -> list[Field]:
    return [(n, w, value if n == number else v) for n, w, v in fields]


def aged_records(backup: bytes, names: set[str], mtime: int) -> tuple[dict[str, bytes], set[str]]:
    """The backup's records of the entries named in ``names`` whose ``mtime`` (epoch seconds)
    is not ``mtime`` yet, rewritten with it (by name); and every name found."""
    out: dict[str, bytes] = {}
    found: set[str] = set()
    pos = 0
    while pos < len(backup):
        (size,) = struct.unpack(">I", backup[pos : pos + 4])
        record = backup[pos + 4 : pos + 4 + size]
        pos += 4 + size
        full = list(_fields(record))
        entry = next(v for n, _, v in full if n == 2)
        assert isinstance(entry, bytes)
        entry_fields = list(_fields(entry))
        raw_name = next(v for n, _, v in entry_fields if n == 1)
        assert isinstance(raw_name, bytes)
        name = raw_name.decode()
        if name not in names:
            continue
        found.add(name)
        attributes = next(v for n, _, v in entry_fields if n == 4)
        assert isinstance(attributes, bytes)
        attribute_fields = list(_fields(attributes))
        if any(n == 2 and v == mtime for n, _, v in attribute_fields):
            continue
        aged_attributes = _encode(_set(attribute_fields, 2, mtime))
        aged = _encode(_set(full, 2, _encode(_set(entry_fields, 4, aged_attributes))))
        out[name] = struct.pack(">I", len(aged)) + aged
    return out, found


# ``weed shell`` once hung for its whole minute on a read-only ``fs.meta.save`` in a clean CI
# run (it passed at once when run again); its scripts here are idempotent (a save, or a load
# of the same entries), so a hung shell is killed and run once more in a fresh process.
SHELL_TRIES = 2


def _shell(admin: StoreAdmin, script: str) -> str:
    exe = shutil.which("weed")
    assert exe is not None
    command = [exe, "shell", f"-master={admin.master}", f"-filer={admin.filer}"]
    for attempt in range(1, SHELL_TRIES + 1):
        try:
            done = subprocess.run(
                command, input=script, capture_output=True, text=True, timeout=60, check=False
            )
        except subprocess.TimeoutExpired:
            if attempt == SHELL_TRIES:
                raise
            continue
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr
    raise AssertionError("unreachable: the last try returns or raises")


def age_objects(admin: StoreAdmin, filer_dir: str, names: set[str], mtime: int) -> None:
    """Set the modification time of the files ``names`` directly in the filer directory
    ``filer_dir`` (e.g. ``/buckets/warehouse/ns/t/data``) to ``mtime``.

    Raises:
        AssertionError: a name was not found there, or ``weed shell`` failed.
    """
    deadline = time.monotonic() + AGE_DEADLINE_S
    with tempfile.TemporaryDirectory(prefix="icepack-age-") as tmp:
        backup = Path(tmp) / "meta.bin"
        for attempt in itertools.count():
            _shell(admin, f"fs.cd {filer_dir}\nfs.meta.save -o {backup}\n")
            pending, found = aged_records(backup.read_bytes(), names, mtime)
            assert found == names, f"not in {filer_dir}: {sorted(names - found)}"
            if not pending:
                return
            assert time.monotonic() < deadline, f"{sorted(pending)} not aged in {filer_dir}"
            # One record per load, and the result read back: a load was seen to leave an
            # object written just before it as it was (SeaweedFS 4.48).
            script = ""
            for i, record in enumerate(pending.values()):
                aged = Path(tmp) / f"aged-{attempt}-{i}.bin"
                aged.write_bytes(record)
                script += f"fs.meta.load {aged}\n"
            _shell(admin, script)
