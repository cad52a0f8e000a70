"""The lobby: tables players create (the creator is the chief), sit at, stand up from and leave;
the chief's options, invitations to private tables, bots at practice tables, readiness, the start
of a match (through the same saga as quick matches) and rematches (docs/matchmaking.md, "The
lobby").

A table is `open` (players sit, the chief sets options), `starting` (the saga runs), `in_match`
(a game table plays the match) or `closed` (everyone left). Between matches it is `open` again:
the first rematch request after the game table has finished reopens it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2, matchmaking_pb2
from services.common import validation as check
from services.matchmaking import models
from services.matchmaking.core import Core, Viewer, new_id, timestamp
from services.matchmaking.errors import DependencyUnavailableError, LobbyTableNotFoundError, NotAllowedError, StateError
from services.matchmaking.options import check_table_options
from services.matchmaking.ports import CallError, SeatSpec
from services.matchmaking.saga import Sagas

LobbyTable = matchmaking_pb2.LobbyTable
STATES = {
    "open": LobbyTable.STATE_OPEN,
    "starting": LobbyTable.STATE_STARTING,
    "in_match": LobbyTable.STATE_IN_MATCH,
    "closed": LobbyTable.STATE_CLOSED,
}
#: Options the chief may change (UpdateLobbyTable's `update_mask` paths).
UPDATABLE = {
    "options.ruleset",
    "options.players",
    "options.length",
    "options.target_points",
    "options.mode",
    "options.bet_chips",
    "options.draw_seconds",
    "options.play_seconds",
    "options.spectators_allowed",
    "options.private",
    "options.bot_level",
}
#: The most tables one WatchLobby stream follows.
WATCH_LIMIT = 500


@dataclass(frozen=True)
class Filters:
    """ListLobbyTables' and WatchLobby's filters; zero values match anything."""

    preset: str = ""
    players: int = 0
    mode: int = 0
    max_bet_chips: int = 0
    only_with_free_seat: bool = False


def _free(seats: Sequence[dict[str, Any]]) -> int:
    return sum(1 for seat in seats if not seat.get("player") and not seat.get("bot"))


def _seat_of(seats: Sequence[dict[str, Any]], player: str) -> int | None:
    for index, seat in enumerate(seats):
        if seat.get("player") == player:
            return index
    return None


def _empty_seat() -> dict[str, Any]:
    return {"player": None, "bot": 0, "ready": False, "rematch": False}


class Lobby:
    def __init__(self, core: Core, sagas: Sagas) -> None:
        self.core = core
        self.sagas = sagas
        self.db = core.db
        self.clock = core.clock

    # -- reading ----------------------------------------------------------------------------------

    def _visible(self, viewer: Viewer) -> Any:
        """The SQL condition: tables the viewer may see (private ones: chief, invitees, players at it)."""
        lt, inv = models.lobby_tables, models.lobby_invitations
        if viewer.privileged:
            return lt.c.id.is_not(None)
        return or_(
            lt.c.private.is_(False),
            lt.c.chief == viewer.player,
            lt.c.id.in_(select(inv.c.table_id).where(inv.c.player == viewer.player)),
        )

    async def _row(self, session: AsyncSession, table_id: str, viewer: Viewer) -> Any:
        lt = models.lobby_tables
        row = (await session.execute(select(lt).where(lt.c.id == table_id))).first()
        if row is None:
            raise LobbyTableNotFoundError(f"lobbyTables/{table_id} not found")
        if row.private and not viewer.privileged and viewer.player != row.chief:
            present = _seat_of(row.seats, viewer.player or "") is not None or viewer.player in row.onlookers
            invited = await self._invited(session, table_id)
            if not present and viewer.player not in invited:
                raise LobbyTableNotFoundError(f"lobbyTables/{table_id} not found")
        return row

    async def _invited(self, session: AsyncSession, table_id: str) -> list[str]:
        inv = models.lobby_invitations
        rows = await session.execute(select(inv.c.player).where(inv.c.table_id == table_id).order_by(inv.c.player))
        return [row.player for row in rows]

    async def view(self, session: AsyncSession, row: Any, viewer: Viewer) -> LobbyTable:
        out = LobbyTable(
            name=f"lobbyTables/{row.id}",
            chief=f"players/{row.chief}" if row.chief else "",
            options=common_pb2.TableOptions.FromString(row.options),
            state=STATES[row.state],
            invited=[f"players/{p}" for p in await self._invited(session, row.id)],
            create_time=timestamp(row.create_time),
            update_time=timestamp(row.update_time),
        )
        for index, seat in enumerate(row.seats):
            lobby_seat = LobbyTable.LobbySeat(seat=index, ready=seat["ready"], wants_rematch=seat["rematch"])
            if seat.get("player"):
                lobby_seat.participant.player = f"players/{seat['player']}"
            elif seat.get("bot"):
                lobby_seat.participant.bot = seat["bot"]
            out.seats.append(lobby_seat)
        if row.match_id:
            seat_index = _seat_of(row.seats, viewer.player or "")
            out.game_table.CopyFrom(
                matchmaking_pb2.MatchAssignment(
                    table=row.game_table,
                    game_session_address=row.game_address,
                    match_id=row.match_id,
                    seat=seat_index or 0,
                )
            )
        return out

    async def get(self, table_id: str, viewer: Viewer) -> LobbyTable:
        async with self.db.read() as session:
            return await self.view(session, await self._row(session, table_id, viewer), viewer)

    def _filtered(self, viewer: Viewer, filters: Filters) -> Any:
        lt = models.lobby_tables
        conditions = [lt.c.state == "open", self._visible(viewer)]
        if filters.preset:
            conditions.append(lt.c.preset == filters.preset)
        if filters.players:
            conditions.append(lt.c.seat_count == filters.players)
        if filters.mode:
            conditions.append(lt.c.mode == filters.mode)
        if filters.max_bet_chips:
            conditions.append(lt.c.bet_chips <= filters.max_bet_chips)
        if filters.only_with_free_seat:
            conditions.append(lt.c.free_seats > 0)
        return and_(*conditions)

    async def list_tables(
        self, viewer: Viewer, filters: Filters, page_size: int, after: str | None
    ) -> matchmaking_pb2.ListLobbyTablesResponse:
        lt = models.lobby_tables
        query = select(lt).where(self._filtered(viewer, filters))
        if after is not None:
            query = query.where(lt.c.id > after)
        async with self.db.read() as session:
            rows = (await session.execute(query.order_by(lt.c.id).limit(page_size + 1))).all()
            tables = [await self.view(session, row, viewer) for row in rows[:page_size]]
        token = check.encode_page_token({"after": rows[page_size - 1].id}) if len(rows) > page_size else ""
        return matchmaking_pb2.ListLobbyTablesResponse(lobby_tables=tables, next_page_token=token)

    async def watch(self, table_id: str, viewer: Viewer) -> AsyncIterator[LobbyTable]:
        await self.get(table_id, viewer)  # NOT_FOUND before the stream starts
        sent = b""
        poll = self.core.settings.watch_poll_seconds
        while True:
            event = self.core.notifier.event(f"lobby:{table_id}")
            async with self.db.read() as session:
                row = await self._row(session, table_id, viewer)
                view = await self.view(session, row, viewer)
            data = view.SerializeToString(deterministic=True)
            if data != sent:
                sent = data
                yield view
            if row.state == "closed":
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await event.wait()

    async def watch_lobby(self, viewer: Viewer, filters: Filters) -> AsyncIterator[matchmaking_pb2.LobbyUpdate]:
        lt = models.lobby_tables
        sent: dict[str, bytes] = {}
        poll = self.core.settings.watch_poll_seconds
        while True:
            event = self.core.notifier.event("lobby")
            async with self.db.read() as session:
                rows = (
                    await session.execute(
                        select(lt).where(self._filtered(viewer, filters)).order_by(lt.c.id).limit(WATCH_LIMIT)
                    )
                ).all()
                views = {row.id: await self.view(session, row, viewer) for row in rows}
            for name in [name for name in sent if name not in views]:
                del sent[name]
                yield matchmaking_pb2.LobbyUpdate(removed=f"lobbyTables/{name}")
            for name, table in views.items():
                data = table.SerializeToString(deterministic=True)
                if sent.get(name) != data:
                    sent[name] = data
                    yield matchmaking_pb2.LobbyUpdate(upserted=table)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await event.wait()

    # -- changing ---------------------------------------------------------------------------------

    async def _write(self, session: AsyncSession, row: Any, **values: Any) -> None:
        lt = models.lobby_tables
        if "seats" in values:
            values["free_seats"] = _free(values["seats"])
        await session.execute(
            update(lt).where(lt.c.id == row.id).values(**values, version=row.version + 1, update_time=self.clock())
        )

    async def _change(
        self,
        scope: str,
        method: str,
        request: Any,
        table_id: str,
        viewer: Viewer,
        change: Any,
        *,
        wake: bool = False,
    ) -> LobbyTable:
        """Runs `change(session, row)` on the table idempotently, then answers with the table."""

        async def work(session: AsyncSession) -> LobbyTable:
            row = await self._row(session, table_id, viewer)
            await change(session, row)
            return await self.view(session, await self._row(session, table_id, Viewer(None, True)), viewer)

        reply = await self.core.once(scope, method, request, LobbyTable, work)
        self.core.notifier.changed(f"lobby:{table_id}", "lobby")
        if wake:
            self.core.wake()
        return reply

    @staticmethod
    def _require_chief(row: Any, player: str) -> None:
        if row.chief != player:
            raise NotAllowedError(f"only the table's chief (players/{row.chief}) may do this")

    @staticmethod
    def _require_state(row: Any, *states: str) -> None:
        if row.state not in states:
            raise StateError(f"lobbyTables/{row.id} is {row.state}")

    async def _eligible(self, options: common_pb2.TableOptions, players: Sequence[str]) -> None:
        if options.mode == common_pb2.TABLE_MODE_COMPETITIVE and players:
            await self.core.check_eligible(players, options.bet_chips)

    async def create(
        self,
        scope: str,
        request: matchmaking_pb2.CreateLobbyTableRequest,
        player: str,
        options: common_pb2.TableOptions,
    ) -> LobbyTable:
        stored = await self.core.prior_answer(scope, "CreateLobbyTable", request, LobbyTable)
        if stored is not None:
            return stored
        await self._eligible(options, [player])
        table_id = new_id()

        async def work(session: AsyncSession) -> LobbyTable:
            now = self.clock()
            seats = [_empty_seat() for _ in range(options.players)]
            seats[0]["player"] = player
            await session.execute(
                insert(models.lobby_tables).values(
                    id=table_id,
                    chief=player,
                    options=options.SerializeToString(),
                    preset=options.ruleset.preset,
                    seat_count=options.players,
                    mode=options.mode,
                    bet_chips=options.bet_chips,
                    private=options.private,
                    free_seats=_free(seats),
                    state="open",
                    seats=seats,
                    onlookers=[],
                    saga_id=None,
                    game_table="",
                    game_address="",
                    match_id="",
                    version=1,
                    create_time=now,
                    update_time=now,
                )
            )
            return await self.view(session, await self._row(session, table_id, Viewer(player)), Viewer(player))

        reply = await self.core.once(scope, "CreateLobbyTable", request, LobbyTable, work)
        self.core.notifier.changed("lobby")
        return reply

    async def update_options(
        self,
        scope: str,
        request: matchmaking_pb2.UpdateLobbyTableRequest,
        table_id: str,
        player: str,
        paths: Sequence[str],
    ) -> LobbyTable:
        wanted = request.lobby_table.options

        async def change(session: AsyncSession, row: Any) -> None:
            self._require_chief(row, player)
            self._require_state(row, "open")
            options = common_pb2.TableOptions.FromString(row.options)
            for path in paths:
                name = path.removeprefix("options.")
                if name == "ruleset":
                    options.ruleset.CopyFrom(wanted.ruleset)
                else:
                    setattr(options, name, getattr(wanted, name))
            if (
                "options.mode" in paths
                and options.mode == common_pb2.TABLE_MODE_PRACTICE
                and "options.bet_chips" not in paths
            ):
                options.bet_chips = 0  # practice tables stake nothing
            options = check_table_options(options, "lobby_table.options")
            seats = [dict(seat) for seat in row.seats]
            if options.players < len(seats):
                if any(seat.get("player") or seat.get("bot") for seat in seats[options.players :]):
                    raise StateError(
                        f"seats {options.players} and up are taken; they must be free to have {options.players}"
                    )
                seats = seats[: options.players]
            seats += [_empty_seat() for _ in range(options.players - len(seats))]
            if options.mode == common_pb2.TABLE_MODE_COMPETITIVE and any(seat.get("bot") for seat in seats):
                raise StateError("bots sit at practice tables only; stand the bots up first")
            for seat in seats:  # new terms: every player confirms again
                seat["ready"] = bool(seat.get("bot"))
                seat["rematch"] = False
                if seat.get("bot") and "options.bot_level" in paths:  # the table's bots play at its level
                    seat["bot"] = options.bot_level or common_pb2.BOT_LEVEL_MEDIUM
            await self._write(
                session,
                row,
                options=options.SerializeToString(),
                preset=options.ruleset.preset,
                seat_count=options.players,
                mode=options.mode,
                bet_chips=options.bet_chips,
                private=options.private,
                seats=seats,
            )

        return await self._change(scope, "UpdateLobbyTable", request, table_id, Viewer(player), change)

    async def sit(
        self, scope: str, request: matchmaking_pb2.SitDownRequest, table_id: str, player: str, seat: int | None
    ) -> LobbyTable:
        stored = await self.core.prior_answer(scope, "SitDown", request, LobbyTable)
        if stored is not None:
            return stored
        async with self.db.read() as session:
            current = await self._row(session, table_id, Viewer(player))
        await self._eligible(common_pb2.TableOptions.FromString(current.options), [player])

        async def change(session: AsyncSession, row: Any) -> None:
            self._require_state(row, "open")
            if row.private and row.chief != player and player not in await self._invited(session, row.id):
                raise NotAllowedError(f"lobbyTables/{row.id} is private: only invited players sit")
            if row.options != current.options:
                raise StateError("the table's options changed; sit down again")
            seats = [dict(s) for s in row.seats]
            taken = _seat_of(seats, player)
            if taken is not None:
                raise StateError(f"players/{player} already sits at seat {taken}")
            if seat is None:
                free = [i for i, s in enumerate(seats) if not s.get("player") and not s.get("bot")]
                if not free:
                    raise StateError(f"lobbyTables/{row.id} has no free seat")
                index = free[0]
            else:
                if seat >= len(seats):
                    raise StateError(f"seat: the table has {len(seats)} seats (0 to {len(seats) - 1})")
                if seats[seat].get("player") or seats[seat].get("bot"):
                    raise StateError(f"seat {seat} is taken")
                index = seat
            seats[index] = {**_empty_seat(), "player": player}
            onlookers = [p for p in row.onlookers if p != player]
            await self._write(session, row, seats=seats, onlookers=onlookers)

        return await self._change(scope, "SitDown", request, table_id, Viewer(player), change)

    async def stand(
        self, scope: str, request: matchmaking_pb2.StandUpRequest, table_id: str, player: str
    ) -> LobbyTable:
        async def change(session: AsyncSession, row: Any) -> None:
            self._require_state(row, "open")
            seats = [dict(s) for s in row.seats]
            index = _seat_of(seats, player)
            if index is None:
                raise StateError(f"players/{player} does not sit at lobbyTables/{row.id}")
            seats[index] = _empty_seat()
            await self._write(session, row, seats=seats, onlookers=[*row.onlookers, player])

        return await self._change(scope, "StandUp", request, table_id, Viewer(player), change)

    async def leave(
        self, scope: str, request: matchmaking_pb2.LeaveLobbyTableRequest, table_id: str, player: str
    ) -> LobbyTable:
        async def change(session: AsyncSession, row: Any) -> None:
            if row.state == "starting":
                raise StateError(f"lobbyTables/{row.id}: the match is starting; leave once it has")
            seats = [dict(s) for s in row.seats]
            index = _seat_of(seats, player)
            if index is None and player not in row.onlookers:
                raise StateError(f"players/{player} is not at lobbyTables/{row.id}")
            if index is not None:
                seats[index] = _empty_seat()
            onlookers = [p for p in row.onlookers if p != player]
            chief = row.chief
            if chief == player:
                # The next seated player after the chief's seat (in seat order), else the first onlooker.
                start = index if index is not None else -1
                order = [(start + k) % len(seats) for k in range(1, len(seats) + 1)]
                seated = [seats[i]["player"] for i in order if seats[i].get("player")]
                chief = seated[0] if seated else (onlookers[0] if onlookers else None)
            humans = any(s.get("player") for s in seats) or onlookers
            values: dict[str, Any] = {"seats": seats, "onlookers": onlookers, "chief": chief}
            if not humans:
                # Nobody left: the bots go too.
                values.update(state="closed", seats=[_empty_seat() for _ in seats], chief=None)
            await self._write(session, row, **values)

        return await self._change(scope, "LeaveLobbyTable", request, table_id, Viewer(player), change)

    async def invite(
        self, scope: str, request: matchmaking_pb2.InviteToTableRequest, table_id: str, player: str, invitee: str
    ) -> LobbyTable:
        async def change(session: AsyncSession, row: Any) -> None:
            self._require_chief(row, player)
            self._require_state(row, "open", "starting", "in_match")
            if invitee not in await self._invited(session, row.id):
                await session.execute(insert(models.lobby_invitations).values(table_id=row.id, player=invitee))
            await self._write(session, row)

        return await self._change(scope, "InviteToTable", request, table_id, Viewer(player), change)

    async def fill_with_bots(
        self, scope: str, request: matchmaking_pb2.FillWithBotsRequest, table_id: str, player: str, wanted: int
    ) -> LobbyTable:
        """Bots of level `wanted` (0: the table's `options.bot_level`, MEDIUM when unset) take
        the free seats."""

        async def change(session: AsyncSession, row: Any) -> None:
            self._require_chief(row, player)
            self._require_state(row, "open")
            if row.mode != common_pb2.TABLE_MODE_PRACTICE:
                raise StateError("bots sit at practice tables only (bots never stake chips)")
            level = (wanted or common_pb2.TableOptions.FromString(row.options).bot_level
                     or common_pb2.BOT_LEVEL_MEDIUM)
            seats = [
                dict(s) if s.get("player") or s.get("bot") else {**_empty_seat(), "bot": level, "ready": True}
                for s in row.seats
            ]
            await self._write(session, row, seats=seats)

        return await self._change(scope, "FillWithBots", request, table_id, Viewer(player), change)

    async def set_ready(
        self, scope: str, request: matchmaking_pb2.SetReadyRequest, table_id: str, player: str, ready: bool
    ) -> LobbyTable:
        async def change(session: AsyncSession, row: Any) -> None:
            self._require_state(row, "open")
            seats = [dict(s) for s in row.seats]
            index = _seat_of(seats, player)
            if index is None:
                raise StateError(f"players/{player} does not sit at lobbyTables/{row.id}")
            seats[index]["ready"] = ready
            await self._write(session, row, seats=seats)

        return await self._change(scope, "SetReady", request, table_id, Viewer(player), change)

    async def _start(self, session: AsyncSession, row: Any, seats: list[dict[str, Any]]) -> None:
        specs = [SeatSpec(s.get("player") or None, int(s.get("bot") or 0)) for s in seats]
        saga_id = await self.sagas.start_lobby(session, row.id, specs, common_pb2.TableOptions.FromString(row.options))
        await self._write(session, row, seats=seats, state="starting", saga_id=saga_id)

    async def start(
        self, scope: str, request: matchmaking_pb2.StartMatchRequest, table_id: str, player: str
    ) -> LobbyTable:
        async def change(session: AsyncSession, row: Any) -> None:
            self._require_chief(row, player)
            self._require_state(row, "open")
            if _free(row.seats):
                raise StateError(f"every seat must be taken ({_free(row.seats)} free); bots fill practice tables")
            waiting = [s["player"] for s in row.seats if s.get("player") and not s["ready"]]
            if waiting:
                raise StateError(f"not every player is ready: {', '.join(f'players/{p}' for p in waiting)}")
            await self._start(session, row, [dict(s) for s in row.seats])

        return await self._change(scope, "StartMatch", request, table_id, Viewer(player), change, wake=True)

    async def request_rematch(
        self, scope: str, request: matchmaking_pb2.RequestRematchRequest, table_id: str, player: str
    ) -> LobbyTable:
        stored = await self.core.prior_answer(scope, "RequestRematch", request, LobbyTable)
        if stored is not None:
            return stored
        async with self.db.read() as session:
            current = await self._row(session, table_id, Viewer(player))
        finished = False
        if current.state == "in_match":
            try:
                finished = (await self.core.platform.get_table(current.game_table)).state in ("finished", "cancelled")
            except CallError as error:
                raise DependencyUnavailableError(f"the game-session service did not answer ({error.code})") from None
            if not finished:
                raise StateError(f"the match at {current.game_table} is still being played")

        async def change(session: AsyncSession, row: Any) -> None:
            if row.state == "in_match" and not (finished and row.match_id == current.match_id):
                raise StateError("the table changed; ask again")
            self._require_state(row, "open", "in_match")
            if not row.match_id:
                raise StateError(f"lobbyTables/{row.id} has not played a match yet")
            seats = [dict(s) for s in row.seats]
            index = _seat_of(seats, player)
            if index is None:
                raise StateError(f"players/{player} does not sit at lobbyTables/{row.id}")
            seats[index].update(rematch=True, ready=True)
            humans = [s for s in seats if s.get("player")]
            if all(s["rematch"] for s in humans) and not _free(seats) and all(s["ready"] for s in seats):
                # Everyone asked: the same table plays again.
                await self._start(session, row, seats)
            else:
                await self._write(session, row, seats=seats, state="open")

        return await self._change(scope, "RequestRematch", request, table_id, Viewer(player), change, wake=True)
