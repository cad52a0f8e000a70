"""The garbage collector of a process that holds many long-lived objects per client: the
game-session service (thousands per live table: its log, its engine state) and the gateway (per
socket: its subscriptions, its streams upstream).

They live for a match's length or a player's session, while every message allocates hundreds of
short-lived containers freed at once by reference counting. Left alone, the collector re-scans the
long-lived ones in every full collection (a pause every table or socket feels) and runs its
young passes far more often than they find anything. So such a service's own process (its
`__main__`, which calls `tune()`):
- raises the young generation's threshold (`GC_THRESHOLDS`);
- every `GC_SETTLE_SECONDS` collects the young generations and moves every survivor out of the
  collector's sight (`gc.freeze`), so a pause only scans what was allocated and is still alive
  since the last settle. Cycles that become garbage later in frozen objects are not collected;
  the service makes few (asyncio's are young).
The collector is process-wide: an in-process server (tests) leaves it alone. docs/game-session.md
("Speed") and docs/gateway.md ("Speed") give the measurements behind the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc

#: Set by the service's own process (`tune()`, from its `__main__`).
FREEZE_SURVIVORS = False
#: Young collections every 10,000 allocations (Python's default is 700).
GC_THRESHOLDS = (10_000, 10, 10)
#: How often the process settles the collector.
GC_SETTLE_SECONDS = 0.5


def tune() -> None:
    """For a service's own process, at start: what was loaded so far is frozen, young passes are
    rarer, and the `Settler` of the process's servers runs."""
    global FREEZE_SURVIVORS
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    FREEZE_SURVIVORS = True


def collect_young_and_freeze() -> None:
    """One settle, whatever the process (the bench's driver settles its own collector with it)."""
    gc.collect(1)
    gc.freeze()


class Settler:
    """Settles the collector every `GC_SETTLE_SECONDS` in the service's own process (no-op elsewhere)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if FREEZE_SURVIVORS:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="gc-settle")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(GC_SETTLE_SECONDS)
            collect_young_and_freeze()
