"""The service's process keeps the garbage collector's pauses short: it settles the young
generations every `GC_SETTLE_SECONDS` on a loop of its own, not with the lease scan (every few
seconds, when a settle scanned tens of thousands of objects at once)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from services.common import migrations
from services.common.db import Database
from services.game_session import manager as manager_module
from services.game_session.clock import RealClock
from services.game_session.manager import Manager
from services.game_session.service import SPEC
from tests.services.game_session.conftest import SETTINGS


async def test_the_service_process_settles_the_collector_on_its_own_cadence(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    settles = 0
    three = asyncio.Event()

    def settle() -> None:
        nonlocal settles
        settles += 1
        if settles >= 3:
            three.set()

    monkeypatch.setattr(manager_module, "FREEZE_SURVIVORS", True)
    monkeypatch.setattr(manager_module, "GC_SETTLE_SECONDS", 0.01)
    monkeypatch.setattr(manager_module, "settle_garbage_collector", settle)
    await migrations.upgrade(SPEC.name, SPEC.migrations, database)
    # the lease scan runs once at start, then not for an hour: only the settle loop can settle
    manager = Manager(database, replace(SETTINGS, scan_seconds=3600.0), RealClock(), CollectorRegistry(),
                      address=lambda: "127.0.0.1:1")
    await manager.start()
    task = manager._settle_task
    try:
        await asyncio.wait_for(three.wait(), timeout=10)
    finally:
        await manager.stop()
    assert settles >= 3
    assert task is not None
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()  # a stopped replica no longer settles


async def test_an_in_process_server_leaves_the_collector_alone(database: Database) -> None:
    """Tests (and any embedding) run the manager without FREEZE_SURVIVORS: no settle loop."""
    await migrations.upgrade(SPEC.name, SPEC.migrations, database)
    manager = Manager(database, SETTINGS, RealClock(), CollectorRegistry(), address=lambda: "127.0.0.1:1")
    await manager.start()
    try:
        assert manager._settle_task is None
    finally:
        await manager.stop()
