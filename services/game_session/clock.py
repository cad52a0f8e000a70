"""Time for timers: the real clock, and a clock tests move by hand.

Every timer of the service (turn timers, bot turns, disconnect grace, annulment deadlines, the
first deal's wait) goes through `Clock.call_later`, so a test can fire them without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


class _FakeHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when `advance` is called; due callbacks run then, in time order.
    A zero delay runs on the event loop at once (bots playing without pause in tests)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._heap: list[tuple[float, int, _FakeHandle, Callable[[], None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        handle = _FakeHandle()
        if delay <= 0:
            asyncio.get_running_loop().call_soon(lambda: None if handle.cancelled else callback())
            return handle
        heapq.heappush(self._heap, (self._now + delay, next(self._order), handle, callback))
        return handle

    def pending(self) -> int:
        return sum(1 for _, _, handle, _ in self._heap if not handle.cancelled)

    def advance(self, seconds: float) -> None:
        target = self._now + seconds
        while self._heap and self._heap[0][0] <= target:
            when, _, handle, callback = heapq.heappop(self._heap)
            self._now = max(self._now, when)
            if not handle.cancelled:
                callback()
        self._now = target
