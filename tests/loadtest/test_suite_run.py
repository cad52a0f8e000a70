"""The driver against the whole suite as real processes (SQLite): the player's journey through
matchmaking, game sessions, the wallet and ranking, and the `tables` scenario; every match played
to its end, every pot checked to the chip, no error."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from buraco.v1 import game_session_pb2, game_session_pb2_grpc, wallet_pb2, wallet_pb2_grpc
from loadtest.journey import run_shard
from loadtest.recorder import Recorder
from loadtest.settings import Settings
from services.common.auth import Kind
from tests.services.harness import ROOT, dev_minter, service_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    """Wallet, ranking, game sessions and matchmaking, each its own process, wired together."""
    tmp_path = tmp_path_factory.mktemp("suite")
    dev_minter(tmp_path / "dev-keys")
    with contextlib.ExitStack() as stack:
        wallet = stack.enter_context(service_process("wallet", tmp_path))
        ranking = stack.enter_context(service_process("ranking", tmp_path))
        wired = {"BURACO_WALLET_ADDRESS": wallet.address, "BURACO_RANKING_ADDRESS": ranking.address}
        game_session = stack.enter_context(
            service_process("game_session", tmp_path, {**wired, "BURACO_GAME_SESSION_BOT_DELAY_MS": "0"})
        )
        matchmaking = stack.enter_context(
            service_process(
                "matchmaking",
                tmp_path,
                {
                    **wired,
                    "BURACO_GAME_SESSION_ADDRESS": game_session.address,
                    "BURACO_MATCHMAKING_TICK_SECONDS": "0.2",
                },
            )
        )
        targets = {
            "wallet": wallet.address,
            "ranking": ranking.address,
            "game_session": game_session.address,
            "matchmaking": matchmaking.address,
        }
        yield targets, tmp_path / "dev-keys" / "dev-private.pem"


def run(suite: tuple[dict[str, str], Path], **changes: object) -> Recorder:
    targets, key = suite
    settings = Settings(players=4, journeys=1, targets=targets, token_key=key, wait_timeout_s=60)
    settings = replace(settings, **changes)  # type: ignore[arg-type]
    settings.check()
    recorder, _ = asyncio.run(run_shard(settings, range(settings.players)))
    return recorder


def errors_of(recorder: Recorder) -> dict[tuple[str, str], dict[str, int]]:
    return {(s.kind, s.name): dict(s.errors) for s in recorder if s.errors}


def test_the_whole_journey(suite: tuple[dict[str, str], Path]) -> None:
    recorder = run(suite, run_id="jny1", bet=30)
    assert errors_of(recorder) == {}
    assert recorder.counters["journeys_completed"] == 4
    steps = {s.name: s.ok for s in recorder if s.kind == "step"}
    assert steps == {
        "signup": 4, "fund": 4, "queue": 4, "play": 4, "settle": 4, "leaderboard": 4, "journey": 4
    }
    rpcs = {s.name: s for s in recorder if s.kind == "rpc"}
    assert rpcs["matchmaking.CreateTicket"].ok == 4
    assert rpcs["matchmaking.WatchTicket"].first_event.count == 4
    assert rpcs["game_session.SubscribeChanges"].first_event.count == 4
    assert rpcs["game_session.Discard"].ok > 0
    assert "game_session.CreateTable" not in rpcs  # matchmaking made the tables


def test_the_tables_scenario_with_two_journeys_per_table(suite: tuple[dict[str, str], Path]) -> None:
    recorder = run(suite, scenario="tables", run_id="tab1", journeys=2, bot="random", seats=4, players=4)
    assert errors_of(recorder) == {}
    assert recorder.counters["matches_completed"] == 2
    rpcs = {s.name: s for s in recorder if s.kind == "rpc"}
    assert rpcs["game_session.CreateTable"].ok == 2
    assert rpcs["wallet.HoldBets"].ok == 2
    assert {s.name: s.ok for s in recorder if s.kind == "step"}["settle"] == 8


def test_the_journey_on_play_streams(suite: tuple[dict[str, str], Path]) -> None:
    """`--play-stream`: each player acts on its Play stream; every action is timed under
    game_session.Play/<Method>, no unary action call is made, and the pots settle as before."""
    recorder = run(suite, run_id="pst1", bet=20, play_stream=True)
    assert errors_of(recorder) == {}
    assert recorder.counters["journeys_completed"] == 4
    rpcs = {s.name: s for s in recorder if s.kind == "rpc"}
    assert rpcs["game_session.Play"].first_event.count == 4
    assert rpcs["game_session.Play/Discard"].ok > 0 and rpcs["game_session.Play/Draw"].ok > 0
    assert not {"game_session.Discard", "game_session.Draw", "game_session.SubscribeChanges"} & set(rpcs)
    assert {s.name: s.ok for s in recorder if s.kind == "step"}["settle"] == 4


def cleanup_command(suite: tuple[dict[str, str], Path], run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    targets, key = suite
    return subprocess.run(
        [sys.executable, "-m", "loadtest", "cleanup", "--run-id", run_id, "--token-key", str(key), "--targets",
         ",".join(f"{name}={address}" for name, address in targets.items()), "--wait", "60", *extra],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=180,
    )


def counts(output: str, verb: str) -> dict[str, dict[str, int]]:
    """`{service: {kind: count}}` from the command's `erased ...` / `would erase ...` lines."""
    found: dict[str, dict[str, int]] = {}
    for line in output.splitlines():
        if line.startswith(f"{verb} "):
            service, _, rest = line.removeprefix(f"{verb} ").partition(": ")
            found[service] = {kind: int(n) for kind, _, n in (part.rpartition(" ") for part in rest.split(", "))}
    return found


def test_a_run_is_erased_by_the_cleanup_command_and_only_that_run(suite: tuple[dict[str, str], Path]) -> None:
    """Two runs whose ids share a prefix (`cln1`, `cln10`): the cleanup of `cln1` erases its
    players' accounts, tables, tickets and ratings in every service, leaves `cln10`'s as they were,
    keeps the ledger whole, and a second cleanup finds nothing."""
    targets, key = suite
    for run_id in ("cln1", "cln10"):
        assert errors_of(run(suite, run_id=run_id, bet=20, bot="random")) == {}
    dry = cleanup_command(suite, "cln1", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    would = counts(dry.stdout, "would erase")
    assert would["wallet"]["accounts"] == 4 and would["wallet"]["escrows"] == 2  # 4 players, 2 per table
    assert would["game_session"]["tables"] == 2 and would["ranking"]["players"] == 4
    assert would["matchmaking"]["tickets"] == 4
    done = cleanup_command(suite, "cln1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert counts(done.stdout, "erased") == would  # the dry run counted what the erasure erased
    again = cleanup_command(suite, "cln1")
    assert again.returncode == 0 and all(n == 0 for kinds in counts(again.stdout, "erased").values()
                                         for n in kinds.values()), again.stdout
    admin = (("authorization", f"Bearer {dev_minter(key.parent).mint(Kind.ADMIN, 'check')}"),)
    with grpc.insecure_channel(targets["wallet"]) as channel:
        wallet = wallet_pb2_grpc.WalletServiceStub(channel)
        with pytest.raises(grpc.RpcError) as erased:
            wallet.GetAccount(wallet_pb2.GetAccountRequest(name="accounts/player-cln1-0"), metadata=admin, timeout=10)
        assert erased.value.code() == grpc.StatusCode.NOT_FOUND
        kept = wallet.GetAccount(wallet_pb2.GetAccountRequest(name="accounts/player-cln10-0"), metadata=admin,
                                 timeout=10)
        assert kept.balance_chips > 0
    with grpc.insecure_channel(targets["game_session"]) as channel:
        stub = game_session_pb2_grpc.GameSessionServiceStub(channel)

        def tables_of(player: str) -> int:
            request = game_session_pb2.ListTablesRequest(player=f"players/{player}")
            return len(stub.ListTables(request, metadata=admin, timeout=10).tables)

        assert [tables_of(f"cln1-{n}") for n in range(4)] == [0, 0, 0, 0]
        assert [tables_of(f"cln10-{n}") for n in range(4)] == [1, 1, 1, 1]
    audit = subprocess.run(
        [sys.executable, "-m", "services.wallet", "audit"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "BURACO_ENV": "local",
             "BURACO_DATABASE_URL": f"sqlite+aiosqlite:///{key.parent.parent / 'wallet'}.db"},
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
