"""The `buraco` command: tokens from the dev key, calls by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.__main__ import main
from services.common.auth import Kind, Verifier, ensure_dev_keys, parse_public_keys
from services.wallet.service import SPEC
from tests.services.harness import make_config, running


def test_token_is_signed_with_the_dev_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BURACO_DEV_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.delenv("BURACO_JWT_PRIVATE_KEY", raising=False)
    assert main(["token", "--admin", "root", "--ttl", "60"]) == 0
    token = capsys.readouterr().out.strip()
    _, public = ensure_dev_keys(tmp_path / "keys")
    identity = Verifier(parse_public_keys(public.read_bytes()), audience="buraco").verify(token)
    assert (identity.kind, identity.name) == (Kind.ADMIN, "root")


async def test_call_reports_the_status_and_lists_methods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config("wallet", tmp_path)
    monkeypatch.setenv("BURACO_DEV_KEYS_DIR", str(config.dev_keys_dir))
    async with running(SPEC, config) as server:
        import asyncio

        def call(*args: str) -> int:
            return main(["call", *args, "--address", server.address])

        assert await asyncio.to_thread(call, "wallet") == 0
        assert "HoldBets\tunary\tHoldBetsRequest -> HoldBetsResponse" in capsys.readouterr().out
        code = await asyncio.to_thread(
            call, "wallet", "GetAccount", '{"name": "accounts/player-alice"}', "--player", "alice"
        )
        assert code == 1
        assert capsys.readouterr().err.startswith("NOT_FOUND: accounts/player-alice does not exist")
        assert await asyncio.to_thread(call, "wallet", "GetAccount", "{}") == 1
        assert capsys.readouterr().err.startswith("UNAUTHENTICATED")
        assert await asyncio.to_thread(call, "wallet", "GetAccount", '{"nope": 1}', "--player", "alice") == 2
