"""`python -m services.game_session`: serve, or run its migrations (`--help`).

The event loop is uvloop's when it is installed (requirements.txt): a game-session replica spends
much of its time scheduling callbacks for gRPC calls and streams, which uvloop does for less CPU.
The garbage collector is tuned for a process that keeps many objects for long (below).
"""

import asyncio
import gc

from services.common.server import main
from services.game_session.service import SPEC

try:
    import uvloop
except ImportError:  # pragma: no cover - the plain asyncio loop works too
    pass
else:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

# A replica holds many long-lived objects (tables, their logs); collecting the young generation
# rarely and never re-scanning what was loaded at start keeps collector pauses out of the latency.
gc.freeze()
gc.set_threshold(50_000, 50, 100)

raise SystemExit(main(SPEC))
