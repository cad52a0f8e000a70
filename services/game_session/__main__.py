"""`python -m services.game_session`: serve, or run its migrations (`--help`).

The event loop is uvloop's when it is installed (requirements.txt): a game-session replica spends
much of its time scheduling callbacks for gRPC calls and streams, which uvloop does for less CPU.
"""

import asyncio

from services.common.server import main
from services.game_session.service import SPEC

try:
    import uvloop
except ImportError:  # pragma: no cover - the plain asyncio loop works too
    pass
else:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

raise SystemExit(main(SPEC))
