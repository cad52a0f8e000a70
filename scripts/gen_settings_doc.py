"""Write the README's configuration tables from the settings' declarations, or check them.

    python scripts/gen_settings_doc.py           # rewrite the tables in README.md
    python scripts/gen_settings_doc.py --check   # exit 1 (naming the tables) when one is stale

Every setting is declared once (`services.common.config.Setting`: name, kind and bounds, default,
meaning, production rules) in the `SETTINGS` of services/common/config.py (the suite-wide ones)
and of each services/<service>/settings.py. Each table sits in README.md between two markers,

    <!-- settings: wallet (scripts/gen_settings_doc.py writes this table; do not edit it) -->
    ...
    <!-- end of settings: wallet -->

and is replaced whole; the text around the markers is the README's own.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.common.config import Setting, table  # noqa: E402

README = ROOT / "README.md"

#: The README's tables: their marker names and the modules whose SETTINGS they show.
SECTIONS: dict[str, str] = {
    "suite": "services.common.config",
    "matchmaking": "services.matchmaking.settings",
    "ranking": "services.ranking.settings",
    "game_session": "services.game_session.settings",
    "tournament": "services.tournament.settings",
    "wallet": "services.wallet.settings",
    "gateway": "services.gateway.settings",
}


def begin_marker(name: str) -> str:
    return f"<!-- settings: {name} (scripts/gen_settings_doc.py writes this table; do not edit it) -->"


def end_marker(name: str) -> str:
    return f"<!-- end of settings: {name} -->"


def settings_of(module: str) -> tuple[Setting[Any], ...]:
    declared: tuple[Setting[Any], ...] = importlib.import_module(module).SETTINGS
    return declared


class MarkerError(ValueError):
    """A table's markers are missing, repeated or out of order."""


def render(text: str) -> str:
    """`text` (the README) with every table written afresh from its declarations."""
    for name, module in SECTIONS.items():
        begin, end = begin_marker(name), end_marker(name)
        if text.count(begin) != 1 or text.count(end) != 1:
            raise MarkerError(f"README.md needs exactly one {begin!r} and one {end!r}")
        head, _, rest = text.partition(begin)
        _, found, tail = rest.partition(end)
        if not found:
            raise MarkerError(f"README.md: {end!r} comes before {begin!r}")
        text = f"{head}{begin}\n{table(settings_of(module))}\n{end}{tail}"
    return text


def stale_tables(text: str) -> list[str]:
    """The names of the tables of `text` that differ from their declarations."""
    fresh = render(text)
    return [name for name in SECTIONS if _block(text, name) != _block(fresh, name)]


def _block(text: str, name: str) -> str:
    return text.split(begin_marker(name), 1)[1].split(end_marker(name), 1)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the README's tables are current")
    args = parser.parse_args(argv)
    text = README.read_text()
    try:
        stale = stale_tables(text)
    except MarkerError as error:
        print(error, file=sys.stderr)
        return 1
    if args.check:
        if stale:
            print(
                "README.md's configuration tables are stale; run `python scripts/gen_settings_doc.py` and commit:",
                file=sys.stderr,
            )
            for name in stale:
                print(f"  {name} ({SECTIONS[name]}.SETTINGS)", file=sys.stderr)
            return 1
        print(f"README.md's configuration tables are current ({len(SECTIONS)} tables)")
        return 0
    README.write_text(render(text))
    print(f"wrote {len(stale)} of {len(SECTIONS)} tables in README.md" if stale else "README.md was current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
