"""`python -m services.gateway`: serve the player edge (the JSON API, the socket, the web table)."""

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)

from services.gateway.service import main  # noqa: E402

raise SystemExit(main())
