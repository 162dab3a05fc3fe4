"""The one location normalisation, against Hadoop's ``Path`` run in the Spark JVM as the oracle.

``Path`` is what Iceberg's Hadoop file IO and Spark's listings read a location with; what
``Path`` leaves to the file system (scheme aliases, default ports, authority case, the local
file system ignoring a ``file:`` authority) is folded by ``_as_store_sees`` below, which
re-spells the oracle's URI components and does no path work of its own.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from icepack_core.safety.locations import (
    DEFAULT_PORTS,
    SCHEME_ALIASES,
    LocationError,
    has_dot_segments,
    location_key,
    locations_overlap,
    normalize_location,
    parse_location,
)

# Segments mixing the ordinary, the empty (``//``), the dot segments and the characters a URL
# parser would treat as delimiters.
segment = st.one_of(
    st.sampled_from(["", ".", "..", "a", "b", "x", "data", "a?b", "c#d", "%20", "t_v2", "A"]),
    st.text(alphabet="abAB_-.0?#% ", min_size=1, max_size=5),
)
prefix = st.sampled_from(
    [
        "file:",
        "file://",
        "file:///",
        "/",
        "s3://bucket/",
        "s3a://Bucket/",
        "s3n://bucket/",
        "hdfs://nn/",
        "hdfs://nn:8020/",
        "hdfs://NN:9000/",
        "gs://b/",
        "abfss://c@acct.dfs.core.windows.net/",
        "wasbs://c@acct.blob.core.windows.net/",
    ]
)
spelling = st.builds(lambda p, segs: p + "/".join(segs), prefix, st.lists(segment, max_size=7))


def _as_store_sees(jvm: object, text: str) -> str | None:
    """The oracle: ``new Path(text).toUri()``, its components re-spelled as
    ``scheme://authority/path`` with the folds ``Path`` leaves to the file system; None when
    ``Path`` refuses the text or reads it as a relative path (no file location)."""
    try:
        uri = jvm.org.apache.hadoop.fs.Path(text).toUri()  # type: ignore[attr-defined]
    except Exception as exc:  # PySpark re-raises Java's as its own IllegalArgumentException
        assert "IllegalArgumentException" in type(exc).__name__ + str(exc), exc
        return None
    if not (uri.getPath() or "").startswith("/") and (uri.getPath() or uri.getAuthority() is None):
        return None
    scheme = (uri.getScheme() or "file").lower()
    scheme = SCHEME_ALIASES.get(scheme, scheme)
    authority = "" if scheme == "file" else (uri.getRawAuthority() or "").lower()
    host, colon, port = authority.rpartition(":")
    if colon and port == DEFAULT_PORTS.get(scheme):
        authority = host
    authority = authority.replace(".blob.core.windows.net", ".dfs.core.windows.net")
    path = uri.getPath() or "/"
    if len(path) > 1:
        path = path.rstrip("/") or "/"  # URI.normalize keeps "/a/" of "/a/b/.."
    return f"{scheme}://{authority}{path}"


@pytest.fixture(scope="module")
def jvm(spark: Any) -> Any:
    return spark._jvm


@settings(max_examples=400, deadline=None)
@given(spelling)
def test_normalisation_agrees_with_hadoop_path(jvm: Any, text: str) -> None:
    assume(text.strip() == text)  # Path keeps surrounding blanks; locations never have them
    expected = _as_store_sees(jvm, text)
    if expected is None:
        with pytest.raises(LocationError):
            normalize_location(text)
    else:
        assert normalize_location(text) == expected


@settings(max_examples=300, deadline=None)
@given(spelling, spelling)
def test_two_spellings_are_equal_exactly_when_hadoop_says_so(jvm: Any, a: str, b: str) -> None:
    assume(a.strip() == a and b.strip() == b)
    x, y = _as_store_sees(jvm, a), _as_store_sees(jvm, b)
    assume(x is not None and y is not None)
    assert (normalize_location(a) == normalize_location(b)) is (x == y)


@pytest.mark.parametrize(
    "spelling",
    [
        "file:/warehouse//a/b",
        "file:/warehouse/x/../a/b",
        "file:/warehouse/./a/b",
        "/warehouse/a/b/",
    ],
)
def test_the_three_spellings_from_the_issue_overlap(spelling: str) -> None:
    assert locations_overlap(spelling, "file:/warehouse/a")
    assert locations_overlap("file:///warehouse/a", spelling)
    assert parse_location("file:/warehouse/a").contains(parse_location(spelling))


def test_scheme_aliases_default_ports_and_case() -> None:
    assert normalize_location("s3a://Bucket/wh/t/") == "s3://bucket/wh/t"
    assert normalize_location("s3n://bucket/wh/t") == normalize_location("s3://bucket/wh/t")
    assert normalize_location("hdfs://nn/wh") == normalize_location("hdfs://NN:8020/wh")
    assert normalize_location("hdfs://nn:9000/wh") != normalize_location("hdfs://nn/wh")
    assert normalize_location("/wh/t") == normalize_location("file:///wh/t") == "file:///wh/t"
    assert normalize_location("file://host/wh/t") == "file:///wh/t"
    # Paths are case-sensitive on every store.
    assert normalize_location("s3://b/WH/t") != normalize_location("s3://b/wh/t")
    assert normalize_location("wasbs://c@a.blob.core.windows.net/x") == normalize_location(
        "abfs://c@a.dfs.core.windows.net/x"
    )


def test_query_and_fragment_characters_are_part_of_the_path() -> None:
    """A URL parser cuts ``?…``/``#…``; the file system does not (the confused-deputy way out of
    a table's location)."""
    sneaky = "s3://lake/sandbox/t?/../../prod/orders/f.parquet"
    assert normalize_location(sneaky) == "s3://lake/prod/orders/f.parquet"
    assert not parse_location("s3://lake/sandbox/t").contains(parse_location(sneaky))
    assert normalize_location("s3://b/a#x") != normalize_location("s3://b/a")


def test_above_the_root_is_inside_nothing_and_overlaps_everything() -> None:
    up = parse_location("s3://lake/../prod/f")
    assert up.escapes_root
    assert not parse_location("s3://lake/").contains(up)
    assert locations_overlap("s3://lake/../x", "s3://lake/y")
    assert not locations_overlap("s3://lake/../x", "gs://lake/y")


def test_an_empty_authority_overlaps_any() -> None:
    assert locations_overlap("hdfs:///wh/t", "hdfs://nn:8020/wh/t")
    assert not parse_location("hdfs:///wh").contains(parse_location("hdfs://nn/wh/t/f"))


@pytest.mark.parametrize("bad", ["", "  ", "relative/path", "file:", "s3:key", "1x://b/k"])
def test_what_names_no_file_is_refused_by_name(bad: str) -> None:
    with pytest.raises(LocationError):
        parse_location(bad)
    assert location_key(bad) == bad


def test_dot_segments_are_spotted_in_the_raw_spelling() -> None:
    assert has_dot_segments("s3://b/t/../x")
    assert has_dot_segments("file:/a/./b")
    assert not has_dot_segments("s3://b/t/.hidden/..x")


@given(st.lists(st.text(alphabet="abt_-.0", min_size=1, max_size=4), min_size=1, max_size=4))
def test_contains_is_a_prefix_at_a_separator(segs: list[str]) -> None:
    assume(all(s not in (".", "..") for s in segs))
    root = parse_location("s3://b/" + "/".join(segs))
    assert root.contains(parse_location("s3a://b/" + "/".join(segs) + "/f"))
    assert not root.contains(parse_location("s3://b/" + "/".join(segs) + "_v2/f"))
