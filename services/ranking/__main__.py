"""`python -m services.ranking`: serve, or run its migrations (`--help`)."""

from services.common.server import main
from services.ranking.service import SPEC

raise SystemExit(main(SPEC))
