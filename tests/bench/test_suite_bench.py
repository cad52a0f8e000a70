"""`make bench-suite` (bench/suite.py) at its smoke size: a suite started as `make run` starts it,
four players through the whole journey, every figure printed, the suite stopped."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.bench.figures import check_figures
from tests.services.harness import ROOT, free_ports

pytestmark = pytest.mark.slow

PER_LEVEL = {
    "journey_4_calls_per_s": "calls/s",
    "journey_4_worst_p99": "ms",
    "journey_4_errors": "calls",
    "journey_4_journeys_completed": "journeys",
    "journey_4_journeys_failed": "journeys",
    "journey_4_cpu_matchmaking": "cores",
    "journey_4_cpu_game_session": "cores",
    "journey_4_cpu_wallet": "cores",
    "journey_4_cpu_ranking": "cores",
    "journey_4_cpu_driver": "cores",
    "journey_4_driver_cpu_per_call": "us",
    "journey_4_service_worst_p99_bound": "ms",
    "journey_4_service_worst_share_over_bound": "%",
    "journey_4_service_loop_lag_worst_p99_bound": "ms",
    "journey_players_within_p99": "players",
}


def test_the_bench_prints_every_figure() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.suite", "--smoke", "--port-base", str(free_ports(5)),
         "--metrics-base", str(free_ports(6))],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = check_figures(run.stdout, PER_LEVEL)
    assert figures["journey_4_errors"] == 0
    assert figures["journey_4_journeys_completed"] == 4 and figures["journey_4_journeys_failed"] == 0
    # every service and the driver did work; the game session most of it (a whole match per table)
    cpu = {name: figures[f"journey_4_cpu_{name}"] for name in ("matchmaking", "game_session", "wallet", "driver")}
    assert all(share > 0 for share in cpu.values()), cpu
    assert cpu["game_session"] > cpu["wallet"]
    # the services' own histograms: every move and unary call seen, streams (a lifetime) left out
    service_lines = [line.split() for line in run.stdout.splitlines() if line.startswith("service: journey_4 ")]
    methods = {line[2] for line in service_lines}
    assert "/buraco.v1.GameSessionService/Play/Discard" in methods, methods
    assert "/buraco.v1.MatchmakingService/CreateTicket" in methods, methods
    assert not {"/buraco.v1.GameSessionService/Play", "/buraco.v1.MatchmakingService/WatchTicket"} & methods
    assert figures["journey_4_service_worst_p99_bound"] > 0
    assert 0 <= figures["journey_4_service_worst_share_over_bound"] <= 100
    within = figures["journey_players_within_p99"]
    assert within == (4 if figures["journey_4_worst_p99"] < 100 else 0)
