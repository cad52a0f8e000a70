"""Game-session tables as the other services (matchmaking, tournaments) create, read and cancel them.

Every call goes to the table's owner (`redirects.Owners` follows the redirects) with a deadline,
and fails as `calls.Refused` (a definitive answer) or `calls.Unreachable` (retry later with the
same request id). `Tables.create` is safe to retry: a retry whose earlier attempt made the table
gets that table back, never a second one and never an error.
"""

from __future__ import annotations

from buraco.v1 import game_session_pb2, game_session_pb2_grpc
from services.client.calls import Refused, classified
from services.client.redirects import Owners

#: A table's state by name, as the callers' own records keep it ("unknown" for any other value).
TABLE_STATES = {
    game_session_pb2.Table.STATE_WAITING: "waiting",
    game_session_pb2.Table.STATE_PLAYING: "playing",
    game_session_pb2.Table.STATE_FINISHED: "finished",
    game_session_pb2.Table.STATE_CANCELLED: "cancelled",
}

SERVICE = "game_session"


class Tables:
    """CreateTable, GetTable and CancelTable at each table's owner, each call with `timeout`."""

    def __init__(self, owners: Owners, timeout: float) -> None:
        self.owners = owners
        self.timeout = timeout

    async def create(self, request: game_session_pb2.CreateTableRequest) -> game_session_pb2.Table:
        """The table `request` creates. ALREADY_EXISTS means a table by its `table_id` exists:
        made by an earlier attempt whose answer was lost (or whose stored answer is gone), it is
        ours when it carries the request's match id, and is returned as its owner reads it now;
        any other table by that id (or a clash without a `table_id`) raises the refusal."""

        async def call(stub: game_session_pb2_grpc.GameSessionServiceAsyncStub) -> game_session_pb2.Table:
            reply: game_session_pb2.Table = await stub.CreateTable(request, timeout=self.timeout)
            return reply

        try:
            return await classified(SERVICE, lambda: self.owners.call(call))
        except Refused as refused:
            if refused.code != "ALREADY_EXISTS" or not request.table_id:
                raise
            try:
                existing = await self.get(f"tables/{request.table_id}")
            except Refused as missing:
                if missing.code == "NOT_FOUND":  # the clash was the match id, under another table id
                    raise refused from None
                raise
            if existing.match_id != request.table.match_id:
                raise
            return existing

    async def get(self, name: str, address: str = "") -> game_session_pb2.Table:
        """The table `name` (`tables/{table}`), asked first at `address` (empty: the entry)."""
        request = game_session_pb2.GetTableRequest(name=name)

        async def call(stub: game_session_pb2_grpc.GameSessionServiceAsyncStub) -> game_session_pb2.Table:
            reply: game_session_pb2.Table = await stub.GetTable(request, timeout=self.timeout)
            return reply

        return await classified(SERVICE, lambda: self.owners.call(call, address))

    async def cancel(
        self, request: game_session_pb2.CancelTableRequest, address: str = ""
    ) -> game_session_pb2.Table:
        """The table as `request` cancelled it, asked first at `address` (empty: the entry)."""

        async def call(stub: game_session_pb2_grpc.GameSessionServiceAsyncStub) -> game_session_pb2.Table:
            reply: game_session_pb2.Table = await stub.CancelTable(request, timeout=self.timeout)
            return reply

        return await classified(SERVICE, lambda: self.owners.call(call, address))
