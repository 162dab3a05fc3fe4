"""The live entries of recently read manifests, kept for the next reader of the same manifest.

A manifest never changes once written, and one compaction job reads the same ones several
times: its scope and its prefetch read the start snapshot's, the check of what it left behind
and its file diff read the end snapshot's, which shares every manifest the rewrite did not
replace. ``EntriesCache`` keeps each decoded manifest by path, length and how it was read, so
each is decoded once; it holds at most ``MAX_ENTRIES`` entries in all (least recently used
dropped first; a larger manifest is not kept), so its memory is bounded on any lake. It is
thread-safe: the prefetch reads in a thread of its own beside the event loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

MAX_ENTRIES = 50_000
Key = tuple[str, int, bool]  # manifest path, its length, read with partition values
V = TypeVar("V")


class EntriesCache(Generic[V]):
    """Decoded manifests by ``Key``, at most ``limit`` entries in all (``size`` counts a
    value's)."""

    def __init__(self, size: Callable[[V], int], limit: int = MAX_ENTRIES) -> None:
        self._size = size
        self._limit = limit
        self._held = 0
        self._values: OrderedDict[Key, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_read(self, key: Key, read: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``read()``'s (kept when it fits). A read's error
        is raised and nothing is kept. Two threads missing the same key both read it."""
        with self._lock:
            found = self._values.get(key)
            if found is not None:
                self._values.move_to_end(key)
                return found
        value = read()  # outside the lock: a read takes milliseconds, a hit microseconds
        size = self._size(value)
        if size > self._limit:
            return value
        with self._lock:
            if key not in self._values:
                self._values[key] = value
                self._held += size
            while self._held > self._limit:
                _, dropped = self._values.popitem(last=False)
                self._held -= self._size(dropped)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._held = 0
