"""The tournament's rows as contract messages (Tournament, Entrant, Bracket, standings). No grpc."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from buraco.v1 import common_pb2, tournament_pb2
from services.tournament import records, standings
from services.tournament.records import Entry, aware

STATES = {
    "scheduled": tournament_pb2.Tournament.STATE_SCHEDULED,
    "registration": tournament_pb2.Tournament.STATE_REGISTRATION,
    "running": tournament_pb2.Tournament.STATE_RUNNING,
    "finished": tournament_pb2.Tournament.STATE_FINISHED,
    "cancelled": tournament_pb2.Tournament.STATE_CANCELLED,
}
FORMATS = {
    records.SINGLE_ELIMINATION: tournament_pb2.Tournament.FORMAT_SINGLE_ELIMINATION,
    records.SWISS: tournament_pb2.Tournament.FORMAT_SWISS,
}
PAIRING_STATES = {
    "creating": tournament_pb2.Pairing.STATE_CREATING_TABLE,
    "playing": tournament_pb2.Pairing.STATE_PLAYING,
    "decided": tournament_pb2.Pairing.STATE_DECIDED,
}


def timestamp(moment: datetime | None) -> Timestamp | None:
    value = aware(moment)
    if value is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _set_time(message: Any, field: str, moment: datetime | None) -> None:
    stamp = timestamp(moment)
    if stamp is not None:
        getattr(message, field).CopyFrom(stamp)


def tournament_name(tournament: str) -> str:
    return f"tournaments/{tournament}"


def entrant_name(tournament: str, entrant: str) -> str:
    return f"tournaments/{tournament}/entrants/{entrant}"


def tournament(row: Any, entrant_count: int) -> tournament_pb2.Tournament:
    out = tournament_pb2.Tournament(
        name=tournament_name(row.id),
        display_name=row.display_name,
        table_options=common_pb2.TableOptions.FromString(row.table_options),
        format=FORMATS[row.format],
        swiss_rounds=row.swiss_rounds,
        buy_in_chips=row.buy_in,
        prizes=[tournament_pb2.Tournament.PrizeShare(place=p, share_bp=s) for p, s in row.prizes],
        min_entrants=row.min_entrants,
        max_entrants=row.max_entrants,
        state=STATES[row.state],
        entrant_count=entrant_count,
        current_round=row.current_round,
        pool_chips=row.pool_chips,
        cancel_reason=row.cancel_reason,
        house_cut_chips=row.house_cut_chips,
        prize_pool_chips=row.prize_pool_chips,
        total_rounds=row.total_rounds,
        chips_settled=row.chips_settled,
    )
    out.no_show_timeout.FromSeconds(row.no_show_seconds)
    _set_time(out, "registration_open_time", row.registration_open_at)
    _set_time(out, "registration_close_time", row.registration_close_at)
    _set_time(out, "start_time", row.start_at)
    _set_time(out, "create_time", row.created_at)
    _set_time(out, "actual_start_time", row.started_at)
    _set_time(out, "end_time", row.ended_at)
    return out


def entrant(tournament_id: str, entry: Entry, eliminated: bool = False) -> tournament_pb2.Entrant:
    registered = [p for p in entry.players if p.hold_state != "failed"]
    out = tournament_pb2.Entrant(
        name=entrant_name(tournament_id, entry.id),
        players=[f"players/{p.player}" for p in registered],
        seed=entry.seed or 0,
        eliminated=eliminated,
        withdrawn=entry.state in ("withdrawn", "dropped"),
        complete=entry.state == "complete",
        place=entry.place or 0,
        prize_chips=entry.prize_chips,
    )
    _set_time(out, "register_time", entry.registered_at)
    return out


def bracket(tournament_id: str, round_rows: Sequence[Any], pairing_rows: Sequence[Any]) -> tournament_pb2.Bracket:
    by_round: dict[int, list[Any]] = {}
    for row in pairing_rows:
        by_round.setdefault(row.round, []).append(row)
    out = tournament_pb2.Bracket(tournament=tournament_name(tournament_id))
    for round_row in round_rows:
        message = out.rounds.add(number=round_row.number, finished=round_row.finished_at is not None)
        _set_time(message, "start_time", round_row.started_at)
        for row in by_round.get(round_row.number, []):
            pairing = message.pairings.add(
                entrants=[entrant_name(tournament_id, e) for e in (row.entrant_a, row.entrant_b) if e is not None],
                table=row.table_name or "",
                match_id=row.match_id or "",
                winner=entrant_name(tournament_id, row.winner) if row.winner else "",
                bye=row.entrant_b is None,
                forfeit=bool(row.forfeit),
                state=PAIRING_STATES[row.state],
                no_shows=[f"players/{p}" for p in row.no_shows or []],
            )
            if row.score_a is not None and row.score_b is not None:
                pairing.scores.extend([int(row.score_a), int(row.score_b)])
            _set_time(pairing, "no_show_deadline", row.no_show_deadline)
    return out


def standings_message(
    tournament_id: str,
    format_: str,
    rows: Sequence[standings.Standing],
    players: dict[str, tuple[str, ...]],
    prizes: dict[str, int],
    final: bool,
) -> tournament_pb2.ListStandingsResponse:
    names = standings.SWISS_TIE_BREAKS if format_ == records.SWISS else standings.ELIMINATION_TIE_BREAKS
    return tournament_pb2.ListStandingsResponse(
        standings=[
            tournament_pb2.Standing(
                rank=row.rank,
                entrant=entrant_name(tournament_id, row.entrant),
                players=[f"players/{p}" for p in players.get(row.entrant, ())],
                points=row.points,
                tie_breaks=list(row.tie_breaks),
                eliminated=row.eliminated,
                prize_chips=prizes.get(row.entrant, 0),
            )
            for row in rows
        ],
        tie_break_names=list(names),
        final=final,
    )
