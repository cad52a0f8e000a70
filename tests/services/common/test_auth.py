"""Tokens and identities (the interceptor's use of them is in test_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from services.common.auth import (
    DEV_PRIVATE_KEY,
    DEV_PUBLIC_KEY,
    Identity,
    Kind,
    Minter,
    Scope,
    Verifier,
    ensure_dev_keys,
    jwk_of,
    key_id,
    keys_from_config,
    load_private_key,
    parse_public_keys,
)
from services.common.config import Config, ConfigError
from services.common.errors import PermissionDeniedError, UnauthenticatedError
from tests.services.harness import ROOT


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Minter, Verifier]:
    private, public = ensure_dev_keys(tmp_path)
    keys = parse_public_keys(public.read_bytes())
    return Minter(load_private_key(private), audience="buraco"), Verifier(keys, audience="buraco")


def test_round_trip(pair: tuple[Minter, Verifier]) -> None:
    minter, verifier = pair
    identity = verifier.verify(minter.mint(Kind.PLAYER, "alice", client_ip="192.0.2.1"))
    assert identity.kind is Kind.PLAYER and identity.name == "alice" and identity.client_ip == "192.0.2.1"
    assert identity.principal == "players/alice" and identity.player == "alice"


def test_ecdsa_keys_work_too(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    verifier = Verifier({key_id(key.public_key()): key.public_key()}, audience="buraco")
    assert verifier.verify(Minter(key, audience="buraco").mint(Kind.SERVICE, "wallet")).kind is Kind.SERVICE


@pytest.mark.parametrize(
    "claims",
    [
        {"sub": "alice", "aud": "buraco", "exp": 9_999_999_999},  # no kind
        {"sub": "alice", "kind": "god", "aud": "buraco", "exp": 9_999_999_999},
        {"sub": "Alice!", "kind": "player", "aud": "buraco", "exp": 9_999_999_999},
        {"sub": "alice", "kind": "player", "aud": "buraco"},  # no expiry
        {"sub": "alice", "kind": "player", "aud": "elsewhere", "exp": 9_999_999_999},
        {"sub": "alice", "kind": "player", "aud": "buraco", "exp": 1},
    ],
)
def test_bad_claims_are_unauthenticated(tmp_path: Path, claims: dict[str, object]) -> None:
    private, public = ensure_dev_keys(tmp_path)
    key = load_private_key(private)
    token = jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": key_id(key.public_key())})
    with pytest.raises(UnauthenticatedError):
        Verifier(parse_public_keys(public.read_bytes()), audience="buraco").verify(token)


def test_symmetric_algorithms_are_refused(pair: tuple[Minter, Verifier], tmp_path: Path) -> None:
    _, verifier = pair
    _, public = ensure_dev_keys(tmp_path)
    kid = next(iter(parse_public_keys(public.read_bytes())))
    forged = jwt.encode(
        {"sub": "root", "kind": "admin", "aud": "buraco", "exp": 9_999_999_999},
        "a-shared-secret-of-at-least-32-bytes!!",
        algorithm="HS256",
        headers={"kid": kid},
    )
    with pytest.raises(UnauthenticatedError):
        verifier.verify(forged)


def test_acting_for(pair: tuple[Minter, Verifier]) -> None:
    minter, verifier = pair
    service = minter.mint(Kind.SERVICE, "matchmaking")
    acting = verifier.authenticate(
        [("authorization", f"Bearer {service}"), ("buraco-act-for", "players/bob")]
    )
    assert (
        acting.acting_for == "bob" and acting.player == "bob" and acting.principal == "services/matchmaking"
    )
    player = minter.mint(Kind.PLAYER, "alice")
    with pytest.raises(PermissionDeniedError):
        verifier.authenticate([("authorization", f"Bearer {player}"), ("buraco-act-for", "players/bob")])
    with pytest.raises(PermissionDeniedError):
        verifier.authenticate([("authorization", f"Bearer {service}"), ("buraco-act-for", "bob")])


def test_identity_guards() -> None:
    service = Identity(Kind.SERVICE, "wallet")
    with pytest.raises(PermissionDeniedError):
        service.require_player()
    with pytest.raises(PermissionDeniedError) as refused:
        service.require_kind(Kind.ADMIN, method="WalletService.AdminCorrection")
    # the refusal names the caller, the method and who may call it
    assert refused.value.message == "services/wallet may not call WalletService.AdminCorrection: only admins may"
    with pytest.raises(PermissionDeniedError, match="only players or admins may"):
        service.require_kind(Kind.PLAYER, Kind.ADMIN, method="X.Y")
    service.require_kind(Kind.SERVICE, Kind.ADMIN, method="X.Y")
    with pytest.raises(PermissionDeniedError):
        Identity(Kind.PLAYER, "alice").check_may_act_for("bob")


def test_dev_keys_are_made_once(tmp_path: Path) -> None:
    first = ensure_dev_keys(tmp_path)
    contents = first[0].read_bytes()
    assert ensure_dev_keys(tmp_path) == first and first[0].read_bytes() == contents
    assert first[0].stat().st_mode & 0o077 == 0


def _key_set(path: Path, key: Any, scope: str = "player") -> Path:
    """A one-key JWKS file (production needs a scope on every key)."""
    path.write_text(json.dumps({"keys": [jwk_of(key, Scope.parse(scope, str(path)))]}))
    return path


def test_production_refuses_the_dev_key(tmp_path: Path) -> None:
    dev_private, _ = ensure_dev_keys(tmp_path / "dev")
    dev_set = _key_set(tmp_path / "dev-set.json", load_private_key(dev_private).public_key())
    config = Config(
        service="wallet", env="production", jwt_public_keys=dev_set, dev_keys_dir=tmp_path / "dev"
    )
    with pytest.raises(ConfigError, match="dev key"):
        keys_from_config(config)
    own = _key_set(tmp_path / "prod.json", ed25519.Ed25519PrivateKey.generate().public_key())
    _verifier, minter = keys_from_config(replace(config, jwt_public_keys=own))
    assert minter is None  # no private key configured: this service makes no outbound calls


def test_local_mode_generates_and_trusts_dev_keys(tmp_path: Path) -> None:
    config = Config(service="wallet", dev_keys_dir=tmp_path / "dev")
    verifier, minter = keys_from_config(config)
    assert minter is not None
    assert verifier.verify(minter.mint(Kind.ADMIN, "root")).kind is Kind.ADMIN


def test_services_that_call_others_need_a_private_key_in_production(tmp_path: Path) -> None:
    from services.common.server import Server
    from services.matchmaking.service import SPEC as MATCHMAKING
    from services.wallet.service import SPEC as WALLET

    key = ed25519.Ed25519PrivateKey.generate()
    public = _key_set(tmp_path / "trusted.json", key.public_key(), "service:matchmaking")
    config = Config(
        service="matchmaking", env="production", jwt_public_keys=public, dev_keys_dir=tmp_path / "x"
    )
    with pytest.raises(ConfigError, match="BURACO_JWT_PRIVATE_KEY"):
        Server(MATCHMAKING, config)
    assert Server(WALLET, replace(config, service="wallet")).minter is None  # the wallet calls no one
    private = tmp_path / "matchmaking.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    assert Server(MATCHMAKING, replace(config, jwt_private_key=private)).minter is not None


def test_verified_tokens_are_cached_until_they_expire(tmp_path: Path) -> None:
    private, public = ensure_dev_keys(tmp_path)
    now = [1_000_000.0]
    verifier = Verifier(
        parse_public_keys(public.read_bytes()), audience="buraco", leeway=10, clock=lambda: now[0]
    )
    key = load_private_key(private)
    token = jwt.encode(
        {"sub": "alice", "kind": "player", "aud": "buraco", "exp": 1_000_060},
        key,
        algorithm="EdDSA",
        headers={"kid": key_id(key.public_key())},
    )
    first = verifier.verify(token)
    assert verifier.verify(token) is first  # from the cache
    now[0] += 65  # past exp, within the leeway
    assert verifier.verify(token) is first
    now[0] += 10  # past exp + leeway: the cached token is refused
    with pytest.raises(UnauthenticatedError, match="expired"):
        verifier.verify(token)
    with pytest.raises(UnauthenticatedError, match="expired"):
        verifier.verify(token)  # and stays refused once out of the cache


def test_processes_starting_at_once_share_one_dev_key_pair(tmp_path: Path) -> None:
    """`make run` starts every service at once, each making sure the dev key pair exists: they all
    end up with the same pair, whose public key is the private key's."""
    directory = tmp_path / "keys"
    script = ("import sys; from pathlib import Path; from services.common.auth import ensure_dev_keys; "
              "p, q = ensure_dev_keys(Path(sys.argv[1])); print(p.read_text() + q.read_text())")
    starting = [subprocess.Popen([sys.executable, "-c", script, str(directory)], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
                for _ in range(12)]
    seen = {process.communicate(timeout=60)[0] for process in starting}
    assert all(process.returncode == 0 for process in starting)
    assert len(seen) == 1, "the processes saw different key pairs"
    private = serialization.load_pem_private_key((directory / DEV_PRIVATE_KEY).read_bytes(), None)
    public = (directory / DEV_PUBLIC_KEY).read_bytes()
    assert private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo) == public
