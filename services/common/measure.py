"""What the benchmarks and the load-test sweep measure a process with (Linux `/proc`), and the
percentile they report: one definition, so their figures compare."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (raises OSError once it is gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(values: Sequence[float], q: float) -> float:
    """The value at rank `int(q * n)` of the sorted values (the largest for q = 1); NaN if none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
