"""Scoped signing keys: each verification key signs only what its scope allows; the key set is a
JWKS file (PEM only in local mode), read again when it changes, so keys rotate without a restart."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from buraco.v1 import wallet_pb2, wallet_pb2_grpc
from services.common.auth import (
    KeyFile,
    Kind,
    Minter,
    Scope,
    Verifier,
    jwk_of,
    keys_from_config,
    parse_key_set,
)
from services.common.config import Config, ConfigError
from services.common.errors import UnauthenticatedError
from tests.services.harness import bearer, dev_minter, make_config, running

ROOT = Path(__file__).resolve().parents[3]


def _key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def _pem(key: ed25519.Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _jwks(*entries: tuple[ed25519.Ed25519PrivateKey, str]) -> bytes:
    return json.dumps({"keys": [jwk_of(k.public_key(), Scope.parse(s, "test")) for k, s in entries]}).encode()


def _minter(key: ed25519.Ed25519PrivateKey) -> Minter:
    return Minter(key, audience="buraco")


GATEWAY, MATCHMAKING, ADMIN = "player", "service:matchmaking", "admin"


def test_each_key_signs_only_what_its_scope_allows() -> None:
    gateway, matchmaking, admin = _key(), _key(), _key()
    verifier = Verifier(parse_key_set(_jwks((gateway, GATEWAY), (matchmaking, MATCHMAKING), (admin, ADMIN))),
                        audience="buraco")
    allowed = [(gateway, Kind.PLAYER, "alice"), (matchmaking, Kind.SERVICE, "matchmaking"), (admin, Kind.ADMIN, "ops")]
    for key, kind, name in allowed:
        assert verifier.verify(_minter(key).mint(kind, name)).kind is kind
    refused = [
        (gateway, Kind.ADMIN, "root", "may not sign admin tokens (its scope: player)"),
        (gateway, Kind.SERVICE, "wallet", "may not sign service tokens for wallet"),
        (matchmaking, Kind.SERVICE, "game-session", "may not sign service tokens for game-session"),
        (matchmaking, Kind.PLAYER, "alice", "may not sign player tokens (its scope: service:matchmaking)"),
        (admin, Kind.PLAYER, "alice", "may not sign player tokens (its scope: admin)"),
    ]
    for key, kind, name, message in refused:
        with pytest.raises(UnauthenticatedError, match=message.replace("(", r"\(").replace(")", r"\)")):
            verifier.verify(_minter(key).mint(kind, name))


def test_a_key_set_that_cannot_be_trusted_is_refused_with_its_reason() -> None:
    key = _key()
    entry = jwk_of(key.public_key(), Scope(player=True))
    cases = [
        ({"keys": [{k: v for k, v in entry.items() if k != "scope"}]}, "every key needs a `scope`"),
        ({"keys": [entry | {"scope": "player owner"}]}, "unknown scope grant 'owner'"),
        ({"keys": [entry | {"kid": "0123456789abcdef"}]}, "its kid must be"),
        ({"keys": []}, "non-empty `keys` list"),
        ({"keys": [entry | {"x": "AAAA"}]}, "key 0"),
    ]
    for document, message in cases:
        with pytest.raises(ConfigError, match=message):
            parse_key_set(json.dumps(document).encode(), "keys.json")
    with pytest.raises(ConfigError, match="not a JWKS document"):
        parse_key_set(b"{not json", "keys.json")


def test_production_needs_a_scope_on_every_key(tmp_path: Path) -> None:
    key = _key()
    pem, jwks = tmp_path / "keys.pem", tmp_path / "keys.json"
    pem.write_bytes(_pem(key))
    jwks.write_bytes(_jwks((key, GATEWAY)))
    production = Config(service="wallet", env="production", dev_keys_dir=tmp_path / "none")
    with pytest.raises(ConfigError, match="in production every key needs a scope"):
        keys_from_config(Config(**{**production.__dict__, "jwt_public_keys": pem}))
    verifier, _ = keys_from_config(Config(**{**production.__dict__, "jwt_public_keys": jwks}))
    assert verifier.verify(_minter(key).mint(Kind.PLAYER, "alice")).name == "alice"
    # local mode takes a PEM key set (unscoped) beside its dev key
    local, _ = keys_from_config(Config(service="wallet", jwt_public_keys=pem, dev_keys_dir=tmp_path / "dev"))
    assert local.verify(_minter(key).mint(Kind.ADMIN, "ops")).kind is Kind.ADMIN


def test_keys_rotate_without_a_restart(tmp_path: Path) -> None:
    """Old and new key side by side, the signer switches, then the old key is removed: its tokens
    stop at once, even those verified (and cached) before."""
    old, new = _key(), _key()
    path = tmp_path / "keys.json"
    path.write_bytes(_jwks((old, GATEWAY)))
    now = [1_000_000.0]
    verifier = Verifier(KeyFile(path, local=False).load(), audience="buraco", clock=lambda: now[0],
                        source=KeyFile(path, local=False), reload_seconds=30)
    old_token = _minter(old).mint(Kind.PLAYER, "alice", ttl=10**9)
    new_token = _minter(new).mint(Kind.PLAYER, "bob", ttl=10**9)
    assert verifier.verify(old_token).name == "alice"
    with pytest.raises(UnauthenticatedError, match="unknown key"):
        verifier.verify(new_token)

    _replace(path, _jwks((old, GATEWAY), (new, GATEWAY)))
    with pytest.raises(UnauthenticatedError, match="unknown key"):
        verifier.verify(new_token)  # not before the next check
    now[0] += 31
    assert verifier.verify(new_token).name == "bob"
    assert verifier.verify(old_token).name == "alice"

    _replace(path, _jwks((new, GATEWAY)))
    now[0] += 31
    with pytest.raises(UnauthenticatedError, match="unknown key"):
        verifier.verify(old_token)
    assert verifier.verify(new_token).name == "bob"

    # a bad key set (half written, wrong scope syntax) leaves the keys in place
    _replace(path, b'{"keys": [{"kty": "OKP"}]}')
    now[0] += 31
    assert verifier.verify(new_token).name == "bob"
    # and a scope narrowed in place applies at the next check
    _replace(path, _jwks((new, ADMIN)))
    now[0] += 31
    with pytest.raises(UnauthenticatedError, match="may not sign player tokens"):
        verifier.verify(new_token)


def _replace(path: Path, data: bytes) -> None:
    """As a Kubernetes Secret's update does: a new file renamed into place."""
    aside = path.with_suffix(".new")
    aside.write_bytes(data)
    aside.replace(path)


async def test_a_service_refuses_a_token_signed_outside_its_keys_scope(tmp_path: Path) -> None:
    from services.wallet.service import SPEC

    gateway = _key()
    keys = tmp_path / "keys.json"
    keys.write_bytes(_jwks((gateway, GATEWAY)))
    config = make_config("wallet", tmp_path, jwt_public_keys=keys)
    async with running(SPEC, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        stub = wallet_pb2_grpc.WalletServiceStub(channel)
        request = wallet_pb2.CreateAccountRequest(request_id="r1", player="players/alice")
        forged = _minter(gateway).mint(Kind.ADMIN, "ops")  # the gateway's key making itself an admin
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateAccount(request, metadata=bearer(forged))
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "may not sign admin tokens" in (refused.value.details() or "")
        admin = dev_minter(tmp_path / "dev-keys").mint(Kind.ADMIN, "ops")  # local mode's dev key signs anything
        await stub.CreateAccount(request, metadata=bearer(admin))
        player = _minter(gateway).mint(Kind.PLAYER, "alice")
        own = wallet_pb2.GetAccountRequest(name="accounts/player-alice")
        account = await stub.GetAccount(own, metadata=bearer(player))
        assert account.name == "accounts/player-alice"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jwks_script", ROOT / "scripts" / "jwks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_writes_a_key_set_the_services_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gateway, service = _key(), _key()
    (tmp_path / "gateway.pub").write_bytes(_pem(gateway))
    (tmp_path / "mm.pub").write_bytes(_pem(service))
    script = _script()
    assert script.main([f"player={tmp_path / 'gateway.pub'}", f"service:matchmaking={tmp_path / 'mm.pub'}"]) == 0
    keys = parse_key_set(capsys.readouterr().out.encode())
    assert sorted(str(k.scope) for k in keys.values()) == ["player", "service:matchmaking"]
    assert script.main([f"owner={tmp_path / 'gateway.pub'}"]) == 2
    assert "unknown scope grant 'owner'" in capsys.readouterr().err
