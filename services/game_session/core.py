"""The game-session service's domain logic: plain functions over explicit dependencies (a
database session, the clock, clients), returning results or raising the errors of `errors.py`.
No grpc import here. Built by issue #4.
"""
