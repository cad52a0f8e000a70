"""The service's process keeps the garbage collector's pauses short: it settles the young
generations every `GC_SETTLE_SECONDS` on a loop of its own (`collector.Settler`); an in-process
server (tests, any embedding) leaves the process-wide collector alone."""

from __future__ import annotations

import asyncio

import pytest

from services.common import collector


async def test_the_service_process_settles_the_collector_on_its_own_cadence(monkeypatch: pytest.MonkeyPatch) -> None:
    settles = 0
    three = asyncio.Event()

    def settle() -> None:
        nonlocal settles
        settles += 1
        if settles >= 3:
            three.set()

    monkeypatch.setattr(collector, "FREEZE_SURVIVORS", True)
    monkeypatch.setattr(collector, "GC_SETTLE_SECONDS", 0.01)
    monkeypatch.setattr(collector, "collect_young_and_freeze", settle)
    settler = collector.Settler()
    settler.start()
    try:
        await asyncio.wait_for(three.wait(), timeout=10)
    finally:
        await settler.stop()
    counted = settles
    assert counted >= 3
    await asyncio.sleep(0.05)  # (a stopped settler would have settled a few more times by now)
    assert settles == counted  # a stopped replica no longer settles


async def test_an_in_process_server_leaves_the_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[None] = []
    monkeypatch.setattr(collector, "collect_young_and_freeze", lambda: calls.append(None))
    settler = collector.Settler()
    settler.start()  # FREEZE_SURVIVORS is False outside the service's own process
    await asyncio.sleep(collector.GC_SETTLE_SECONDS * 2)
    await settler.stop()
    assert calls == []
