"""Reads of many concurrent callers made together: `Coalesced`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

G = TypeVar("G", bound=Hashable)
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Asked = list[tuple[Sequence[K], "asyncio.Future[dict[K, V]]"]]


class Coalesced(Generic[G, K, V]):
    """Keys asked for by concurrent callers, read together: the keys asked for (per group) while a
    read is under way are read by the next one, so a burst of callers costs a few reads rather than
    one each; a caller alone is read at once. `read(group, keys)` reads distinct keys of one group
    and answers every one of them; a read that fails fails every caller it was reading for, with
    the same error."""

    def __init__(self, read: Callable[[G, list[K]], Awaitable[dict[K, V]]], name: str) -> None:
        self._read = read
        self._name = name
        self._pending: dict[G, Asked[K, V]] = {}
        self._task: asyncio.Task[None] | None = None

    async def get(self, group: G, keys: Sequence[K]) -> dict[K, V]:
        """The value of each of `keys` (of `group`)."""
        future: asyncio.Future[dict[K, V]] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(group, []).append((keys, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)
        return await future

    async def _run(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, {}
            await asyncio.gather(*(self._answer(group, asked) for group, asked in pending.items()))

    async def _answer(self, group: G, asked: Asked[K, V]) -> None:
        everyone = list(dict.fromkeys(key for keys, _ in asked for key in keys))
        try:
            found = await self._read(group, everyone)
        except Exception as error:
            for _, future in asked:
                if not future.done():
                    future.set_exception(error)
            return
        for keys, future in asked:
            if not future.done():
                future.set_result({key: found[key] for key in keys})
