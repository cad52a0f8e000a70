import pickle

import pytest

from engine.errors import RulesetError
from engine.rules import PARAMETERS, PRESETS, Ruleset, preset, ruleset_from_spec

# The digest's table of named presets, column by column.
DIGEST = {
    #                 jokers groups clean  meld-out closed two joker royal a2a
    "aberto":         (0, False, True, True, False, 10, None, 500, 1000),
    "aberto_sujo":    (4, True, False, False, False, 20, 30, 500, None),
    "fechado":        (4, True, True, True, True, 10, 20, 500, 1000),
    "fechado_stbl":   (4, False, True, True, True, 10, 20, 500, 1000),
    "fechado_sujo":   (4, True, False, True, True, 10, 20, 500, 1000),
    "classico_104":   (0, False, True, True, False, 10, None, 500, 1000),
    "buraco_2005":    (4, True, False, True, False, 20, 30, None, None),
    "aberto_joker50": (4, False, True, True, False, 10, 50, 500, 1000),
}


def test_there_are_exactly_the_eight_presets() -> None:
    assert set(PRESETS) == set(DIGEST)


@pytest.mark.parametrize("name", sorted(DIGEST))
def test_presets_match_the_digest(name: str) -> None:
    jokers, groups, clean, meld_out, closed, two, joker, royal, a2a = DIGEST[name]
    r = preset(name)
    assert r.name == name
    assert r.jokers == jokers
    assert r.deck_size == 104 + jokers
    assert r.groups is groups
    assert r.clean_to_go_out is clean
    assert r.go_out_by_meld is meld_out
    assert r.closed_pile is closed
    assert r.two_value == two
    if joker is not None:
        assert r.joker_value == joker
    assert r.bonus_royal == royal
    assert r.bonus_ace_to_ace == a2a
    assert (r.bonus_dirty, r.bonus_clean) == (100, 200)


def test_source_specific_rules() -> None:
    assert preset("aberto_sujo").groups_of_twos is False  # P: no groups of 2s
    assert preset("aberto_sujo").ace_to_ace is False  # P: no A..A
    assert preset("classico_104").lone_discard is True  # M
    assert preset("buraco_2005").no_wild_going_out is True  # V
    assert preset("buraco_2005").stock_out == "end"  # V
    assert preset("buraco_2005").tie == "extra_hand"  # V
    assert preset("buraco_2005").target == 2005
    assert all(preset(n).stock_out == "morto_then_end" for n in DIGEST if n != "buraco_2005")
    assert preset("fechado").unplayed_morto_penalty and not preset("aberto_sujo").unplayed_morto_penalty
    # J: without a morto taken, going out waits until both mortos became the stock
    assert [n for n in DIGEST if preset(n).go_out_after_both_mortos] == ["aberto_joker50"]
    # V: a side with its morto and no canastra keeps two cards
    assert [n for n in DIGEST if preset(n).keep_two_without_canastra] == ["buraco_2005"]


def test_custom_ruleset_overrides_a_preset() -> None:
    r = ruleset_from_spec({"preset": "fechado", "target": 3000, "lone_discard": True})
    assert r.target == 3000 and r.lone_discard and r.closed_pile
    assert r.name == "fechado+custom"
    assert ruleset_from_spec({"preset": "aberto"}) is preset("aberto")


@pytest.mark.parametrize(
    "spec,words",
    [
        ("nope", "unknown ruleset"),
        ({"target": 100}, "preset"),
        ({"preset": "nope"}, "unknown ruleset"),
        ({"preset": "aberto", "colour": "red"}, "unknown ruleset parameter"),
        ({"preset": "aberto", "groups_of_twos": True}, "groups_of_twos needs groups"),
        ({"preset": "aberto_sujo", "bonus_ace_to_ace": 1000}, "ace_to_ace"),
        ({"preset": "aberto", "jokers": 3}, "jokers"),
        ({"preset": "aberto", "target": -5}, "target"),
        ({"preset": "aberto", "stock_out": "never"}, "stock_out"),
        ({"preset": "aberto", "tie": "coin"}, "tie"),
        ({"preset": "aberto", "closed_pile": "yes"}, "closed_pile"),
        ({"preset": "aberto", "name": "x"}, "name"),
        (42, "preset name or an object"),
    ],
)
def test_inconsistent_or_unknown_rulesets_are_refused(spec: object, words: str) -> None:
    with pytest.raises(RulesetError, match=words):
        ruleset_from_spec(spec)


def test_every_parameter_is_documented() -> None:
    with open("docs/rules.md", encoding="utf-8") as f:
        text = f.read()
    missing = [p for p in PARAMETERS if p != "name" and f"`{p}`" not in text]
    assert missing == []


def test_ruleset_is_frozen_data() -> None:
    r = preset("fechado")
    with pytest.raises(AttributeError):
        r.target = 1  # type: ignore[misc]
    assert Ruleset(**r.to_dict()) == r


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_ruleset_survives_pickling(name: str) -> None:
    # worker processes receive rulesets pickled, in the compiled build as in pure Python
    r = PRESETS[name].override(target=1500, bonus_royal=None)
    back = pickle.loads(pickle.dumps(r))
    assert back == r and back.to_dict() == r.to_dict() and type(back) is Ruleset
