"""Game sessions: authoritative tables hosting the rules engine, per-player event streams."""
