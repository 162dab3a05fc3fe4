"""``EntriesCache``: a manifest is decoded once while it is kept, the cache never holds more
than its bound, and a read's error keeps nothing. Pure Python: the manifests' reader is the
one ``tests/execution/test_metadata_diff*.py`` and the compaction tests exercise."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.execution.verification.entries_cache import EntriesCache


@given(st.lists(st.integers(0, 12), max_size=60), st.integers(1, 20))
def test_the_cache_is_a_bounded_lru_of_what_was_read(calls: list[int], limit: int) -> None:
    """Each call reads manifest ``n`` of ``n % 7`` entries; the reads it decodes are exactly
    those a least-recently-used model with the same bound decodes, and it never holds more."""
    cache: EntriesCache[list[int]] = EntriesCache(len, limit)
    decoded: list[int] = []
    model: OrderedDict[int, int] = OrderedDict()
    expected: list[int] = []
    for n in calls:
        size = n % 7

        def read(n: int = n, size: int = size) -> list[int]:
            decoded.append(n)
            return [n] * size

        assert cache.get_or_read((f"/m/{n}.avro", size, True), read) == [n] * size
        if n in model:
            model.move_to_end(n)
        else:
            expected.append(n)
            if size <= limit:
                model[n] = size
                while sum(model.values()) > limit:
                    model.popitem(last=False)
        assert decoded == expected
        assert cache._held == sum(len(v) for v in cache._values.values()) <= limit


def test_a_kept_manifest_is_not_read_again_until_it_is_dropped() -> None:
    cache: EntriesCache[list[int]] = EntriesCache(len, 4)
    read: list[str] = []

    def reader(name: str, size: int) -> list[int]:
        read.append(name)
        return [0] * size

    for name in ("a", "a", "b", "a"):
        cache.get_or_read((name, 2, True), functools.partial(reader, name, 2))
    assert read == ["a", "b"]
    cache.get_or_read(("c", 2, True), lambda: reader("c", 2))  # drops b, the least recent
    cache.get_or_read(("a", 2, True), lambda: reader("a", 2))
    cache.get_or_read(("b", 2, True), lambda: reader("b", 2))
    assert read == ["a", "b", "c", "b"]
    # Another way of reading the same manifest is another entry.
    cache.get_or_read(("b", 2, False), lambda: reader("b", 2))
    assert read[-1] == "b" and len(read) == 5


def test_a_failed_read_keeps_nothing_and_a_larger_manifest_is_not_kept() -> None:
    cache: EntriesCache[list[int]] = EntriesCache(len, 3)

    def failing() -> list[int]:
        raise OSError("unreadable manifest")

    with pytest.raises(OSError, match="unreadable"):
        cache.get_or_read(("x", 1, True), failing)
    assert cache.get_or_read(("x", 1, True), lambda: [1]) == [1]
    big = cache.get_or_read(("y", 9, True), lambda: [0] * 9)
    assert len(big) == 9 and ("y", 9, True) not in cache._values


def test_threads_share_the_cache() -> None:
    cache: EntriesCache[list[int]] = EntriesCache(len, 1000)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(300):
                n = (i + offset) % 50
                value = cache.get_or_read((str(n), 3, True), functools.partial(list, [n] * 3))
                assert value == [n] * 3
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and cache._held == 150
