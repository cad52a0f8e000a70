"""A stateful property test of the ledger (hypothesis), on SQLite and PostgreSQL.

Random sequences of account openings, grants, holds (some that cannot be covered), settlements,
voids with penalties, clock moves with expiry, retried calls (same content: the original answer;
other content: ALREADY_EXISTS), and failures injected inside the transaction (after the key is
claimed, after the work, before the commit) or after the commit (the reply lost). After every
step: the audit passes (stored balances equal the transfers, all balances add up to zero, every
hold resolved at most once and the live-hold index exact), no balance is negative, the chips in
circulation equal what grants minted, and every account's balance and held chips equal an
independent model's; each hold ends settled, voided or expired exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import func, select

from buraco.v1 import common_pb2, wallet_pb2
from services.common.db import Database
from services.common.errors import ServiceError
from services.wallet import models
from services.wallet.settings import WalletSettings
from tests.conftest import DatabaseTarget
from tests.services.wallet.conftest import GAME, Ledger, caller_of, make_ledger, migrated

T = TypeVar("T")
START = 100  # a small starting grant: many holds cannot be covered
CUT = 20
FAULT_POINTS = ("after_claim", "after_work", "before_commit")
_examples = itertools.count()


class InjectedFault(Exception):
    """Stands for a crash inside a transaction."""


@dataclass
class Match:
    name: str
    stakes: list[tuple[str, int]]  # in hold (and seat) order
    expires_in: float  # seconds after the hold
    held_at: float
    state: str = "open"  # open, settled, voided, expired


@dataclass
class Sent:
    method: str
    request: Message
    reply: Message
    identity: Any


@dataclass
class Model:
    balances: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    house: int = 0
    minted: int = 0

    def available(self, name: str) -> int:
        return self.balances[name] - self.held[name]


class LedgerMachine(RuleBasedStateMachine):
    loop: asyncio.AbstractEventLoop
    ledger: Ledger
    baseline_house = 0
    baseline_minted = 0

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"x{next(_examples)}"
        self.model = Model()
        self.matches: list[Match] = []
        self.sent: list[Sent] = []
        self.requests = itertools.count()
        self.elapsed = 0.0
        self.fault_at: str | None = None

    # -- plumbing ---------------------------------------------------------------------------------

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def fault(self, point: str) -> None:
        if self.fault_at == point:
            self.fault_at = None
            raise InjectedFault(point)

    def request_id(self) -> str:
        return f"{self.prefix}-r{next(self.requests)}"

    def send(self, method: str, request: Message, identity: Any = None, *, fault: str | None = None) -> Any:
        """A mutating call (as `identity`, default: the service that makes it, `caller_of`); with
        `fault`, the first attempt crashes there (or the reply is lost after the commit,
        "lost_reply") and the retry with the same request id must apply once."""
        identity = identity or caller_of(method, request)
        if fault in FAULT_POINTS:
            self.fault_at = fault
            with pytest.raises(InjectedFault):
                self.run(self.ledger.call(method, request, identity))
            assert self.fault_at is None
        elif fault == "lost_reply":
            self.run(self.ledger.call(method, request, identity))
        reply = self.run(self.ledger.call(method, request, identity))
        self.sent.append(Sent(method, request, reply, identity))
        return reply

    def refused(self, method: str, request: Message, code: grpc.StatusCode, identity: Any = None) -> str:
        with pytest.raises(ServiceError) as caught:
            self.run(self.ledger.call(method, request, identity))
        assert caught.value.code == code, caught.value.message
        return caught.value.message

    # -- rules ------------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        # Every example starts after the previous ones' holds could live, and expires them first.
        self.ledger.clock.advance(days=2)
        more = True
        while more:
            request = wallet_pb2.ExpireHoldsRequest(request_id=f"{self.prefix}-leftovers-{next(self.requests)}")
            more = self.run(self.ledger.call("ExpireHolds", request)).more

    @rule(fault=st.sampled_from([None, None, *FAULT_POINTS, "lost_reply"]))
    def open_account(self, fault: str | None) -> None:
        name = f"{self.prefix}p{len(self.model.balances)}"
        request = wallet_pb2.CreateAccountRequest(request_id=self.request_id(), player=f"players/{name}")
        reply = self.send("CreateAccount", request, fault=fault)
        assert reply.balance_chips == START
        self.model.balances[name], self.model.held[name] = START, 0
        self.model.minted += START

    @precondition(lambda self: self.model.balances)
    @rule(data=st.data(), amount=st.integers(1, 150), fault=st.sampled_from([None, *FAULT_POINTS]))
    def grant(self, data: st.DataObject, amount: int, fault: str | None) -> None:
        name = data.draw(st.sampled_from(sorted(self.model.balances)))
        request = wallet_pb2.GrantRequest(
            request_id=self.request_id(),
            player=f"players/{name}",
            amount_chips=amount,
            kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
        )
        self.send("Grant", request, fault=fault)
        self.model.balances[name] += amount
        self.model.minted += amount

    @precondition(lambda self: len(self.model.balances) >= 4)
    @rule(
        data=st.data(),
        size=st.sampled_from([2, 4]),
        ttl=st.sampled_from([60.0, 600.0]),
        fault=st.sampled_from([None, None, *FAULT_POINTS, "lost_reply"]),
    )
    def hold(self, data: st.DataObject, size: int, ttl: float, fault: str | None) -> None:
        names = data.draw(
            st.lists(st.sampled_from(sorted(self.model.balances)), min_size=size, max_size=size, unique=True)
        )
        amounts = data.draw(st.lists(st.integers(1, 80), min_size=size, max_size=size))
        match = Match(f"{self.prefix}m{len(self.matches)}", list(zip(names, amounts, strict=True)), ttl, self.elapsed)
        request = wallet_pb2.HoldBetsRequest(
            request_id=self.request_id(),
            match_id=match.name,
            stakes=[wallet_pb2.Stake(player=f"players/{n}", amount_chips=a) for n, a in match.stakes],
            hold_ttl=Duration(seconds=int(ttl)),
        )
        short = [i for i, (n, a) in enumerate(match.stakes) if self.model.available(n) < a]
        if short:
            message = self.refused("HoldBets", request, grpc.StatusCode.FAILED_PRECONDITION)
            first = short[0]
            assert message.startswith(f"stakes[{first}].player: players/{match.stakes[first][0]} cannot cover")
            return
        reply = self.send("HoldBets", request, fault=fault)
        assert [t.amount_chips for t in reply.holds] == amounts
        for name, amount in match.stakes:
            self.model.held[name] += amount
        self.matches.append(match)

    def open_matches(self) -> list[Match]:
        return [m for m in self.matches if m.state == "open"]

    @precondition(lambda self: self.open_matches())
    @rule(
        data=st.data(),
        side=st.integers(0, 1),
        first_seat=st.integers(0, 3),
        fault=st.sampled_from([None, None, *FAULT_POINTS, "lost_reply"]),
    )
    def settle(self, data: st.DataObject, side: int, first_seat: int, fault: str | None) -> None:
        match = data.draw(st.sampled_from(self.open_matches()))
        seats = len(match.stakes)
        first_seat %= seats
        outcomes = []
        for seat, (name, _) in enumerate(match.stakes):
            if seat % 2 == side:
                outcome = data.draw(st.sampled_from(["won", "won", "abandoned"]))
            else:
                outcome = data.draw(st.sampled_from(["lost", "lost", "abandoned"]))
            outcomes.append((name, seat, outcome))
        codes = {
            "won": common_pb2.OUTCOME_WON,
            "lost": common_pb2.OUTCOME_LOST,
            "abandoned": common_pb2.OUTCOME_ABANDONED,
        }
        request = wallet_pb2.SettleRequest(
            request_id=self.request_id(),
            match_id=match.name,
            first_seat=first_seat,
            outcomes=[
                common_pb2.PlayerOutcome(player=f"players/{n}", seat=s, outcome=codes[o]) for n, s, o in outcomes
            ],
        )
        winners = [(n, s) for n, s, o in outcomes if o == "won"]
        if not winners:
            assert "no winner" in self.refused("Settle", request, grpc.StatusCode.INVALID_ARGUMENT, GAME)
            return
        reply = self.send("Settle", request, GAME, fault=fault)
        pot = sum(a for _, a in match.stakes)
        cut = pot * CUT // 100
        winners.sort(key=lambda w: (w[1] - first_seat) % seats)
        share, odd = divmod(pot - cut, len(winners))
        assert (reply.pot_chips, reply.house_cut_chips) == (pot, cut)
        for name, amount in match.stakes:
            self.model.held[name] -= amount
            self.model.balances[name] -= amount
        for i, (name, _) in enumerate(winners):
            self.model.balances[name] += share + (1 if i < odd else 0)
        self.model.house += cut
        match.state = "settled"

    @precondition(lambda self: self.open_matches())
    @rule(data=st.data(), fault=st.sampled_from([None, None, *FAULT_POINTS, "lost_reply"]))
    def void(self, data: st.DataObject, fault: str | None) -> None:
        match = data.draw(st.sampled_from(self.open_matches()))
        names = [n for n, _ in match.stakes]
        penalised = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
        request = wallet_pb2.VoidRequest(
            request_id=self.request_id(), match_id=match.name, penalised_players=[f"players/{n}" for n in penalised]
        )
        self.send("Void", request, fault=fault)
        returned = [n for n in names if n not in penalised]
        penalty = sum(a for n, a in match.stakes if n in penalised)
        for name, amount in match.stakes:
            self.model.held[name] -= amount
            if name in penalised:
                self.model.balances[name] -= amount
        if returned:
            share, odd = divmod(penalty, len(returned))
            for i, name in enumerate(returned):
                self.model.balances[name] += share + (1 if i < odd else 0)
        else:
            self.model.house += penalty
        match.state = "voided"

    @rule(seconds=st.sampled_from([10.0, 70.0, 700.0]), fault=st.sampled_from([None, *FAULT_POINTS, "lost_reply"]))
    def time_passes_and_holds_expire(self, seconds: float, fault: str | None) -> None:
        self.ledger.clock.advance(seconds=seconds)
        self.elapsed += seconds
        reply = self.send("ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id=self.request_id()), fault=fault)
        due = [m for m in self.open_matches() if m.held_at + m.expires_in <= self.elapsed]
        expired = sorted((t.debit_account, t.match_id) for t in reply.expired)
        assert expired == sorted((f"accounts/player-{n}", m.name) for m in due for n, _ in m.stakes)
        for match in due:
            for name, amount in match.stakes:
                self.model.held[name] -= amount
            match.state = "expired"

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        """A retry gets the first answer, whatever happened since; other content is refused."""
        sent = data.draw(st.sampled_from(self.sent))
        assert self.run(self.ledger.call(sent.method, sent.request, sent.identity)) == sent.reply
        changed = type(sent.request)()
        changed.CopyFrom(sent.request)
        if isinstance(changed, wallet_pb2.CreateAccountRequest):
            changed.player = "players/someone-else"
        elif isinstance(changed, wallet_pb2.ExpireHoldsRequest):
            changed.match_id = "another"
        elif isinstance(changed, wallet_pb2.GrantRequest):
            changed.amount_chips += 1
        elif isinstance(changed, wallet_pb2.HoldBetsRequest):
            changed.stakes[0].amount_chips += 1
        elif isinstance(changed, wallet_pb2.SettleRequest):
            changed.first_seat = (changed.first_seat + 1) % len(changed.outcomes)
        elif isinstance(changed, wallet_pb2.VoidRequest):
            changed.reason = "changed"
        self.refused(sent.method, changed, grpc.StatusCode.ALREADY_EXISTS, sent.identity)

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def the_ledger_adds_up(self) -> None:
        report = self.run(self.ledger.audit())
        assert report.ok, report.problems
        assert report.minted == self.baseline_minted + self.model.minted

    @invariant()
    def every_account_matches_the_model(self) -> None:
        async def read() -> dict[str, tuple[int, int]]:
            accounts = models.accounts
            async with self.ledger.db.engine.connect() as conn:
                rows = await conn.execute(
                    select(accounts.c.id, accounts.c.balance, accounts.c.held).where(
                        accounts.c.id.like(f"player-{self.prefix}p%") | (accounts.c.id == "house")
                    )
                )
                return {row.id: (row.balance, row.held) for row in rows}

        stored = self.run(read())
        expected = {f"player-{n}": (self.model.balances[n], self.model.held[n]) for n in self.model.balances}
        expected["house"] = (self.baseline_house + self.model.house, 0)
        assert stored == expected
        assert all(balance >= held >= 0 for balance, held in stored.values())

    @invariant()
    def every_hold_is_resolved_exactly_once(self) -> None:
        async def count() -> tuple[int, int, int]:
            transfers, live = models.transfers, models.live_holds
            mine = transfers.c.match_id.like(f"{self.prefix}m%")
            async with self.ledger.db.engine.connect() as conn:
                holds = (
                    await conn.execute(select(func.count()).where(mine, transfers.c.phase == "pending"))
                ).scalar_one()
                resolved = (
                    await conn.execute(
                        select(func.count()).where(mine, transfers.c.phase.in_(("post", "void", "expire")))
                    )
                ).scalar_one()
                live_count = (
                    await conn.execute(select(func.count()).where(live.c.pot.like(f"match-{self.prefix}m%")))
                ).scalar_one()
                return int(holds), int(resolved), int(live_count)

        holds, resolved, live_count = self.run(count())
        open_stakes = sum(len(m.stakes) for m in self.open_matches())
        assert holds == sum(len(m.stakes) for m in self.matches)
        assert (resolved, live_count) == (holds - open_stakes, open_stakes)


@pytest.mark.parametrize("examples", [10])
def test_the_ledger_under_random_operations_failures_and_retries(db_target: DatabaseTarget, examples: int) -> None:
    loop = asyncio.new_event_loop()
    db: Database = db_target.database()
    ledger = make_ledger(db, settings=WalletSettings(starting_grant_chips=START, house_cut_percent=CUT))
    try:
        loop.run_until_complete(migrated(db))

        class Machine(LedgerMachine):
            def __init__(self) -> None:
                super().__init__()
                self.loop, self.ledger = loop, ledger
                ledger.api.tx.fault = self.fault
                report = loop.run_until_complete(ledger.audit())
                self.baseline_minted = report.minted
                self.baseline_house = loop.run_until_complete(ledger.balance("house"))

        run_state_machine_as_test(
            Machine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    finally:
        loop.run_until_complete(ledger.close())
        loop.run_until_complete(db.dispose())
        loop.close()
