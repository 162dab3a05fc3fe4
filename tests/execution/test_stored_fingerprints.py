"""Properties of the stored fingerprints' keys: a fingerprint taken at first sight is used
only for the same file read the same way (``stored_fingerprints.schema_key``,
``replaced_files.from_store``). Pure functions: no Spark, no database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
)

from icepack_core.execution.verification.file_fingerprint import (
    ListedFile,
    PartitionFiles,
    TouchedFiles,
)
from icepack_core.execution.verification.fingerprint import Fingerprint
from icepack_core.execution.verification.replaced_files import from_store
from icepack_core.execution.verification.stored_fingerprints import (
    StoredFingerprint,
    schema_key,
)

TYPES = [LongType(), IntegerType(), StringType(), DoubleType(), DateType(), DecimalType(10, 2)]
columns = st.lists(
    st.tuples(st.integers(1, 6), st.sampled_from(range(len(TYPES)))),
    min_size=1,
    max_size=5,
    unique_by=lambda c: c[0],
)


def schema_of(cols: list[tuple[int, int]], renamed: bool = False) -> Schema:
    return Schema(
        *(
            NestedField(i, f"{'r' if renamed else 'c'}{i}", TYPES[t], required=False)
            for i, t in cols
        )
    )


@given(columns, columns)
def test_the_schema_key_is_equal_exactly_when_the_columns_read_are(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    same = [(i, str(TYPES[t])) for i, t in a] == [(i, str(TYPES[t])) for i, t in b]
    assert (schema_key(schema_of(a)) == schema_key(schema_of(b))) == same
    # Names are not read (the reader reads by field id): a rename keeps the key.
    assert schema_key(schema_of(a, renamed=True)) == schema_key(schema_of(a))


files = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3)),
    min_size=1,
    max_size=6,
    unique_by=lambda f: f[0],
)
constants = st.sampled_from([frozenset(), frozenset({2}), frozenset({2, 3})])


@given(files, files, constants, constants)
def test_a_stored_fingerprint_is_taken_only_for_the_same_file_and_columns(
    listed: list[tuple[int, int, int]],
    stored: list[tuple[int, int, int]],
    partition_constant: frozenset[int],
    stored_constant: frozenset[int],
) -> None:
    """(path number, record count, size) on each side: a stored one counts only where all
    three and the identity columns left out are the listed file's."""
    partition = PartitionFiles(
        "p",
        tuple(ListedFile(f"/t/{n}.parquet", records, "PARQUET") for n, records, _ in listed),
        (),
        partition_constant,
    )
    sizes = {f"/t/{n}.parquet": size for n, _, size in listed}
    kept = {
        f"/t/{n}.parquet": StoredFingerprint(
            f"/t/{n}.parquet", size, records, stored_constant, Fingerprint(records, 7 * n)
        )
        for n, records, size in stored
    }
    found = from_store(TouchedFiles((partition,), None), sizes, kept)
    expected = {
        (partition_constant, f"/t/{n}.parquet"): Fingerprint(records, 7 * n)
        for n, records, size in listed
        if (n, records, size) in set(stored) and stored_constant == partition_constant
    }
    assert found == expected
