"""The `bench: NAME VALUE UNIT` lines a bench printed, read back and checked by the bench tests."""

from __future__ import annotations

import math


def printed_figures(stdout: str) -> dict[str, tuple[float, str]]:
    """Every `bench:` line of `stdout`, by name: (value, unit)."""
    figures: dict[str, tuple[float, str]] = {}
    for line in stdout.splitlines():
        if line.startswith("bench: "):
            _, name, number, unit = line.split()
            figures[name] = (float(number), unit)
    return figures


def check_figures(stdout: str, expected: dict[str, str]) -> dict[str, float]:
    """Asserts that every expected figure was printed, finite, in its unit; returns every printed
    figure's value by name."""
    figures = printed_figures(stdout)
    for name, unit in expected.items():
        assert name in figures, f"{name} missing from:\n{stdout}"
        value, printed_unit = figures[name]
        assert printed_unit == unit and math.isfinite(value), (name, value, printed_unit)
    return {name: value for name, (value, _) in figures.items()}
