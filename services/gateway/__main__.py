"""`python -m services.gateway`: serve the player edge (the JSON API, the socket, the web table).

The event loop is uvloop's when it is installed, and the garbage collector is settled as the
game-session service's is (services/common/collector.py): a gateway holds a few hundred objects
per open socket for a session's length, and the collector's full passes must never re-scan them
all while every socket waits on the one event loop (docs/gateway.md, "Speed", has the figures).
"""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

import asyncio  # noqa: E402

from services.common import collector  # noqa: E402
from services.gateway.service import main  # noqa: E402

try:
    import uvloop
except ImportError:  # pragma: no cover - the plain asyncio loop works too
    pass
else:
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

collector.tune()

raise SystemExit(main())
