"""The CLI's knobs, targets, shards and the settlement arithmetic the journey checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.cli import build_parser, main, settings_from, shards
from loadtest.client import TargetsError, parse_targets
from loadtest.payouts import expected_deltas
from loadtest.settings import Settings


def settings(*argv: str) -> Settings:
    return settings_from(build_parser().parse_args(list(argv)))


def test_defaults_and_knobs() -> None:
    s = settings()
    assert (s.scenario, s.players, s.seats, s.bet, s.practice, s.bot, s.processes) == (
        "journey", 4, 2, 10, False, "heuristic", 1
    )
    assert s.targets["wallet"] == "localhost:50053" and s.targets["game_session"] == "localhost:50052"
    assert s.run_id.startswith("lt") and settings().run_id != s.run_id
    s = settings(
        "--scenario", "backend", "--players", "8", "--seats", "4", "--ramp", "5", "--duration", "30",
        "--practice", "--bot", "random", "--think-time", "0.5", "--seed", "x", "--processes", "2",
        "--target-points", "1005", "--token-key", "k.pem", "--run-id", "run1", "--play-stream",
    )
    assert (s.scenario, s.players, s.seats, s.ramp_s, s.duration_s, s.bet, s.practice) == (
        "backend", 8, 4, 5.0, 30.0, 0, True
    )
    assert (s.bot, s.think_time_s, s.seed, s.processes, s.target_points, s.token_key, s.run_id) == (
        "random", 0.5, "x", 2, 1005, Path("k.pem"), "run1"
    )
    assert s.play_stream and not settings().play_stream
    assert Settings.from_json(s.to_json()) == s


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--players", "3"], "multiple of --seats"),
        (["--players", "4", "--seats", "4", "--processes", "2"], "--processes"),
        (["--practice", "--bet", "5"], "take no bet"),
        (["--bet", "0"], "--bet must be positive"),
        (["--target-points", "100"], "505..3005"),
        (["--duration", "0"], "--journeys"),
        (["--targets", "wallet=nohost"], "host:port"),
        (["--targets", "bank=h:1"], "unknown service"),
        (["--fail-if", "p99<<1"], "gate"),
        (["--max-error-rate", "2"], "fraction"),
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "c.pem", "--tls-key", "k.pem"], "need --tls-ca"),
        (["--tls-server-name", "wallet"], "need --tls-ca"),
        (["--tls-ca", "/nonexistent/ca.pem"], "--tls-ca /nonexistent/ca.pem: no such file"),
    ],
)
def test_bad_knobs_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--token-key", "/nonexistent.pem"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_key_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--token-key", str(tmp_path / "none.pem"), "--out", str(tmp_path)]) == 2
    assert "no signing key" in capsys.readouterr().err


def test_targets() -> None:
    env = {"BURACO_WALLET_ADDRESS": "wallet:7000"}
    assert parse_targets(None, env)["wallet"] == "wallet:7000"
    assert parse_targets("10.0.0.5") == {
        "matchmaking": "10.0.0.5:50051",
        "game_session": "10.0.0.5:50052",
        "wallet": "10.0.0.5:50053",
        "ranking": "10.0.0.5:50054",
    }
    mixed = parse_targets("ranking=r:1, game-session=g:2", env)
    assert (mixed["ranking"], mixed["game_session"], mixed["wallet"]) == ("r:1", "g:2", "wallet:7000")
    # one address for every service (an ingress routing gRPC by service)
    assert parse_targets("ingress.example:443") == dict.fromkeys(
        ("matchmaking", "game_session", "wallet", "ranking"), "ingress.example:443")
    with pytest.raises(TargetsError):
        parse_targets("host:port")
    with pytest.raises(TargetsError):
        parse_targets(":1")


def test_shards_split_whole_tables() -> None:
    s = settings("--players", "20", "--seats", "4", "--processes", "3")
    parts = shards(s)
    assert [len(p) for p in parts] == [8, 8, 4]
    assert sorted(i for p in parts for i in p) == list(range(20))


@pytest.mark.parametrize(
    ("bet", "seats", "winners", "first_seat", "expected"),
    [
        (10, 2, [0], 0, {0: 6, 1: -10}),  # pot 20, cut 4, the winner takes 16
        (25, 4, [1, 3], 0, {0: -25, 1: 15, 2: -25, 3: 15}),  # pot 100, cut 20, 40 each
        (7, 4, [0, 2], 1, {0: -7, 1: -7, 2: 5, 3: -7} | {0: 4}),  # net 23: the odd chip to seat 2
        (7, 4, [0, 2], 3, {0: 5, 1: -7, 2: 4, 3: -7}),  # seat 0 acts before seat 2 from seat 3
        (10, 2, [], 0, {0: -10, 1: -10}),
    ],
)
def test_expected_deltas(bet: int, seats: int, winners: list[int], first_seat: int, expected: dict[int, int]) -> None:
    deltas = expected_deltas(bet, seats, winners, first_seat, 20)
    assert deltas == expected
    if winners:  # nothing but the house cut leaves the players
        assert sum(deltas.values()) == -(bet * seats * 20 // 100)
