"""Catalog requests, counted and limited: at most ``max_concurrent_requests`` in flight and
``max_requests_per_second`` on average per catalog, so a large fleet never floods a catalog.

Every request discovery sends a catalog goes through that catalog's ``CatalogGate`` (kept by
``CatalogSet`` for the process's life, so the rate holds across passes), which counts it by kind
into the pass's ``CatalogCalls`` and into the ``icepack.discovery.catalog.calls`` metric:

* ``list``: listing namespaces or tables (one per PyIceberg call, which follows pages itself);
* ``load``: a full table load, one table's metadata in the answer (an unconditional load, or a
  conditional one the catalog answered in full);
* ``conditional``: a REST table load sent with ``If-None-Match`` (the ETag stored with the
  table's metadata location; ``discovery.conditional``);
* ``not_modified``: a conditional load answered ``304 Not Modified`` (the table is unchanged);
* ``query``: the SQL catalog's one query for every metadata location;
* ``policy``: a request to Polaris' policy API (one page of applicable policies, the token).

A conditional load is one request counted twice: ``conditional``, then by its answer
``not_modified`` (304) or ``load`` (200, the table in full; nothing more when it failed). So
``load`` is the number of tables whose metadata travelled, the cost that should follow changes.

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
KINDS = (
    "list",
    "load",
    "conditional",
    "not_modified",
    "query",
    "unmaintained_load",
    "policy",
)


@dataclass
class CatalogCalls:
    """Requests of one pass (or one targeted refresh) by kind; safe to share between threads."""

    counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    started: float = field(default_factory=time.monotonic)  # when the pass began

    def elapsed(self) -> float:
        """Seconds since the pass began (``catalog_status.last_pass_seconds``)."""
        return time.monotonic() - self.started

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

    def count(self, kind: str, calls: CatalogCalls | None) -> None:
        """Count ``kind`` into ``calls`` and the metric without sending anything (the outcome
        of a request ``call`` already counted: ``load`` or ``not_modified``)."""
        if calls is not None:
            calls.add(kind)
        CATALOG_CALLS.add(1, {"catalog": self.catalog, "kind": kind})

    def call(self, kind: str, calls: CatalogCalls | None, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` within the limits, counted as ``kind`` (blocking: call from a thread)."""
        with self._slots:
            self._bucket.take()
            with self._count_lock:
                self._in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
            try:
                self.count(kind, calls)
                return fn(*args)
            finally:
                with self._count_lock:
                    self._in_flight -= 1
