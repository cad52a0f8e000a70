"""The load-test kit: simulated players driving a running suite (`python -m loadtest`, `make loadtest`).

docs/performance.md describes the knobs, how to run it and the figures measured on this machine.
"""
