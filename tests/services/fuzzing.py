"""A reusable fuzz harness for the services' gRPC APIs (hypothesis).

`fuzz_service(process, descriptor, minter)` calls every method of a running service with:
- requests generated from the method's message descriptor: fields missing, oversized, negative or
  huge numbers, unknown enum values, nonsense resource names, deep nesting, random maps and lists;
- random bytes on the wire instead of a message;
- as a player, a service acting for a player, an admin, with no token, and with a garbage token.

It asserts that no call ends in UNKNOWN or INTERNAL (nor hangs past its deadline for unary calls),
and afterwards that the process is alive and healthy. A service issue passes `invariant` to also
check its state after the run (e.g. the wallet's audit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import symbol_database
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.client.channels import act_for
from services.common.auth import Kind, Minter
from tests.services.harness import ServiceProcess, health_status

FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
CALL_TIMEOUT = 10.0

NONSENSE = [
    "",
    " ",
    "tables/",
    "tables/../../etc",
    "players/",
    "players/ALICE",
    "accounts/-",
    "tickets/\x00",
    "tournaments/" + "x" * 300,
    "🃏",
    "JK",
    "10S",
    "11X",
    "\u202e",
    "%s%s%n",
    "' OR 1=1 --",
    "null",
    "-1",
    "9" * 40,
    "tables/t1",
    "players/alice",
    "accounts/player-alice",
    "tournaments/t1",
]
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

_RANGES = {
    FieldDescriptor.TYPE_INT32: INT32,
    FieldDescriptor.TYPE_SINT32: INT32,
    FieldDescriptor.TYPE_SFIXED32: INT32,
    FieldDescriptor.TYPE_INT64: INT64,
    FieldDescriptor.TYPE_SINT64: INT64,
    FieldDescriptor.TYPE_SFIXED64: INT64,
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [v for v in (low, high, -1, 0, 1, 2, 3, 4, 5, 505, 3005, 2**31 - 1) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _strings() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NONSENSE),
        st.text(max_size=40),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_/", min_size=1, max_size=80),
        st.text(min_size=300, max_size=3000),
        st.integers(4000, 20000).map(lambda n: "z" * n),
        st.just("y" * 70_000),  # larger than the default maximum message size
    )


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return _strings()
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=200)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(
            allow_nan=True, allow_infinity=True, width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64
        )
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-3, 40))
    low, high = _RANGES[kind]
    return _integers(low, high)


def messages(descriptor: Descriptor, depth: int = 3) -> st.SearchStrategy[Message]:
    """Messages of `descriptor` with any subset of fields set to odd or plausible values."""
    cls = symbol_database.Default().GetSymbol(descriptor.full_name)

    def value_strategy(field: FieldDescriptor) -> st.SearchStrategy[Any]:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth <= 0 or field.message_type is None:
                return st.just(None)
            return messages(field.message_type, depth - 1)
        return _scalar(field)

    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            fields[field.name] = st.dictionaries(_scalar(key), value_strategy(value), max_size=4)
        elif field.is_repeated:
            fields[field.name] = st.one_of(
                st.lists(value_strategy(field), max_size=4),
                st.lists(value_strategy(field), min_size=50, max_size=300),
            )
        else:
            fields[field.name] = value_strategy(field)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        for name in draw(st.lists(st.sampled_from(sorted(fields)), unique=True)) if fields else []:
            value = draw(fields[name])
            _assign(message, descriptor.fields_by_name[name], value)
        return message

    return build()


def _assign(message: Message, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        for key, item in value.items():
            if isinstance(item, Message):
                target[key].CopyFrom(item)
            elif item is not None:
                target[key] = item
    elif field.is_repeated:
        for item in value:
            if isinstance(item, Message):
                target.add().CopyFrom(item)
            elif item is not None:
                target.append(item)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        if value is not None:
            target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


def identities(minter: Minter) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    def bearer(kind: Kind, name: str, **kwargs: Any) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {minter.mint(kind, name, **kwargs)}"),)

    choices = [
        bearer(Kind.PLAYER, "alice"),
        bearer(Kind.PLAYER, "bob", client_ip="10.0.0.7"),
        bearer(Kind.SERVICE, "matchmaking") + act_for("alice"),
        bearer(Kind.SERVICE, "game-session"),
        bearer(Kind.ADMIN, "root"),
        bearer(Kind.PLAYER, "alice") + act_for("bob"),
        bearer(Kind.PLAYER, "alice", ttl=-3600),
        (("authorization", "Bearer garbage"),),
        (),
    ]
    return st.sampled_from(choices)


def _call(
    channel: grpc.Channel,
    service: ServiceDescriptor,
    method: MethodDescriptor,
    payload: bytes,
    metadata: tuple[tuple[str, str], ...],
) -> grpc.StatusCode:
    path = f"/{service.full_name}/{method.name}"
    try:
        if method.server_streaming:
            stream: Any = channel.unary_stream(path, None, None)(
                payload, metadata=metadata, timeout=CALL_TIMEOUT
            )
            for _ in zip(range(3), stream, strict=False):  # a few messages are enough
                pass
            stream.cancel()
        else:
            channel.unary_unary(path, None, None)(payload, metadata=metadata, timeout=CALL_TIMEOUT)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        if code == grpc.StatusCode.CANCELLED and method.server_streaming:
            return grpc.StatusCode.OK  # our own cancel after reading
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and method.server_streaming:
            return grpc.StatusCode.OK  # a live stream with nothing to say yet
        assert code not in FORBIDDEN and code != grpc.StatusCode.DEADLINE_EXCEEDED, (
            f"{path} ended in {code.name}: {error.details()}"
        )
        return code
    return grpc.StatusCode.OK


def fuzz_service(
    process: ServiceProcess,
    service: ServiceDescriptor,
    minter: Minter,
    *,
    examples: int = 300,
    invariant: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Fuzz every method of `service` served by `process`; returns how often each code came back."""
    methods = list(service.methods)
    seen: dict[str, int] = {}

    def payloads(method: MethodDescriptor) -> st.SearchStrategy[bytes]:
        return st.one_of(
            messages(method.input_type).map(lambda m: m.SerializeToString()),
            st.binary(max_size=300),  # random bytes on the wire
        )

    calls = st.sampled_from(methods).flatmap(lambda m: st.tuples(st.just(m), payloads(m)))

    with grpc.insecure_channel(process.address) as channel:

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
                HealthCheck.large_base_example,
            ],
        )
        @given(call=calls, metadata=identities(minter))
        def check(call: tuple[MethodDescriptor, bytes], metadata: tuple[tuple[str, str], ...]) -> None:
            method, payload = call
            code = _call(channel, service, method, payload, metadata)
            seen[code.name] = seen.get(code.name, 0) + 1

        check()
    assert process.process.poll() is None, "the service process died:\n" + "\n".join(process.lines[-30:])
    assert health_status(process.address) == 1  # SERVING
    if invariant is not None:
        invariant()
    return seen
