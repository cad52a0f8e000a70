"""The in-memory table without a server: old hands compacted to their JSON text read back the
same, a finished match compacted likewise, a table rebuilt from its log equals the one that
wrote it (bots included), and a tournament table's social rules on a proposal read back."""

from __future__ import annotations

from typing import Any

import pytest

from buraco.v1 import common_pb2, game_session_pb2
from services.common.errors import FailedPreconditionError
from services.game_session import social, timers
from services.game_session.log import Entry, SealedEntryError
from services.game_session.table import LiveTable
from tests.services.game_session.conftest import options, seats


def _bot_table(table_id: str, express: bool = False) -> LiveTable:
    length = {"length": common_pb2.MATCH_LENGTH_EXPRESS} if express else \
        {"length": common_pb2.MATCH_LENGTH_POINTS, "target_points": 3005}
    description = game_session_pb2.Table(
        name=f"tables/{table_id}", match_id=f"m-{table_id}", seats=seats("bot", "bot"), options=options(**length),
    )
    return LiveTable(table_id, description, 1_000)


def _play_hands(table: LiveTable, hands: int) -> dict[int, tuple[Any, ...]]:
    """Bots play until `hands` hands have been played (the way the manager drives a bot table);
    returns each entry's data and views as they were when it was made."""
    seen: dict[int, tuple[Any, ...]] = {}
    out: list[Entry] = []

    def look() -> None:
        for entry in out:
            if entry.seq not in seen:
                seen[entry.seq] = (dict(entry.data), *(entry.proto(v) for v in (0, 1, None)))

    table.start_hand(1_000, "seed", out)
    table.after_change(1_000, "seed", out)
    look()
    while table.match.hands_played < hands and table.live:
        hand = table.match.hand
        assert hand is not None
        seat = hand.to_act
        table.apply_action(table.bot(seat).choose(hand.view(seat), hand.legal_actions()), seat, "bot", 2_000, out)
        look()
        table.after_change(2_000, "seed", out)
        look()
    return seen


def test_old_hands_are_compacted_and_read_back_the_same() -> None:
    table = _bot_table("compact")
    seen = _play_hands(table, 3)
    assert table.compacted > 0
    assert all(e.sealed and not e.encoded for e in table.entries[: table.compacted])
    for entry in table.entries:
        data, *views = seen[entry.seq]
        assert entry.data == data
        assert [entry.proto(v) for v in (0, 1, None)] == views


def test_a_rebuilt_table_equals_the_one_that_wrote_the_log() -> None:
    table = _bot_table("rebuild")
    _play_hands(table, 2)
    copy = _bot_table("rebuild")
    copy.restore([e.text() for e in table.entries])
    assert copy.match == table.match and copy.seq == table.seq
    assert copy.snapshot(0, "") == table.snapshot(0, "")
    # the bots' memory was rebuilt too: they go on making the same moves
    for _ in range(30):
        hand, other = table.match.hand, copy.match.hand
        assert hand is not None and other is not None
        seat = hand.to_act
        mine = table.bot(seat).choose(hand.view(seat), hand.legal_actions())
        theirs = copy.bot(seat).choose(other.view(seat), other.legal_actions())
        assert mine == theirs
        out: list[Entry] = []
        table.apply_action(mine, seat, "bot", 3_000, out)
        copy.apply_action(theirs, seat, "bot", 3_000, [])
        if not table.live or table.match.needs_deal():
            break


def test_a_finished_match_is_compacted_but_its_last_change_and_reads_back_the_same() -> None:
    table = _bot_table("finished", express=True)
    seen = _play_hands(table, 5)
    assert not table.live and table.state == game_session_pb2.Table.STATE_FINISHED
    last = 3  # the final change's entries keep their protos: the streams are sending them
    table.compact_finished(keep=last)
    assert table.compacted == len(table.entries) - last
    assert all(e.sealed and not e.encoded for e in table.entries[:-last])
    for entry in table.entries:
        data, *views = seen[entry.seq]
        assert entry.data == data
        assert [entry.proto(v) for v in (0, 1, None)] == views
    # read back from its log, a finished table keeps only the JSON text
    copy = _bot_table("finished", express=True)
    copy.restore([e.text() for e in table.entries])
    assert not copy.live and copy.compacted == len(copy.entries)
    assert all(not e.encoded for e in copy.entries)
    assert [[e.proto(v) for v in (0, 1, None)] for e in copy.entries] == \
        [list(seen[e.seq][1:]) for e in table.entries]


def test_a_sealed_entry_never_changes() -> None:
    """Once sealed (written and published), an entry's content is fixed: marking a request on it
    is refused, and a form it was not encoded for is built each time, never kept."""
    table = _bot_table("sealed")
    out: list[Entry] = []
    table.start_hand(1_000, "seed", out)
    entry = out[0]
    entry.seal(table.players, spectators=False)
    text = entry.text()
    try:
        entry.mark_request("scope", "r1", "digest", 1)
        raise AssertionError("a sealed entry took a request")
    except SealedEntryError:
        pass
    assert entry.text() == text and "rq" not in entry.data
    spectator = entry.framed(None)  # not encoded at the seal (nobody watched): built, not kept
    assert entry.framed(None) == spectator and entry.framed(None) is not spectator
    assert entry.framed(0) is entry.framed(0)  # a seat's form was encoded at the seal


def test_a_proposal_logged_at_a_tournament_table_never_passes() -> None:
    """A proposal opened at a tournament's table before annulment was refused there (read back
    from its log) takes no vote, and a voter leaving does not pass it either: it runs out."""
    description = game_session_pb2.Table(
        name="tables/cup", match_id="m-cup", seats=seats("alice", "bob"), tournament="tournaments/cup1",
        options=options(mode=common_pb2.TABLE_MODE_COMPETITIVE),
    )
    table = LiveTable("cup", description, 1_000)
    out: list[Entry] = []
    table.start_hand(1_000, "seed", out)
    table.proposed("cup-a1", 0, [0, 1], 61_000)
    proposal = table.proposal
    assert proposal is not None
    proposal.votes[0] = True
    with pytest.raises(FailedPreconditionError, match="cannot be annulled"):
        social.vote(table, 1, "cup-a1", True, 2_000, out)
    social.leave(table, 1, 2_000, out)  # alice's yes is the only vote left: still not passed
    assert table.live and table.proposal is proposal and proposal.voters == [0]
    social.expire(table, "cup-a1", 61_000, out)
    assert table.live and not table.proposal
    assert [e.data["x"]["approved"] for e in out if e.type == "annulment_resolved"] == [False]


def test_a_search_bots_decision_is_dropped_when_the_table_changed_meanwhile() -> None:
    """An expert seat's decision is captured between two changes and applied by a later one: a
    change in between (here a chat message) drops it (and the next one is due again); a failed
    decision is stood in for by the heuristic bot's move."""
    description = game_session_pb2.Table(
        name="tables/deep", match_id="m-deep", seats=seats("bot", "bot"),
        options=options(bot_level=common_pb2.BOT_LEVEL_HARD),
    )
    for seat in description.seats:
        seat.participant.bot = common_pb2.BOT_LEVEL_UNSPECIFIED
    table = LiveTable("deep", description, 1_000, expert_budget_ms=1.0)
    out: list[Entry] = []
    table.start_hand(1_000, "seed", out)
    table.after_change(1_000, "seed", out)
    turn = table.current_turn()
    assert turn is not None and table.bot_kind(turn.seat) == "expert"
    def idle() -> bool:
        return table.thinking is None

    decision = timers.think(table, turn)
    assert decision is not None and not idle()
    assert timers.think(table, turn) is None  # one decision at a time
    social.chat(table, "ana", None, "hi", 2.0, 10, out)
    seq = table.seq
    timers.decided(table, decision, decision.choose(), 2_000, out)
    assert table.seq == seq and idle()  # dropped
    again = timers.think(table, turn)
    assert again is not None
    timers.decided(table, again, None, 3_000, out)  # failed: the heuristic's move stands in
    moved = [e for e in table.entries[seq:] if "a" in e.data]
    assert [e.data["by"] for e in moved] == ["bot"] and idle()
