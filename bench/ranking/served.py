"""``python -m bench.ranking.served``: the ranking service exactly as ``python -m services.ranking``
serves it (that entry point run as is, with the configuration from the environment), in a process
of its own so that the benchmark can read its CPU time, with a count of what it sends PostgreSQL.

Every asyncpg connection the process opens (SQLAlchemy's engine and any raw pool go through asyncpg)
has its protocol wrapped by `CountingProtocol`, which counts, per message exchange with the server:

    round_trips   every exchange the client waits for: a simple query (BEGIN, COMMIT, ROLLBACK,
                  unparameterised SQL), a prepare, an execute, an executemany's pipelined batch,
                  a statement closed
    statements    SQL statements executed: an execute counts 1, an executemany of n argument
                  sets counts n, a simple query counts 1, a prepare 0

On SIGUSR1 the process prints ``sql-counts {"round_trips": N, "statements": N, ...}`` on stdout
(the totals so far); the benchmark reads it before and after a phase. Counting costs an integer
increment per exchange. With BURACO_BENCH_PROFILE=FILE it runs under cProfile and writes the
profile to FILE when it stops.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
from collections import Counter
from typing import Any

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported

import asyncpg.connection  # noqa: E402

COUNTS: Counter[str] = Counter()


class CountingProtocol:
    """An asyncpg protocol that counts the exchanges it makes (module docstring) and forwards
    everything to the real one."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._protocol, name)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        COUNTS["round_trips"] += 1
        COUNTS["statements"] += 1
        COUNTS["simple_queries"] += 1
        return self._protocol.query(*args, **kwargs)

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        COUNTS["round_trips"] += 1
        COUNTS["prepares"] += 1
        return self._protocol.prepare(*args, **kwargs)

    def bind_execute(self, *args: Any, **kwargs: Any) -> Any:
        COUNTS["round_trips"] += 1
        COUNTS["statements"] += 1
        return self._protocol.bind_execute(*args, **kwargs)

    def bind_execute_many(self, *args: Any, **kwargs: Any) -> Any:
        arguments = list(kwargs["args"] if "args" in kwargs else args[1])
        COUNTS["round_trips"] += 1
        COUNTS["statements"] += len(arguments)
        if "args" in kwargs:
            kwargs["args"] = arguments
        else:
            args = (args[0], arguments, *args[2:])
        return self._protocol.bind_execute_many(*args, **kwargs)

    def close_statement(self, *args: Any, **kwargs: Any) -> Any:
        COUNTS["round_trips"] += 1
        return self._protocol.close_statement(*args, **kwargs)


_original_init = asyncpg.connection.Connection.__init__


def _counting_init(self: Any, protocol: Any, *args: Any, **kwargs: Any) -> None:
    _original_init(self, CountingProtocol(protocol), *args, **kwargs)


def _print_counts(_signal: int, _frame: Any) -> None:
    sys.stdout.write("sql-counts " + json.dumps(dict(COUNTS)) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncpg.connection.Connection.__init__ = _counting_init
    signal.signal(signal.SIGUSR1, _print_counts)
    # The service's own entry point (`python -m services.ranking`), with its event loop and collector.
    profile = os.environ.get("BURACO_BENCH_PROFILE")
    if not profile:
        runpy.run_module("services.ranking", run_name="__main__", alter_sys=True)
    import cProfile

    cProfile.run('runpy.run_module("services.ranking", run_name="__main__", alter_sys=True)', profile)
