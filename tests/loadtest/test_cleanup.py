"""`python -m loadtest cleanup`: dry runs everywhere before anything is erased, the services in
their order, a refusal anywhere erasing nothing, retries keeping their request id, and the
arguments it refuses. The services' own erasures are tested with each service; the whole run
erased from a real suite is in tests/loadtest/test_suite_run.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from buraco.v1 import common_pb2, game_session_pb2_grpc, matchmaking_pb2_grpc, ranking_pb2_grpc, wallet_pb2_grpc
from loadtest import cleanup
from loadtest.cli import main
from loadtest.client import Channels, Tokens
from services.common.auth import Kind, Verifier, parse_public_keys
from tests.services.harness import dev_minter


class Fake:
    """The four services' EraseLoadTestRun on one server: each call is recorded as (service,
    request id, dry run, the caller's token kind and name); `refuse` and `unavailable` name the
    services that answer FAILED_PRECONDITION, or UNAVAILABLE once."""

    def __init__(self, verify: Any, refuse: frozenset[str] = frozenset(),
                 unavailable: frozenset[str] = frozenset(), refusals: int = 1_000) -> None:
        self.verify, self.unavailable = verify, set(unavailable)
        self.refusals = dict.fromkeys(refuse, refusals)
        self.calls: list[tuple[str, str, bool, str]] = []

    def servicer(self, service: str, base: type) -> Any:
        fake = self

        class Servicer(base):  # type: ignore[misc]
            async def EraseLoadTestRun(self, request: common_pb2.EraseLoadTestRunRequest, context: Any) -> Any:
                token = dict(context.invocation_metadata())["authorization"].removeprefix("Bearer ")
                identity = fake.verify(token)
                who = f"{identity.kind.value}:{identity.name}"
                fake.calls.append((service, request.request_id, request.dry_run, who))
                if service in fake.unavailable:
                    fake.unavailable.discard(service)
                    code = grpc.StatusCode.ABORTED if service == "ranking" else grpc.StatusCode.UNAVAILABLE
                    await context.abort(code, "try again")
                if fake.refusals.get(service, 0) > 0:
                    fake.refusals[service] -= 1
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "2 tables in play")
                return common_pb2.EraseLoadTestRunResponse(
                    run_id=request.run_id, dry_run=request.dry_run,
                    erased=[common_pb2.ErasedRecords(kind=f"{service}_rows", count=len(service))],
                )

        return Servicer()


@contextlib.asynccontextmanager
async def fake_suite(fake: Fake) -> AsyncIterator[str]:
    server = grpc.aio.server()
    game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(
        fake.servicer("game_session", game_session_pb2_grpc.GameSessionServiceServicer), server)
    matchmaking_pb2_grpc.add_MatchmakingServiceServicer_to_server(
        fake.servicer("matchmaking", matchmaking_pb2_grpc.MatchmakingServiceServicer), server)
    ranking_pb2_grpc.add_RankingServiceServicer_to_server(
        fake.servicer("ranking", ranking_pb2_grpc.RankingServiceServicer), server)
    wallet_pb2_grpc.add_WalletServiceServicer_to_server(
        fake.servicer("wallet", wallet_pb2_grpc.WalletServiceServicer), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


def verifier(keys: Path) -> Any:
    dev_minter(keys)
    return Verifier(parse_public_keys((keys / "dev-public.pem").read_bytes()), audience="buraco").verify


async def run(tmp_path: Path, fake: Fake, address: str, *, dry_run: bool = False,
              services: tuple[str, ...] = cleanup.ORDER, wait: float = 0.0) -> tuple[int, list[str]]:
    lines: list[str] = []
    tokens = Tokens.from_key(tmp_path / "keys" / "dev-private.pem")
    status = await cleanup.cleanup("lt1", services, dict.fromkeys(cleanup.ORDER, address), Channels(connections=1),
                                   tokens, dry_run, 10.0, lines.append, wait=wait)
    return status, lines


async def test_every_service_is_checked_then_erased_in_order_as_the_admin(tmp_path: Path) -> None:
    fake = Fake(verifier(tmp_path / "keys"))
    async with fake_suite(fake) as address:
        status, lines = await run(tmp_path, fake, address)
    assert status == 0
    order = list(cleanup.ORDER)
    assert [(s, dry) for s, _, dry, _ in fake.calls] == [(s, True) for s in order] + [(s, False) for s in order]
    assert {who for *_, who in fake.calls} == {"admin:loadtest"}
    checks, erasures = {rid for _, rid, dry, _ in fake.calls if dry}, {rid for _, rid, dry, _ in fake.calls if not dry}
    assert len(checks) == len(erasures) == 1 and checks != erasures  # one request id for all erasures
    assert "erased wallet: wallet_rows 6" in lines and lines[-1].startswith("cleanup: run lt1: erased in")


async def test_a_refusal_in_the_dry_runs_erases_nothing_anywhere(tmp_path: Path) -> None:
    fake = Fake(verifier(tmp_path / "keys"), refuse=frozenset({"ranking"}))
    async with fake_suite(fake) as address:
        status, lines = await run(tmp_path, fake, address)
    assert status == 1
    assert all(dry for _, _, dry, _ in fake.calls) and len(fake.calls) == 4
    assert "refused ranking: FAILED_PRECONDITION: 2 tables in play" in lines
    assert "nothing erased" in lines[-1]


async def test_with_wait_the_dry_runs_are_asked_again_until_none_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleanup, "RECHECK_SECONDS", 0.01)
    fake = Fake(verifier(tmp_path / "keys"), refuse=frozenset({"ranking"}), refusals=2)
    async with fake_suite(fake) as address:
        status, lines = await run(tmp_path, fake, address, services=("ranking", "wallet"), wait=30.0)
    assert status == 0
    checks = [(s, rid) for s, rid, dry, _ in fake.calls if dry]
    assert [s for s, _ in checks] == ["ranking", "wallet"] * 3
    assert len({rid for _, rid in checks}) == 3  # a request id per round
    assert [(s, dry) for s, _, dry, _ in fake.calls[6:]] == [("ranking", False), ("wallet", False)]
    assert sum(line.startswith("waiting: ranking: FAILED_PRECONDITION") for line in lines) == 2


async def test_a_dry_run_only_counts(tmp_path: Path) -> None:
    fake = Fake(verifier(tmp_path / "keys"))
    async with fake_suite(fake) as address:
        status, lines = await run(tmp_path, fake, address, dry_run=True, services=("ranking", "wallet"))
    assert status == 0
    assert [(s, dry) for s, _, dry, _ in fake.calls] == [("ranking", True), ("wallet", True)]
    assert "would erase ranking: ranking_rows 7" in lines


@pytest.mark.parametrize("service", ["matchmaking", "ranking"])  # UNAVAILABLE, ABORTED
async def test_an_unavailable_or_aborted_call_is_retried_with_the_same_request_id(tmp_path: Path, service: str) -> None:
    fake = Fake(verifier(tmp_path / "keys"), unavailable=frozenset({service}))
    async with fake_suite(fake) as address:
        status, _ = await run(tmp_path, fake, address, services=(service,))
    assert status == 0
    asked = [(rid, dry) for s, rid, dry, _ in fake.calls if s == service]
    assert len(asked) == 3 and asked[0] == asked[1] and asked[0][1] and not asked[2][1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run-id", "lt_1"], "--run-id must be"),
        (["--run-id", "lt1", "--only", "tournament"], "--only takes"),
        (["--run-id", "lt1", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    ],
)
def test_bad_arguments_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["cleanup", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_tokens_file_needs_the_admin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"player:lt1-0": "x"}')
    assert main(["cleanup", "--run-id", "lt1", "--tokens", str(tokens)]) == 2
    assert "has no token for admin:loadtest" in capsys.readouterr().err


def test_the_admin_token_is_an_admin_token(tmp_path: Path) -> None:
    verify = verifier(tmp_path / "keys")
    identity = verify(Tokens.from_key(tmp_path / "keys" / "dev-private.pem").token(Kind.ADMIN, cleanup.ADMIN))
    assert (identity.kind, identity.name) == (Kind.ADMIN, "loadtest")
