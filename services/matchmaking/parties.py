"""Parties of two, who play as partners: creating one (the caller leads it), inviting (the leader,
one invitee at a time), joining (invitees only) and leaving (the leader leaving disbands it; an
invitee leaving declines). A player is in one party at a time, and members cannot change a party
while it is queued: only its leader queues it, as one ticket (`tickets.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import Message
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import matchmaking_pb2
from services.matchmaking import models
from services.matchmaking.core import Core, Executor, Viewer, new_id, timestamp
from services.matchmaking.errors import NotAllowedError, PartyNotFoundError, StateError


async def party_row(session: Executor, party_id: str, viewer: Viewer) -> Any:
    """The party's row, if the viewer may see it (a member, an invitee, a service or admin)."""
    row = (await session.execute(select(models.parties).where(models.parties.c.id == party_id))).first()
    if row is None or not (viewer.privileged or viewer.player in row.members or viewer.player in row.invited):
        raise PartyNotFoundError(f"parties/{party_id} not found")
    return row


class Parties:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.db = core.db
        self.clock = core.clock

    @staticmethod
    def party_view(row: Any) -> matchmaking_pb2.Party:
        return matchmaking_pb2.Party(
            name=f"parties/{row.id}",
            members=[f"players/{p}" for p in row.members],
            invited=[f"players/{p}" for p in row.invited],
            create_time=timestamp(row.create_time),
        )

    async def get_party(self, party_id: str, viewer: Viewer) -> matchmaking_pb2.Party:
        async with self.db.read() as session:
            return self.party_view(await party_row(session, party_id, viewer))

    async def create_party(
        self, scope: str, request: matchmaking_pb2.CreatePartyRequest, player: str
    ) -> matchmaking_pb2.Party:
        party_id = new_id()

        async def work(session: AsyncSession) -> matchmaking_pb2.Party:
            now = self.clock()
            current = (
                await session.execute(
                    select(models.party_members.c.party_id).where(models.party_members.c.player == player)
                )
            ).scalar_one_or_none()
            if current is not None:
                raise StateError(f"players/{player} is already in parties/{current}; leave it first")
            await session.execute(insert(models.party_members).values(player=player, party_id=party_id))
            await session.execute(
                insert(models.parties).values(
                    id=party_id,
                    leader=player,
                    members=[player],
                    invited=[],
                    state="open",
                    create_time=now,
                    update_time=now,
                )
            )
            return self.party_view(await party_row(session, party_id, Viewer(player)))

        return await self.core.once(scope, "CreateParty", request, matchmaking_pb2.Party, work)

    async def _party_change(
        self,
        scope: str,
        method: str,
        request: Message,
        party_id: str,
        viewer: Viewer,
        change: Callable[[AsyncSession, Any], Any],
    ) -> matchmaking_pb2.Party:
        async def work(session: AsyncSession) -> matchmaking_pb2.Party:
            row = await party_row(session, party_id, viewer)
            if row.state != "open":
                raise StateError(f"parties/{party_id} was disbanded")
            values = await change(session, row)
            await session.execute(
                update(models.parties).where(models.parties.c.id == party_id).values(**values, update_time=self.clock())
            )
            return self.party_view(await party_row(session, party_id, Viewer(None, True)))

        return await self.core.once(scope, method, request, matchmaking_pb2.Party, work)

    async def _queued(self, session: AsyncSession, players: Sequence[str]) -> None:
        live = (
            await session.execute(select(models.queue_members).where(models.queue_members.c.player.in_(players)))
        ).first()
        if live is not None:
            raise StateError(f"players/{live.player} is queued (tickets/{live.ticket_id}); cancel the ticket first")

    async def invite_to_party(
        self, scope: str, request: matchmaking_pb2.InviteToPartyRequest, party_id: str, player: str, invitee: str
    ) -> matchmaking_pb2.Party:
        async def change(session: AsyncSession, row: Any) -> dict[str, Any]:
            if row.leader != player:
                raise NotAllowedError(f"only the party's leader (players/{row.leader}) invites")
            if invitee in row.members:
                raise StateError(f"players/{invitee} is already a member")
            if len(row.members) >= 2:
                raise StateError(f"parties/{party_id} is full (two players)")
            return {"invited": sorted(set(row.invited) | {invitee})}

        return await self._party_change(scope, "InviteToParty", request, party_id, Viewer(player), change)

    async def join_party(
        self, scope: str, request: matchmaking_pb2.JoinPartyRequest, party_id: str, player: str
    ) -> matchmaking_pb2.Party:
        async def change(session: AsyncSession, row: Any) -> dict[str, Any]:
            if player in row.members:
                return {}
            if player not in row.invited:
                raise NotAllowedError(f"players/{player} was not invited to parties/{party_id}")
            if len(row.members) >= 2:
                raise StateError(f"parties/{party_id} is full (two players)")
            await self._queued(session, [row.leader, player])
            try:
                async with session.begin_nested():
                    await session.execute(insert(models.party_members).values(player=player, party_id=party_id))
            except IntegrityError:
                raise StateError(f"players/{player} is already in another party; leave it first") from None
            return {"members": [*row.members, player], "invited": [p for p in row.invited if p != player]}

        return await self._party_change(scope, "JoinParty", request, party_id, Viewer(player), change)

    async def leave_party(
        self, scope: str, request: matchmaking_pb2.LeavePartyRequest, party_id: str, player: str
    ) -> matchmaking_pb2.Party:
        async def change(session: AsyncSession, row: Any) -> dict[str, Any]:
            if player not in row.members:
                if player in row.invited:  # declining the invitation
                    return {"invited": [p for p in row.invited if p != player]}
                raise StateError(f"players/{player} is not a member of parties/{party_id}")
            await self._queued(session, row.members)
            if player == row.leader:  # the leader leaving disbands the party
                await session.execute(delete(models.party_members).where(models.party_members.c.party_id == party_id))
                return {"state": "disbanded", "members": [], "invited": []}
            await session.execute(delete(models.party_members).where(models.party_members.c.player == player))
            return {"members": [p for p in row.members if p != player]}

        return await self._party_change(scope, "LeaveParty", request, party_id, Viewer(player), change)
