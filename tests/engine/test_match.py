"""Match play: hands to a target, ties, the rotating dealer, persistence and the event log."""

import random

import pytest

from engine.errors import IllegalActionError
from engine.events import Event
from engine.match import MatchState, rebuild
from engine.rules import preset, ruleset_from_spec


def finish_hand(match: MatchState, totals: tuple[int, int]) -> list[Event]:
    """Record the current hand as ended with these side totals (scoring is tested elsewhere)."""
    assert match.hand is not None
    match.hand.phase = "hand_over"
    return match._record_hand([{"total": totals[0]}, {"total": totals[1]}])


def test_express_is_one_hand_and_the_higher_total_wins() -> None:
    m = MatchState(ruleset_from_spec({"preset": "fechado", "target": 0}), 2)
    m.start_hand(seed=1)
    events = finish_hand(m, (120, 300))
    assert m.is_over() and m.winner == 1
    assert events[0].type == "match_ended" and events[0].public["winner_side"] == 1


def test_points_match_continues_until_a_side_reaches_the_target() -> None:
    m = MatchState(preset("fechado"), 2)  # 2,000
    for k, totals in enumerate([(900, 200), (900, 700)]):
        m.start_hand(seed=k)
        assert finish_hand(m, totals) == []
        assert not m.is_over()
    m.start_hand(seed=9)
    finish_hand(m, (300, 50))
    assert m.totals == [2100, 950] and m.winner == 0 and m.hands_played == 3


def test_both_over_the_target_the_higher_total_wins() -> None:
    m = MatchState(preset("buraco_2005"), 4)
    m.start_hand(seed=1)
    finish_hand(m, (1900, 1950))
    m.start_hand(seed=2)
    finish_hand(m, (200, 100))
    assert m.totals == [2100, 2050] and m.winner == 0


def test_tie_goes_to_the_side_that_started_the_match_in_p() -> None:
    m = MatchState(preset("fechado"), 2, first_dealer=0)  # seat 1 starts: side 1
    m.start_hand(seed=1)
    finish_hand(m, (2100, 2100))
    assert m.winner == 1 == m.starter_side


def test_tie_plays_another_hand_in_v() -> None:
    m = MatchState(preset("buraco_2005"), 2)
    m.start_hand(seed=1)
    finish_hand(m, (2100, 2100))
    assert not m.is_over()
    m.start_hand(seed=2)
    finish_hand(m, (10, -20))
    assert m.winner == 0


def test_express_tie_rules() -> None:
    m = MatchState(ruleset_from_spec({"preset": "aberto", "target": 0}), 2)
    m.start_hand(seed=1)
    finish_hand(m, (50, 50))
    assert m.winner == m.starter_side == 0
    m = MatchState(ruleset_from_spec({"preset": "buraco_2005", "target": 0}), 2)
    m.start_hand(seed=1)
    finish_hand(m, (50, 50))
    assert not m.is_over()


def test_the_dealer_rotates_each_hand() -> None:
    m = MatchState(preset("fechado"), 4, first_dealer=3)
    dealers = []
    for k in range(5):
        event = m.start_hand(seed=k)
        dealers.append(event.public["dealer"])
        assert event.public["first"] == (dealers[-1] + 1) % 4
        finish_hand(m, (0, 0))
    assert dealers == [3, 0, 1, 2, 3]


def test_a_hand_cannot_start_while_one_is_played() -> None:
    m = MatchState(preset("fechado"), 2)
    m.start_hand(seed=1)
    with pytest.raises(IllegalActionError):
        m.start_hand(seed=2)


def test_same_seed_same_deal_and_different_seeds_differ() -> None:
    a, b, c = (MatchState(preset("fechado"), 4) for _ in range(3))
    ea, eb, ec = a.start_hand(seed="x"), b.start_hand(seed="x"), c.start_hand(seed="y")
    assert ea.to_json() == eb.to_json()
    assert ea.secret["deal"] != ec.secret["deal"]


def play_random(match: MatchState, rng: random.Random, hands: int) -> list[Event]:
    log: list[Event] = []
    for k in range(hands):
        if match.is_over():
            break
        log.append(match.start_hand(seed=f"seed-{k}"))
        assert match.hand is not None
        while not match.hand.is_terminal():
            log.extend(match.apply(rng.choice(match.hand.legal_actions()), match.hand.to_act))
    return log


@pytest.mark.parametrize("name,players", [("fechado", 2), ("buraco_2005", 4), ("classico_104", 2)])
def test_the_event_log_rebuilds_an_equal_match(name: str, players: int) -> None:
    m = MatchState(preset(name), players)
    log = play_random(m, random.Random(7), 2)
    again = rebuild(preset(name), players, m.first_dealer, [Event.from_json(e.to_json()) for e in log])
    assert again == m
    assert MatchState.from_json(m.to_json()) == m


def test_a_tampered_log_is_refused() -> None:
    m = MatchState(preset("fechado"), 2)
    log = play_random(m, random.Random(3), 1)
    bad = [Event.from_json(e.to_json()) for e in log]
    for e in bad:
        if e.type == "discarded":
            e.public["card"] = "AS" if e.public["card"] != "AS" else "KS"
            break
    with pytest.raises((ValueError, IllegalActionError)):
        rebuild(preset("fechado"), 2, m.first_dealer, bad)
