"""Write a key set (JWKS) for BURACO_JWT_PUBLIC_KEYS from PEM public keys, each with its scope.

    python scripts/jwks.py player=gateway.pub service:matchmaking=matchmaking.pub \
        service:game-session=game-session.pub service:tournament=tournament.pub admin=admin.pub >keys.json

Each argument is `SCOPE=FILE`: what the keys in FILE may sign (grants separated by commas:
`player`, `admin`, `service:<name>`) and a PEM file of public keys. Rotation: list the old and the
new key of a signer side by side (same scope), then, once no token signed with the old one can
still be valid, write the set again without it (docs/operations.md, "Keys").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from services.common.auth import Scope, jwk_of, parse_key_set, parse_public_keys
from services.common.config import ConfigError


def build(arguments: list[str]) -> dict[str, list[dict[str, object]]]:
    entries: dict[str, dict[str, object]] = {}
    for argument in arguments:
        grants, separator, file = argument.partition("=")
        if not separator or not file:
            raise ConfigError(f"{argument!r}: expected SCOPE=FILE (for example player=gateway.pub)")
        scope = Scope.parse(grants.replace(",", " "), argument)
        for kid, key in parse_public_keys(Path(file).read_bytes(), file).items():
            if kid in entries:
                raise ConfigError(f"{file}: key {kid} is listed twice; give it one scope")
            entries[kid] = jwk_of(key, scope)
    document = {"keys": list(entries.values())}
    parse_key_set(json.dumps(document).encode(), "the written key set")  # what the services will read
    return document


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if not arguments or arguments[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if arguments else 2
    try:
        document = build(arguments)
    except (ConfigError, OSError) as error:
        print(f"jwks: {error}", file=sys.stderr)
        return 2
    json.dump(document, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
