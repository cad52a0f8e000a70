"""Benchmarks and measurement tools (`make bench-*`, bench/README.md).

A tool, not part of what ships: nothing under engine/ or services/ imports it, pyproject.toml does
not package it and the service image (deploy/Dockerfile) does not carry it.
"""
