"""Signing players in: who they are, and the token the browser holds.

- `dev` (local mode only): a name, no password. The player id is the name in lower case.
- `oidc`: an OpenID Connect ID token from the configured issuer, checked here (signature by the
  issuer's keys, `iss`, `aud`, `exp`, `iat`, `sub`). The player id is derived from the issuer and
  the subject (`o` and 25 characters of base32 of their SHA-256): stable across sign-ins, the same
  for no two accounts of the issuer, and within the suite's name rule.

Either way the browser gets a player token minted by the gateway (`kind` player, the suite's
audience, valid BURACO_GATEWAY_TOKEN_SECONDS) carrying the end of its session (`sx`: sign-in time
plus BURACO_GATEWAY_SESSION_SECONDS). A token still valid can be refreshed until the session ends;
then the player signs in again. The services never see this token: each call upstream carries one
the gateway mints for the player and the address they call from (`upstream.PlayerTokens`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jwt

from services.common.auth import NAME_PATTERN, Identity, Kind, Minter, Verifier
from services.common.errors import ServiceError
from services.gateway.errors import EdgeError, invalid, unauthenticated
from services.gateway.settings import GatewaySettings

#: The claim carrying the end of the session (seconds since the epoch) in the gateway's tokens.
SESSION_END_CLAIM = "sx"
#: Signature algorithms accepted on ID tokens (asymmetric only: a shared secret is no issuer's key).
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
ID_TOKEN_LEEWAY_SECONDS = 30.0


@dataclass(frozen=True)
class Session:
    """What a sign-in or a refresh answers."""

    player: str
    display_name: str
    token: str
    expires_at: float
    session_ends_at: float

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "player": f"players/{self.player}",
            "displayName": self.display_name,
            "token": self.token,
            "expiresIn": max(0, int(self.expires_at - now)),
            "sessionEndsIn": max(0, int(self.session_ends_at - now)),
        }


def oidc_player_id(issuer: str, subject: str) -> str:
    digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).digest()
    return "o" + base64.b32encode(digest).decode().lower()[:25]


class IdTokens:
    """Checks ID tokens of one issuer, with its keys from a JWKS file or URL. A URL's keys are
    fetched on first use, cached, and fetched again when a token names a key id not among them
    (the issuer rotated its keys)."""

    def __init__(self, issuer: str, audience: str, jwks: str, clock: Callable[[], float] = time.time) -> None:
        self.issuer = issuer
        self.audience = audience
        self._clock = clock
        self._client: jwt.PyJWKClient | None = None
        self._keys: dict[str, Any] = {}
        if jwks.startswith(("https://", "http://")):
            self._client = jwt.PyJWKClient(jwks, cache_keys=True, lifespan=3600, timeout=10)
        else:
            key_set = jwt.PyJWKSet.from_json(Path(jwks).read_text())
            self._keys = {key.key_id or "": key for key in key_set.keys}

    async def _key(self, token: str) -> Any:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise unauthenticated("the ID token is malformed") from None
        kid = str(header.get("kid") or "")
        if self._client is not None:
            try:
                return (await asyncio.to_thread(self._client.get_signing_key, kid)).key
            except jwt.PyJWKClientConnectionError:
                raise EdgeError(grpc.StatusCode.UNAVAILABLE,
                                "the sign-in provider's keys cannot be fetched; retry") from None
            except jwt.PyJWKClientError:
                raise unauthenticated("the ID token is signed with a key the issuer does not publish") from None
        key = self._keys.get(kid) or (next(iter(self._keys.values())) if not kid and len(self._keys) == 1 else None)
        if key is None:
            raise unauthenticated("the ID token is signed with a key the issuer does not publish")
        return key.key

    async def check(self, token: str) -> dict[str, Any]:
        """The ID token's claims; UNAUTHENTICATED saying what is wrong with it."""
        key = await self._key(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=ID_TOKEN_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=ID_TOKEN_LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "sub", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise unauthenticated("the ID token has expired") from None
        except jwt.InvalidAudienceError:
            raise unauthenticated("the ID token is for another client (aud)") from None
        except jwt.InvalidIssuerError:
            raise unauthenticated("the ID token is from another issuer (iss)") from None
        except jwt.PyJWTError as error:
            raise unauthenticated(f"the ID token is not valid: {error}") from None
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            raise unauthenticated("the ID token names no subject (sub)")
        return claims


class SignIn:
    """Sign-ins and refreshes; opens a new player's wallet account (`open_account`)."""

    def __init__(self, settings: GatewaySettings, minter: Minter, verifier: Verifier,
                 open_account: Callable[[str], Any], clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.minter = minter
        self.verifier = verifier
        self.open_account = open_account
        self.clock = clock
        self.id_tokens: IdTokens | None = None
        if settings.sign_in == "oidc":
            assert settings.oidc_issuer and settings.oidc_audience and settings.oidc_jwks  # settings.load checks
            self.id_tokens = IdTokens(settings.oidc_issuer, settings.oidc_audience, settings.oidc_jwks, clock)

    def _session(self, player: str, display_name: str, client_ip: str, session_ends_at: float) -> Session:
        now = self.clock()
        ttl = min(self.settings.token_seconds, session_ends_at - now)
        token = self.minter.mint(Kind.PLAYER, player, ttl=ttl, client_ip=client_ip or None,
                                 claims={SESSION_END_CLAIM: int(session_ends_at), "name": display_name})
        return Session(player, display_name, token, now + int(ttl), session_ends_at)

    async def sign_in(self, body: dict[str, Any], client_ip: str) -> Session:
        """A sign-in: `{"name": ...}` (dev) or `{"idToken": ...}` (oidc)."""
        if self.id_tokens is None:
            name = body.get("name")
            if not isinstance(name, str) or not name.strip():
                raise invalid("name: required (a development sign-in takes a name and no password)")
            player = name.strip().lower()
            if not NAME_PATTERN.fullmatch(player):
                raise invalid("name: 1 to 63 letters, digits, `_` or `-`, starting with a letter or digit")
            display_name = name.strip()
        else:
            id_token = body.get("idToken", body.get("id_token"))
            if not isinstance(id_token, str) or not id_token:
                raise invalid("idToken: required (an OpenID Connect ID token from the sign-in provider)")
            claims = await self.id_tokens.check(id_token)
            player = oidc_player_id(self.id_tokens.issuer, claims["sub"])
            display_name = str(claims.get("name") or claims.get("preferred_username") or player)[:64]
        await self.open_account(player)
        return self._session(player, display_name, client_ip, self.clock() + self.settings.session_seconds)

    def identify(self, token: str) -> Identity:
        """The player a token the gateway minted names; UNAUTHENTICATED (bad, expired) or
        PERMISSION_DENIED (not a player's) otherwise."""
        try:
            identity = self.verifier.verify(token)
        except ServiceError as error:
            raise EdgeError(error.code, error.message) from None
        if identity.kind is not Kind.PLAYER:
            raise EdgeError(grpc.StatusCode.PERMISSION_DENIED, "the gateway serves players: sign in for a player token")
        return identity

    def session_end(self, token: str) -> float:
        """When the session of a token the gateway minted (and `identify` accepted) ends."""
        ends_at = jwt.decode(token, options={"verify_signature": False}).get(SESSION_END_CLAIM)
        return float(ends_at) if isinstance(ends_at, int | float) else 0.0

    def refresh(self, token: str, client_ip: str) -> Session:
        """A new token for the session of `token` (still valid), until the session ends."""
        identity = self.identify(token)
        claims = jwt.decode(token, options={"verify_signature": False})  # verified just above
        ends_at = self.session_end(token)
        if ends_at - self.clock() < 1:
            raise unauthenticated("the session has ended: sign in again")
        return self._session(identity.name, str(claims.get("name") or identity.name), client_ip, ends_at)
