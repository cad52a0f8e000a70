"""Every gRPC status as one HTTP status and one JSON error body, the same on HTTP and the socket.

    {"code": "failed_precondition", "message": "not your turn", "details": [...]}

`code` is the status code's name in lower case (as the Connect protocol writes it), `message` is
the service's own message where it is meant for people, and `details` carries what a client can
act on: the table's current seq after a stale action (`{"currentSeq": 41}`), the wait before a
retry (`{"retryAfterMs": 250}`), the services' rich status details in their JSON form. Nothing
internal leaks: INTERNAL, UNKNOWN and DATA_LOSS carry a fixed message and the request id to quote,
UNAVAILABLE and DEADLINE_EXCEEDED name the service but no address, and a redirect's owner address
(routing the gateway follows itself) is never shown.

| gRPC status | HTTP |
|---|---|
| OK | 200 |
| CANCELLED | 499 |
| UNKNOWN, INTERNAL, DATA_LOSS | 500 |
| INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE | 400 |
| DEADLINE_EXCEEDED | 504 |
| NOT_FOUND | 404 |
| ALREADY_EXISTS, ABORTED | 409 |
| PERMISSION_DENIED | 403 |
| UNAUTHENTICATED | 401 |
| RESOURCE_EXHAUSTED | 429 (with `Retry-After`) |
| UNIMPLEMENTED | 501 (also: a method the gateway does not offer) |
| UNAVAILABLE | 503 (with `Retry-After` when the service named a wait) |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from buraco.v1 import common_pb2
from services.client.calls import trailer
from services.client.redirects import STATUS_DETAILS_HEADER

HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

#: Statuses whose message may tell something of the inside (a traceback's words, an address).
HIDDEN: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS})
CURRENT_SEQ_HEADER = "buraco-current-seq"
RETRY_AFTER_HEADER = "retry-after-ms"


@dataclass
class EdgeError(Exception):
    """A failure as the gateway reports it (to HTTP as a status and body, to a socket as a message)."""

    code: grpc.StatusCode
    message: str
    details: list[dict[str, Any]] = field(default_factory=list)
    #: milliseconds the client should wait before trying again (429, 503), when known
    retry_after_ms: int | None = None
    #: an HTTP status more precise than the code's (413 for a body too large), else None
    http: int | None = None

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    @property
    def http_status(self) -> int:
        return self.http or HTTP_STATUS.get(self.code, 500)

    def body(self) -> dict[str, Any]:
        details = list(self.details)
        if self.retry_after_ms is not None:
            details.append({"retryAfterMs": self.retry_after_ms})
        return {"code": self.code.name.lower(), "message": self.message, "details": details}

    def headers(self) -> dict[str, str]:
        if self.retry_after_ms is None or self.code not in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                            grpc.StatusCode.UNAVAILABLE):
            return {}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after_ms / 1000)))}


def invalid(message: str) -> EdgeError:
    return EdgeError(grpc.StatusCode.INVALID_ARGUMENT, message)


def unauthenticated(message: str) -> EdgeError:
    return EdgeError(grpc.StatusCode.UNAUTHENTICATED, message)


def _rich_details(error: grpc.aio.AioRpcError) -> list[dict[str, Any]]:
    """The rich status details in their JSON form, but for the routing ones (a redirect)."""
    metadata: Any = error.trailing_metadata()
    for key, value in metadata or ():
        if key != STATUS_DETAILS_HEADER or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            return []
        shown = []
        for detail in status.details:
            if detail.Is(common_pb2.NotOwnerDetails.DESCRIPTOR):
                continue
            try:
                shown.append(json_format.MessageToDict(detail))
            except (TypeError, KeyError, json_format.Error):  # a type this gateway does not know
                continue
        return shown
    return []


def from_rpc(error: grpc.aio.AioRpcError, service: str, request_id: str) -> EdgeError:
    """The edge's form of a failed call to `service`."""
    code = error.code()
    if code in HIDDEN:
        return EdgeError(code, f"internal error (request id {request_id})")
    if code == grpc.StatusCode.UNAVAILABLE:
        message = f"the {service} service is unavailable; retry"
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        message = f"the {service} service did not answer in time"
    else:
        message = error.details() or code.name.lower()
    details = _rich_details(error)
    current = trailer(error, CURRENT_SEQ_HEADER)
    if current is not None and current.isdigit():
        details.append({"currentSeq": int(current)})
    retry = trailer(error, RETRY_AFTER_HEADER)
    retry_after_ms = int(retry) if retry is not None and retry.isdigit() else None
    return EdgeError(code, message, details, retry_after_ms)


def status_named(name: str) -> grpc.StatusCode:
    """The status code of an upper-case name (UNKNOWN for a name that is none)."""
    return next((c for c in grpc.StatusCode if c.name == name), grpc.StatusCode.UNKNOWN)


def status_numbered(number: int) -> grpc.StatusCode:
    """The status code of its number (as a `Play` stream's error carries it)."""
    return next((c for c in grpc.StatusCode if c.value[0] == number), grpc.StatusCode.UNKNOWN)

