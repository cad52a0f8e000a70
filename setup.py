"""Build hook: with ``BURACO_NATIVE=1`` the engine's hot modules (engine/native.txt) are compiled by
mypyc into extension modules beside their sources, which Python then imports instead (the service
image and ``make engine-native`` build it so). Without it, a plain pure-Python build.

Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup


def native_modules() -> list[str]:
    listing = Path(__file__).parent / "engine" / "native.txt"
    lines = (line.strip() for line in listing.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


if os.environ.get("BURACO_NATIVE") == "1":
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(native_modules(), opt_level="3"))
else:
    setup()
