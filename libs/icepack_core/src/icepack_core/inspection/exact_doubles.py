"""Avro ``double`` values read exactly, around a PyIceberg decoder bug.

PyIceberg 0.12.0's Cython ``BinaryDecoder.read_double`` rounds every double to float32
(measured: 0.1 reads as 0.10000000149011612, 1e300 as inf). A reader tree built by PyIceberg
(``construct_reader``, ``AvroFile``) therefore merges distinct ``double`` partition values and
turns large ones into infinity. ``exact_doubles(reader)`` returns the tree with every
``DoubleReader`` (inside structs and options) replaced by one that unpacks the 8 little-endian
IEEE 754 bytes itself. Used for partition tuples by the inspection's manifest scan and by the
verification's file diff.
"""

from __future__ import annotations

import struct

from pyiceberg.avro.decoder import BinaryDecoder
from pyiceberg.avro.reader import DoubleReader, OptionReader, Reader, StructReader


class ExactDoubleReader(Reader):
    """A double read as its 8 little-endian IEEE 754 bytes."""

    def __init__(self) -> None:
        super().__init__()

    def read(self, decoder: BinaryDecoder) -> float:
        value: float = struct.unpack("<d", decoder.read(8))[0]
        return value

    def skip(self, decoder: BinaryDecoder) -> None:
        decoder.skip(8)


def exact_doubles(reader: Reader) -> Reader:
    """``reader`` with every ``DoubleReader`` in its structs and options made exact."""
    if isinstance(reader, DoubleReader):
        return ExactDoubleReader()
    if isinstance(reader, OptionReader):
        return OptionReader(exact_doubles(reader.option))
    if isinstance(reader, StructReader):
        return StructReader(
            tuple((pos, exact_doubles(r)) for pos, r in reader.field_readers),
            reader.create_struct,
            reader.struct,
        )
    return reader
