"""The streams' messages written from framed events (`wire`) are the generated code's encoding."""

from __future__ import annotations

import random

import pytest

from buraco.v1 import common_pb2, game_session_pb2
from services.game_session import wire


def _events(rng: random.Random, count: int) -> list[game_session_pb2.TableEvent]:
    """Events of every size: small ones, and melds long enough for multi-byte lengths."""
    out = []
    for seq in range(1, count + 1):
        event = game_session_pb2.TableEvent(seq=seq)
        event.time.FromMilliseconds(rng.randrange(10**13))
        if rng.random() < 0.5:
            event.card_drawn.seat, event.card_drawn.stock_count = rng.randrange(4), rng.randrange(100)
            event.card_drawn.card = rng.choice(["", "7h", "Ac"])
        else:
            laid = event.meld_laid
            laid.seat, laid.side, laid.meld_index = rng.randrange(4), rng.randrange(2), rng.randrange(20)
            laid.meld.kind = common_pb2.Meld.KIND_SEQUENCE
            laid.meld.cards.extend(rng.choice(["2h", "3h", "Jk", "10s"]) for _ in range(rng.randrange(200)))
        out.append(event)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_written_messages_equal_the_generated_encoding(seed: int) -> None:
    rng = random.Random(seed)
    events = _events(rng, rng.randrange(0, 12))
    request_ids = [f"r-{seed}-{n}" + "x" * rng.randrange(150) for n in range(rng.randrange(0, 4))]
    frames = [wire.frame(e.SerializeToString()) for e in events]
    assert [wire.unframe(f) for f in frames] == [e.SerializeToString() for e in events]

    changes = game_session_pb2.TableChanges(events=events)
    assert wire.table_changes(frames) == changes.SerializeToString()
    update = game_session_pb2.PlayUpdate(request_ids=request_ids)
    if events:
        update.changes.CopyFrom(changes)
    assert wire.play_update(frames, request_ids) == update.SerializeToString()
    assert game_session_pb2.PlayUpdate.FromString(wire.play_update(frames, request_ids)) == update


@pytest.mark.parametrize("value", [1, 127, 128, 300, 16_383, 16_384, 2**21, 2**35 + 5])
def test_varint_is_protobufs(value: int) -> None:
    # an int64 field's encoding is its key (one byte for field 1) then the value's varint
    assert wire.varint(value) == game_session_pb2.TableEvent(seq=value).SerializeToString()[1:]
    assert wire.varint(0) == b"\x00"
