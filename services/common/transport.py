"""gRPC's transport for every process of the suite: services, the CLI, `services.local`, the
load-test kit, the benches and the test suite.

    from services.common.transport import use_suite_transport

    use_suite_transport()          # the entry point's first statement, before anything imports grpc

The suite runs gRPC's iomgr TCP transport, not EventEngine's (grpcio's default since 1.80).
EventEngine hands each socket read and write to a pool of threads of its own and then to the
asyncio loop's thread, so on a replica's one core every message pays two thread switches; the
iomgr transport does the socket work on the loop's own thread, for less CPU per call and lower
latency (docs/game-session.md, "Speed", has the measurements).

grpc reads GRPC_EXPERIMENTS once, when `grpc` is first imported (its C core is loaded then), so
the choice must be made before that import: a function the entry point calls, not a side effect
of importing a package. An operator's own GRPC_EXPERIMENTS wins (empty: grpc's defaults). When
grpcio is upgraded, re-measure: grpc logs "Unknown experiment" (and goes on with its defaults)
once these experiments are retired, and tests/services/common/test_transport.py fails.

This module imports nothing of grpc's, so importing it is always early enough.
"""

from __future__ import annotations

import os
import sys

#: The experiments turned off: EventEngine's listener, its client and its other endpoints.
GRPC_EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints,-event_engine_client"

VARIABLE = "GRPC_EXPERIMENTS"


def use_suite_transport() -> bool:
    """Choose the suite's gRPC transport for this process (and the processes it starts, which
    inherit the environment). Returns whether the choice is in effect: True when grpc is not
    imported yet or GRPC_EXPERIMENTS was already set (the operator's, or this process's own);
    False when grpc was imported first, which then runs with its defaults (the variable is left
    unset then, so the environment does not claim what grpc does not do)."""
    if VARIABLE in os.environ:
        return True
    if "grpc" in sys.modules:
        return False
    os.environ[VARIABLE] = GRPC_EXPERIMENTS
    return True

