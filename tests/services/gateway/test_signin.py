"""Signing in: the development sign-in, OpenID Connect ID tokens checked against the issuer's
keys, the tokens the gateway mints, refreshes until the session ends."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from services.common.auth import Kind, Minter, Verifier, ensure_dev_keys, load_private_key, parse_public_keys
from services.gateway.errors import EdgeError
from services.gateway.settings import GatewaySettings
from services.gateway.signin import SESSION_END_CLAIM, SignIn, oidc_player_id

ISSUER = "https://id.example"
CLIENT = "buraco-web"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Minter, Verifier]:
    private, public = ensure_dev_keys(tmp_path / "keys")
    return (Minter(load_private_key(private), audience="buraco"),
            Verifier(parse_public_keys(public.read_bytes()), audience="buraco", leeway=0))


@pytest.fixture
def issuer_key(tmp_path: Path) -> tuple[rsa.RSAPrivateKey, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    return key, jwks


def id_token(key: rsa.RSAPrivateKey, kid: str = "k1", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "user-42", "iat": now, "exp": now + 300, "name": "Ana Lima",
            **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


opened: list[str] = []


async def open_account(player: str) -> None:
    opened.append(player)


async def test_the_development_sign_in_takes_a_name(keys: tuple[Minter, Verifier]) -> None:
    minter, verifier = keys
    sign_in = SignIn(GatewaySettings(token_seconds=600, session_seconds=3600), minter, verifier, open_account)
    session = await sign_in.sign_in({"name": "Ana"}, "203.0.113.5")
    assert session.player == "ana" and session.display_name == "Ana" and opened[-1] == "ana"
    identity = sign_in.identify(session.token)
    assert identity.kind is Kind.PLAYER and identity.name == "ana" and identity.client_ip == "203.0.113.5"
    for bad in ({}, {"name": ""}, {"name": "ana lima"}, {"name": "-x"}, {"name": 7}):
        with pytest.raises(EdgeError) as refused:
            await sign_in.sign_in(bad, "203.0.113.5")
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT and "name" in refused.value.message


async def test_an_id_token_signs_in_the_same_player_every_time(
        keys: tuple[Minter, Verifier], issuer_key: tuple[rsa.RSAPrivateKey, Path]) -> None:
    minter, verifier = keys
    key, jwks = issuer_key
    settings = GatewaySettings(sign_in="oidc", oidc_issuer=ISSUER, oidc_audience=CLIENT, oidc_jwks=str(jwks))
    sign_in = SignIn(settings, minter, verifier, open_account)
    first = await sign_in.sign_in({"idToken": id_token(key)}, "203.0.113.5")
    again = await sign_in.sign_in({"idToken": id_token(key)}, "198.51.100.7")
    assert first.player == again.player == oidc_player_id(ISSUER, "user-42")
    assert first.display_name == "Ana Lima"
    assert (await sign_in.sign_in({"idToken": id_token(key, sub="user-43")}, "x")).player != first.player
    with pytest.raises(EdgeError, match="idToken: required"):  # a name is no sign-in here
        await sign_in.sign_in({"name": "ana"}, "x")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"aud": "another-app"}, "another client"),
        ({"iss": "https://evil.example"}, "another issuer"),
        ({"exp": int(time.time()) - 120}, "expired"),
        ({"kid": "k2"}, "key the issuer does not publish"),
        ({"forged": True}, "not valid"),
    ],
)
async def test_a_bad_id_token_is_refused_saying_why(
        keys: tuple[Minter, Verifier], issuer_key: tuple[rsa.RSAPrivateKey, Path], change: dict[str, Any],
        problem: str) -> None:
    minter, verifier = keys
    key, jwks = issuer_key
    settings = GatewaySettings(sign_in="oidc", oidc_issuer=ISSUER, oidc_audience=CLIENT, oidc_jwks=str(jwks))
    sign_in = SignIn(settings, minter, verifier, open_account)
    claims = {k: v for k, v in change.items() if k not in ("kid", "forged")}
    if change.get("forged"):
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        token = id_token(other, **claims)
    else:
        token = id_token(key, kid=str(change.get("kid", "k1")), **claims)
    with pytest.raises(EdgeError) as refused:
        await sign_in.sign_in({"idToken": token}, "203.0.113.5")
    assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert problem in refused.value.message


async def test_refresh_until_the_session_ends(keys: tuple[Minter, Verifier]) -> None:
    minter, verifier = keys
    clock = Clock()
    sign_in = SignIn(GatewaySettings(token_seconds=600, session_seconds=1000), minter, verifier, open_account,
                     clock=clock)
    session = await sign_in.sign_in({"name": "bia"}, "203.0.113.5")
    ends = jwt.decode(session.token, options={"verify_signature": False})[SESSION_END_CLAIM]
    refreshed = sign_in.refresh(session.token, "203.0.113.9")
    claims = jwt.decode(refreshed.token, options={"verify_signature": False})
    assert claims[SESSION_END_CLAIM] == ends and claims["sub"] == "bia" and claims["ip"] == "203.0.113.9"
    clock.now += 900  # 100 s of session left: the new token ends with it
    late = sign_in.refresh(refreshed.token, "203.0.113.9")
    assert late.expires_at == pytest.approx(ends, abs=1)
    clock.now = ends + 1
    with pytest.raises(EdgeError, match="session has ended"):
        sign_in.refresh(late.token, "203.0.113.9")


async def test_only_player_tokens_pass(keys: tuple[Minter, Verifier]) -> None:
    minter, verifier = keys
    sign_in = SignIn(GatewaySettings(), minter, verifier, open_account)
    with pytest.raises(EdgeError) as refused:
        sign_in.identify(minter.mint(Kind.ADMIN, "root", ttl=60))
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(EdgeError) as refused:
        sign_in.identify("not-a-token")
    assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
