"""Rewrite the strings of an Avro object container file, keeping everything else.

Used by ``generate.py`` to make the locations inside writer-produced manifests and manifest
lists relative. Values are decoded generically with the file's own writer schema and encoded
back with it (same metadata, codec and sync marker; one block per original block), so the
result differs from the input only in the strings ``rewrite`` changed. Codecs: null, deflate.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

MAGIC = b"Obj\x01"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def long(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        if len(out) != n:
            raise EOFError("truncated Avro data")
        self.pos += n
        return out


def _long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z & ~0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        else:
            out.append(z)
            return bytes(out)


Rewrite = Callable[[str], str]


class Codec:
    """Decode and encode values of one writer schema, rewriting strings on the way out."""

    def __init__(self, schema: Any) -> None:
        self.names: dict[str, Any] = {}
        self.schema = schema
        self._register(schema)

    def _register(self, t: Any) -> None:
        if isinstance(t, list):
            for branch in t:
                self._register(branch)
        elif isinstance(t, dict):
            kind = t.get("type")
            if kind in ("record", "enum", "fixed"):
                self.names[t["name"]] = t
                if "namespace" in t:
                    self.names[f"{t['namespace']}.{t['name']}"] = t
            if kind == "record":
                for f in t["fields"]:
                    self._register(f["type"])
            elif kind == "array":
                self._register(t["items"])
            elif kind == "map":
                self._register(t["values"])
            elif isinstance(kind, dict | list):
                self._register(kind)

    def _resolve(self, t: Any) -> Any:
        if isinstance(t, str) and t in self.names:
            return self.names[t]
        if isinstance(t, dict) and t.get("type") not in ("record", "enum", "fixed", "array", "map"):
            return self._resolve(t["type"])  # a primitive with a logical type
        return t

    def read(self, t: Any, r: _Reader) -> Any:
        t = self._resolve(t)
        if isinstance(t, list):
            i = r.long()
            return (i, self.read(t[i], r))
        if isinstance(t, str):
            return self._read_primitive(t, r)
        kind = t["type"]
        if kind == "record":
            return [self.read(f["type"], r) for f in t["fields"]]
        if kind == "enum":
            return r.long()
        if kind == "fixed":
            return r.take(int(t["size"]))
        if kind in ("array", "map"):
            return self._read_items(t, r)
        raise ValueError(f"unknown Avro type {kind!r}")

    @staticmethod
    def _read_primitive(t: str, r: _Reader) -> Any:
        """A primitive's value: numbers other than int/long stay raw bytes (written back as is)."""
        if t == "null":
            return None
        if t in ("int", "long"):
            return r.long()
        sizes = {"boolean": 1, "float": 4, "double": 8}
        if t in sizes:
            return r.take(sizes[t])
        if t == "bytes":
            return r.take(r.long())
        if t == "string":
            return r.take(r.long()).decode()
        raise ValueError(f"unknown Avro type {t!r}")

    def _read_items(self, t: dict[str, Any], r: _Reader) -> list[Any]:
        """An array's items, or a map's (key, value) pairs, over all their blocks."""
        items: list[Any] = []
        n = r.long()
        while n:
            if n < 0:
                n = -n
                r.long()  # the block's byte size
            for _ in range(n):
                if t["type"] == "map":
                    key = r.take(r.long()).decode()
                    items.append((key, self.read(t["values"], r)))
                else:
                    items.append(self.read(t["items"], r))
            n = r.long()
        return items

    def write(self, t: Any, value: Any, rewrite: Rewrite) -> bytes:
        t = self._resolve(t)
        if isinstance(t, list):
            i, inner = value
            return _long(i) + self.write(t[i], inner, rewrite)
        if isinstance(t, str):
            return self._write_primitive(t, value, rewrite)
        kind = t["type"]
        if kind == "record":
            return b"".join(
                self.write(f["type"], v, rewrite) for f, v in zip(t["fields"], value, strict=True)
            )
        if kind == "enum":
            return _long(value)
        if kind == "fixed":
            return bytes(value)
        if kind in ("array", "map"):
            return self._write_items(t, value, rewrite)
        raise ValueError(f"unknown Avro type {kind!r}")

    @staticmethod
    def _write_primitive(t: str, value: Any, rewrite: Rewrite) -> bytes:
        """A primitive written back; a string through ``rewrite``."""
        if t == "null":
            return b""
        if t in ("int", "long"):
            return _long(value)
        if t in ("boolean", "float", "double"):
            return bytes(value)
        if t == "bytes":
            data: bytes = value
            return _long(len(data)) + data
        if t == "string":
            raw = rewrite(value).encode()
            return _long(len(raw)) + raw
        raise ValueError(f"unknown Avro type {t!r}")

    def _write_items(self, t: dict[str, Any], value: list[Any], rewrite: Rewrite) -> bytes:
        """An array's items, or a map's (key, value) pairs, as one block."""
        if not value:
            return _long(0)
        parts = [_long(len(value))]
        for item in value:
            if t["type"] == "map":
                key = item[0].encode()
                parts.append(_long(len(key)) + key + self.write(t["values"], item[1], rewrite))
            else:
                parts.append(self.write(t["items"], item, rewrite))
        return b"".join(parts) + _long(0)


def read_container(data: bytes) -> tuple[dict[str, bytes], bytes, Codec, list[list[Any]]]:
    """``(metadata, sync, codec, blocks of records)`` of an Avro object container file."""
    r = _Reader(data)
    if r.take(4) != MAGIC:
        raise ValueError("not an Avro object container")
    meta: dict[str, bytes] = {}
    n = r.long()
    while n:
        if n < 0:
            n = -n
            r.long()
        for _ in range(n):
            key = r.take(r.long()).decode()
            meta[key] = r.take(r.long())
        n = r.long()
    sync = r.take(16)
    codec = Codec(json.loads(meta["avro.schema"]))
    name = meta.get("avro.codec", b"null").decode()
    blocks: list[list[Any]] = []
    while r.pos < len(data):
        count = r.long()
        raw = r.take(r.long())
        if name == "deflate":
            raw = zlib.decompress(raw, -15)
        elif name != "null":
            raise ValueError(f"codec {name!r} not supported here")
        br = _Reader(raw)
        blocks.append([codec.read(codec.schema, br) for _ in range(count)])
        if r.take(16) != sync:
            raise ValueError("sync marker mismatch")
    return meta, sync, codec, blocks


def write_container(
    meta: dict[str, bytes], sync: bytes, codec: Codec, blocks: list[list[Any]], rewrite: Rewrite
) -> bytes:
    """The container file of ``blocks`` (inverse of ``read_container``), strings rewritten."""
    out = [MAGIC, _long(len(meta))]
    for key, value in meta.items():
        k = key.encode()
        out += [_long(len(k)), k, _long(len(value)), value]
    out += [_long(0), sync]
    name = meta.get("avro.codec", b"null").decode()
    for records in blocks:
        raw = b"".join(codec.write(codec.schema, rec, rewrite) for rec in records)
        if name == "deflate":
            compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
            raw = compressor.compress(raw) + compressor.flush()
        out += [_long(len(records)), _long(len(raw)), raw, sync]
    return b"".join(out)


def field_index(codec: Codec, name: str) -> int:
    """Position of the top-level record field ``name``."""
    for i, f in enumerate(codec.schema["fields"]):
        if f["name"] == name:
            return i
    raise KeyError(name)


def rewrite_file(
    data: bytes, rewrite: Rewrite, fix: Callable[[Codec, list[Any]], None] | None = None
) -> bytes:
    """``data`` with every string value rewritten (and ``fix`` applied to each record)."""
    meta, sync, codec, blocks = read_container(data)
    if fix is not None:
        for records in blocks:
            for rec in records:
                fix(codec, rec)
    return write_container(meta, sync, codec, blocks, rewrite)
