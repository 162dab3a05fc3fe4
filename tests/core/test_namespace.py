"""Namespace levels as one string: escaped, so that no two namespaces share it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.types import join_namespace, split_namespace


def test_dotted_level_and_two_levels_differ() -> None:
    assert join_namespace(("a.b",)) == "a\\.b"
    assert join_namespace(("a", "b")) == "a.b"
    assert join_namespace(("db",)) == "db"  # plain names read as before
    assert split_namespace("a\\.b.c") == ("a.b", "c")
    assert split_namespace("a\\\\.b") == ("a\\", "b")


levels = st.lists(st.text(alphabet=st.sampled_from("ab.\\_é"), max_size=5), min_size=1, max_size=4)


@given(levels)
def test_split_inverts_join(parts: list[str]) -> None:
    assert split_namespace(join_namespace(parts)) == tuple(parts)


@given(levels, levels)
def test_join_is_injective(a: list[str], b: list[str]) -> None:
    assert (join_namespace(a) == join_namespace(b)) == (a == b)
