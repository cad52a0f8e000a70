"""Fixtures of the matchmaking tests: the services it calls (`platform`) and the matchmaking
service on each database (`service`). The helpers are in `support.py`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import DatabaseTarget
from tests.services.matchmaking.support import Platform_, Service, matchmaking_service, platform_for


@pytest.fixture
async def platform(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[Platform_]:
    async with platform_for(db_target, tmp_path) as services:
        yield services


@pytest.fixture
async def service(platform: Platform_, db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[Service]:
    async with matchmaking_service(platform, db_target, tmp_path) as running_service:
        yield running_service
    await platform.audit()
