"""`make bench-sessions` (bench/game_sessions.py) at its smoke size: the whole run (echo baseline,
the game-session process on PostgreSQL, the driver, both scenarios) ends well and prints every
figure."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import weakref
from typing import Any

import pytest

from bench import game_sessions, session_driver
from tests.bench.figures import check_figures
from tests.services.harness import ROOT

FIGURES = {
    "sessions_echo_unary_rate": "calls/s",
    "sessions_echo_unary_rate_after": "calls/s",
    "sessions_human_concurrent_tables": "tables",
    "sessions_human_actions_per_s": "actions/s",
    "sessions_human_latency_p50": "ms",
    "sessions_human_latency_p99": "ms",
    "sessions_memory_per_table": "KiB",
    "sessions_human_cpu_per_1000_actions": "s",
    "sessions_human_driver_loop_lag_p99": "ms",
    "sessions_human_health_check_p99": "ms",
    "sessions_errors": "errors",
    "sessions_max_sustained_actions_per_s": "actions/s",
    "sessions_max_sustained_latency_p99": "ms",
    "sessions_max_sustained_cpu_per_1000_actions": "s",
    "sessions_max_sustained_vs_echo": "ratio",
    "sessions_ramp_match_actions": "actions",
}


def test_the_bench_prints_every_figure(postgres_url: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.game_sessions", "--smoke", "--postgres-url", postgres_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = check_figures(run.stdout, FIGURES)
    assert figures["sessions_errors"] == 0
    assert figures["sessions_human_concurrent_tables"] == 6
    assert figures["sessions_human_actions_per_s"] > 10  # 6 tables at 5 actions/s each were offered
    assert figures["sessions_max_sustained_actions_per_s"] > 0
    # the ramp's tables were played ahead by up to a match's length: a hand of bots, hundreds of actions
    assert 100 < figures["sessions_ramp_match_actions"] < 1000
    assert figures["sessions_echo_unary_rate"] > 100 and figures["sessions_echo_unary_rate_after"] > 100
    # the ratio is taken to the higher of the two echo rates
    echo = max(figures["sessions_echo_unary_rate"], figures["sessions_echo_unary_rate_after"])
    ratio = figures["sessions_max_sustained_actions_per_s"] / echo
    assert math.isclose(figures["sessions_max_sustained_vs_echo"], ratio, rel_tol=1e-3, abs_tol=1e-5)


class FakeDriver:
    """The orchestrator's view of the driver: canned windows, in order."""

    def __init__(self, *windows: dict[str, Any]) -> None:
        self.windows = list(windows)
        self.commands: list[dict[str, Any]] = []

    async def run_window(self, command: dict[str, Any], pid: int) -> tuple[dict[str, Any], float]:
        self.commands.append(command)
        return self.windows.pop(0), 0.5


def window(rate: float, latency_ms: float, seconds: float = 5.0) -> dict[str, Any]:
    actions = int(rate * seconds)
    return {"actions": actions, "seconds": seconds, "latencies": [latency_ms / 1000] * actions,
            "driver_cpu": 1.0, "driver_lag_p99": 0.001, "health_p99": 0.002}


@pytest.mark.parametrize(
    ("windows", "retries", "passed", "used"),
    [
        ((window(1000, 20),), 1, True, 1),  # a pass is not measured again
        ((window(1000, 150), window(1000, 40)), 1, True, 2),  # p99 over 100 ms, then a pass
        ((window(800, 40), window(990, 40)), 1, True, 2),  # under 90% of the offered rate, then a pass
        ((window(1000, 150), window(700, 40)), 1, False, 2),  # failed twice: a failure
        ((window(1000, 150),), 0, False, 1),  # no retries: one window decides
    ],
)
async def test_a_ramp_step_takes_the_best_of_its_windows(
    windows: tuple[dict[str, Any], ...], retries: int, passed: bool, used: int, capsys: pytest.CaptureFixture[str]
) -> None:
    args = game_sessions.build_parser().parse_args(["--ramp-retries", str(retries)])
    driver = FakeDriver(*windows)
    result, cpu, step_passed = await game_sessions.ramp_step(driver, 0, 1000.0, args)
    assert step_passed is passed
    assert len(driver.commands) == used and all(c["rate"] == 1000.0 for c in driver.commands)
    assert result is windows[used - 1] and cpu == 0.5
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("bench-step: ")]
    assert len(printed) == used  # every window is printed


async def test_the_driver_settles_its_collector_young_objects_frozen_each_time() -> None:
    """The driver's collector pauses stay short: young survivors are collected, then frozen (out of
    every later scan); garbage cycles are collected first, not frozen."""
    import gc

    settles = 0
    first = asyncio.Event()

    def settled() -> None:
        nonlocal settles
        settles += 1
        first.set()

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    kept = [[index] for index in range(1000)]  # young survivors, tracked by the collector
    garbage = weakref.ref(Cycle())  # unreachable at once, but only a collection frees a cycle
    assert garbage() is not None
    tracked_before = {id(o) for o in gc.get_objects()}
    assert all(id(k) in tracked_before for k in kept)
    task = asyncio.ensure_future(session_driver.settle_collector(0.01, settled))
    try:
        await asyncio.wait_for(first.wait(), timeout=10)
        tracked_after = {id(o) for o in gc.get_objects()}  # every generation but the frozen one
    finally:
        task.cancel()
        gc.unfreeze()  # the rest of the test session collects as usual
    assert settles >= 1
    assert not any(id(k) in tracked_after for k in kept)  # frozen
    assert garbage() is None  # collected, not frozen
