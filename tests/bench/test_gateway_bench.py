"""`make bench-gateway` (bench/gateway.py) at its smoke size: the whole run (the game session on
PostgreSQL, the gateway in front of it, the driver's socket and direct players, both scenarios)
ends well and prints every figure; and the rules by which a capacity level holds."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest

from bench import gateway
from bench.gateway_driver import GATEWAY
from tests.bench.figures import check_figures
from tests.services.harness import ROOT

FIGURES = {
    "gateway_human_players": "players",
    "gateway_human_direct_players": "players",
    "gateway_human_connect_seconds": "s",
    "gateway_human_setup_seconds": "s",
    "gateway_human_offered_actions_per_s": "actions/s",
    "gateway_human_actions_per_s": "actions/s",
    "gateway_direct_actions_per_s": "actions/s",
    "gateway_move_latency_p50": "ms",
    "gateway_move_latency_p99": "ms",
    "gateway_direct_latency_p50": "ms",
    "gateway_direct_latency_p99": "ms",
    "gateway_added_latency_p50": "ms",
    "gateway_added_latency_p99": "ms",
    "gateway_added_latency_p99_target": "ms",
    "gateway_move_p50_vs_direct": "ratio",
    "gateway_move_p99_vs_direct": "ratio",
    "gateway_memory_per_socket": "KiB",
    "gateway_memory_per_idle_socket": "KiB",
    "gateway_rss": "MiB",
    "gateway_human_cpu_share": "cores",
    "gateway_cpu_per_1000_actions": "s",
    "gateway_human_players_per_core": "players",
    "gateway_human_session_cpu_share": "cores",
    "gateway_human_driver_cpu_share": "cores",
    "gateway_human_driver_loop_lag_p99": "ms",
    "gateway_human_healthz_p99": "ms",
    "gateway_human_tables_failed": "tables",
    "gateway_max_players": "players",
    "gateway_max_players_latency_p50": "ms",
    "gateway_max_players_latency_p99": "ms",
    "gateway_max_players_cpu_share": "cores",
    "gateway_players_per_core": "players",
    "gateway_players_per_core_target": "players",
    "gateway_ramp_tables_failed": "tables",
    "gateway_ramp_disturbed_windows": "windows",
}


def test_the_bench_prints_every_figure(postgres_url: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.gateway", "--smoke", "--postgres-url", postgres_url],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    value = check_figures(run.stdout, FIGURES)
    assert set(value) == set(FIGURES)  # and nothing unlisted
    assert value["gateway_human_tables_failed"] == 0 and value["gateway_ramp_tables_failed"] == 0
    assert value["gateway_human_players"] == 6 and value["gateway_human_direct_players"] == 6
    # 3 tables of each kind, an action every 0.2 s each: 15 actions/s offered per kind
    assert value["gateway_human_actions_per_s"] > 5 and value["gateway_direct_actions_per_s"] > 5
    assert 0 < value["gateway_direct_latency_p50"] <= value["gateway_direct_latency_p99"]
    assert 0 < value["gateway_move_latency_p50"] <= value["gateway_move_latency_p99"]
    assert math.isclose(value["gateway_added_latency_p99"],
                        value["gateway_move_latency_p99"] - value["gateway_direct_latency_p99"], abs_tol=0.01)
    assert value["gateway_human_cpu_share"] > 0 and value["gateway_rss"] > 10
    # both levels of the smoke ramp (6, then 10 players) hold on an idle gateway
    assert value["gateway_max_players"] == 10
    share = value["gateway_max_players_cpu_share"]
    assert math.isclose(value["gateway_players_per_core"], 10 / share, rel_tol=1e-3)
    assert "bench-step: level 10" in run.stdout


def window(players: int, p99_ms: float, actions: int, failed: int = 0, seconds: float = 10.0) -> dict[str, Any]:
    return {"seconds": seconds, "kinds": {GATEWAY: {
        "players": players, "offered": players / 2 / 2.0, "actions": actions, "p50": 0.005,
        "p99": p99_ms / 1000, "tables_failed": failed}}}


@pytest.mark.parametrize(
    ("result", "held"),
    [
        (window(1000, 40, 2500), True),  # 250 actions/s offered over 10 s, all answered
        (window(1000, 100, 2500), False),  # p99 at the bound
        (window(1000, 40, 2249), False),  # under 90% of the offered moves
        (window(1000, 40, 2250), True),
        (window(1000, 40, 2500, failed=1), False),  # a table failed
        (window(1000, 40, 0), False),  # nothing answered
    ],
)
def test_a_level_holds_under_100_ms_with_the_moves_answered_and_no_table_failed(
        result: dict[str, Any], held: bool) -> None:
    assert gateway.holds(result) is held


def test_a_window_is_disturbed_when_other_processes_take_the_gateways_core() -> None:
    cpu = {"gateway": 2.0, "core0": 3.0, "core1": 9.0}  # over 10 s
    assert not gateway.disturbed(cpu, 10.0, "0")  # 0.1 of the core besides the gateway: PostgreSQL
    assert gateway.disturbed({**cpu, "core0": 6.0}, 10.0, "0")  # 0.4 of it: another bench
    assert gateway.disturbed(cpu, 10.0, "1")  # the gateway on core 1 beside 0.7 of other work
    assert not gateway.disturbed(cpu, 10.0, None)  # not pinned: unknown


def test_players_per_core_and_the_layout() -> None:
    assert gateway.players_per_core(2000, 0.5) == 4000
    assert gateway.players_per_core(0, 0.0) == 0 and gateway.players_per_core(100, 0.0) == 0
    assert gateway.layout(1) == gateway.Layout(None, None, None)
    assert gateway.layout(2) == gateway.Layout("0", "1", "1")  # the gateway alone on its core
    assert gateway.layout(3) == gateway.Layout("0", "1", "2")
    assert gateway.layout(8) == gateway.Layout("0", "1", "2-7")


def test_sizes_are_whole_tables() -> None:
    parser = gateway.build_parser()
    args = parser.parse_args(["--players", "20", "--levels", "20,40"])
    assert args.players == 20 and args.levels == [20, 40] and args.direct_players is None
    for bad in (["--players", "7"], ["--levels", "10,3"], ["--players", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
