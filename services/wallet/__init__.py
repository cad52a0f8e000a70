"""Wallet: the double-entry chips ledger, escrowed bets, settlement and refunds."""
