"""Unpack the compiled engine from the project's native wheel into a folder of its own.

    python scripts/unpack_native.py build/wheels build/native

Writes ``engine/`` (its sources beside the extension modules mypyc built from them) and mypyc's
shared runtime module (``*__mypyc*.so``, at the top of the wheel) into the folder, which then goes
first on the import path (``PYTHONPATH=build/native``) to run the compiled engine from a checkout.
Nothing else of the wheel (services, generated code) is unpacked: those stay the checkout's.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path


def unpack(wheels: Path, target: Path) -> list[str]:
    found = sorted(wheels.glob("buraco-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"unpack_native: expected one buraco wheel in {wheels}, found {len(found)}")
    with zipfile.ZipFile(found[0]) as wheel:
        names = [n for n in wheel.namelist()
                 if n.startswith("engine/") or ("/" not in n and "__mypyc" in n and n.endswith(".so"))]
        if not any(n.startswith("engine/") and n.endswith(".so") for n in names):
            raise SystemExit(f"unpack_native: {found[0].name} holds no compiled engine "
                             "(built without BURACO_NATIVE=1?)")
        target.mkdir(parents=True, exist_ok=True)
        wheel.extractall(target, names)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", type=Path, help="the folder holding the buraco wheel")
    parser.add_argument("target", type=Path, help="where to unpack the engine")
    args = parser.parse_args(argv)
    names = unpack(args.wheels, args.target)
    compiled = sum(n.endswith(".so") for n in names)
    print(f"unpack_native: {len(names)} files ({compiled} extension modules) into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
