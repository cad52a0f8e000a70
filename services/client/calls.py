"""How a call to another service failed, in the two kinds its caller acts on.

`classified(service, call)` runs the call and raises its failure as
- `Refused`: a definitive answer (its status code's name and message); the same request would get
  it again;
- `Unreachable`: no answer, or a transient one (`TRANSIENT`); the outcome is unknown, and the
  caller retries later with the same request id, which makes the retry safe.

`trailer(error, key)` reads one trailing-metadata value of a failed call (`retry-after-ms`,
`buraco-current-seq`, ...), as text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

T = TypeVar("T")

#: Answers that say nothing final about the request: retry it later, with the same request id.
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


class CallError(Exception):
    def __init__(self, service: str, code: str, message: str) -> None:
        super().__init__(f"{service}: {code}: {message}")
        self.service = service
        self.code = code
        self.message = message


class Refused(CallError):
    """A definitive answer: retrying the same request would get it again."""


class Unreachable(CallError):
    """The outcome is unknown or the error is transient: retry with the same request id."""


async def classified(service: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, its failure raised as `Refused` or `Unreachable`."""
    try:
        return await call()
    except grpc.aio.AioRpcError as error:
        kind = Unreachable if error.code() in TRANSIENT else Refused
        raise kind(service, error.code().name, error.details() or "") from None
    except (OSError, TimeoutError) as error:  # a channel that cannot even start a call
        raise Unreachable(service, "UNAVAILABLE", str(error)) from None


def trailer(error: grpc.aio.AioRpcError, key: str) -> str | None:
    """The first value of trailing-metadata `key` on a failed call, as text (None when absent)."""
    metadata: Any = error.trailing_metadata()
    for item in metadata or ():
        if item[0] == key:
            value = item[1]
            return value if isinstance(value, str) else bytes(value).decode()
    return None
