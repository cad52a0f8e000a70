"""`python -m services.matchmaking`: serve, or run its migrations (`--help`)."""

from services.common.server import main
from services.matchmaking.service import SPEC

raise SystemExit(main(SPEC))
