"""Who is calling: JWT identities, key loading, dev keys and token minting.

Every call carries `authorization: Bearer <JWT>`. The token is signed with an asymmetric key
(Ed25519 by default; ECDSA P-256 and RSA are accepted) whose id is the token header's `kid`, and
carries these claims:

    sub   the caller's id: a player id, a service name or an admin's name ([a-z0-9][a-z0-9_-]{0,62})
    kind  "player" (through a gateway), "service" or "admin"
    aud   the configured audience (BURACO_JWT_AUDIENCE)
    exp   expiry (required), iat, jti
    ip    optional: the player's address, as the gateway saw it (signed, so a player cannot forge it)

A service or admin may act for a player by adding the metadata `buraco-act-for: players/{player}`;
the identity then carries `acting_for`, the call log records it, and `Identity.player` is that
player. A player may only name themselves there (anything else is PERMISSION_DENIED).

Handlers read the caller with `current_identity()`, never from a request body. A method that
service identities call admits exactly the services its service's `Callers` table names (and
admins where it says so): `CALLERS.require(method)` in the handler.

Each verification key is bound to what it may sign (its `Scope`): the gateway's key player tokens
only, each service's key service tokens for that service only, the admin key admin tokens. The key
set (BURACO_JWT_PUBLIC_KEYS) is a JWKS file with a `scope` member on each key; a token signed
outside its key's scope is UNAUTHENTICATED. A PEM file (keys without a scope) is accepted in local
mode only. The key set is read again when its file changes (checked every
BURACO_JWT_KEYS_RELOAD_SECONDS), so keys rotate without a restart: add the new key beside the old,
switch the signer, then remove the old one.
"""

from __future__ import annotations

import contextvars
import fcntl
import hashlib
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from services.common.config import Config, ConfigError
from services.common.errors import PermissionDeniedError, UnauthenticatedError

PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
ACT_FOR_HEADER = "buraco-act-for"
DEV_PRIVATE_KEY = "dev-private.pem"
DEV_PUBLIC_KEY = "dev-public.pem"


class Kind(StrEnum):
    PLAYER = "player"
    SERVICE = "service"
    ADMIN = "admin"


_COLLECTION = {Kind.PLAYER: "players", Kind.SERVICE: "services", Kind.ADMIN: "admins"}
log = logging.getLogger("buraco.auth")


@dataclass(frozen=True)
class Scope:
    """What one verification key may sign: player tokens, admin tokens, and service tokens for
    the services named (`*`: any service)."""

    player: bool = False
    admin: bool = False
    services: frozenset[str] = frozenset()

    def allows(self, kind: Kind, name: str) -> bool:
        if kind is Kind.SERVICE:
            return "*" in self.services or name in self.services
        return self.player if kind is Kind.PLAYER else self.admin

    @classmethod
    def parse(cls, text: object, source: str) -> Scope:
        """A JWK's `scope`: grants separated by spaces: `player`, `admin`, `service:<name>`,
        `service:*`."""
        if not isinstance(text, str) or not text.split():
            raise ConfigError(f"{source}: every key needs a `scope` (player, admin, service:<name>)")
        player = admin = False
        services: set[str] = set()
        for grant in text.split():
            if grant == "player":
                player = True
            elif grant == "admin":
                admin = True
            elif grant.startswith("service:") and (grant[8:] == "*" or NAME_PATTERN.fullmatch(grant[8:])):
                services.add(grant[8:])
            else:
                raise ConfigError(f"{source}: unknown scope grant {grant!r} (player, admin, service:<name>)")
        return cls(player, admin, frozenset(services))

    def __str__(self) -> str:
        grants = (["player"] if self.player else []) + (["admin"] if self.admin else [])
        return " ".join(grants + [f"service:{s}" for s in sorted(self.services)])


#: A key with no scope of its own (a PEM key set, local mode only): it may sign anything.
UNSCOPED = Scope(player=True, admin=True, services=frozenset({"*"}))


class TrustedKey(NamedTuple):
    """A verification key and what it may sign; `scoped`: the scope came from the key set."""

    key: PublicKey
    scope: Scope = UNSCOPED
    scoped: bool = False


@dataclass(frozen=True)
class Identity:
    """The authenticated caller of one call."""

    kind: Kind
    name: str
    token_id: str = ""
    client_ip: str | None = None
    #: The player id a service or admin acts for (from `buraco-act-for`), else None.
    acting_for: str | None = None
    #: When the token stops being valid (seconds since the epoch, its `exp`): a long-lived stream
    #: that carries calls of its own (`Play`) checks it at each message.
    expires_at: float = math.inf

    @property
    def principal(self) -> str:
        """The caller as a resource name: `players/alice`, `services/matchmaking`, `admins/bob`."""
        return f"{_COLLECTION[self.kind]}/{self.name}"

    @property
    def player(self) -> str | None:
        """The player id the call is about: the caller if a player, else the one acted for."""
        return self.name if self.kind is Kind.PLAYER else self.acting_for

    def require_kind(self, *kinds: Kind, method: str) -> None:
        """PERMISSION_DENIED naming the caller, the method (``Service.Method``) and who may call it,
        unless the caller is of one of ``kinds``."""
        if self.kind not in kinds:
            allowed = " or ".join(_COLLECTION[k] for k in kinds)
            raise PermissionDeniedError(f"{self.principal} may not call {method}: only {allowed} may")

    def require_player(self) -> str:
        """The player the call is about; PERMISSION_DENIED when there is none."""
        player = self.player
        if player is None:
            raise PermissionDeniedError(f"{self.principal} must act for a player ({ACT_FOR_HEADER})")
        return player

    def check_may_act_for(self, player: str) -> None:
        """Players may only act on themselves; services and admins on anyone."""
        if self.kind is Kind.PLAYER and player != self.name:
            raise PermissionDeniedError(f"players/{self.name} may not act for players/{player}")


#: In `Allowed.services`: any service identity.
ANY_SERVICE = "*"


@dataclass(frozen=True)
class Allowed:
    """Who may call one method that service identities call: the services named (`ANY_SERVICE`:
    every service), and admins when `admins`. Players never: a method open to players checks them
    itself before it consults the table."""

    services: frozenset[str]
    admins: bool = False

    def admits(self, identity: Identity) -> bool:
        if identity.kind is Kind.SERVICE:
            return ANY_SERVICE in self.services or identity.name in self.services
        return self.admins and identity.kind is Kind.ADMIN

    def __str__(self) -> str:
        """`services/game-session, services/tournament or admins`, `any service or admins`."""
        who = ["any service"] if ANY_SERVICE in self.services else [f"services/{s}" for s in sorted(self.services)]
        if self.admins:
            who.append("admins")
        if not who:
            return "no one"
        return who[0] if len(who) == 1 else ", ".join(who[:-1]) + " or " + who[-1]


def allow(*names: str, admins: bool = False) -> Allowed:
    """The services `names` (`ANY_SERVICE`: every one), and admins when `admins`, may call the method."""
    for name in names:
        if name != ANY_SERVICE and not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"{name!r} is not a service name")
    return Allowed(frozenset(names), admins)


class Callers:
    """Who may call each of one service's methods that service identities call: least privilege
    between services. A service's signing key signs tokens for that service only (`Scope`), so the
    token's name is the calling service; each method admits exactly the services that call it in
    this codebase (docs/contracts.md, "Who may call what"). Adding a method is one line."""

    def __init__(self, service: str, methods: Mapping[str, Allowed]) -> None:
        self.service = service
        self.methods = dict(methods)

    def check(self, identity: Identity, method: str) -> None:
        """PERMISSION_DENIED naming the caller, the method and who may call it, unless `identity`
        may call `method`. A method missing from the table is a bug (KeyError: INTERNAL), never
        an open door."""
        allowed = self.methods[method]
        if not allowed.admits(identity):
            raise PermissionDeniedError(
                f"{identity.principal} may not call {self.service}.{method}: only {allowed} may")

    def require(self, method: str) -> Identity:
        """The caller of the call being handled, once `check` admits it for `method`."""
        identity = current_identity()
        self.check(identity, method)
        return identity


_current: contextvars.ContextVar[Identity] = contextvars.ContextVar("buraco_identity")


def current_identity() -> Identity:
    """The caller of the call being handled (set by the server pipeline)."""
    try:
        return _current.get()
    except LookupError:
        raise UnauthenticatedError("no authenticated caller") from None


def current_identity_or_none() -> Identity | None:
    return _current.get(None)


def set_current_identity(identity: Identity) -> contextvars.Token[Identity]:
    return _current.set(identity)


def reset_current_identity(token: contextvars.Token[Identity]) -> None:
    _current.reset(token)


def key_id(key: PublicKey) -> str:
    """A key's id: the first 16 hex digits of the SHA-256 of its SubjectPublicKeyInfo."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()[:16]


def algorithm_for(key: PublicKey | PrivateKey) -> str:
    if isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        if key.curve.name != "secp256r1":
            raise ConfigError(f"ECDSA keys must use P-256, not {key.curve.name}")
        return "ES256"
    return "RS256"


def parse_public_keys(pem: bytes, source: str = "keys") -> dict[str, PublicKey]:
    """Every PEM public key in `pem`, by key id."""
    keys: dict[str, PublicKey] = {}
    blocks = re.findall(rb"-----BEGIN PUBLIC KEY-----.*?-----END PUBLIC KEY-----", pem, re.S)
    for block in blocks:
        key = serialization.load_pem_public_key(block)
        if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
            raise ConfigError(f"{source}: unsupported key type {type(key).__name__}")
        algorithm_for(key)
        keys[key_id(key)] = key
    if not keys:
        raise ConfigError(f"{source}: no PEM public key found")
    return keys


def parse_key_set(data: bytes, source: str = "keys") -> dict[str, TrustedKey]:
    """A key set by key id: a JWKS document (`{"keys": [...]}`, each key with its `scope`), or PEM
    public keys (no scope: `UNSCOPED`, refused in production by `keys_from_config`)."""
    if not data.lstrip().startswith(b"{"):
        return {kid: TrustedKey(key) for kid, key in parse_public_keys(data, source).items()}
    try:
        document = json.loads(data)
    except ValueError as error:
        raise ConfigError(f"{source}: not a JWKS document: {error}") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{source}: a JWKS document needs a non-empty `keys` list")
    keys: dict[str, TrustedKey] = {}
    for number, entry in enumerate(entries):
        where = f"{source}: key {number}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: not a JSON object")
        try:
            key = jwt.PyJWK(entry).key
        except jwt.PyJWTError as error:
            raise ConfigError(f"{where}: {error}") from None
        if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
            raise ConfigError(f"{where}: not a public key of a supported type ({type(key).__name__})")
        algorithm_for(key)
        kid = key_id(key)
        if "kid" in entry and entry["kid"] != kid:
            raise ConfigError(f"{where}: its kid must be {kid} (the key's own id), not {entry['kid']!r}")
        keys[kid] = TrustedKey(key, Scope.parse(entry.get("scope"), where), scoped=True)
    return keys


def jwk_of(key: PublicKey, scope: Scope) -> dict[str, Any]:
    """A public key as a JWKS entry with its `scope` and `kid` (scripts/jwks.py writes key sets)."""
    algorithm = jwt.get_algorithm_by_name(algorithm_for(key))
    entry: dict[str, Any] = json.loads(algorithm.to_jwk(key))
    return entry | {"kid": key_id(key), "use": "sig", "scope": str(scope)}


class KeyFile:
    """The key set file, read again when it changes (a Kubernetes Secret's update replaces it)."""

    def __init__(self, path: Path, *, local: bool, extra: Mapping[str, TrustedKey] | None = None) -> None:
        self.path = path
        self.local = local
        self.extra = dict(extra or {})
        self._seen: tuple[int, int, int] | None = None

    def _stamp(self) -> tuple[int, int, int]:
        stat = self.path.stat()  # follows the Secret's symlinks to the file of the moment
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def load(self) -> dict[str, TrustedKey]:
        """Read the file now (a bad file raises ConfigError)."""
        stamp = self._stamp()
        keys = parse_key_set(self.path.read_bytes(), str(self.path))
        if not self.local and not all(k.scoped for k in keys.values()):
            raise ConfigError(
                f"BURACO_JWT_PUBLIC_KEYS ({self.path}): in production every key needs a scope: write the "
                "key set as a JWKS file with a `scope` on each key (scripts/jwks.py; docs/operations.md)")
        self._seen = stamp
        return keys | self.extra

    def changed(self) -> dict[str, TrustedKey] | None:
        """The key set when the file changed since it was last read, else None."""
        if self._stamp() == self._seen:
            return None
        return self.load()


def load_private_key(path: Path) -> PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ConfigError(f"{path}: unsupported private key type {type(key).__name__}")
    algorithm_for(key)
    return key


def ensure_dev_keys(directory: Path) -> tuple[Path, Path]:
    """Local mode's key pair (Ed25519), generated once into `directory`; (private, public) paths.

    Every local process calls this at start, `make run`'s all at once: one of them generates the
    pair, under an exclusive lock on the directory's lock file, and the others wait for it and
    take the same pair (two generating at once could leave one's public key beside the other's
    private key, and tokens no process can verify)."""
    private_path, public_path = directory / DEV_PRIVATE_KEY, directory / DEV_PUBLIC_KEY
    if private_path.exists() and public_path.exists():
        return private_path, public_path
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if private_path.exists() and public_path.exists():  # another process made them meanwhile
            return private_path, public_path
        key = ed25519.Ed25519PrivateKey.generate()
        private_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        # Written aside, then renamed into place, the private key last: a process that finds
        # both files (without the lock, above) finds the whole pair.
        suffix = f".{os.getpid()}.{uuid.uuid4().hex}"
        tmp_private, tmp_public = Path(f"{private_path}{suffix}"), Path(f"{public_path}{suffix}")
        tmp_private.write_bytes(private_pem)
        tmp_private.chmod(0o600)
        tmp_public.write_bytes(public_pem)
        tmp_public.replace(public_path)
        tmp_private.replace(private_path)
    return private_path, public_path


class Verifier:
    """Checks tokens: signature (by `kid`), expiry, audience, and the claims above."""

    def __init__(
        self,
        keys: Mapping[str, PublicKey | TrustedKey],
        *,
        audience: str,
        leeway: float = 10.0,
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.time,
        source: KeyFile | None = None,
        reload_seconds: float = 30.0,
    ) -> None:
        if not keys:
            raise ConfigError("no public key to verify tokens with")
        self._keys = {kid: k if isinstance(k, TrustedKey) else TrustedKey(k) for kid, k in keys.items()}
        self._source = source
        self._reload_seconds = reload_seconds
        self._next_reload = clock() + reload_seconds
        self._audience = audience
        self._leeway = leeway
        # Verified tokens by their exact text, with their expiry: a signature check costs far more
        # than a gRPC call's own overhead, and clients reuse a token for many calls.
        self._verified: dict[str, tuple[Identity, float]] = {}
        self._cache_size = cache_size
        self._clock = clock

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(self._keys)

    def reload(self) -> bool:
        """Read the key set again if its file changed; a key set that cannot be used leaves the
        current one in place (logged). Whether the keys changed."""
        if self._source is None:
            return False
        try:
            keys = self._source.changed()
        except (OSError, ConfigError) as error:
            log.error("the key set could not be read again; the current keys stay",
                      extra={"fields": {"error": str(error)}})
            return False
        if keys is None or keys == self._keys:
            return False
        if not keys:
            log.error("the key set is empty; the current keys stay")
            return False
        self._keys = keys
        self._verified.clear()  # a removed key's tokens stop here, cached or not
        log.info("key set reloaded", extra={"fields": {"kids": sorted(keys)}})
        return True

    def verify(self, token: str) -> Identity:
        if self._source is not None:
            now = self._clock()
            if now >= self._next_reload:
                self._next_reload = now + self._reload_seconds
                self.reload()
        cached = self._verified.get(token)
        if cached is not None:
            if self._clock() < cached[1] + self._leeway:
                return cached[0]
            del self._verified[token]
        identity, expiry = self._verify(token)
        if len(self._verified) >= self._cache_size:
            del self._verified[next(iter(self._verified))]  # the oldest entry
        self._verified[token] = (identity, expiry)
        return identity

    def _verify(self, token: str) -> tuple[Identity, float]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise UnauthenticatedError("malformed token") from None
        trusted = self._keys.get(str(header.get("kid", "")))
        if trusted is None:
            raise UnauthenticatedError("token signed with an unknown key")
        key = trusted.key
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[algorithm_for(key)],
                audience=self._audience,
                leeway=self._leeway,
                options={"require": ["exp", "sub", "aud"], "verify_exp": False},
            )
        except jwt.InvalidAudienceError:
            raise UnauthenticatedError("token not meant for this audience") from None
        except jwt.PyJWTError as error:
            raise UnauthenticatedError(f"invalid token: {error}") from None
        expiry = claims["exp"]
        if not isinstance(expiry, int | float) or self._clock() >= expiry + self._leeway:
            raise UnauthenticatedError("token expired")
        try:
            kind = Kind(str(claims.get("kind")))
        except ValueError:
            raise UnauthenticatedError("token has no valid `kind` claim") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not NAME_PATTERN.fullmatch(subject):
            raise UnauthenticatedError("token has no valid `sub` claim")
        if not trusted.scope.allows(kind, subject):
            raise UnauthenticatedError(
                f"token signed with a key that may not sign {kind.value} tokens"
                + (f" for {subject}" if kind is Kind.SERVICE else "") + f" (its scope: {trusted.scope})")
        ip = claims.get("ip")
        identity = Identity(
            kind=kind,
            name=subject,
            token_id=str(claims.get("jti", "")),
            client_ip=ip if isinstance(ip, str) and ip else None,
            expires_at=float(expiry),
        )
        return identity, float(expiry)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]]) -> Identity:
        """The identity of a call from its metadata: the bearer token and `buraco-act-for`."""
        authorization = act_for = None
        for key, value in metadata:
            if key == "authorization" and isinstance(value, str):
                authorization = value
            elif key == ACT_FOR_HEADER and isinstance(value, str):
                act_for = value
        if authorization is None:
            raise UnauthenticatedError("missing `authorization: Bearer <token>` metadata")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthenticatedError("authorization metadata must be `Bearer <token>`")
        identity = self.verify(token.strip())
        if act_for is None:
            return identity
        player = act_for.removeprefix("players/")
        if not act_for.startswith("players/") or not NAME_PATTERN.fullmatch(player):
            raise PermissionDeniedError(f"{ACT_FOR_HEADER} must be `players/{{player}}`")
        identity.check_may_act_for(player)
        if identity.kind is Kind.PLAYER:
            return identity
        return replace(identity, acting_for=player)

    def expired(self, identity: Identity) -> bool:
        """Whether the token `identity` came from has expired since (with the same leeway)."""
        return self._clock() >= identity.expires_at + self._leeway


class Minter:
    """Signs tokens with a private key (services for their own calls; `buraco token` locally)."""

    def __init__(self, key: PrivateKey, *, audience: str) -> None:
        self._key = key
        self._algorithm = algorithm_for(key)
        self._kid = key_id(key.public_key())
        self._audience = audience

    def mint(
        self,
        kind: Kind,
        name: str,
        *,
        ttl: float = 3600.0,
        client_ip: str | None = None,
        claims: Mapping[str, Any] | None = None,
    ) -> str:
        """A token for `name`, valid `ttl` seconds; `claims` adds claims of the minter's own (the
        gateway's session end), never in place of the standard ones nor of `ip`."""
        if not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid name ([a-z0-9][a-z0-9_-]{{0,62}})")
        now = int(time.time())
        payload: dict[str, Any] = {k: v for k, v in (claims or {}).items() if k != "ip"}
        payload |= {
            "sub": name,
            "kind": kind.value,
            "aud": self._audience,
            "iat": now,
            "exp": now + int(ttl),
            "jti": uuid.uuid4().hex,
        }
        if client_ip:
            payload["ip"] = client_ip
        return jwt.encode(payload, self._key, algorithm=self._algorithm, headers={"kid": self._kid})


def keys_from_config(config: Config) -> tuple[Verifier, Minter | None]:
    """The verifier and (when a private key is available) the minter a service runs with.

    Local mode generates (once) and trusts a dev key pair under BURACO_DEV_KEYS_DIR (it may sign
    anything), besides any configured keys. Production uses only the configured key set, every key
    with its scope, and refuses the dev key.
    """
    keys: dict[str, TrustedKey] = {}
    extra: dict[str, TrustedKey] = {}
    private: PrivateKey | None = None
    if config.jwt_private_key is not None:
        private = load_private_key(config.jwt_private_key)
    dev_private_path = config.dev_keys_dir / DEV_PRIVATE_KEY
    if config.local:
        dev_private_path, dev_public_path = ensure_dev_keys(config.dev_keys_dir)
        extra = parse_key_set(dev_public_path.read_bytes(), str(dev_public_path))
        if private is None:
            private = load_private_key(dev_private_path)
    source: KeyFile | None = None
    if config.jwt_public_keys is not None:
        source = KeyFile(config.jwt_public_keys, local=config.local, extra=extra)
        keys = source.load()
    else:
        keys = extra
    if not config.local and dev_private_path.exists():
        dev_kid = key_id(load_private_key(dev_private_path).public_key())
        own_kid = key_id(private.public_key()) if private is not None else None
        if dev_kid in keys or dev_kid == own_kid:
            raise ConfigError("the local dev key may not be used when BURACO_ENV=production")
    verifier = Verifier(keys, audience=config.jwt_audience, leeway=config.jwt_leeway_seconds, source=source,
                        reload_seconds=config.jwt_keys_reload_seconds)
    minter = Minter(private, audience=config.jwt_audience) if private is not None else None
    return verifier, minter
