"""`python -m services.wallet`: serve, run its migrations, audit the ledger or expire holds
(`--help`).

The garbage collector never re-scans what was loaded at start: a full collection over it all
paused the event loop 30-70 ms about every second under load (every call in flight waited, and a
batch paused between its last write and its commit kept the house row locked meanwhile), where a
collection of what remains takes about 1 ms (docs/wallet.md, Benchmark).
"""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

import gc  # noqa: E402

from services.wallet.service import main  # noqa: E402

gc.freeze()

raise SystemExit(main())
