"""`python -m loadtest cleanup --run-id RUN`: erase what a load-test run created.

    python -m loadtest cleanup --run-id lt1a2b3c4d --dry-run
    python -m loadtest cleanup --run-id lt1a2b3c4d --targets buraco.example.com:443 --tls-ca ca.pem \\
        --tokens tokens.json

Each service erases its own records of the run's players (`<run id>-<n>`) and of what only they
took part in, with its admin call EraseLoadTestRun (common.proto): game sessions (tables), then
matchmaking, ranking and the wallet. Every service is asked for a dry run first; if one refuses
(part of the run still in progress, or a run player shared a record with a player outside the run),
nothing is erased anywhere and the command says why. Each erasure is one transaction in its
service, so a cleanup stopped half-way (a service unreachable after the dry run) leaves every
service either untouched or erased, and running the command again finishes it.

Exits 0 when every service erased (or, with --dry-run, would erase) the run, 1 when a service
refused or failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from buraco.v1 import (
    common_pb2,
    game_session_pb2_grpc,
    matchmaking_pb2_grpc,
    ranking_pb2_grpc,
    wallet_pb2_grpc,
)
from loadtest.client import Channels, TargetsError, Tokens, TokensError, client_tls, parse_targets
from services.common.loadtest_runs import RUN_ID_PATTERN
from services.common.tls import TlsError

#: The order of erasure: a table's settlement must be delivered before its rows go (game sessions
#: refuse otherwise), and the wallet, whose refusals guard money, comes last.
ORDER = ("game_session", "matchmaking", "ranking", "wallet")

Stub = Callable[[grpc.aio.Channel], Any]
STUBS: dict[str, Stub] = {
    "game_session": game_session_pb2_grpc.GameSessionServiceStub,
    "matchmaking": matchmaking_pb2_grpc.MatchmakingServiceStub,
    "ranking": ranking_pb2_grpc.RankingServiceStub,
    "wallet": wallet_pb2_grpc.WalletServiceStub,
}
#: The admin identity a cleanup calls as (a tokens file needs `admin:loadtest`, as a run does).
ADMIN = "loadtest"
#: Between two rounds of dry runs while a service refuses (--wait).
RECHECK_SECONDS = 2.0
#: Attempts of a call that ends UNAVAILABLE (a replica restarting) or ABORTED (a write that raced
#: the erasure, rolled back whole); the same request id each time.
ATTEMPTS = 3
RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED})


@dataclass(frozen=True)
class Outcome:
    """One service's answer: the counts by kind, or the refusal or error that stopped it."""

    service: str
    counts: tuple[tuple[str, int], ...] = ()
    code: grpc.StatusCode | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code is None

    def line(self) -> str:
        if not self.ok:
            assert self.code is not None
            return f"{self.service}: {self.code.name}: {self.message}"
        return f"{self.service}: " + ", ".join(f"{kind} {count}" for kind, count in self.counts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest cleanup", description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--run-id", required=True, help="the run to erase (the --run-id it was started with)")
    add("--dry-run", action="store_true", help="print what would be erased, erase nothing")
    add("--only", default=",".join(ORDER), metavar="SERVICES",
        help=f"comma-separated services to clean (default: all, in the order {','.join(ORDER)})")
    add("--targets", help="as for a run: service=host:port,..., a bare host, or one host:port for every service")
    add("--tls-ca", default="", metavar="PEM", help="CA bundle the services' certificates chain to: TLS")
    add("--tls-cert", default="", metavar="PEM", help="client certificate (mutual TLS)")
    add("--tls-key", default="", metavar="PEM", help="the client certificate's private key")
    add("--tls-server-name", default="", metavar="NAME", help="the name the certificates carry")
    add("--token-key", type=Path, default=None, help="PEM private key to sign the admin token with")
    add("--tokens", default="", metavar="JSON", help="tokens issued beforehand; needs \"admin:loadtest\"")
    add("--audience", default=os.environ.get("BURACO_JWT_AUDIENCE") or "buraco", help="the tokens' audience")
    add("--rpc-timeout", type=float, default=60.0, metavar="S", help="deadline of each call (default 60)")
    add("--wait", type=float, default=0.0, metavar="S",
        help="while a service refuses (the run's last settlements still on their way), ask again every "
        f"{RECHECK_SECONDS:g} s for up to S seconds (default 0: once)")
    return parser


async def erase(
    service: str, channel: grpc.aio.Channel, metadata: Sequence[tuple[str, str]], run_id: str, request_id: str,
    dry_run: bool, timeout: float,
) -> Outcome:
    """One service's EraseLoadTestRun; an UNAVAILABLE or ABORTED answer is retried with the same
    request id, which the service answers once."""
    stub = STUBS[service](channel)
    request = common_pb2.EraseLoadTestRunRequest(request_id=request_id, run_id=run_id, dry_run=dry_run)
    for attempt in range(ATTEMPTS):
        try:
            answer: common_pb2.EraseLoadTestRunResponse = await stub.EraseLoadTestRun(
                request, metadata=tuple(metadata), timeout=timeout
            )
        except grpc.aio.AioRpcError as error:
            if error.code() in RETRIED and attempt + 1 < ATTEMPTS:
                await asyncio.sleep(1.0 + attempt)  # a backoff between attempts, not a synchronisation
                continue
            return Outcome(service, code=error.code(), message=error.details() or "")
        return Outcome(service, tuple((e.kind, e.count) for e in answer.erased))
    raise AssertionError("unreachable: the last attempt returns")


async def cleanup(
    run_id: str, services: Sequence[str], targets: dict[str, str], channels: Channels, tokens: Tokens,
    dry_run: bool, timeout: float, say: Callable[[str], None] = print, wait: float = 0.0,
) -> int:
    """Dry runs everywhere (again every RECHECK_SECONDS for up to `wait` seconds while a service
    refuses), then (unless `dry_run`) the erasures in ORDER; the exit status."""
    metadata = tokens.admin(ADMIN)
    token = uuid.uuid4().hex[:8]
    loop = asyncio.get_running_loop()
    give_up = loop.time() + wait
    try:
        for round_ in itertools.count():
            check_id = f"cleanup-{run_id}-{token}-check{round_}"
            checks = [
                await erase(s, channels.get(targets[s]), metadata, run_id, check_id, True, timeout) for s in services
            ]
            refused = [c for c in checks if c.code == grpc.StatusCode.FAILED_PRECONDITION]
            if not refused or loop.time() + RECHECK_SECONDS > give_up:
                break
            say("waiting: " + "; ".join(c.line() for c in refused))
            await asyncio.sleep(RECHECK_SECONDS)
        for outcome in checks:
            say(("would erase " if outcome.ok else "refused ") + outcome.line())
        if not all(outcome.ok for outcome in checks):
            say(f"cleanup: run {run_id}: nothing erased (a service refused; see above)")
            return 1
        if dry_run:
            say(f"cleanup: run {run_id}: dry run, nothing erased")
            return 0
        for service in services:
            outcome = await erase(
                service, channels.get(targets[service]), metadata, run_id, f"cleanup-{run_id}-{token}", False, timeout
            )
            say(("erased " if outcome.ok else "failed ") + outcome.line())
            if not outcome.ok:
                done = services[: services.index(service)]
                say(f"cleanup: run {run_id}: stopped at {service}; erased in {', '.join(done) or 'no service'}; "
                    "run the command again once the cause is fixed")
                return 1
        say(f"cleanup: run {run_id}: erased in {', '.join(services)}")
        return 0
    finally:
        await channels.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if RUN_ID_PATTERN.fullmatch(args.run_id) is None:
        parser.error("--run-id must be 3 to 40 characters of [a-z0-9-], starting with a letter or a digit")
    services = [name.strip().replace("-", "_") for name in args.only.split(",") if name.strip()]
    unknown = [name for name in services if name not in ORDER]
    if unknown or not services:
        parser.error(f"--only takes services among {','.join(ORDER)}")
    services = [name for name in ORDER if name in services]
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if (args.tls_cert or args.tls_server_name) and not args.tls_ca:
        parser.error("--tls-cert, --tls-key and --tls-server-name need --tls-ca")
    try:
        targets = parse_targets(args.targets, os.environ)
        tls = client_tls(args.tls_ca, args.tls_cert, args.tls_key)
        if args.tokens:
            tokens = Tokens.from_file(Path(args.tokens), [f"admin:{ADMIN}"])
        else:
            dev_keys = Path(os.environ.get("BURACO_DEV_KEYS_DIR") or "var/dev-keys")
            key = args.token_key or Path(os.environ.get("BURACO_JWT_PRIVATE_KEY") or dev_keys / "dev-private.pem")
            tokens = Tokens.from_key(key, args.audience)
    except TargetsError as error:
        parser.error(str(error))
    except (TokensError, TlsError, FileNotFoundError) as error:
        print(f"loadtest cleanup: {error}", file=sys.stderr)
        return 2
    channels = Channels(connections=1, tls=tls, server_name=args.tls_server_name)
    if args.wait < 0:
        parser.error("--wait must not be negative")
    return asyncio.run(
        cleanup(args.run_id, services, targets, channels, tokens, args.dry_run, args.rpc_timeout, wait=args.wait)
    )


if __name__ == "__main__":
    sys.exit(main())
