"""`python -m services.game_session`: serve, or run its migrations (`--help`).

The event loop is uvloop's when it is installed (requirements.txt): a game-session replica spends
much of its time scheduling callbacks for gRPC calls and streams, which uvloop does for less CPU.
The garbage collector never re-scans what was loaded at start (below).
"""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

import asyncio  # noqa: E402

from services.common import collector  # noqa: E402
from services.common.server import main  # noqa: E402
from services.game_session.service import SPEC  # noqa: E402

try:
    import uvloop
except ImportError:  # pragma: no cover - the plain asyncio loop works too
    pass
else:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

# What was loaded at start lives as long as the process: out of the collector's sight (the
# service does the same for tables as they age: `collector`).
collector.tune()

raise SystemExit(main(SPEC))
