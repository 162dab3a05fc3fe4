"""The one parser of a target file size (``inspection.status.parse_target_file_size``): what
the planner, the policy preview and the executor's rewrite all read it with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.inspection.status import (
    TARGET_FILE_SIZE_PROPERTY,
    parse_target_file_size,
    target_file_size,
)


@given(st.integers(min_value=1, max_value=2**63 - 1))
def test_every_positive_java_long_is_accepted(value: int) -> None:
    assert parse_target_file_size(str(value)) == value
    assert target_file_size({TARGET_FILE_SIZE_PROPERTY: str(value)}) == value


@pytest.mark.parametrize("raw", ["", "0", "-5", "+5", " 5", "5 ", "1e9", "٣", str(2**63), "abc"])
def test_anything_else_is_refused_naming_the_value(raw: str) -> None:
    """``int()`` accepted several of these (signs, spaces, other scripts' digits, zero)."""
    with pytest.raises(ValueError, match="target file size") as caught:
        parse_target_file_size(raw)
    assert repr(raw) in str(caught.value)
    assert target_file_size({TARGET_FILE_SIZE_PROPERTY: raw}) is None


@given(st.text(max_size=25))
def test_any_property_string_gives_a_size_or_none_never_an_error(raw: str) -> None:
    found = target_file_size({TARGET_FILE_SIZE_PROPERTY: raw})
    assert found is None or (0 < found < 2**63 and found == int(raw) and raw.isascii())
