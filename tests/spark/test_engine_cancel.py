"""The engine's contract under cancellation: cancelling ``sql`` cannot stop the statement's
thread (a rewrite's CALL may go on committing), so the engine stays locked until that thread
ends, and the next statement (the verification after a cancel) sees everything it did.

The blocking client here is a stand-in whose statement ends when the test says so: what is
tested is the engine's lock, and no Spark statement can be held open and released on cue the
same way on every engine (a sleeping statement ended before the cancel on a loaded machine)."""

from __future__ import annotations

import asyncio
import threading

from icepack_core.spark.engine import Rows, SparkEngine


class HeldEngine(SparkEngine):
    """An engine whose ``hold`` statement blocks its thread until ``release`` is set."""

    kind = "local"

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()
        self.done: list[str] = []

    def _execute(self, statement: str) -> Rows:
        if statement == "hold":
            self.started.set()
            self.release.wait(30)
        self.done.append(statement)
        return [{"seen": list(self.done)}]

    def _close(self) -> None:
        pass


async def test_a_cancelled_statement_holds_the_engine_until_its_thread_ends() -> None:
    engine = HeldEngine()
    held = asyncio.create_task(engine.sql("hold"))
    assert await asyncio.to_thread(engine.started.wait, 30)
    held.cancel()
    following = asyncio.create_task(engine.sql("verify"))
    await asyncio.sleep(0.2)
    assert not following.done()  # waits: the held statement's thread still runs
    engine.release.set()
    (row,) = await asyncio.wait_for(following, 30)
    assert row["seen"] == ["hold", "verify"]  # the next statement came after it ended
    assert held.cancelled()
