"""Matchmaking: quick-match tickets, parties, the table lobby, the hand-off to wallet and game sessions."""
