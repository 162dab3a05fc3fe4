"""Decompression with a ceiling: no Avro block (and no gzip metadata file) may expand beyond a cap.

A manifest is a few KB to a few MB of compressed Avro, written by whoever can commit to a table.
Its blocks are decompressed whole in memory, so a block that expands 1000x (a few MB of zeros
deflate to a few KB) would take a service's memory, and every table it inspects with it. Every
decompression of an Avro block Icepack does, in its own scan (``avro_scan``) and in PyIceberg's
readers (``AvroFile``, ``fetch_manifest_entry``, ``read_manifest_list``, used by the inspector's
fallback, ``referenced_files``, ``metadata_diff`` and ``expiry_files``), goes through
``decompress_block``: ``install`` replaces the codecs of PyIceberg's registry
(``pyiceberg.avro.codecs.KNOWN_CODECS``, the dict every PyIceberg Avro reader looks codecs up
in) with bounded ones, process-wide, when this module is imported.

The bound is exact for every codec, and memory never exceeds it by more than one chunk:

* deflate and bzip2 decompress with ``max_length`` = cap + 1 (zlib/bz2 stop there);
* zstandard reads the stream in chunks and stops past the cap;
* snappy declares its uncompressed length in its first bytes (a varint); that is checked
  before anything is allocated (and the decompressor refuses a block whose content differs
  from its declared length).

A block beyond the cap raises ``AvroBlockTooLarge`` (an ``AvroDamaged``): the file is damaged as
far as Icepack is concerned, and the caller names its path (``cannot read manifest <path>:
AvroBlockTooLarge: ...``). The cap is ``ICEPACK_AVRO_MAX_BLOCK_BYTES`` (default 64 MiB; Iceberg
writers flush a block every few MB), set by ``configure`` at service start; go-inspector gets
the same cap (``--max-block-bytes``).
"""

from __future__ import annotations

import bz2
import zlib
from io import BytesIO

from pyiceberg.avro.codecs import KNOWN_CODECS
from pyiceberg.avro.codecs.codec import Codec

from icepack_core.errors import AvroDamaged

DEFAULT_MAX_BLOCK_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 20
METADATA_FACTOR = 4  # gzip metadata JSON may expand to 4 block caps
_limit = DEFAULT_MAX_BLOCK_BYTES


class AvroBlockTooLarge(AvroDamaged):
    """A compressed block (or gzip file) expands beyond the configured cap."""

    def __init__(self, codec: str, limit: int, declared: int | None = None) -> None:
        self.codec = codec
        self.limit = limit
        size = f"declares {declared} bytes" if declared is not None else "expands"
        super().__init__(
            f"a {codec} block {size}, more than the {limit} bytes any block may expand to "
            "(ICEPACK_AVRO_MAX_BLOCK_BYTES); the file is treated as damaged"
        )


def configure(max_block_bytes: int) -> None:
    """Set the process-wide cap (``Settings.avro_max_block_bytes``) and make sure PyIceberg's
    codecs are the bounded ones."""
    global _limit
    if max_block_bytes < 1:
        raise ValueError(f"max_block_bytes must be positive, not {max_block_bytes}")
    _limit = max_block_bytes
    install()


def max_block_bytes() -> int:
    """The cap in force."""
    return _limit


def _inflate(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(-15)  # raw deflate, as Avro writes it
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise AvroBlockTooLarge("deflate", limit)
    if not d.eof:
        if d.unconsumed_tail:  # output pending beyond the cap
            raise AvroBlockTooLarge("deflate", limit)
        raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
    return out


def _bunzip(data: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:  # concatenated streams, as bz2.decompress reads them
        d = bz2.BZ2Decompressor()
        out = d.decompress(data, limit - total + 1)
        total += len(out)
        if total > limit or (not d.eof and not d.needs_input):
            raise AvroBlockTooLarge("bzip2", limit)
        if not d.eof:
            raise ValueError("Compressed data ended before the end-of-stream marker was reached")
        parts.append(out)
        data = d.unused_data
        if not data:
            return b"".join(parts)


def _unzstd(data: bytes, limit: int) -> bytes:
    from zstandard import ZstdDecompressor  # a declared dependency; imported on use

    out = bytearray()
    with ZstdDecompressor().stream_reader(BytesIO(data)) as reader:  # as PyIceberg reads it
        while chunk := reader.read(_CHUNK):
            out += chunk
            if len(out) > limit:
                raise AvroBlockTooLarge("zstandard", limit)
    return bytes(out)


def snappy_declared_length(data: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint).

    Raises:
        AvroDamaged: the varint is missing, truncated or longer than 32 bits allow.
    """
    value = shift = 0
    for i, byte in enumerate(data[:5]):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
        if i == 4:
            break
    raise AvroDamaged("a snappy block without a valid length preamble")


def _unsnappy(data: bytes, limit: int) -> bytes:
    # The preamble leads the block (Avro appends a CRC-32 of the output): no copy needed.
    declared = snappy_declared_length(data[:5])
    if declared > limit:
        raise AvroBlockTooLarge("snappy", limit, declared)
    return _ORIGINAL["snappy"].decompress(data)  # type: ignore[union-attr]


_DECOMPRESS = {"deflate": _inflate, "bzip2": _bunzip, "zstandard": _unzstd, "snappy": _unsnappy}
_ORIGINAL: dict[str, type[Codec] | None] = {str(k): v for k, v in KNOWN_CODECS.items()}


def decompress_block(codec: str, data: bytes, limit: int | None = None) -> bytes:
    """One Avro block decompressed with ``codec`` (an ``avro.codec`` name; ``null`` returns
    ``data``), refusing to expand beyond ``limit`` bytes (default: the configured cap).

    Raises:
        AvroBlockTooLarge: the block expands beyond the cap.
        ValueError: a codec no reader here knows.
        Exception: the codec's own error for a corrupt block.
    """
    if codec == "null":
        return data
    if codec not in _DECOMPRESS:
        raise ValueError(f"unsupported Avro codec {codec!r}")
    return _DECOMPRESS[codec](data, _limit if limit is None else limit)


def gunzip(data: bytes, limit: int | None = None) -> bytes:
    """A gzip stream (every member, as ``gzip.decompress`` reads them), refusing to expand
    beyond ``limit`` bytes (default: ``METADATA_FACTOR`` times the configured cap, for table
    metadata JSON files: 256 MiB by default, far above the largest metadata file seen).

    Raises:
        AvroBlockTooLarge: the content expands beyond the cap.
        zlib.error / EOFError: a corrupt or truncated stream.
    """
    limit = _limit * METADATA_FACTOR if limit is None else limit
    parts: list[bytes] = []
    total = 0
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(data, limit - total + 1)
        total += len(out)
        if total > limit or d.unconsumed_tail:
            raise AvroBlockTooLarge("gzip", limit)
        if not d.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        parts.append(out)
        data = d.unused_data.lstrip(b"\x00")  # gzip.decompress allows trailing zero padding
    return b"".join(parts)


def _bounded(name: str) -> type[Codec]:
    original = _ORIGINAL[name]
    assert original is not None

    class Bounded(original):  # type: ignore[valid-type,misc]
        @staticmethod
        def decompress(data: bytes) -> bytes:
            return decompress_block(name, data)

    Bounded.__name__ = Bounded.__qualname__ = f"Bounded{original.__name__}"
    return Bounded


_BOUNDED = {name: _bounded(name) for name in _DECOMPRESS}


def install() -> None:
    """Put the bounded codecs into PyIceberg's registry (idempotent)."""
    KNOWN_CODECS.update(_BOUNDED)  # type: ignore[arg-type]


install()
