"""The web table in a real browser (headless Chromium), against the whole suite as real processes.

- Two players sign in, quick-match the same staked express preferences, confirm, and play the
  whole hand by clicking (draw, the meld and addition suggestions, a highlighted discard); both
  pages then show the settled balances: the loser's start - bet, the winner's start - bet + the
  pot less the house cut (rounded down, as the wallet does: docs/wallet.md, "Rounding").
- A practice table against a bot, played for a few turns by clicking: the hand shown sorted, the
  legal moves highlighted as the server's GetLegalMoves says, and a socket dropped while a move is
  in flight: the page reconnects, resumes the table and the move is applied once.
- A spectator (a third window) sees the table, the public cards and the chat, but no player's
  hand.

No sleeps stand in for synchronisation: every wait is a WebDriverWait on what the page shows (its
`data-*` attributes).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.conftest import HOUSE_CUT_PERCENT, SCREENSHOTS, TOKEN_SECONDS, LocalSuite

pytestmark = pytest.mark.slow

BET = 41  # an odd pot (82): the house cut is rounded down (16, not 16.4)
WAIT = 30.0
MATCH_SECONDS = 150.0
SUITS = "SHDC"
RANKS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]

#: Records the page's WebSockets and what the page sends on each (the test closes one to
#: simulate a network drop). Installed before the page's own scripts run; the page itself is not
#: changed.
TRACK_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  const opened = [];
  const sent = [];
  class Tracked extends Native {
    constructor(...args) { super(...args); this.__number = opened.length; opened.push(this); }
    send(data) { sent.push({socket: this.__number, message: JSON.parse(data)}); return super.send(data); }
  }
  window.WebSocket = Tracked;
  window.__sockets = opened;
  window.__sent = sent;
})();
"""


def card_code(card: str) -> int:
    """The engine's order (engine/cards.py): suit by suit S H D C, ace low, the joker last."""
    if card == "JK":
        return 52
    return SUITS.index(card[-1]) * 13 + RANKS.index(card[:-1])


class Page:
    """One browser window on the web table."""

    def __init__(self, driver: Any, url: str, name: str) -> None:
        self.driver = driver
        self.url = url
        self.name = name
        self.moves: Counter[str] = Counter()  # moves of the current turn, by kind
        self.signed_in_at = 0.0
        self.first_token = ""

    # -- reading and waiting --------------------------------------------------------------------
    def wait(self, predicate: Callable[[], Any], message: str, timeout: float = WAIT) -> Any:
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05,
                                 ignored_exceptions=(StaleElementReferenceException,)).until(lambda _: predicate())
        except TimeoutException:
            raise AssertionError(f"{self.name}: {message} (notice: {self.notice()!r}, table: {self.table()})") from None

    def attrs(self, css: str) -> dict[str, str] | None:
        """The data-* attributes of the first element matching `css` (None when there is none)."""
        found: dict[str, str] | None = self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? Object.assign({}, e.dataset) : null;", css)
        return found

    def all_attrs(self, css: str) -> list[dict[str, str]]:
        found: list[dict[str, str]] = self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => Object.assign({}, e.dataset));", css)
        return found

    def wait_for_data(self, css: str, key: str | None = None, value: str | None = None,
                      timeout: float = WAIT) -> dict[str, str]:
        """The data-* attributes of `css` once it is there (with `key`, once `key` is set; with
        `value` too, once `key` has that value)."""

        def found() -> dict[str, str] | None:
            data = self.attrs(css)
            if data is None or (key is not None and not data.get(key)):
                return None
            if value is not None and data.get(key or "") != value:
                return None
            return data

        wanted = css if key is None else f"{css} with {key}={value if value is not None else '...'}"
        result: dict[str, str] = self.wait(found, f"no {wanted}", timeout=timeout)
        return result

    def table(self) -> dict[str, str] | None:
        return self.attrs("[data-testid=table]")

    def notice(self) -> str:
        text: str = self.driver.execute_script(
            "const n = document.querySelector('[data-testid=notice]'); return n && !n.hidden ? n.textContent : '';")
        return text

    def count(self, css: str) -> int:
        return int(self.driver.execute_script("return document.querySelectorAll(arguments[0]).length;", css))

    def text(self, css: str) -> str:
        return str(self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';", css))

    def click(self, css: str) -> None:
        """Click the first element matching `css` once it is there and enabled (found again if the
        page re-rendered it meanwhile)."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By

        def clicked() -> bool:
            elements = self.driver.find_elements(By.CSS_SELECTOR, css)
            if not elements or not elements[0].is_displayed() or not elements[0].is_enabled():
                return False
            try:
                elements[0].click()
            except StaleElementReferenceException:
                return False
            return True

        self.wait(clicked, f"nothing to click at {css}")

    def type_into(self, css: str, text: str) -> None:
        from selenium.webdriver.common.by import By

        def shown() -> Any:
            found = self.driver.find_elements(By.CSS_SELECTOR, css)
            return found[0] if found and found[0].is_displayed() and found[0].is_enabled() else None

        element = self.wait(shown, f"no {css} to type into")
        element.clear()
        element.send_keys(text)

    def select(self, css: str, value: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        def shown() -> Any:
            found = self.driver.find_elements(By.CSS_SELECTOR, css)
            return found[0] if found and found[0].is_displayed() else None

        Select(self.wait(shown, f"no {css} to choose from")).select_by_value(value)

    # -- the page's flows -----------------------------------------------------------------------
    def sign_in(self) -> int:
        """Sign in; the starting balance the page shows."""
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": TRACK_SOCKETS})
        self.driver.get(self.url)
        self.type_into("[data-testid=signin-name]", self.name)
        self.click("[data-testid=signin-submit]")
        self.wait(lambda: (self.attrs("[data-testid=connection]") or {}).get("state") == "open",
                  "the socket did not open")
        balance = self.wait(lambda: (self.attrs("[data-testid=balance]") or {}).get("value"), "no balance shown")
        self.wait(lambda: self.text("[data-testid=rank]") == "Rank —", "a new player is unranked: Rank —")
        self.signed_in_at = time.monotonic()
        self.first_token = self.token()
        return int(balance)

    def token(self) -> str:
        return str(self.driver.execute_script(
            "return (JSON.parse(sessionStorage.getItem('buraco.session') || '{}')).token || '';"))

    def sockets_opened(self) -> int:
        return int(self.driver.execute_script("return window.__sockets.length;"))

    def balance(self) -> int:
        return int((self.attrs("[data-testid=balance]") or {}).get("value") or -1)

    def open_table(self) -> str:
        """Wait for the table view; the table's name."""
        state = self.wait(lambda: (t := self.table()) and t.get("loaded") == "true" and t, "no table shown")
        return str(state["table"])

    # -- playing by clicking --------------------------------------------------------------------
    def ready(self) -> bool:
        """It is this page's turn and the server's legal moves for the table as it is are shown."""
        t = self.table()
        return bool(t and t["finished"] == "false" and t["myTurn"] == "true" and t["busy"] == "false"
                    and t["hintsSeq"] == t["seq"])

    def finished(self) -> bool:
        t = self.table()
        return bool(t and t["finished"] == "true")

    def hand(self) -> list[str]:
        return [a["card"] for a in self.all_attrs("[data-testid=hand-card]")]

    def play_step(self) -> str | None:
        """One move, when it is this page's turn: draw; else the first meld suggested; else the
        first addition; else select the first highlighted discard and discard it. None when
        there is nothing to do."""
        if not self.ready():
            return None
        t = self.table()
        assert t is not None
        if t["phase"] == "draw":
            self.moves.clear()
            self.click("[data-testid=draw].legal")
            kind = "draw"
        elif self.count("[data-testid=meld-option]") and self.moves["meld"] < 8:
            self.click("[data-testid=meld-option]")
            kind = "meld"
        elif self.count("[data-testid=add-option]") and self.moves["add"] < 8:
            self.click("[data-testid=add-option]")
            kind = "add"
        else:
            self.click("[data-testid=hand-card][data-discardable=true]")
            self.click("[data-testid=discard].legal")
            kind = "discard"
        self.moves[kind] += 1
        seq = int(t["seq"])
        self.wait(lambda: (s := self.table()) is not None and s["busy"] == "false"
                  and (int(s["seq"]) > seq or s["finished"] == "true"), f"the {kind} was not applied")
        return kind

    def play_turn(self) -> None:
        """Wait for this page's turn and play it whole (until the discard, or the match's end)."""
        while True:
            self.wait(lambda: self.ready() or self.finished(), "the turn did not come")
            if self.finished() or self.play_step() == "discard":
                return


def practice_table(page: Page, preset: str = "aberto") -> str:
    """Start a practice table against one easy bot from the page's form; the table's name."""
    page.select("[data-testid=practice-preset]", preset)
    page.select("[data-testid=practice-players]", "2")
    page.select("[data-testid=practice-level]", "BOT_LEVEL_EASY")
    page.click("[data-testid=practice-submit]")
    return page.open_table()


def test_two_players_quick_match_a_staked_express_hand_and_see_it_settled(
    local_suite: LocalSuite, browsers: Callable[[], Any],
) -> None:
    pages = [Page(browsers(), local_suite.url, name) for name in ("ana", "bruno")]
    starts = {page.name: page.sign_in() for page in pages}
    for page in pages:
        assert starts[page.name] >= BET, "the starting grant covers the bet"
        page.select("[data-testid=qm-preset]", "aberto")
        page.select("[data-testid=qm-players]", "2")
        page.select("[data-testid=qm-length]", "MATCH_LENGTH_EXPRESS")
        page.select("[data-testid=qm-mode]", "TABLE_MODE_COMPETITIVE")
        page.type_into("[data-testid=qm-bet]", str(BET))
        page.click("[data-testid=qm-submit]")
    for page in pages:  # a live ticket: proposed once both queue, then each confirms
        page.wait_for_data("[data-testid=ticket]", "state", "STATE_PROPOSED", timeout=60)
        page.click("[data-testid=ticket-confirm]")
    tables = {page.open_table() for page in pages}
    assert len(tables) == 1, tables
    seats = {page.name: int(page.wait_for_data("[data-testid=table]", "viewerSeat")["viewerSeat"]) for page in pages}
    assert sorted(seats.values()) == [0, 1]

    # the whole hand, by clicking
    deadline = time.monotonic() + MATCH_SECONDS
    moves = 0
    screenshot = SCREENSHOTS / "table-mid-hand.png"
    shot = False
    while not all(page.finished() for page in pages):
        assert time.monotonic() < deadline, f"the hand did not end within {MATCH_SECONDS:g} s ({moves} moves)"
        stepped = [page.play_step() for page in pages]
        moves += sum(1 for kind in stepped if kind)
        if not shot and moves >= 24:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            mover = next((p for p in pages if p.count("[data-testid=table-meld]")), pages[0])
            assert mover.driver.save_screenshot(str(screenshot))
            shot = True
        if not any(stepped):
            pages[0].wait(lambda: any(p.ready() for p in pages) or all(p.finished() for p in pages),
                          "nobody could move", timeout=WAIT)
    if not shot:  # a very short hand
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        assert pages[0].driver.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 0

    # express: one hand, then the match's end and the settlement, on both pages
    pot = 2 * BET
    prize = pot - pot * HOUSE_CUT_PERCENT // 100
    outcomes = {}
    for page in pages:
        assert page.count("[data-testid=hand-result]") == 1
        assert (page.attrs("[data-testid=hand-result]") or {}).get("handNumber") == "1"
        result = page.wait_for_data("[data-testid=match-result]")
        outcomes[page.name] = result["myOutcome"]
        settled = page.wait_for_data("[data-testid=settlement]", "state", "settled", timeout=60)
        start = starts[page.name]
        expected = start - BET + (prize if result["myOutcome"] == "OUTCOME_WON" else 0)
        assert int(settled["balance"]) == expected, (page.name, settled, expected)
        assert int(settled["change"]) == expected - start
        page.wait_for_data("[data-testid=balance]", "value", str(expected))
    assert sorted(outcomes.values()) == ["OUTCOME_LOST", "OUTCOME_WON"], outcomes
    # the tokens were refreshed before they expired, on the same socket all along
    for page in pages:
        if time.monotonic() - page.signed_in_at > TOKEN_SECONDS * 0.75:
            assert page.token() != page.first_token, "the page refreshed its token"
        assert page.sockets_opened() == 1, "the socket never dropped (a token refreshed in time keeps it)"


def test_a_practice_table_against_a_bot_sorted_hand_legal_moves_and_a_dropped_socket(
    local_suite: LocalSuite, browsers: Callable[[], Any],
) -> None:
    page = Page(browsers(), local_suite.url, "pia")
    page.sign_in()
    table = practice_table(page)
    assert table.startswith("tables/")
    # the level chosen is the table's too (the bot that takes a dropped player's seat plays at it)
    assert server_table(page, table)["options"]["botLevel"] == "BOT_LEVEL_EASY"
    turns = 0
    checked_turn = -1
    dropped = False
    deadline = time.monotonic() + 90
    while turns < 4:
        assert time.monotonic() < deadline, f"four turns did not come ({turns} played)"
        page.wait(lambda: page.ready() or page.finished(), "the turn did not come back")
        if page.finished():
            break
        t = page.table()
        assert t is not None
        hand = page.hand()
        assert hand == sorted(hand, key=card_code), f"the hand is not sorted: {hand}"
        assert len(hand) == int((page.attrs(f"[data-testid=seat][data-seat='{t['viewerSeat']}']") or {})["handSize"])
        hints = server_hints(page)
        fresh = int(hints.get("seq", -1)) == int(t["seq"])
        if t["phase"] == "draw":
            if fresh:
                assert bool(page.count("[data-testid=draw].legal:enabled")) == bool(hints.get("canDraw")), hints
                assert bool(page.count("[data-testid=take-pile].legal:enabled")) == bool(hints.get("canTakeDiscard"))
            if turns == 1 and not dropped:
                drop_socket_while_drawing(page)
                dropped = True
                page.wait(lambda: page.ready() and (page.table() or {}).get("phase") == "play",
                          "the draw sent before the drop was not applied after the reconnect")
                assert len(page.hand()) == len(hand) + 1, "the draw was applied once"
            else:
                page.play_step()
            continue
        # the play phase: what is highlighted is what the server says is legal now
        if fresh and checked_turn != turns:
            checked_turn = turns
            discardable = {a["card"] for a in page.all_attrs("[data-testid=hand-card][data-discardable=true]")}
            assert discardable == set(hints.get("discards", [])), (discardable, hints.get("discards"))
            assert discardable, "some card can be discarded"
            assert page.count("[data-testid=meld-option]") == min(40, len(hints.get("melds", [])))
            assert page.count("[data-testid=add-option]") == min(40, len(hints.get("additions", [])))
            for option in page.all_attrs("[data-testid=meld-option]"):
                assert not Counter(option["cards"].split()) - Counter(hand), option
            assert page.count("[data-testid=discard]:disabled") == 1, "discard waits for a selected card"
        if page.play_step() == "discard":
            turns += 1
    assert dropped, "the socket was dropped mid-move"
    assert page.sockets_opened() >= 2, "the page opened a new socket after the drop"
    # the chat goes through and comes back on the stream
    page.type_into("[data-testid=chat-input]", "good game, bot")
    page.click("[data-testid=chat-send]")
    page.wait(lambda: any(a.get("sender") == "pia" for a in page.all_attrs("[data-testid=chat-message]")),
              "the chat message did not come back")


def test_a_spectator_sees_the_table_but_no_hand(local_suite: LocalSuite, browsers: Callable[[], Any]) -> None:
    player = Page(browsers(), local_suite.url, "rui")
    player.sign_in()
    table = practice_table(player)
    spectator = Page(browsers(), local_suite.url, "carla")
    spectator.sign_in()
    spectator.type_into("[data-testid=spectate-table]", table)
    spectator.click("[data-testid=spectate-submit]")
    assert spectator.open_table() == table
    view = spectator.wait(lambda: (t := spectator.table()) and t["handNumber"] != "0" and t, "no hand dealt")
    assert view["viewerSeat"] == "", "a spectator has no seat"
    assert spectator.count("[data-testid=spectator-note]") == 1
    sizes = [int(a["handSize"]) for a in spectator.all_attrs("[data-testid=seat]")]
    assert len(sizes) == 2 and all(size > 0 for size in sizes), sizes
    # the player plays a turn; the spectator follows it, still without any hand
    player.play_turn()
    seq = int((player.table() or {})["seq"])
    spectator.wait(lambda: int((spectator.table() or {"seq": "0"})["seq"]) >= seq, "the spectator did not follow")
    pile = (player.attrs("[data-testid=discard-pile]") or {}).get("top")
    assert pile, "the player discarded"
    spectator.wait(lambda: (spectator.attrs("[data-testid=discard-pile]") or {}).get("top") == pile
                   or int((spectator.table() or {"seq": "0"})["seq"]) > seq, "the spectator does not see the pile")
    assert spectator.count("[data-testid=hand-card]") == 0
    assert spectator.count("[data-testid=draw]") == 0 and spectator.count("[data-testid=discard]") == 0
    lines = spectator.driver.execute_script(
        "return [...document.querySelectorAll('[data-testid=event-log] li')].map(e => e.textContent);")
    assert any(line.endswith(" drew") for line in lines), lines
    assert not [line for line in lines if re.search(r" drew \S", line)], f"a drawn card shown to a spectator: {lines}"
    # the chat reaches the spectator
    player.type_into("[data-testid=chat-input]", "hello, watcher")
    player.click("[data-testid=chat-send]")
    spectator.wait(lambda: "hello, watcher" in spectator.text("[data-testid=chat-log]"),
                   "the spectator missed the chat")


# -- helpers ------------------------------------------------------------------------------------------
def gateway_call(page: Page, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """`method` (`Service/Method`) through the gateway with the page's own session: its answer."""
    answer: dict[str, Any] = page.driver.execute_async_script(
        """
        const [method, body, done] = arguments;
        const session = JSON.parse(sessionStorage.getItem("buraco.session"));
        fetch("/buraco.v1." + method, {
          method: "POST",
          headers: {"content-type": "application/json", "authorization": "Bearer " + session.token},
          body: JSON.stringify(body),
        }).then(r => r.json()).then(done, e => done({error: String(e)}));
        """,
        method,
        body,
    )
    assert "error" not in answer, answer
    return answer


def server_table(page: Page, table: str) -> dict[str, Any]:
    """GetTable: the table as the server has it."""
    return gateway_call(page, "GameSessionService/GetTable", {"name": table})


def server_hints(page: Page) -> dict[str, Any]:
    """GetLegalMoves: what the server says now."""
    return gateway_call(page, "GameSessionService/GetLegalMoves", {"table": (page.table() or {})["table"]})


def drop_socket_while_drawing(page: Page) -> None:
    """Click the draw and close the socket in the same breath: the move is sent, but its answer
    cannot come on this socket. The page reopens one, resumes the table and sends the draw again,
    with the same requestId (the table applies it once)."""
    first = page.sockets_opened() - 1
    mark = int(page.driver.execute_script("return window.__sent.length;"))
    page.driver.execute_script(
        """
        document.querySelector('[data-testid=draw]').click();
        window.__sockets[window.__sockets.length - 1].close();
        """
    )
    page.wait(lambda: page.sockets_opened() >= first + 2, "no new socket after the drop")
    page.wait_for_data("[data-testid=connection]", "state", "open")

    def draws() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = page.driver.execute_script("return window.__sent.slice(arguments[0]);", mark)
        return [s for s in sent if s["message"].get("type") == "act" and s["message"].get("method") == "Draw"]

    page.wait(lambda: len(draws()) >= 2, "the unanswered draw was not sent again")
    before, again = draws()[:2]
    assert (before["socket"], again["socket"]) == (first, first + 1)
    assert again["message"]["request"]["requestId"] == before["message"]["request"]["requestId"]
    resumed = page.driver.execute_script("return window.__sent.slice(arguments[0]);", mark)
    hello, subscribe = [s["message"] for s in resumed if s["socket"] == first + 1][:2]
    assert hello["type"] == "hello" and subscribe["type"] == "subscribe"
    # resumed from the last seq applied: the one the draw was sent at (nothing came in between)
    assert subscribe["afterSeq"] == int(before["message"]["request"]["expectedSeq"]), (subscribe, before)

