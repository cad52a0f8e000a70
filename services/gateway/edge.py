"""The gateway's protections at the edge: who the client is, where it may call from, how often.

- The client's address is the connection's peer, or, when that peer is a configured trusted proxy
  (a load balancer, an ingress), the right-most address of `X-Forwarded-For` that is not itself a
  trusted proxy: addresses further left were written by the client and prove nothing.
- Origins: a browser's request or socket from another site is refused unless its `Origin` is the
  gateway's own or one allowed (BURACO_GATEWAY_ALLOWED_ORIGINS). A client that sends no `Origin`
  (not a browser) is not subject to it: the token is what authorises it.
- Rate limits: a token bucket per client address (every request, sign-in and socket opened) and
  one per player (every authenticated request and socket message), RESOURCE_EXHAUSTED (HTTP 429
  with `Retry-After`) beyond. Sockets per player are capped. These are per gateway replica.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

import grpc

from services.common.errors import ResourceExhaustedError
from services.common.ratelimit import RateLimiter
from services.gateway.errors import EdgeError
from services.gateway.settings import GatewaySettings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(address: str, proxies: Iterable[Network]) -> bool:
    parsed = _address(address)
    return parsed is not None and any(parsed in network for network in proxies)


def client_address(peer: str, forwarded_for: str | None, proxies: tuple[Network, ...]) -> str:
    """The client's address, as described above."""
    if not proxies or forwarded_for is None or not _trusted(peer, proxies):
        return peer
    for hop in reversed([part.strip() for part in forwarded_for.split(",")]):
        if _address(hop) is None:
            return peer  # a malformed header: trust nothing in it
        if not _trusted(hop, proxies):
            return hop
    return peer


def own_origin(headers: Mapping[str, str], scheme: str) -> str:
    """The gateway's own origin as this request reached it (`Host`)."""
    secure = scheme in ("https", "wss") or headers.get("x-forwarded-proto") == "https"
    return f"{'https' if secure else 'http'}://{headers.get('host', '')}"


def origin_allowed(origin: str | None, own: str, allowed: tuple[str, ...]) -> bool:
    if origin is None:
        return True
    return origin == own or origin in allowed or "*" in allowed


class Limits:
    """The rate limits and the count of sockets per player."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self._buckets = RateLimiter()
        self._sockets: dict[str, int] = {}

    def _take(self, key: str, rate: float, burst: int, who: str) -> None:
        try:
            self._buckets.take(key, rate, burst)
        except ResourceExhaustedError as error:
            wait = next((int(v) for k, v in error.metadata if k == "retry-after-ms"), 1000)
            raise EdgeError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"too many requests from this {who}: at most {rate:g} a second",
                            retry_after_ms=wait) from None

    def by_address(self, address: str) -> None:
        self._take(f"a:{address}", self.settings.address_rate_per_second, self.settings.address_rate_burst,
                   "address")

    def by_player(self, player: str) -> None:
        self._take(f"p:{player}", self.settings.rate_per_second, self.settings.rate_burst, "player")

    def open_socket(self, player: str) -> None:
        count = self._sockets.get(player, 0)
        if count >= self.settings.sockets_per_player:
            raise EdgeError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"at most {self.settings.sockets_per_player} open sockets per player")
        self._sockets[player] = count + 1

    def close_socket(self, player: str) -> None:
        count = self._sockets.get(player, 0) - 1
        if count <= 0:
            self._sockets.pop(player, None)
        else:
            self._sockets[player] = count

    def sockets(self, player: str) -> int:
        return self._sockets.get(player, 0)
