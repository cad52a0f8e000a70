"""The services behind PgBouncer in transaction mode (docs/operations.md, "PgBouncer"), as
production runs them when `BURACO_DATABASE_TRANSACTION_POOLING=true`: Debian's pgbouncer, started
here in front of the test PostgreSQL with two server connections per role (so every client
connection shares them), each service as a role that owns its schema, whose own `search_path`
names it. Every service migrates and answers a call through it; the wallet and ranking carry a
load of whole matches without an error, and no prepared statement is left on a server connection.

pgbouncer comes from Debian's package (scripts/install-pgbouncer.sh, which CI runs). Without it
these tests are skipped, except with CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest

from buraco.v1 import game_session_pb2, game_session_pb2_grpc
from loadtest.journey import run_shard
from loadtest.settings import Settings
from services.common import migrations
from services.common.auth import Kind
from services.common.config import Config, ConfigError
from services.common.db import Database
from tests.services.common.test_least_privilege import _specs
from tests.services.game_session.conftest import table_request
from tests.services.harness import bearer, dev_minter, free_port, make_config, running

SERVICES = ("wallet", "ranking", "matchmaking", "tournament", "game_session")


def _binary() -> str:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if found is None:
        message = "pgbouncer is not installed (scripts/install-pgbouncer.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found



@dataclass(frozen=True)
class Bouncer:
    """PgBouncer in transaction mode; `url(role)` reaches the test database through it as `role`."""

    port: int
    database: str
    roles: dict[str, str]  # service -> its role (whose schema is the service's name plus a suffix)
    schemas: dict[str, str]
    bare_role: str  # a role with a schema (`bare_schema`) but no search_path naming it
    bare_schema: str

    def url(self, role: str) -> str:
        return f"postgresql+asyncpg://{role}@127.0.0.1:{self.port}/{self.database}"


def _admin_dsn(postgres_url: str) -> str:
    return postgres_url.replace("postgresql+asyncpg://", "postgresql://", 1)


@contextlib.contextmanager
def _process(binary: str, config: Path, port: int) -> Iterator[None]:
    command = [binary, str(config)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root: it switches to another user
        user = "postgres" if _user_exists("postgres") else "nobody"
        command = [binary, "-u", user, str(config)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_listening(process, port)
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    """Until pgbouncer accepts connections (or fails to start: its output then says why)."""
    for _ in range(200):
        if process.poll() is not None:
            output = process.stdout.read().decode() if process.stdout else ""
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {output}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.1):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
    raise RuntimeError("pgbouncer did not start listening")


@pytest.fixture
async def bouncer(postgres_url: str, tmp_path: Path) -> AsyncIterator[Bouncer]:
    binary = _binary()
    suffix = uuid.uuid4().hex[:8]
    roles = {service: f"pgb_{service}_{suffix}" for service in SERVICES}
    schemas = {service: f"{service}_{suffix}" for service in SERVICES}
    bare, bare_schema = f"pgb_bare_{suffix}", f"bare_{suffix}"
    database = postgres_url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(_admin_dsn(postgres_url))
    folder = tmp_path / "pgbouncer"
    folder.mkdir()
    try:
        for service in SERVICES:
            role, schema = roles[service], schemas[service]
            await admin.execute(f'CREATE ROLE "{role}" LOGIN')
            await admin.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"')
            # what a transaction pooler needs: the schema from the role, not from the client
            await admin.execute(f'ALTER ROLE "{role}" IN DATABASE "{database}" SET search_path = "{schema}"')
        await admin.execute(f'CREATE ROLE "{bare}" LOGIN')
        await admin.execute(f'CREATE SCHEMA "{bare_schema}" AUTHORIZATION "{bare}"')
        port = free_port()
        users = [*roles.values(), bare]
        (folder / "users.txt").write_text("".join(f'"{user}" ""\n' for user in users))
        (folder / "pgbouncer.ini").write_text(
            f"[databases]\n{database} = host=127.0.0.1 port=5432 dbname={database}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
            "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 1000\n"
            # statements a client prepared on a server connection go with its transaction
            "server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
        )
        os.chmod(tmp_path, 0o755)
        os.chmod(folder, 0o755)
        for file in folder.iterdir():
            os.chmod(file, 0o644)
        with _process(binary, folder / "pgbouncer.ini", port):
            yield Bouncer(port, database, roles, schemas, bare, bare_schema)
    finally:
        for service in SERVICES:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schemas[service]}" CASCADE')
            await admin.execute(f'DROP ROLE IF EXISTS "{roles[service]}"')
        await admin.execute(f'DROP SCHEMA IF EXISTS "{bare_schema}" CASCADE')
        await admin.execute(f'DROP ROLE IF EXISTS "{bare}"')
        await admin.close()


async def _migrate(bouncer: Bouncer, service: str) -> None:
    spec, scripts, _ = _specs()[service]
    database = Database(bouncer.url(bouncer.roles[service]), schema=bouncer.schemas[service], transaction_pooling=True)
    try:
        await migrations.upgrade(spec.name, scripts, database)
        assert await migrations.current(spec.name, scripts, database) == migrations.head(scripts)
    finally:
        await database.dispose()


def _config(bouncer: Bouncer, service: str, tmp_path: Path) -> Config:
    return make_config(service, tmp_path, database_url=bouncer.url(bouncer.roles[service]),
                       database_schema=bouncer.schemas[service], migrate_on_start=False,
                       database_transaction_pooling=True)


@pytest.mark.parametrize("service", SERVICES)
async def test_a_service_migrates_and_serves_through_pgbouncer_in_transaction_mode(
    service: str, bouncer: Bouncer, tmp_path: Path
) -> None:
    await _migrate(bouncer, service)
    spec, _, call = _specs()[service]
    async with running(spec, _config(bouncer, service, tmp_path)) as server, \
            grpc.aio.insecure_channel(server.address) as channel:
        minter = dev_minter(tmp_path / "dev-keys")
        answer = await call(channel, minter)
        if service == "game_session":  # and its writes: a table created (its log's first append) and read back
            stub = game_session_pb2_grpc.GameSessionServiceStub(channel)
            service_token = bearer(minter.mint(Kind.SERVICE, "matchmaking"))
            created = await stub.CreateTable(table_request("pgb", "alice", "bob"), metadata=service_token)
            read = await stub.GetTable(game_session_pb2.GetTableRequest(name=created.name), metadata=service_token)
            assert read.name == created.name
            assert [s.participant.player for s in read.seats] == ["players/alice", "players/bob"]
    assert type(answer).DESCRIPTOR.full_name.startswith("buraco.v1.")


async def test_matches_settle_through_pgbouncer_and_leave_no_prepared_statement(
    bouncer: Bouncer, tmp_path: Path
) -> None:
    for service in ("wallet", "ranking"):
        await _migrate(bouncer, service)
    async with contextlib.AsyncExitStack() as stack:
        targets = {}
        for service in ("wallet", "ranking"):
            spec = _specs()[service][0]
            server = await stack.enter_async_context(running(spec, _config(bouncer, service, tmp_path)))
            targets[service] = server.address
        targets |= {"matchmaking": "127.0.0.1:1", "game_session": "127.0.0.1:1"}
        dev_minter(tmp_path / "dev-keys")
        settings = Settings(scenario="backend", players=16, journeys=3, bet=25, bot="random", targets=targets,
                            token_key=tmp_path / "dev-keys" / "dev-private.pem", run_id=f"pgb{uuid.uuid4().hex[:6]}",
                            wait_timeout_s=20)
        recorder, _ = await run_shard(settings, range(16))
    assert {(s.kind, s.name): dict(s.errors) for s in recorder if s.errors} == {}
    assert recorder.counters.get("matches_completed") == 24  # 8 tables x 3 matches
    calls = {s.name: s.calls for s in recorder if s.kind == "rpc"}
    assert calls["wallet.Settle"] == calls["ranking.RecordMatch"] == 24
    # the server connections the wallet's role shares: no statement of a client's left behind
    for _ in range(2):
        connection = await asyncpg.connect(bouncer.url(bouncer.roles["wallet"]).replace("+asyncpg", ""),
                                           statement_cache_size=0)
        try:
            assert await connection.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
        finally:
            await connection.close()


async def test_a_role_without_the_schema_on_its_search_path_is_refused_at_start(
    bouncer: Bouncer, tmp_path: Path
) -> None:
    spec = _specs()["wallet"][0]
    config = make_config("wallet", tmp_path, database_url=bouncer.url(bouncer.bare_role),
                         database_schema=bouncer.bare_schema, migrate_on_start=True,
                         database_transaction_pooling=True)
    with pytest.raises(ConfigError, match=f"ALTER ROLE {bouncer.bare_role} SET search_path = {bouncer.bare_schema}"):
        async with running(spec, config):
            pass
