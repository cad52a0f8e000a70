"""Per-caller limits: a token bucket of calls and a cap on open streams.

Both are in-process (per replica) and bounded in memory: the least recently seen callers are
forgotten past `max_callers`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from services.common.errors import ResourceExhaustedError


class RateLimiter:
    """Token buckets by caller key: `rate` tokens a second, at most `burst` saved up."""

    def __init__(self, *, max_callers: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        # a plain dict keeps insertion order, and a key popped and put back goes last: the least
        # recently seen caller comes first (cheaper than an OrderedDict, on every call and message)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._max = max_callers
        self._clock = clock

    def take(self, key: str, rate: float, burst: int) -> None:
        """Spend one token of `key`'s bucket, or raise RESOURCE_EXHAUSTED."""
        now = self._clock()
        buckets = self._buckets
        tokens, last = buckets.pop(key, (float(burst), now))
        tokens = min(float(burst), tokens + (now - last) * rate)
        if tokens < 1.0:
            buckets[key] = (tokens, now)
            wait = (1.0 - tokens) / rate
            raise ResourceExhaustedError(
                f"rate limit: at most {rate:g} calls a second; retry in {wait:.2f} s",
                metadata=(("retry-after-ms", str(max(1, int(wait * 1000)))),),
            )
        buckets[key] = (tokens - 1.0, now)
        if len(buckets) > self._max:
            for oldest in list(itertools.islice(buckets, len(buckets) - self._max)):
                del buckets[oldest]


class StreamLimiter:
    """Counts open streams by caller key."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, key: str) -> None:
        count = self._open.get(key, 0)
        if count >= self.limit:
            raise ResourceExhaustedError(f"at most {self.limit} open streams per caller")
        self._open[key] = count + 1

    def release(self, key: str) -> None:
        count = self._open.get(key, 0) - 1
        if count <= 0:
            self._open.pop(key, None)
        else:
            self._open[key] = count

    def open(self, key: str) -> int:
        return self._open.get(key, 0)
