"""`make bench-sessions` at its smoke size: the whole run (echo baseline, the game-session process on
PostgreSQL, the driver, both scenarios) ends well and prints every figure."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from services.game_session import bench
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
}


def test_the_bench_prints_every_figure(postgres_url: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "services.game_session.bench", "--smoke", "--postgres-url", postgres_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures: dict[str, tuple[float, str]] = {}
    for line in run.stdout.splitlines():
        if line.startswith("bench: "):
            _, name, number, unit = line.split()
            figures[name] = (float(number), unit)
    for name, unit in FIGURES.items():
        assert name in figures, f"{name} missing from:\n{run.stdout}"
        value, printed_unit = figures[name]
        assert printed_unit == unit and math.isfinite(value), (name, value, printed_unit)
    assert figures["sessions_errors"][0] == 0
    assert figures["sessions_human_concurrent_tables"][0] == 6
    assert figures["sessions_human_actions_per_s"][0] > 10  # 6 tables at 5 actions/s each were offered
    assert figures["sessions_max_sustained_actions_per_s"][0] > 0
    assert figures["sessions_echo_unary_rate"][0] > 100 and figures["sessions_echo_unary_rate_after"][0] > 100
    # the ratio is taken to the higher of the two echo rates
    echo = max(figures["sessions_echo_unary_rate"][0], figures["sessions_echo_unary_rate_after"][0])
    ratio = figures["sessions_max_sustained_actions_per_s"][0] / echo
    assert math.isclose(figures["sessions_max_sustained_vs_echo"][0], ratio, rel_tol=1e-3, abs_tol=1e-5)


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
    args = bench.build_parser().parse_args(["--ramp-retries", str(retries)])
    driver = FakeDriver(*windows)
    result, cpu, step_passed = await bench.ramp_step(driver, 0, 1000.0, args)
    assert step_passed is passed
    assert len(driver.commands) == used and all(c["rate"] == 1000.0 for c in driver.commands)
    assert result is windows[used - 1] and cpu == 0.5
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("bench-step: ")]
    assert len(printed) == used  # every window is printed
