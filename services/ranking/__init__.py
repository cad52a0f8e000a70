"""Ranking: XP and levels, skill ratings and leaderboards."""
