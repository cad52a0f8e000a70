"""Skill ratings: the Weng-Lin Bayesian model (OpenSkill, Plackett-Luce) over sides of one or two
players (docs/ranking.md, "Ratings"). Pure functions.

Each player has, per modality (ruleset preset) and table size, a belief about their skill: a mean
`mu` and an uncertainty `sigma` (new players: 25 and 25/3). A match is two teams (the two sides);
the model moves every player of the winning side up and of the losing side down, by how surprising
the result was and how uncertain each player is, and shrinks their sigmas. The displayed rating is
the conservative `ordinal` = mu - 3 sigma (0 for a new player), which rises as a player proves
themselves. The same update also runs on each player's overall rating for the table size (preset
`*`, every modality together), which the global rating leaderboards rank.

A player who abandons is rated as having lost, whatever their side did afterwards with a bot in
the seat: their new rating comes from the same match with their side ranked last. Everyone else is
rated on the table's result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from openskill.models import PlackettLuce

#: The model with the library's defaults: mu 25, sigma 25/3, beta 25/6, tau 25/300 (a little
#: uncertainty added before each match, so ratings keep moving for returning players).
MODEL = PlackettLuce()
DEFAULT_MU: float = MODEL.mu
DEFAULT_SIGMA: float = MODEL.sigma
#: The conservative estimate shown and ranked: mu - ORDINAL_SIGMAS * sigma.
ORDINAL_SIGMAS = 3.0


@dataclass(frozen=True)
class Skill:
    mu: float = DEFAULT_MU
    sigma: float = DEFAULT_SIGMA

    @property
    def ordinal(self) -> float:
        return ordinal(self.mu, self.sigma)


def ordinal(mu: float, sigma: float) -> float:
    return mu - ORDINAL_SIGMAS * sigma


@dataclass(frozen=True)
class RatingView:
    """A player's rating for one preset (or `*`) and table size, as stored and shown: `matches`
    rated so far, and, in a history or a RecordMatch answer, the match that set it."""

    player: str
    preset: str
    players: int
    mu: float
    sigma: float
    matches: int
    updated_at: datetime | None = None
    match_id: str = ""

    @property
    def ordinal(self) -> float:
        return ordinal(self.mu, self.sigma)

    def to_json(self) -> dict[str, Any]:
        return {
            "player": self.player,
            "preset": self.preset,
            "players": self.players,
            "mu": self.mu,
            "sigma": self.sigma,
            "matches": self.matches,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "match_id": self.match_id,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> RatingView:
        updated = data["updated_at"]
        return RatingView(
            player=data["player"],
            preset=data["preset"],
            players=data["players"],
            mu=data["mu"],
            sigma=data["sigma"],
            matches=data["matches"],
            updated_at=datetime.fromisoformat(updated) if updated else None,
            match_id=data["match_id"],
        )


def rate_sides(sides: list[list[Skill]], winner: int) -> list[list[Skill]]:
    """New skills after a match between `sides` (two teams, in side order) won by side `winner`:
    `MODEL.rate` with those ranks, computed by `_rate_two_teams` (the same arithmetic in the same
    order, so the same floats; tests compare the two on random ratings)."""
    if len(sides) == 2 and all(1 <= len(side) <= 2 for side in sides):
        return _rate_two_teams(sides, winner)
    return _rate_with_model(sides, winner)


def _rate_with_model(sides: list[list[Skill]], winner: int) -> list[list[Skill]]:
    teams = [[MODEL.create_rating([s.mu, s.sigma]) for s in side] for side in sides]
    ranks = [0.0 if index == winner else 1.0 for index in range(len(sides))]
    rated = MODEL.rate(teams, ranks=ranks)
    return [[Skill(r.mu, r.sigma) for r in team] for team in rated]


_TAU_SQUARED = MODEL.tau * MODEL.tau
_BETA_SQUARED = MODEL.beta**2
_KAPPA = MODEL.kappa


def _rate_two_teams(sides: list[list[Skill]], winner: int) -> list[list[Skill]]:
    """OpenSkill's Plackett-Luce update (Weng and Lin, algorithm 4) for two teams of one or two
    players and distinct ranks, with the model's defaults (no weights, scores, balance or sigma
    limit), written out: the library's general code spends most of its time copying and sorting.
    Every expression is the library's, in its order: a sum of two floats does not depend on their
    order, which is the only freedom taken (the library sums a team's players by ordinal)."""
    # sigma corrected by tau before the match
    teams = [[(s.mu, math.sqrt(s.sigma * s.sigma + _TAU_SQUARED)) for s in side] for side in sides]
    team_mu = [0.0, 0.0]
    team_sigma_squared = [0.0, 0.0]
    for index, team in enumerate(teams):
        mu_summed = 0.0
        sigma_squared_summed = 0.0
        for mu, sigma in team:
            mu_summed += mu * 1.0
            sigma_squared_summed += (sigma * 1.0) ** 2
        team_mu[index] = mu_summed
        team_sigma_squared[index] = sigma_squared_summed
    loser = 1 - winner
    c = math.sqrt(0.0 + (team_sigma_squared[winner] + _BETA_SQUARED) + (team_sigma_squared[loser] + _BETA_SQUARED))
    exp_winner = math.exp(team_mu[winner] / c)
    exp_loser = math.exp(team_mu[loser] / c)
    sum_winner = exp_winner + exp_loser  # the ranks at or after the winner's: both teams
    result: list[list[Skill]] = [[], []]
    for index in (winner, loser):
        if index == winner:
            ratio = exp_winner / sum_winner
            delta = 0.0 + ratio * (1 - ratio) / 1
            omega = 0.0 + (1 - ratio) / 1
        else:
            ratio = exp_loser / sum_winner
            delta = 0.0 + ratio * (1 - ratio) / 1
            omega = 0.0 - ratio / 1
            own = exp_loser / exp_loser
            delta += own * (1 - own) / 1
            omega += (1 - own) / 1
        sigma_squared = team_sigma_squared[index]
        omega *= sigma_squared / c
        delta *= sigma_squared / c**2
        delta *= math.sqrt(sigma_squared) / c
        for mu, sigma in teams[index]:
            if omega >= 0:
                mu += (sigma**2 / sigma_squared) * omega * 1.0
                sigma *= math.sqrt(max(1 - (sigma**2 / sigma_squared) * delta * 1.0, _KAPPA))
            else:
                mu += (sigma**2 / sigma_squared) * omega / 1.0
                sigma *= math.sqrt(max(1 - (sigma**2 / sigma_squared) * delta / 1.0, _KAPPA))
            result[index].append(Skill(mu, sigma))
    return result


def win_probability(sides: list[list[Skill]]) -> list[float]:
    """The model's probability that each side wins."""
    teams = [[MODEL.create_rating([s.mu, s.sigma]) for s in side] for side in sides]
    return list(MODEL.predict_win(teams))
