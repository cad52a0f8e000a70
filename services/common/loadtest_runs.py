"""What every service's EraseLoadTestRun shares (common.proto, EraseLoadTestRunRequest): which ids
belong to a load-test run, and the answer's shape.

A run's players are exactly the ids `{run_id}-{n}` with n a decimal number. The run id's alphabet
has no `_` or `%`, so `{run_id}-%` is a literal SQL LIKE prefix that finds the candidates with an
index; `is_run_player` then keeps only the exact form: run `lt1`'s prefix `lt1-%` also finds
`lt1-5-3` (a player of run `lt1-5`), which the exact form refuses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from buraco.v1 import common_pb2
from services.common.auth import Identity, Kind, current_identity
from services.common.validation import request_id, require

RUN_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{2,39}")


def run_id(value: str, field: str = "run_id") -> str:
    """The run id of an erasure: 3 to 40 characters of [a-z0-9-], starting with a letter or digit."""
    require(value != "", field, "required")
    require(
        RUN_ID_PATTERN.fullmatch(value) is not None,
        field,
        "must be 3 to 40 characters of [a-z0-9-], starting with a letter or a digit",
    )
    return value


def admitted(request: common_pb2.EraseLoadTestRunRequest, service: str) -> tuple[Identity, str]:
    """The admin asking ``service`` (``RankingService``...) for an erasure and its checked run id:
    PERMISSION_DENIED for anyone but an admin, INVALID_ARGUMENT for a missing request id or a run id
    outside RUN_ID_PATTERN."""
    identity = current_identity()
    identity.require_kind(Kind.ADMIN, method=f"{service}.EraseLoadTestRun")
    request_id(request.request_id)
    return identity, run_id(request.run_id)


def like_prefix(run: str) -> str:
    """The SQL LIKE pattern of the run's candidate player ids (filter with `is_run_player`)."""
    return f"{run}-%"


def is_run_player(run: str, player: str) -> bool:
    """Whether `player` is one of the run's players: `{run}-{n}`, n decimal digits only."""
    prefix = f"{run}-"
    rest = player[len(prefix) :]
    return player.startswith(prefix) and rest.isdigit() and rest.isascii()


def response(run: str, dry_run: bool, counts: Sequence[tuple[str, int]]) -> common_pb2.EraseLoadTestRunResponse:
    """The answer: every kind the service erases, in its fixed order, zeros included."""
    return common_pb2.EraseLoadTestRunResponse(
        run_id=run,
        dry_run=dry_run,
        erased=[common_pb2.ErasedRecords(kind=kind, count=count) for kind, count in counts],
    )
