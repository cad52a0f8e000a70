"""`python -m services.game_session`: serve, or run its migrations (`--help`)."""

from services.common.server import main
from services.game_session.service import SPEC

raise SystemExit(main(SPEC))
