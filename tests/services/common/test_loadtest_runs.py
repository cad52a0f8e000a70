"""Which ids belong to a load-test run: exactly `{run}-{n}`, never a longer id sharing the prefix."""

import pytest

from services.common import loadtest_runs
from services.common.errors import InvalidArgumentError


@pytest.mark.parametrize("player", ["lt1-0", "lt1-17", "lt1-999999"])
def test_the_run_players_are_the_run_id_and_a_number(player: str) -> None:
    assert loadtest_runs.is_run_player("lt1", player)


@pytest.mark.parametrize("player", ["lt1", "lt1-", "lt1-5-3", "lt1-a", "lt10-1", "xlt1-1", "lt1-1x", "lt1-\u0661"])
def test_other_ids_are_not_run_players(player: str) -> None:
    assert not loadtest_runs.is_run_player("lt1", player)


def test_the_like_prefix_finds_every_run_player() -> None:
    assert loadtest_runs.like_prefix("lt1") == "lt1-%"


@pytest.mark.parametrize("run", ["", "ab", "a_b1", "lt%1", "-lt1", "Lt1", "a" * 41])
def test_run_ids_outside_the_alphabet_are_invalid(run: str) -> None:
    with pytest.raises(InvalidArgumentError, match="run_id"):
        loadtest_runs.run_id(run)


def test_the_answer_lists_every_kind_in_order() -> None:
    answer = loadtest_runs.response("lt1", True, [("accounts", 2), ("transfers", 0)])
    assert (answer.run_id, answer.dry_run) == ("lt1", True)
    assert [(e.kind, e.count) for e in answer.erased] == [("accounts", 2), ("transfers", 0)]
