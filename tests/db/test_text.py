"""``db.text``: what Postgres can store, and text made storable."""

import asyncpg
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.db.text import storable, unstorable


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_storable_text_is_storable_and_only_changed_when_it_had_to_be(text: str) -> None:
    made = storable(text)
    assert unstorable("text", made) is None
    if unstorable("text", text) is None:
        assert made == text
    else:
        assert "\x00" not in made
        # Nothing is dropped: every character that was storable is still there, in order.
        kept = [c for c in text if c != "\x00" and not 0xD800 <= ord(c) <= 0xDFFF]
        it = iter(made)
        assert all(c in it for c in kept)


async def test_escaped_text_goes_into_text_and_jsonb(db: asyncpg.Pool) -> None:
    text = storable("a\x00b\udc80c")
    assert text == "a\\x00b\\udc80c"
    assert await db.fetchval("SELECT $1::text", text) == text
    assert await db.fetchval("SELECT jsonb_build_object('m', $1::text) ->> 'm'", text) == text
