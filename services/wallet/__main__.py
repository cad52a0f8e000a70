"""`python -m services.wallet`: serve, or run its migrations (`--help`)."""

from services.common.server import main
from services.wallet.service import SPEC

raise SystemExit(main(SPEC))
