"""The streams' messages written from events encoded once, not built and serialized per stream.

A table's event reaches every stream that follows the table: a `Play` or `SubscribeChanges`
stream sends it inside a `PlayUpdate` or `TableChanges`. Rather than build every recipient's
message (every event copied in) and have grpc serialize it again, each log entry keeps its
`TableEvent` serialized once per viewer class, already framed as field 1 of `TableChanges`
(`frame`), and a stream's message is those frames joined with the few bytes around them. The
result is the message's ordinary protobuf encoding (fields in number order, as the generated
`SerializeToString` writes them; tests compare the two). The servers' pipeline passes bytes
through as they are (`services.common.interceptor`), so a handler may yield either.

Wire format (protobuf): a length-delimited field is its key, `field_number << 3 | 2`, a varint,
then the payload's length as a varint, then the payload.

    TableChanges { repeated TableEvent events = 1; }
    PlayUpdate { TableChanges changes = 1; repeated string request_ids = 2; PlayError error = 3; }
"""

from __future__ import annotations

from collections.abc import Sequence

#: keys of the length-delimited fields used here
_FIELD_1 = b"\x0a"
_FIELD_2 = b"\x12"
#: the varint of every length under 128, ready made (most events are shorter)
_SHORT = [bytes((n,)) for n in range(128)]


def varint(value: int) -> bytes:
    """`value` (>= 0) as a protobuf varint: seven bits a byte, low bits first."""
    if value < 128:
        return _SHORT[value]
    out = bytearray()
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(event: bytes) -> bytes:
    """A serialized `TableEvent` as one element of `TableChanges.events` (field 1)."""
    return _FIELD_1 + varint(len(event)) + event


def unframe(framed: bytes) -> bytes:
    """The serialized `TableEvent` of a `frame`: after its key and its length's varint."""
    start = 2
    while framed[start - 1] & 0x80:
        start += 1
    return framed[start:]


def table_changes(frames: Sequence[bytes]) -> bytes:
    """A `TableChanges` of the framed events, in order."""
    return b"".join(frames)


def play_update(frames: Sequence[bytes], request_ids: Sequence[str]) -> bytes:
    """A `PlayUpdate` carrying the framed events (if any) and answering `request_ids`."""
    parts: list[bytes] = []
    if frames:
        changes = b"".join(frames)
        parts += (_FIELD_1, varint(len(changes)), changes)
    for request_id in request_ids:
        encoded = request_id.encode()
        parts += (_FIELD_2, varint(len(encoded)), encoded)
    return b"".join(parts)
