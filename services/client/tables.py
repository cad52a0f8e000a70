"""Game-session tables as the other services see them."""

from __future__ import annotations

from buraco.v1 import game_session_pb2

#: A table's state by name, as the callers' own records keep it ("unknown" for any other value).
TABLE_STATES = {
    game_session_pb2.Table.STATE_WAITING: "waiting",
    game_session_pb2.Table.STATE_PLAYING: "playing",
    game_session_pb2.Table.STATE_FINISHED: "finished",
    game_session_pb2.Table.STATE_CANCELLED: "cancelled",
}
