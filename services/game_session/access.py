"""Who may do what at a table. The seat always comes from the caller's token, never from the
request: a player acts, proposes and votes for their own seat only.

- CreateTable and CancelTable: matchmaking and tournaments only (`api.CALLERS`).
- Moves, hints, annulment votes, `Play`: the table's seated players, for their own seat.
- Subscribe, SubscribeChanges, GetTable, GetTableSnapshot: the table's players, services and
  admins, and anyone where the table allows spectators.
- ExportRecords: the table's players, services and admins.
"""

from __future__ import annotations

from services.common.auth import Identity, Kind
from services.common.errors import PermissionDeniedError
from services.game_session.table import LiveTable


def seat_of(table: LiveTable, identity: Identity) -> int:
    """The caller's seat at the table; PERMISSION_DENIED for a caller without one."""
    player = identity.require_player()
    seat = table.seat_of(player)
    if seat is None:
        raise PermissionDeniedError(f"players/{player} has no seat at {table.name}")
    return seat


def viewer_of(table: LiveTable, identity: Identity) -> tuple[int | None, str | None]:
    """(seat, player) of a caller who may watch the table (seat None: a spectator);
    PERMISSION_DENIED otherwise."""
    player = identity.player
    if player is not None:
        seat = table.seat_of(player)
        if seat is not None:
            return seat, player
    if identity.kind in (Kind.SERVICE, Kind.ADMIN) or table.options.spectators_allowed:
        return None, player
    raise PermissionDeniedError(f"{table.name} does not allow spectators")


def scope_of(identity: Identity) -> str:
    """Whose request ids these are: the caller, and the player a service acts for."""
    return f"{identity.principal}>{identity.acting_for or ''}"
