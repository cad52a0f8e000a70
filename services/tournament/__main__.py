"""`python -m services.tournament`: serve, or run its migrations (`--help`)."""

from services.common.server import main
from services.tournament.service import SPEC

raise SystemExit(main(SPEC))
