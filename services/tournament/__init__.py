"""Tournaments: elimination and Swiss events with buy-ins and prizes."""
