"""Latency recording: an HDR-style histogram and the per-RPC / per-step series of a run.

`Histogram` keeps counts in log-linear buckets of integer microseconds (the scheme of
HdrHistogram): values below 2048 µs are kept exactly, larger ones in buckets whose width is at most
1/1024 of their value, so every percentile is within 0.1 % of the exact one, memory stays bounded
(a few thousand buckets whatever the number of calls), and histograms from several driver
processes merge by adding counts. Percentiles use the nearest-rank definition: the p-th percentile
of n values is the ceil(p/100 * n)-th smallest, reported as the largest value its bucket holds
(capped at the largest value recorded).

`Recorder` holds one `Series` per RPC (`rpc`, by method name) and per journey step (`step`): the
latencies of the calls that succeeded, the errors counted by status code (failed calls carry no
latency: a fast UNIMPLEMENTED must not make the latency look good), and for streams the time to
the first event.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: Values below 2**SUB_BITS µs are exact; above, each power of two is cut into 2**(SUB_BITS-1)
#: buckets (relative width <= 2**-(SUB_BITS-1), under 0.1 %).
SUB_BITS = 11
_MASK = (1 << SUB_BITS) - 1


def bucket_of(value: int) -> int:
    """The bucket key of a value in µs (>= 0): `(shift << SUB_BITS) | (value >> shift)`."""
    shift = max(0, value.bit_length() - SUB_BITS)
    return (shift << SUB_BITS) | (value >> shift)


def bucket_bounds(key: int) -> tuple[int, int]:
    """The lowest and highest value (µs) a bucket holds."""
    shift, mantissa = key >> SUB_BITS, key & _MASK
    return mantissa << shift, ((mantissa + 1) << shift) - 1


@dataclass
class Histogram:
    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total_us: int = 0
    min_us: int = 0
    max_us: int = 0

    def record_us(self, value: int) -> None:
        value = max(0, int(value))
        key = bucket_of(value)
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.count == 0 or value < self.min_us:
            self.min_us = value
        self.max_us = max(self.max_us, value)
        self.count += 1
        self.total_us += value

    def record_seconds(self, seconds: float) -> None:
        self.record_us(round(seconds * 1_000_000))

    def merge(self, other: Histogram) -> None:
        if other.count == 0:
            return
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        self.min_us = other.min_us if self.count == 0 else min(self.min_us, other.min_us)
        self.max_us = max(self.max_us, other.max_us)
        self.count += other.count
        self.total_us += other.total_us

    def percentile_us(self, percent: float) -> int | None:
        """The nearest-rank percentile in µs; None when nothing was recorded."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percentile {percent} not in 0..100")
        if self.count == 0:
            return None
        # rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in binary floating point
        rank = max(1, math.ceil(round(percent * self.count / 100, 9)))
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                return min(bucket_bounds(key)[1], self.max_us)
        return self.max_us  # unreachable: the counts add up to count

    @property
    def mean_us(self) -> float | None:
        return self.total_us / self.count if self.count else None

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": [[key, n] for key, n in sorted(self.counts.items())],
            "count": self.count,
            "total_us": self.total_us,
            "min_us": self.min_us,
            "max_us": self.max_us,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        return cls(
            counts={int(k): int(n) for k, n in data["counts"]},
            count=int(data["count"]),
            total_us=int(data["total_us"]),
            min_us=int(data["min_us"]),
            max_us=int(data["max_us"]),
        )


KINDS = ("rpc", "step")


@dataclass
class Series:
    """One row of the report: an RPC (`rpc`, e.g. `wallet.GetAccount`) or a journey step (`step`)."""

    kind: str
    name: str
    latency: Histogram = field(default_factory=Histogram)
    errors: Counter[str] = field(default_factory=Counter)
    first_event: Histogram = field(default_factory=Histogram)

    @property
    def ok(self) -> int:
        return self.latency.count

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def calls(self) -> int:
        return self.ok + self.error_count

    def merge(self, other: Series) -> None:
        self.latency.merge(other.latency)
        self.errors.update(other.errors)
        self.first_event.merge(other.first_event)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "latency": self.latency.to_json(),
            "errors": dict(sorted(self.errors.items())),
            "first_event": self.first_event.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Series:
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            latency=Histogram.from_json(data["latency"]),
            errors=Counter({str(k): int(v) for k, v in data["errors"].items()}),
            first_event=Histogram.from_json(data["first_event"]),
        )


@dataclass
class Recorder:
    """Every series of one driver process (or, merged, of a whole run) and the run's counters."""

    series: dict[tuple[str, str], Series] = field(default_factory=dict)
    #: Journeys started and finished (every step succeeded), and other whole-run counters.
    counters: Counter[str] = field(default_factory=Counter)

    def get(self, kind: str, name: str) -> Series:
        if kind not in KINDS:
            raise ValueError(f"series kind {kind!r} not one of {KINDS}")
        key = (kind, name)
        found = self.series.get(key)
        if found is None:
            found = self.series[key] = Series(kind, name)
        return found

    def ok(self, kind: str, name: str, seconds: float) -> None:
        self.get(kind, name).latency.record_seconds(seconds)

    def error(self, kind: str, name: str, code: str) -> None:
        self.get(kind, name).errors[code] += 1

    def first_event(self, kind: str, name: str, seconds: float) -> None:
        self.get(kind, name).first_event.record_seconds(seconds)

    def __iter__(self) -> Iterator[Series]:
        """The series in report order: RPCs first, then steps, each by name."""
        return iter(sorted(self.series.values(), key=lambda s: (KINDS.index(s.kind), s.name)))

    def merge(self, other: Recorder) -> None:
        for key, theirs in other.series.items():
            self.get(*key).merge(theirs)
        self.counters.update(other.counters)

    def to_json(self) -> dict[str, Any]:
        return {"series": [s.to_json() for s in self], "counters": dict(sorted(self.counters.items()))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recorder:
        recorder = cls()
        for item in data["series"]:
            series = Series.from_json(item)
            recorder.series[(series.kind, series.name)] = series
        recorder.counters.update({str(k): int(v) for k, v in data["counters"].items()})
        return recorder

    @classmethod
    def merged(cls, parts: Iterable[Recorder]) -> Recorder:
        total = cls()
        for part in parts:
            total.merge(part)
        return total
