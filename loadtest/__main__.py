"""`python -m loadtest`: see loadtest.cli."""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

import sys  # noqa: E402

from loadtest.cli import main  # noqa: E402

sys.exit(main())
