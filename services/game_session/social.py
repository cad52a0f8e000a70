"""The table's social rules, as plain logic over the table: annulment proposals and votes, chat,
leaving, and bots taking (and giving back) a player's seat.

Each function is part of a change: it checks the rule (raising the error the caller gets),
changes the table and appends the log entries it makes to `out`. The table's actor runs it, with
the time and the settings; nothing here waits or writes.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import FailedPreconditionError, PermissionDeniedError, ResourceExhaustedError
from services.game_session.log import Entry
from services.game_session.table import LiveTable, Proposal, State


# -- annulment -------------------------------------------------------------------------------------
def _annulment_allowed(table: LiveTable) -> None:
    """A tournament's match is never annulled (its tournament would play it again): the players
    play it out, or leave it (a bot plays on for their side)."""
    if table.tournament:
        raise FailedPreconditionError(
            f"{table.name} is a match of {table.tournament}: a tournament match cannot be annulled; "
            "play it out, or leave the table (a bot plays on for your side)"
        )


def propose(table: LiveTable, seat: int, now_ms: int, open_ms: int, out: list[Entry]) -> str:
    """`seat` proposes to annul the match (and votes for it); the proposal stays open `open_ms`.
    Every human seat not played by a bot votes. Never at a tournament's table. Returns the
    proposal's id."""
    _annulment_allowed(table)
    if table.seats[seat].bot_controlled:
        raise FailedPreconditionError(f"a bot plays seat {seat} now; it cannot propose")
    if table.state != State.STATE_PLAYING:
        raise FailedPreconditionError(f"{table.name}: the match has not started")
    if table.proposal is not None:
        raise FailedPreconditionError(f"{table.name}: an annulment proposal is open already")
    voters = [s.seat for s in table.seats if s.human and not s.bot_controlled]
    table.proposals_made += 1
    proposal = Proposal(f"{table.table_id}-a{table.proposals_made}", seat, voters, now_ms + open_ms)
    table.proposal = proposal
    table.add({"t": "annulment_proposed", "ms": now_ms,
               "x": {"proposal_id": proposal.proposal_id, "proposer_seat": seat, "voters": voters,
                     "deadline_ms": proposal.deadline_ms}}, out)
    vote(table, seat, proposal.proposal_id, True, now_ms, out)
    return proposal.proposal_id


def vote(table: LiveTable, seat: int, proposal_id: str, approve: bool, now_ms: int, out: list[Entry]) -> None:
    """`seat` votes on the open proposal: one vote against rejects it, every voter's approval
    passes it. Never at a tournament's table (no proposal opens there; one logged before that
    rule runs out unanswered)."""
    _annulment_allowed(table)
    proposal = table.proposal
    if proposal is None or proposal.proposal_id != proposal_id:
        raise FailedPreconditionError(f"proposal {proposal_id!r} is not open at {table.name}")
    if seat not in proposal.voters:
        raise FailedPreconditionError(f"seat {seat} does not vote on {proposal_id!r}")
    if seat in proposal.votes:
        raise FailedPreconditionError(f"seat {seat} has voted on {proposal_id!r} already")
    proposal.votes[seat] = approve
    table.add({"t": "annulment_voted", "ms": now_ms,
               "x": {"proposal_id": proposal_id, "seat": seat, "approve": approve}}, out)
    if not approve:
        _resolve(table, False, now_ms, out)
    elif all(proposal.votes.get(v) for v in proposal.voters):
        _resolve(table, True, now_ms, out)


def expire(table: LiveTable, proposal_id: str, now_ms: int, out: list[Entry]) -> None:
    """The proposal's time ran out without every vote: rejected."""
    proposal = table.proposal
    if proposal is None or proposal.proposal_id != proposal_id or now_ms < proposal.deadline_ms:
        return
    _resolve(table, False, now_ms, out)


def _resolve(table: LiveTable, approved: bool, now_ms: int, out: list[Entry]) -> None:
    """Close the proposal; approved, the hand in play is aborted and the match ends, annulled."""
    proposal = table.proposal
    assert proposal is not None
    table.proposal = None
    table.add({"t": "annulment_resolved", "ms": now_ms,
               "x": {"proposal_id": proposal.proposal_id, "approved": approved}}, out)
    if not approved:
        return
    hand = table.match.hand
    if hand is not None and not hand.is_terminal():
        table.add({"t": "hand_ended", "ms": now_ms,
                   "x": {"hand_number": hand.hand_number, "reason": "aborted", "seed": table.seed,
                         "match_scores": table.match.totals[:],
                         "hands": [table.hand_cards(s) for s in range(table.players)]}}, out)
    table.state = State.STATE_FINISHED
    table.add({"t": "match_ended", "ms": now_ms,
               "x": {"outcomes": table.outcomes(annulled=True), "annulled": True,
                     "match_scores": table.match.totals[:]}}, out)


# -- chat ------------------------------------------------------------------------------------------
def chat(
    table: LiveTable, sender: str, seat: int | None, text: str, now: float, per_minute: int, out: list[Entry],
) -> None:
    """`sender` says `text` at the table (`seat` None: a spectator), at most `per_minute` a minute."""
    room = table.chat
    if ("*", sender) in room.mutes:
        raise PermissionDeniedError(f"players/{sender} is muted at {table.name}")
    recent = [t for t in room.recent.get(sender, []) if t > now - 60]
    if len(recent) >= per_minute:
        raise ResourceExhaustedError(
            f"at most {per_minute} chat messages a minute; wait a little",
            metadata=(("retry-after-ms", str(int((recent[0] + 60 - now) * 1000) + 1)),),
        )
    recent.append(now)
    room.recent[sender] = recent
    x: dict[str, Any] = {"sender": sender, "text": text}
    if seat is not None:
        x["seat"] = seat
    table.add({"t": "chat", "ms": int(now * 1000), "x": x}, out)


# -- seats -----------------------------------------------------------------------------------------
def leave(table: LiveTable, seat_number: int, now_ms: int, out: list[Entry]) -> None:
    """The seat's player leaves the match for good: a bot plays the seat, the player is counted
    as having abandoned, and no longer votes on an open proposal (whose remaining voters' yes then
    passes it, except at a tournament's table)."""
    if table.state != State.STATE_PLAYING:
        raise FailedPreconditionError(f"{table.name}: the match is not being played")
    seat = table.seats[seat_number]
    if seat.abandoned:
        raise FailedPreconditionError(f"you left {table.name} already")
    if seat.bot_controlled:  # a bot took it while they were away: now they have left for good
        seat.abandoned = True
        seat.takeover_reason = "left"
        table.add({"t": "seat_taken_over", "ms": now_ms, "x": {"seat": seat_number, "reason": "left"}}, out)
    else:
        take_seat(table, seat_number, "left", now_ms, out)
    proposal = table.proposal
    if proposal is not None and seat_number in proposal.voters:
        proposal.voters.remove(seat_number)
        proposal.votes.pop(seat_number, None)
        if proposal.voters and all(proposal.votes.get(v) for v in proposal.voters) and not table.tournament:
            _resolve(table, True, now_ms, out)


def take_seat(table: LiveTable, seat_number: int, reason: str, now_ms: int, out: list[Entry],
              *, return_deadline_ms: int = 0) -> None:
    """A bot takes the seat: "left", "timeouts" (for good) or "disconnected" (until its player
    comes back by `return_deadline_ms`)."""
    table.seats[seat_number].taken_by_bot(reason, return_deadline_ms)
    x: dict[str, Any] = {"seat": seat_number, "reason": reason}
    if return_deadline_ms:
        x["return_deadline_ms"] = return_deadline_ms
    table.add({"t": "seat_taken_over", "ms": now_ms, "x": x}, out)


def disconnected(table: LiveTable, seat_number: int, now_ms: int, window_ms: int, out: list[Entry]) -> None:
    """The seat's player has had no stream for the grace period: a bot plays the seat, which the
    player may take back within `window_ms`."""
    seat = table.seats[seat_number]
    if table.state != State.STATE_PLAYING or seat.streams > 0 or seat.bot_controlled:
        return
    take_seat(table, seat_number, "disconnected", now_ms, out, return_deadline_ms=now_ms + window_ms)


def returned(table: LiveTable, seat_number: int, now_ms: int, out: list[Entry]) -> None:
    """A disconnected player's stream is back within their window: they play their seat again."""
    seat = table.seats[seat_number]
    if not (seat.bot_controlled and seat.takeover_reason == "disconnected") or now_ms > seat.return_deadline_ms:
        return
    seat.returned()
    table.add({"t": "seat_returned", "ms": now_ms, "x": {"seat": seat_number, "player": seat.player}}, out)
