"""Bounded decompression (``decompression``): exact below the cap, refused above it, for
every codec, and PyIceberg's own readers go through it."""

from __future__ import annotations

import bz2
import gzip
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.avro.codecs import KNOWN_CODECS
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import FromInputFile
from zstandard import ZstdCompressor

from icepack_core.decompression import (
    DEFAULT_MAX_BLOCK_BYTES,
    AvroBlockTooLarge,
    configure,
    decompress_block,
    gunzip,
    snappy_declared_length,
)
from icepack_core.errors import AvroDamaged
from icepack_core.execution.ledger.referenced_files import referenced_paths
from icepack_core.settings import CatalogConfig
from tests.inspection.test_decompression_bombs import plant_bomb
from tests.plugins.catalogs import rows


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data)[2:-1]  # raw deflate, as Avro (and PyIceberg) write it


def deflate_zeros(n: int) -> bytes:
    """Raw deflate of ``n`` zero bytes, compressed in 1 MiB pieces (never holding ``n``)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = bytes(1 << 20)
    out = [c.compress(piece) for _ in range(n >> 20)]
    return b"".join([*out, c.compress(bytes(n & ((1 << 20) - 1))), c.flush()])


COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "deflate": _deflate,
    "bzip2": bz2.compress,
    "zstandard": lambda data: ZstdCompressor().compress(data),
}


@pytest.mark.parametrize("codec", sorted(COMPRESS))
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3000), limit=st.integers(1, 4000))
def test_exact_up_to_the_cap_refused_beyond(codec: str, data: bytes, limit: int) -> None:
    packed = COMPRESS[codec](data)
    if len(data) <= limit:
        assert decompress_block(codec, packed, limit) == data
    else:
        with pytest.raises(AvroBlockTooLarge, match=f"{codec} block"):
            decompress_block(codec, packed, limit)


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_bomb_is_refused_without_expanding(codec: str) -> None:
    """64 MiB of zeros compress to a few KB; with a 1 MiB cap the refusal comes before the
    output grows past the cap (it never holds the 64 MiB)."""
    bomb = COMPRESS[codec](bytes(64 << 20))
    assert len(bomb) < 1 << 20
    with pytest.raises(AvroBlockTooLarge) as caught:
        decompress_block(codec, bomb, 1 << 20)
    assert isinstance(caught.value, AvroDamaged)  # the file is damaged, never a fallback
    assert "1048576 bytes" in str(caught.value)


def test_deflate_zeros_is_deflate() -> None:
    assert zlib.decompress(deflate_zeros((3 << 20) + 5), -15) == bytes((3 << 20) + 5)


def test_a_truncated_deflate_block_is_still_an_error() -> None:
    packed = _deflate(bytes(range(256)) * 100)
    with pytest.raises(zlib.error):
        decompress_block("deflate", packed[: len(packed) // 2], 1 << 20)


def _snappy_header(length: int) -> bytes:
    out = bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        if length:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@given(st.integers(0, 2**32 - 1))
def test_snappy_declared_length(length: int) -> None:
    assert snappy_declared_length(_snappy_header(length) + b"\x00" * 8) == length


def test_a_snappy_block_declaring_more_than_the_cap_is_refused_before_decoding() -> None:
    """Snappy declares its output length first; a block declaring 4 GiB is refused from that
    alone (no snappy library is needed to refuse it, and nothing is allocated)."""
    block = _snappy_header(2**32 - 1) + b"\x00" * 16 + b"\x00\x00\x00\x00"  # + CRC-32
    with pytest.raises(AvroBlockTooLarge, match="declares 4294967295 bytes"):
        decompress_block("snappy", block, 64 << 20)
    with pytest.raises(AvroDamaged, match="preamble"):
        decompress_block("snappy", b"\xff\xff\xff\xff\xff\xff" + b"\0\0\0\0", 64 << 20)


def test_pyiceberg_readers_use_the_bounded_codecs() -> None:
    """Every PyIceberg Avro reader looks its codec up in ``KNOWN_CODECS``: the bounded ones."""
    for name in COMPRESS:
        codec = KNOWN_CODECS[name]  # type: ignore[index]
        assert codec is not None and codec.__name__.startswith("Bounded")
    bomb = deflate_zeros(80 << 20)
    deflate = KNOWN_CODECS["deflate"]
    assert deflate is not None
    with pytest.raises(AvroBlockTooLarge):
        deflate.decompress(bomb)  # the default cap: 64 MiB


def test_gzip_metadata_is_bounded_and_multi_member() -> None:
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert gunzip(two, 10) == gzip.decompress(two) == b"abcdef"
    with pytest.raises(AvroBlockTooLarge, match="gzip"):
        gunzip(gzip.compress(bytes(10 << 20)), 1 << 20)
    with pytest.raises(EOFError):
        gunzip(gzip.compress(b"x" * 1000)[:-10], 1 << 20)


@pytest.fixture
def small_cap() -> Iterator[int]:
    cap = 256 * 1024
    configure(cap)
    try:
        yield cap
    finally:
        configure(DEFAULT_MAX_BLOCK_BYTES)


@pytest.mark.parametrize("codec", ["deflate", "snappy"])
def test_the_executor_readers_refuse_a_bomb_in_bounded_memory(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], small_cap: int, codec: str
) -> None:
    """``referenced_paths`` (orphan check) and PyIceberg's ``fetch_manifest_entry`` (expiry's
    planner) meet a 1000x bomb: ``AvroBlockTooLarge`` (an ``AvroDamaged``), and the Python
    heap never holds more than a few caps (tracemalloc's peak)."""
    _, catalog = scratch_catalog
    catalog.create_namespace("x")
    table = catalog.create_table("x.t", rows(0).schema)
    table.append(rows(5))
    table = catalog.load_table("x.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    (manifest,) = snapshot.manifests(table.io)
    path = Path(manifest.manifest_path.removeprefix("file://"))
    plant_bomb(path, codec)
    size = path.stat().st_size  # 250 KB (deflate) or 12 MB (snappy), expanding to 250 MiB
    for read in (
        lambda: referenced_paths(table.io, table.metadata_location),
        lambda: list(manifest.fetch_manifest_entry(table.io, discard_deleted=True)),
    ):
        tracemalloc.start()
        try:
            with pytest.raises(AvroBlockTooLarge):
                read()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # A few copies of the file itself (read, checked, handed to the reader), never the
        # 250 MiB it expands to.
        assert peak < 16 * small_cap + 5 * size, (peak, size)


def test_a_gzip_metadata_bomb_fails_pyiceberg_s_metadata_read_in_bounded_memory(
    tmp_path: Path, small_cap: int
) -> None:
    """PyIceberg's own read of a ``*.gz.metadata.json`` (``FromInputFile.table_metadata``, which
    every catalog's ``load_table`` calls) is bounded at 4 caps: a metadata file of 256 MiB of
    zeros (260 KB gzipped) is refused. (PyIceberg never writes gzip metadata; Spark does with
    ``write.metadata.compression-codec=gzip``.)"""
    path = tmp_path / "00001-x.gz.metadata.json"
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = bytes(1 << 20)
    path.write_bytes(b"".join([*(c.compress(piece) for _ in range(256)), c.flush()]))
    tracemalloc.start()
    try:
        with pytest.raises(AvroBlockTooLarge, match="gzip"):
            FromInputFile.table_metadata(PyArrowFileIO().new_input(path.as_uri()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * small_cap + 5 * path.stat().st_size, peak
