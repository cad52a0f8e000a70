"""`python -m services.ranking`: serve, or run its migrations (`--help`)."""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

from services.common.server import main  # noqa: E402
from services.ranking.service import SPEC  # noqa: E402

raise SystemExit(main(SPEC))
