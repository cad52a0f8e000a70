"""One Alembic migration history per service, run by command and (in local mode) at start.

A service's `migrations/` folder holds `env.py` (two lines: call `run_env`), `script.py.mako`
and `versions/`. The version table is `alembic_version_<service>`, so histories never mix even
in a shared database. Commands (`python -m services.<service> ...`):

    migrate [REVISION]       upgrade to REVISION (default head)
    downgrade REVISION       downgrade to REVISION (`base` removes every table)
    revision -m MESSAGE      new empty migration (`--autogenerate` diffs models.py and the database)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.environment import EnvironmentContext
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from services.common.db import Database


def alembic_config(service: str, migrations: Path, database: Database) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(migrations))
    config.set_main_option("path_separator", "os")
    config.set_main_option("version_locations", str(migrations / "versions"))
    config.set_main_option("sqlalchemy.url", database.url.replace("%", "%%"))
    # Files are v0001_slug.py, v0002_...: revision ids are zero-padded sequence numbers.
    config.set_main_option("file_template", "v%%(rev)s_%%(slug)s")
    config.attributes["service"] = service
    config.attributes["schema"] = database.schema
    return config


class MigrationTimeoutError(RuntimeError):
    """A migration waited longer than its lock or statement timeout (PostgreSQL): nothing of it
    was applied (the whole upgrade is one transaction)."""


@dataclass(frozen=True)
class Timeouts:
    """How long a migration may wait (PostgreSQL): for a table's lock, and for one statement
    (which includes the wait for another replica migrating the same service)."""

    lock_seconds: float = 5.0
    statement_seconds: float = 300.0

    @property
    def lock_ms(self) -> int:
        return max(1, int(self.lock_seconds * 1000))

    @property
    def statement_ms(self) -> int:
        return max(1, int(self.statement_seconds * 1000))


async def _run(database: Database, config: AlembicConfig, action: Any, *args: Any,
               timeouts: Timeouts | None = None, **kwargs: Any) -> None:
    """Run an Alembic command in one transaction. On PostgreSQL the role needs only to own the
    service's schema (docs/operations.md): the schema is created here only when it is missing,
    which alone needs CREATE on the database (local runs and tests)."""
    timeouts = timeouts or Timeouts()
    postgresql = database.dialect == "postgresql"
    try:
        if database.schema and postgresql:
            await _ensure_schema(database, database.schema, timeouts)
        async with database.engine.begin() as connection:
            if postgresql:
                await connection.execute(text(f"SET LOCAL statement_timeout = {timeouts.statement_ms}"))
                # replicas or a release Job may migrate at once: one at a time per service and schema
                # (the lock ends with the transaction)
                key = f"buraco-migrate:{config.attributes['service']}:{database.schema or ''}"
                await connection.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})
                # DDL waiting behind a long transaction makes every later query on its table queue
                # behind it: fail fast and say so instead
                await connection.execute(text(f"SET LOCAL lock_timeout = {timeouts.lock_ms}"))
            if database.schema and postgresql:
                # for this transaction only: behind a transaction pooler a session setting would
                # outlive it on a server connection other clients use
                await connection.execute(text(f'SET LOCAL search_path TO "{database.schema}"'))

            def run(sync_connection: Connection) -> None:
                config.attributes["connection"] = sync_connection
                action(config, *args, **kwargs)

            await connection.run_sync(run)
    except DBAPIError as error:
        cause = getattr(error.orig, "__cause__", None)  # the driver's own error, under SQLAlchemy's adapter
        state = getattr(error.orig, "sqlstate", None) or getattr(cause, "sqlstate", None)
        service = config.attributes["service"]
        if state == LOCK_NOT_AVAILABLE:
            raise MigrationTimeoutError(
                f"{service}: a migration waited over {timeouts.lock_seconds:g} s for a lock "
                f"(BURACO_MIGRATION_LOCK_TIMEOUT_SECONDS) and was rolled back, nothing applied: a long "
                f"transaction holds a table it changes ({_first_line(error)}); end that transaction or "
                f"retry when it is done") from None
        if state == QUERY_CANCELED:
            raise MigrationTimeoutError(
                f"{service}: a migration statement ran over {timeouts.statement_seconds:g} s "
                f"(BURACO_MIGRATION_STATEMENT_TIMEOUT_SECONDS) and was rolled back, nothing applied "
                f"({_first_line(error)})") from None
        raise


#: PostgreSQL's SQLSTATEs for a lock_timeout and a statement_timeout.
LOCK_NOT_AVAILABLE = "55P03"
QUERY_CANCELED = "57014"


def _first_line(error: BaseException) -> str:
    return str(getattr(error, "orig", error)).strip().splitlines()[0]


async def _ensure_schema(database: Database, schema: str, timeouts: Timeouts) -> None:
    """Create `schema` when it is missing. `CREATE SCHEMA IF NOT EXISTS` needs CREATE on the
    database even when the schema exists, so it runs only when the schema is not there; services
    sharing a schema that start at once take turns (two could both find it missing)."""
    async with database.engine.begin() as connection:
        exists = text("SELECT 1 FROM pg_namespace WHERE nspname = :schema")
        if (await connection.execute(exists, {"schema": schema})).first() is not None:
            return
        await connection.execute(text(f"SET LOCAL statement_timeout = {timeouts.statement_ms}"))
        key = f"buraco-schema:{schema}"
        await connection.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})
        if (await connection.execute(exists, {"schema": schema})).first() is None:
            await connection.execute(text(f'CREATE SCHEMA "{schema}"'))


async def upgrade(service: str, migrations: Path, database: Database, revision: str = "head",
                  timeouts: Timeouts | None = None) -> None:
    await _run(database, alembic_config(service, migrations, database), command.upgrade, revision, timeouts=timeouts)


async def downgrade(service: str, migrations: Path, database: Database, revision: str,
                    timeouts: Timeouts | None = None) -> None:
    await _run(database, alembic_config(service, migrations, database), command.downgrade, revision, timeouts=timeouts)


async def current(service: str, migrations: Path, database: Database) -> str | None:
    """The revision the database is at (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    async with database.engine.connect() as connection:

        def read(sync_connection: Connection) -> str | None:
            context = MigrationContext.configure(
                sync_connection,
                opts={"version_table": version_table(service), "version_table_schema": database.schema},
            )
            return context.get_current_revision()

        return await connection.run_sync(read)


class SchemaNotReadyError(RuntimeError):
    """The database is behind the code's migrations (or was never migrated)."""


def head(migrations: Path) -> str | None:
    """The newest revision in the service's migration scripts."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(migrations)).get_current_head()


async def check_at_head(service: str, migrations: Path, database: Database) -> None:
    """Raise `SchemaNotReadyError` unless the database is at the scripts' head.

    A revision the scripts do not know is newer than this code (a release being rolled out, or
    rolled back): that is allowed, as migrations only expand the schema before code uses it.
    """
    from alembic.script import ScriptDirectory

    at = await current(service, migrations, database)
    expected = head(migrations)
    if at == expected:
        return
    command_hint = f"run `python -m services.{service} migrate` (the release's migration Job)"
    if at is None:
        raise SchemaNotReadyError(f"{service}: the database was never migrated (head is {expected}): {command_hint}")
    scripts = ScriptDirectory(str(migrations))
    known = {script.revision for script in scripts.walk_revisions()}
    if at in known:
        raise SchemaNotReadyError(f"{service}: the database is at {at}, the code needs {expected}: {command_hint}")


def revision(service: str, migrations: Path, database: Database, message: str, autogenerate: bool) -> None:
    """Writes a new migration file (autogenerate needs the database at head)."""
    import asyncio

    config = alembic_config(service, migrations, database)
    numbers = [int(p.name[1:5]) for p in (migrations / "versions").glob("v[0-9][0-9][0-9][0-9]_*.py")]
    rev_id = f"{max(numbers, default=0) + 1:04d}"
    if autogenerate:
        asyncio.run(
            _run(database, config, command.revision, message=message, autogenerate=True, rev_id=rev_id)
        )
    else:
        command.revision(config, message=message, rev_id=rev_id)


def version_table(service: str) -> str:
    return f"alembic_version_{service}"


def run_env(target_metadata: MetaData) -> None:
    """The body of every service's `migrations/env.py` (online mode on the given connection)."""
    from alembic import context as alembic_context

    environment: EnvironmentContext = alembic_context  # type: ignore[assignment]
    config = environment.config
    connection: Connection | None = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations with `python -m services.<service> migrate`")
    schema = config.attributes.get("schema")
    environment.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=version_table(config.attributes["service"]),
        version_table_schema=schema,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=own_tables(target_metadata, config.attributes["service"]),
    )
    with environment.begin_transaction():
        environment.run_migrations()


def own_tables(metadata: MetaData, service: str) -> Any:
    """Autogenerate looks only at the service's own tables (others may share the database)."""

    def include(name: str | None, type_: str, _parent: Any) -> bool:
        if type_ == "table":
            return name is not None and (name in metadata.tables or name.startswith(f"{service}_"))
        return True

    return include
