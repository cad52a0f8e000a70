"""The driver's side of gRPC: targets, tokens, channels, and calls that record themselves.

Every call goes through `Calls.unary` or `Calls.stream`, which time it and record it in the
process's `Recorder` under `rpc` `service.Method` (the latency of successful calls, errors by
status code). Streams count as successful once their first message arrives (its delay is both the
call's latency and its "time to first event"); a stream that breaks later adds one to the
`stream_breaks:{CODE}` counter.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from loadtest.recorder import Recorder
from services.client.channels import open_channel
from services.common.auth import ACT_FOR_HEADER, Kind, Minter, load_private_key
from services.common.config import DEFAULT_PORTS
from services.common.tls import ClientTls, TlsSettings

T = TypeVar("T")

#: The services the journey calls (tournaments are not part of it).
SERVICES = ("matchmaking", "game_session", "wallet", "ranking")
DEFAULT_KEY = Path("var/dev-keys/dev-private.pem")


class TargetsError(ValueError):
    """A `--targets` value that cannot be read."""


def parse_targets(text: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Addresses by service. `text`: `wallet=host:port,ranking=host:port,...` (the rest default),
    or a bare `host` for every service on its default port there. Defaults: BURACO_<SERVICE>_ADDRESS,
    else localhost and the default port."""
    env = env or {}
    targets = {
        name: env.get(f"BURACO_{name.upper()}_ADDRESS") or f"localhost:{DEFAULT_PORTS[name]}" for name in SERVICES
    }
    if not text:
        return targets
    if "=" not in text:
        host = text.strip()
        if not host or "," in host:
            raise TargetsError(f"--targets {text!r}: a bare host, one host:port, or service=host:port pairs")
        if ":" in host:  # one address for every service (an ingress or a gateway routing gRPC by service)
            name, _, port = host.rpartition(":")
            if not name or not port.isdigit():
                raise TargetsError(f"--targets {text!r}: a bare host, one host:port, or service=host:port pairs")
            return dict.fromkeys(SERVICES, host)
        return {name: f"{host}:{DEFAULT_PORTS[name]}" for name in SERVICES}
    for part in text.split(","):
        name, _, address = part.strip().partition("=")
        name = name.strip().replace("-", "_")
        if name not in SERVICES:
            raise TargetsError(f"--targets: unknown service {name!r}; one of {', '.join(SERVICES)}")
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise TargetsError(f"--targets: {part.strip()!r} needs host:port")
        targets[name] = address.strip()
    return targets


class TokensError(ValueError):
    """A tokens file that cannot be used (unreadable, or without an identity the run needs)."""


def needed_identities(scenario: str, run_id: str, players: int, uses_wallet: bool = True) -> list[str]:
    """The identities (`kind:name`) a run calls the services as: its players (who open their own
    accounts), an admin who tops them up with chips, and the services it stands in for (matchmaking
    holding stakes and creating tables where the run starts matches itself; game sessions settling
    them in the backend scenario). The same kinds a deployment's scoped keys sign (docs/operations.md,
    "Keys"): player tokens by the gateway's key, the admin's by the operators', each service's by its own."""
    out = [f"player:{run_id}-{index}" for index in range(players)]
    if uses_wallet:
        out.append("admin:loadtest")
    if scenario in ("tables", "backend"):
        out.append("service:matchmaking")
    if scenario == "backend":
        out.append("service:game-session")
    return out


class Tokens:
    """Tokens by identity: signed here with a key (re-minted ten minutes before they expire), or
    read from a file of tokens issued beforehand (`from_file`), for a deployment whose keys the
    run must not hold."""

    def __init__(self, minter: Minter | None, ttl: float = 3600.0, clock: Callable[[], float] = time.monotonic,
                 issued: Mapping[str, str] | None = None) -> None:
        self._minter, self._ttl, self._clock = minter, ttl, clock
        self._cache: dict[tuple[Kind, str], tuple[str, float]] = {}
        self._issued = dict(issued or {})

    @classmethod
    def from_file(cls, path: Path, needed: Sequence[str] = ()) -> Tokens:
        """Tokens issued beforehand: a JSON object of `"kind:name": "token"` (`player:<run id>-<n>`,
        `service:<name>`, `admin:<name>`); TokensError names what is missing."""
        try:
            issued = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise TokensError(f"--tokens {path}: {error}") from None
        if not isinstance(issued, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in issued.items()):
            raise TokensError(f"--tokens {path}: expected a JSON object of \"kind:name\": \"token\"")
        missing = [identity for identity in needed if identity not in issued]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise TokensError(f"--tokens {path} has no token for {shown}")
        return cls(None, issued=issued)

    @classmethod
    def from_key(cls, path: Path, audience: str = "buraco") -> Tokens:
        if not path.is_file():
            raise FileNotFoundError(
                f"no signing key at {path}: start the suite first (`make run` creates var/dev-keys), "
                "or pass --token-key with the key the services trust"
            )
        return cls(Minter(load_private_key(path), audience=audience))

    def token(self, kind: Kind, name: str) -> str:
        if self._minter is None:
            identity = f"{kind.value}:{name}"
            if identity not in self._issued:
                raise TokensError(f"no token issued for {identity}")
            return self._issued[identity]
        now = self._clock()
        cached = self._cache.get((kind, name))
        if cached is None or now > cached[1] - 600:
            cached = (self._minter.mint(kind, name, ttl=self._ttl), now + self._ttl)
            self._cache[(kind, name)] = cached
        return cached[0]

    def metadata(self, kind: Kind, name: str, act_for: str | None = None) -> tuple[tuple[str, str], ...]:
        pairs: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {self.token(kind, name)}"),)
        if act_for is not None:
            pairs += ((ACT_FOR_HEADER, f"players/{act_for}"),)
        return pairs

    def player(self, player: str) -> tuple[tuple[str, str], ...]:
        return self.metadata(Kind.PLAYER, player)

    def service(self, name: str) -> tuple[tuple[str, str], ...]:
        return self.metadata(Kind.SERVICE, name)

    def admin(self, name: str = "loadtest") -> tuple[tuple[str, str], ...]:
        return self.metadata(Kind.ADMIN, name)


def client_tls(ca: str, cert: str = "", key: str = "") -> ClientTls | None:
    """The TLS credentials of the run's calls (None: plaintext); TlsError when the files do not load."""
    if not ca:
        return None
    return ClientTls(TlsSettings(Path(cert) if cert else None, Path(key) if key else None, Path(ca), None))


@dataclass
class Channels:
    """`connections` channels per address (players spread over them), opened on first use; TLS
    with `tls` (verifying `server_name` when given, else the host dialled)."""

    connections: int = 4
    tls: ClientTls | None = None
    server_name: str = ""
    _open: dict[tuple[str, int], grpc.aio.Channel] = field(default_factory=dict)

    def get(self, address: str, player_index: int = 0) -> grpc.aio.Channel:
        key = (address, player_index % max(1, self.connections))
        found = self._open.get(key)
        if found is None:
            # A distinct option per slot keeps gRPC from sharing one subchannel between them.
            credentials = None if self.tls is None else self.tls.current()[1]
            found = self._open[key] = open_channel(address, [("loadtest.slot", key[1])], credentials,
                                                   self.server_name or None)
        return found

    async def close(self) -> None:
        for channel in self._open.values():
            await channel.close(None)
        self._open.clear()


class RunEnded(Exception):
    """The run ended (--duration) while the player waited: not a failure of the suite."""


class StepError(Exception):
    """A journey step that failed for a reason of the driver's own (no gRPC status)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def status_name(error: BaseException) -> str:
    """The code a failure is counted under: the gRPC status name, or the driver's own."""
    if isinstance(error, grpc.aio.AioRpcError):
        return str(error.code().name)
    if isinstance(error, StepError):
        return error.code
    if isinstance(error, TimeoutError):
        return "TIMEOUT"
    return type(error).__name__


class Calls:
    """Timed calls recorded into `recorder`."""

    def __init__(
        self, recorder: Recorder, *, timeout: float = 10.0, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.recorder, self.timeout, self.clock = recorder, timeout, clock

    async def unary(
        self,
        name: str,
        method: Callable[..., Awaitable[T]],
        request: Any,
        metadata: tuple[tuple[str, str], ...],
        expected: tuple[grpc.StatusCode, ...] = (),
    ) -> T:
        """The call's reply; a failure is recorded as an error, except the `expected` codes
        (the caller handles them), which only count in `expected:{name}:{CODE}`."""
        started = self.clock()
        try:
            reply = await method(request, metadata=metadata, timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            if error.code() in expected:
                self.recorder.counters[f"expected:{name}:{error.code().name}"] += 1
            else:
                self.recorder.error("rpc", name, error.code().name)
            raise
        self.recorder.ok("rpc", name, self.clock() - started)
        return reply

    async def stream(
        self,
        name: str,
        method: Callable[..., Any],
        request: Any,
        metadata: tuple[tuple[str, str], ...],
    ) -> AsyncIterator[Any]:
        """The stream's messages; the call is cancelled when the caller stops iterating."""
        started = self.clock()
        call = method(request, metadata=metadata)
        first = True
        try:
            async for message in call:
                if first:
                    delay = self.clock() - started
                    self.recorder.ok("rpc", name, delay)
                    self.recorder.first_event("rpc", name, delay)
                    first = False
                yield message
        except grpc.aio.AioRpcError as error:
            if first:
                self.recorder.error("rpc", name, error.code().name)
            else:
                self.recorder.counters[f"stream_breaks:{error.code().name}"] += 1
            raise
        finally:
            call.cancel()
