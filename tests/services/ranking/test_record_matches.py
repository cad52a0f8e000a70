"""RecordMatches through gRPC on both databases: each record answered and recorded exactly as its own
RecordMatch call would be, in the request's order (a reference server answering the same records as
single calls, compared answer for answer and row for row), a refused record (invalid, reused
request id, known match id with other content) refused alone with its RecordMatch status, a whole
call retried answered record by record; and what refuses the call as a whole."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from buraco.v1 import ranking_pb2, ranking_pb2_grpc
from services.common.auth import Kind
from services.ranking import core
from services.ranking.batches import MAX_RECORDS
from services.ranking.service import SPEC
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, dev_minter, make_config, running
from tests.services.ranking.test_api import IP_ALICE, LOST, WON, duel, participant, record_request
from tests.services.ranking.test_batched_recording import _dump

Outcome = ranking_pb2.RecordMatchResponse | tuple[grpc.StatusCode, str]


def _copy(request: ranking_pb2.RecordMatchRequest, **changes: Any) -> ranking_pb2.RecordMatchRequest:
    copy = ranking_pb2.RecordMatchRequest()
    copy.CopyFrom(request)
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


def _records() -> list[ranking_pb2.RecordMatchRequest]:
    """Records whose answers depend on the ones before them in the call."""
    m1 = duel("m1")
    foursome = record_request(
        "m4", participant("carol", 0, WON, "10.0.0.1", 2100, 3), participant("dave", 1, LOST, "10.0.0.2", 900),
        participant("erin", 2, WON, "10.0.0.3", 2100, 1), participant("alice", 3, LOST, "10.0.0.4", 900), players=4,
    )
    return [
        m1,
        record_request("bad", participant("a", 0, WON, "300.1.1.1")),  # invalid: refused alone
        duel("m2", winner="bob", loser="alice"),  # shares both players with m1: recorded after it
        _copy(m1, request_id="redelivered"),  # m1 again under a new request id: m1's first answer
        m1,  # m1's own retry within the call: the stored answer
        _copy(duel("m3"), request_id=m1.request_id),  # a request id reused with other content
        _copy(duel("m1", winner="bob", loser="alice"), request_id="other"),  # m1's id, other content
        foursome,
        record_request("m5", participant("alice", 0, WON, IP_ALICE), participant("frank", 1, LOST, IP_ALICE)),
    ]


async def _single(stub: Any, request: ranking_pb2.RecordMatchRequest, metadata: Any) -> Outcome:
    try:
        answer: ranking_pb2.RecordMatchResponse = await stub.RecordMatch(request, metadata=metadata, timeout=30)
        return answer
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""


def outcomes(reply: ranking_pb2.RecordMatchesResponse) -> list[Outcome]:
    return [
        result.recorded if result.HasField("recorded")
        else (_code(result.error.code), result.error.message)
        for result in reply.results
    ]


def _code(number: int) -> grpc.StatusCode:
    return next(code for code in grpc.StatusCode if code.value[0] == number)


async def test_each_record_is_answered_and_recorded_as_its_own_record_match_call(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    batched_config = make_config("ranking", tmp_path / "batched", database_url=db_target.url,
                                 database_schema=db_target.schema)
    reference_config = make_config("ranking", tmp_path / "reference")  # SQLite, single calls
    async with running(SPEC, batched_config) as batched, running(SPEC, reference_config) as reference, \
            grpc.aio.insecure_channel(batched.address) as batched_channel, \
            grpc.aio.insecure_channel(reference.address) as reference_channel:
        stub: Any = ranking_pb2_grpc.RankingServiceStub(batched_channel)
        reference_stub: Any = ranking_pb2_grpc.RankingServiceStub(reference_channel)
        auth = bearer(dev_minter(batched_config.dev_keys_dir).mint(Kind.SERVICE, "game-session"))
        reference_auth = bearer(dev_minter(reference_config.dev_keys_dir).mint(Kind.SERVICE, "game-session"))
        records = _records()

        async def both(batch: Sequence[ranking_pb2.RecordMatchRequest]) -> list[Outcome]:
            expected = [await _single(reference_stub, record, reference_auth) for record in batch]
            reply = await stub.RecordMatches(ranking_pb2.RecordMatchesRequest(records=batch), metadata=auth,
                                             timeout=30)
            got = outcomes(reply)
            assert got == expected
            return got

        first = await both(records)
        codes = [answer[0] if isinstance(answer, tuple) else None for answer in first]
        assert codes == [None, grpc.StatusCode.INVALID_ARGUMENT, None, None, None, grpc.StatusCode.ALREADY_EXISTS,
                         grpc.StatusCode.ALREADY_EXISTS, None, None]
        assert isinstance(first[1], tuple) and first[1][1].startswith("participants[0].client_ip: not an IP address")
        assert first[3] == first[4] == first[0]  # m1 answered with its first answer, whatever the request id
        m1, m2 = first[0], first[2]
        assert isinstance(m1, ranking_pb2.RecordMatchResponse) and isinstance(m2, ranking_pb2.RecordMatchResponse)
        assert [r.xp_total for r in m2.results] == [45, 45]  # bob 5 + 40, alice 40 + 5: after m1
        before, after = m2.results[1].rating_before, m1.results[0].rating_after  # alice's, as m1 left it
        assert (before.mu, before.sigma, before.matches) == (after.mu, after.sigma, 1)
        # The whole call retried: every record answered as a retry of it alone is (nothing recorded twice).
        assert await both(records) == first
        # Records that only a later call brings, after the ones already recorded.
        assert await both([duel("m6", winner="frank", loser="bob"), _copy(records[2], request_id="again")]) != []
        assert await _dump(batched.db) == await _dump(reference.db)
        async with batched.db.transaction() as session:
            assert await core.audit(session) == []


async def test_the_call_is_refused_whole_only_for_its_caller_and_its_size(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    config = make_config("ranking", tmp_path, database_url=db_target.url, database_schema=db_target.schema)
    minter = dev_minter(config.dev_keys_dir)
    async with running(SPEC, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        stub: Any = ranking_pb2_grpc.RankingServiceStub(channel)
        service = bearer(minter.mint(Kind.SERVICE, "game-session"))
        cases = [
            (ranking_pb2.RecordMatchesRequest(records=[duel("p1")]), bearer(minter.mint(Kind.PLAYER, "alice")),
             grpc.StatusCode.PERMISSION_DENIED, ""),
            (ranking_pb2.RecordMatchesRequest(records=[duel("p1")]), bearer(minter.mint(Kind.SERVICE, "matchmaking")),
             grpc.StatusCode.PERMISSION_DENIED, ""),
            (ranking_pb2.RecordMatchesRequest(), service, grpc.StatusCode.INVALID_ARGUMENT,
             "records: at least one record"),
            (ranking_pb2.RecordMatchesRequest(records=[duel(f"p{i}") for i in range(MAX_RECORDS + 1)]), service,
             grpc.StatusCode.INVALID_ARGUMENT, f"records: at most {MAX_RECORDS} records"),
        ]
        for request, metadata, code, message in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.RecordMatches(request, metadata=metadata, timeout=30)
            assert refused.value.code() == code and (refused.value.details() or "").startswith(message)
        profile = await stub.GetPlayer(ranking_pb2.GetPlayerRequest(name="players/alice"), metadata=service)
        assert profile.stats.matches == 0  # nothing of a refused call was recorded
        # The most a call may carry is recorded.
        reply = await stub.RecordMatches(
            ranking_pb2.RecordMatchesRequest(records=[
                duel(f"q{i}", winner=f"w{i}", loser=f"l{i % 7}") for i in range(MAX_RECORDS)
            ]), metadata=service, timeout=60)
        assert [result.HasField("recorded") for result in reply.results] == [True] * MAX_RECORDS
        loser = await stub.GetPlayer(ranking_pb2.GetPlayerRequest(name="players/l0"), metadata=service)
        assert (loser.stats.matches, loser.xp) == (15, 75)
