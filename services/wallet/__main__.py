"""`python -m services.wallet`: serve, run its migrations, audit the ledger or expire holds
(`--help`).

What was loaded at start is frozen out of the garbage collector's sight (`gc.freeze`): a full
collection must not re-scan it all under load, since the event loop waits for it (every call in
flight waits, and a batch paused between its last write and its commit keeps the house row locked
meanwhile). docs/wallet.md, "Benchmark", has the pauses measured with and without.
"""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

import gc  # noqa: E402

from services.wallet.service import main  # noqa: E402

gc.freeze()

raise SystemExit(main())
