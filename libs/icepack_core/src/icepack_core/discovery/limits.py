"""Catalog requests, counted and limited: at most ``max_concurrent_requests`` in flight and
``max_requests_per_second`` on average per catalog, so a large fleet never floods a catalog.

Every request discovery sends a catalog goes through that catalog's ``CatalogGate`` (kept by
``CatalogSet`` for the process's life, so the rate holds across passes), which counts it by kind
into the pass's ``CatalogCalls`` and into the ``icepack.discovery.catalog.calls`` metric:

* ``list``: listing namespaces or tables;
* ``load``: loading one table's metadata;
* ``query``: the SQL catalog's one query for every metadata location.

PyIceberg calls block, so the gate is used from worker threads: a ``threading`` semaphore bounds
concurrency and a token bucket (burst = one second's worth) paces the rate.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from icepack_core.telemetry.metrics import CATALOG_CALLS

T = TypeVar("T")
KINDS = ("list", "load", "query")


@dataclass
class CatalogCalls:
    """Requests of one pass (or one targeted refresh) by kind; safe to share between threads."""

    counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def as_json(self) -> dict[str, int]:
        with self._lock:
            return {kind: self.counts[kind] for kind in KINDS if self.counts[kind]}


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``; ``take`` blocks until its token is
    due.

    ``clock`` and ``sleep`` are injectable so the pacing can be tested without waiting.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self.clock = clock
        self.sleep = sleep
        self._tokens = self.burst
        self._stamp = clock()
        self._lock = threading.Lock()

    def take(self) -> None:
        """Reserve a token, sleeping for the shortfall when the bucket is empty (reservations
        may run the balance below zero, so concurrent callers queue up in time, not in a loop)."""
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= 1
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self.sleep(wait)


class CatalogGate:
    """Concurrency and rate limits of one catalog, and the counting of its requests."""

    def __init__(self, catalog: str, max_concurrent: int, per_second: float) -> None:
        self.catalog = catalog
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._bucket = TokenBucket(per_second)
        self._in_flight = 0
        self._count_lock = threading.Lock()
        self.peak_in_flight = 0  # the most requests ever in flight at once (tests, logs)

    def call(self, kind: str, calls: CatalogCalls | None, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` within the limits, counted as ``kind`` (blocking: call from a thread)."""
        with self._slots:
            self._bucket.take()
            with self._count_lock:
                self._in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
            try:
                if calls is not None:
                    calls.add(kind)
                CATALOG_CALLS.add(1, {"catalog": self.catalog, "kind": kind})
                return fn(*args)
            finally:
                with self._count_lock:
                    self._in_flight -= 1
