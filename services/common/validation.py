"""Request checks for the API layer. Each raises InvalidArgumentError naming the field's path
(e.g. `stakes[2].amount_chips`) and returns the checked (and normalised) value.

    rid = check.request_id(request.request_id)
    table = check.resource_id(request.table, "table", "tables")
    size = check.page_size(request.page_size, default=20, maximum=100)
    offset = check.page_token(request.page_token).get("offset", 0)
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message

from services.common.errors import InvalidArgumentError

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
CARD_PATTERN = re.compile(r"(?:(A|[2-9]|10|J|Q|K)([SHDC])|JK)")
MAX_REQUEST_ID = 64
MAX_PAGE_TOKEN = 1024


def require(condition: bool, field: str, problem: str) -> None:
    if not condition:
        raise InvalidArgumentError(field, problem)


def request_id(value: str, field: str = "request_id") -> str:
    """The idempotency key of a mutating call: 1 to 64 printable ASCII characters."""
    if 0 < len(value) <= MAX_REQUEST_ID and value.isascii() and value.isprintable():
        return value  # the common case, checked without building the messages below
    require(value != "", field, "required")
    require(len(value) <= MAX_REQUEST_ID, field, f"at most {MAX_REQUEST_ID} characters")
    require(value.isascii() and value.isprintable(), field, "printable ASCII only")
    return value


def text(value: str, field: str, *, max_length: int, required: bool = True) -> str:
    """A free-text field: present when required, not longer than `max_length` characters."""
    if required:
        require(value.strip() != "", field, "required")
    require(len(value) <= max_length, field, f"at most {max_length} characters")
    require(all(ch.isprintable() or ch in "\n\t" for ch in value), field, "control characters")
    return value


def identifier(value: str, field: str) -> str:
    """A resource id: 1 to 63 of [a-z0-9_-], starting with a letter or a digit."""
    require(value != "", field, "required")
    require(ID_PATTERN.fullmatch(value) is not None, field, "must match [a-z0-9][a-z0-9_-]{0,62}")
    return value


def resource_id(name: str, field: str, collection: str) -> str:
    """The id in a resource name `{collection}/{id}` (e.g. `tables/t1` -> `t1`)."""
    require(name != "", field, "required")
    prefix = f"{collection}/"
    require(name.startswith(prefix), field, f"must be a resource name `{collection}/{{id}}`")
    return identifier(name[len(prefix) :], field)


def player(name: str, field: str) -> str:
    """A player resource name `players/{player}`; returns the player id."""
    return resource_id(name, field, "players")


def int_range(value: int, field: str, low: int, high: int) -> int:
    require(low <= value <= high, field, f"must be between {low} and {high}")
    return value


def positive(value: int, field: str) -> int:
    require(value > 0, field, "must be positive")
    return value


def enum(value: int, field: str, descriptor: EnumDescriptor, *, required: bool = True) -> int:
    """An enum field: a known value, and not the `_UNSPECIFIED` zero when required."""
    if value == 0:
        require(not required, field, "required")
        return value
    require(value in descriptor.values_by_number, field, f"unknown value {value}")
    return value


def message(request: Message, name: str, field: str | None = None) -> None:
    """A singular message field must be set."""
    require(request.HasField(name), field or name, "required")


def card(value: str, field: str) -> str:
    """A card in the game-record notation (`4H`, `10S`, `JK`, case-insensitive), normalised."""
    normal = value.upper()
    require(CARD_PATTERN.fullmatch(normal) is not None, field, f"not a card: {value[:8]!r}")
    return normal


def cards(values: Sequence[str], field: str, *, min_count: int = 1, max_count: int = 60) -> list[str]:
    require(len(values) >= min_count, field, f"at least {min_count} card(s)")
    require(len(values) <= max_count, field, f"at most {max_count} cards")
    return [card(value, f"{field}[{i}]") for i, value in enumerate(values)]


def batch(values: Sequence[str], field: str, *, noun: str, maximum: int, parse: Callable[[str, str], str]) -> list[str]:
    """A batch call's names (AIP-231): 1 to `maximum` of them, each `parse`d (given its field's
    path, `field[i]`), none named twice; the parsed ids in order. `noun` names one (`player`)."""
    require(len(values) >= 1, field, f"at least one {noun}")
    require(len(values) <= maximum, field, f"at most {maximum} {noun}s")
    ids = [parse(value, f"{field}[{i}]") for i, value in enumerate(values)]
    article = "an" if noun[:1] in "aeiou" else "a"
    require(len(set(ids)) == len(ids), field, f"{article} {noun} is listed twice")
    return ids


def page_size(value: int, field: str = "page_size", *, default: int, maximum: int) -> int:
    """AIP-158: 0 means the default; larger than the maximum is brought down to it."""
    require(value >= 0, field, "must not be negative")
    return default if value == 0 else min(value, maximum)


def encode_page_token(position: dict[str, Any]) -> str:
    """An opaque page token for `position` (JSON object of the service's choosing)."""
    raw = json.dumps(position, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_token(value: str, field: str = "page_token") -> dict[str, Any]:
    """Decodes a token made by `encode_page_token`; {} for the first page. Services must still
    check the values in it: a client can forge a token."""
    if value == "":
        return {}
    require(len(value) <= MAX_PAGE_TOKEN, field, "not a page token of this service")
    try:
        decoded = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidArgumentError(field, "not a page token of this service") from None
    require(isinstance(decoded, dict), field, "not a page token of this service")
    return dict(decoded)
