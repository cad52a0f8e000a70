"""What a table sends to the streams that follow it, and how a stream takes it.

A stream registers a `Subscriber` with the table's actor (`TableActor.subscribe`), which answers
with an `Opening` (the snapshot, or the events after the caller's `after_seq`) and from then on
puts, in order, on the subscriber's `Inbox`:
- each committed log `Entry` (a change's entries are put together, synchronously, so a stream
  that takes everything queued takes whole changes);
- for a `Play` stream, a `PlayAnswer`: an encoded `PlayUpdate` that answers one of the stream's
  own requests without a change of its own (a retry answered from the log, or a refusal), put
  where the request was decided, among the changes;
- a `StreamEnd`: nothing follows; the stream ends with its error's status (the copy was dropped:
  resume; too far behind: resume; the request side broke the protocol).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from services.game_session.log import Entry

#: Most items a stream may have queued before it is ended (the client resumes with after_seq).
MAX_QUEUED = 2000


@dataclass(frozen=True, slots=True)
class PlayAnswer:
    """An encoded `PlayUpdate` answering a `Play` stream's request without a change of its own."""

    message: bytes


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The stream ends with `error`'s status."""

    error: Exception


StreamItem = Entry | PlayAnswer | StreamEnd


class Inbox:
    """A stream's queue: what the table's actor puts for one stream, taken by that stream alone
    (a deque and one waiter: no bounds and no getters to share it with, unlike asyncio.Queue)."""

    __slots__ = ("_items", "_loop", "_waiter")

    def __init__(self) -> None:
        self._items: deque[StreamItem] = deque()
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: StreamItem) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def qsize(self) -> int:
        return len(self._items)

    async def _wait(self) -> None:
        while not self._items:
            waiter = self._waiter = self._loop.create_future()
            await waiter

    async def get(self) -> StreamItem:
        """The next item, waiting for one."""
        await self._wait()
        return self._items.popleft()

    async def get_all(self) -> list[StreamItem]:
        """Every item queued, at least one (waiting for it): whole changes."""
        await self._wait()
        items = list(self._items)
        self._items.clear()
        return items


@dataclass(eq=False)
class Subscriber:
    """One stream following one table: who watches (a seat, or a spectator), and its inbox."""

    viewer: int | None
    player: str | None
    inbox: Inbox = field(default_factory=Inbox)


@dataclass(frozen=True)
class Opening:
    """What a new stream sends first: the snapshot, or the events after the caller's `after_seq`,
    framed (`wire.frame`)."""

    frames: list[bytes]
    #: the sequence number of the last event included
    last_seq: int
    #: nothing follows: the replay reached the table's final event, or the snapshot is of a
    #: table that changes no more
    final: bool
