"""RecordMatches: several RecordMatch requests in one call, each recorded exactly as its own
RecordMatch call would be (ranking.proto; docs/ranking.md, "RecordMatches").

Each record is checked alone (an invalid record is refused alone, with the INVALID_ARGUMENT its
RecordMatch call would have had) and recorded through the same path as a RecordMatch call: on
PostgreSQL every valid record is queued for the recorder at once, in the request's order, so the
records fill its batches together while those sharing a player, a match id or a request key are
recorded one after the other in that order (recorder.py); on SQLite each runs in its own
transaction through the reference path, one after the other. Idempotency is per record (its own
request id; its match id), so a retried call, or one of its records sent again alone, is answered
as RecordMatch answers it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from buraco.v1 import ranking_pb2
from services.common import validation as check
from services.common.errors import status_for
from services.ranking.recorder import Call, Recorder

#: Records per call: the outbox sends fewer, and 100 four-player records stay well under the
#: smallest request size a deployment may allow for (BURACO_MAX_MESSAGE_BYTES's default).
MAX_RECORDS = 100

#: A record's reference path: its RecordMatch alone, in a transaction of its own.
Alone = Callable[[], Awaitable[ranking_pb2.RecordMatchResponse]]
#: A record checked (raising what RecordMatch would raise): the recorder's call (None on SQLite) and
#: its reference path.
Prepare = Callable[[ranking_pb2.RecordMatchRequest], tuple[Call | None, Alone]]

log = logging.getLogger(__name__)


async def record_matches(
    prepare: Prepare, request: ranking_pb2.RecordMatchesRequest, recorder: Recorder | None
) -> ranking_pb2.RecordMatchesResponse:
    records = request.records
    check.require(len(records) >= 1, "records", "at least one record")
    check.require(len(records) <= MAX_RECORDS, "records", f"at most {MAX_RECORDS} records")
    outcomes: list[ranking_pb2.RecordMatchResponse | BaseException | None] = [None] * len(records)
    queued: list[tuple[int, Call]] = []
    alone: list[tuple[int, Alone]] = []
    for index, record in enumerate(records):
        try:
            call, reference = prepare(record)
        except Exception as error:  # this record's refusal; the others go on
            outcomes[index] = error
            continue
        if call is not None and recorder is not None:
            queued.append((index, call))
        else:
            alone.append((index, reference))
    if queued:
        assert recorder is not None
        answers = await asyncio.gather(*recorder.submit(*(call for _, call in queued)), return_exceptions=True)
        for (index, _), answer in zip(queued, answers, strict=True):
            outcomes[index] = answer  # type: ignore[assignment]  # the recorder answers with `respond`'s messages
    for index, reference in alone:  # one after the other: a record sees every earlier one recorded
        try:
            outcomes[index] = await reference()
        except Exception as error:
            outcomes[index] = error
    return ranking_pb2.RecordMatchesResponse(results=[_result(outcome) for outcome in outcomes])


def _result(
    outcome: ranking_pb2.RecordMatchResponse | BaseException | None,
) -> ranking_pb2.RecordMatchesResponse.Result:
    if isinstance(outcome, ranking_pb2.RecordMatchResponse):
        return ranking_pb2.RecordMatchesResponse.Result(recorded=outcome)
    if isinstance(outcome, asyncio.CancelledError):
        raise outcome
    assert outcome is not None, "every record has an outcome"
    code, message, _ = status_for(outcome)
    if code.name == "INTERNAL":  # a bug: its traceback in the log, a fixed message to the caller
        log.error("unexpected error recording a match of a RecordMatches call", exc_info=outcome)
    return ranking_pb2.RecordMatchesResponse.Result(
        error=ranking_pb2.RecordMatchError(code=code.value[0], message=message)
    )
