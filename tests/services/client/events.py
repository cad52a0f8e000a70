"""Stream events the client tests feed to a `TableModel`."""

from __future__ import annotations

from buraco.v1 import common_pb2, game_session_pb2


def event(seq: int, **kind: object) -> game_session_pb2.TableEvent:
    """A stream event: `event(8, card_drawn=CardDrawn(...))`."""
    return game_session_pb2.TableEvent(seq=seq, **kind)  # type: ignore[arg-type]


def snapshot(seq: int = 1) -> game_session_pb2.TableEvent:
    """The first event seat 0 (`ann`, to draw, holding 4H 5H 6H KS) gets of a 2-player aberto table
    against an easy bot: its snapshot at `seq`."""
    table = game_session_pb2.Table(
        name="tables/t1", seq=seq,
        options=common_pb2.TableOptions(ruleset=common_pb2.RulesetRef(preset="aberto"), players=2),
        state=game_session_pb2.Table.STATE_PLAYING,
    )
    snap = game_session_pb2.TableSnapshot(
        table=table, viewer_seat=0, hand=["4H", "5H", "6H", "KS"],
        seats=[
            game_session_pb2.TableSnapshot.SeatView(
                seat=0, participant=common_pb2.Participant(player="players/ann"), hand_size=4),
            game_session_pb2.TableSnapshot.SeatView(
                seat=1, participant=common_pb2.Participant(bot=common_pb2.BOT_LEVEL_EASY), hand_size=11),
        ],
        sides=[game_session_pb2.TableSnapshot.SideView(side=0), game_session_pb2.TableSnapshot.SideView(side=1)],
        discard_pile=["9C"], stock_count=50, hand_number=1, dealer=1, to_act=0,
        phase=game_session_pb2.TURN_PHASE_DRAW,
    )
    return event(seq, snapshot=snap)
