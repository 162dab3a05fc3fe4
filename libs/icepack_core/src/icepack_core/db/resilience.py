"""Riding out a Postgres outage: which database errors are transient, and retrying through them.

A restart of Postgres (``pg_ctl stop -m fast``, a failover) closes every connection: asyncpg then
raises ``ConnectionDoesNotExistError``/``InterfaceError`` on pooled connections, the server
answers ``AdminShutdown`` or ``CannotConnectNow`` while it goes down or comes up, and connecting
meanwhile fails with ``OSError``. None of these says anything about the work itself: the service
waits (capped exponential backoff with jitter, interrupted by ``stop``) and tries again. The pool
replaces broken connections by itself on the next acquire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.wait import wait_exponential_jitter

from icepack_core.telemetry.logs import redact_text

T = TypeVar("T")

# Errors that mean "the database is (momentarily) not there", never "this work is bad".
TRANSIENT_DB_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused/reset connections; TimeoutError is an OSError too
    asyncpg.InterfaceError,  # "connection is closed", a pool connection that died
    asyncpg.PostgresConnectionError,  # class 08: connection exceptions
    asyncpg.exceptions.AdminShutdownError,  # 57P01: the server is shutting down
    asyncpg.exceptions.CrashShutdownError,  # 57P02
    asyncpg.exceptions.CannotConnectNowError,  # 57P03: starting up / in recovery
    asyncpg.InternalClientError,  # a pooled connection left mid-protocol by the lost server
    # 53300: no connection slot (server max_connections or the role's CONNECTION LIMIT); slots
    # free up as other clients disconnect, so it is waited out like an outage.
    asyncpg.exceptions.TooManyConnectionsError,
)
RETRY_INITIAL_SECONDS = 0.2
RETRY_MAX_SECONDS = 10.0


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` means the database was unreachable, not that the work failed."""
    return isinstance(exc, TRANSIENT_DB_ERRORS)


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def survive(
    round_: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    log: Any,
    what: str,
    pause_seconds: float = 1.0,
) -> None:
    """Run one round of a service loop; log whatever it raises and pause, never raise.

    The last line of defence of a loop that must not end: ``retry_db`` inside the round waits
    out outages; anything else (a bug, an unexpected driver state) costs one round only.
    """
    try:
        await round_()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception(f"{what}.round_failed", error=f"{type(exc).__name__}: {exc}")
        await pause(stop, pause_seconds)


async def retry_db(
    call: Callable[[], Awaitable[T]],
    stop: asyncio.Event,
    log: Any,
    what: str,
    *,
    max_wait: float = RETRY_MAX_SECONDS,
) -> T | None:
    """``await call()``, retrying it through transient database errors until it answers.

    Each failed try is logged (``<what>.db_unavailable``) with the wait before the next one:
    0.2 s doubling (with jitter) up to ``max_wait``. Other exceptions propagate at once.

    Returns:
        What ``call`` returned, or None when ``stop`` was set before it could succeed.
    """

    def log_retry(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else None
        log.warning(
            f"{what}.db_unavailable",
            error=f"{type(error).__name__}: {error}",
            attempt=state.attempt_number,
            retry_in=round(wait or 0.0, 2),
        )

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(TRANSIENT_DB_ERRORS),
        wait=wait_exponential_jitter(
            multiplier=RETRY_INITIAL_SECONDS, max=max_wait, jitter=RETRY_INITIAL_SECONDS
        ),
        stop=lambda _state: stop.is_set(),
        sleep=lambda seconds: pause(stop, seconds),
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                return await call()
    except TRANSIENT_DB_ERRORS:
        if stop.is_set():
            return None
        raise
    return None  # unreachable: AsyncRetrying either returns or raises


async def loop_every(
    interval: float, stop: asyncio.Event, once: Callable[[], Awaitable[Any]], log: Any, name: str
) -> None:
    """Call ``once()`` every ``interval`` seconds until ``stop``; log and carry on on any error
    (a database outage included: the next round tries again)."""
    while not stop.is_set():
        try:
            await once()
        except asyncio.CancelledError:
            raise
        except TRANSIENT_DB_ERRORS as exc:
            log.warning(f"{name}.db_unavailable", error=str(exc))
        except Exception as exc:  # one failed round never stops the service
            log.exception(f"{name}.failed", error=redact_text(f"{type(exc).__name__}: {exc}"))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
