// Rendering: the table, the results, the chat, the profile, a ticket and a lobby table, as DOM
// built from what the server sent (text always as text: nothing the server or a player wrote is
// ever parsed as HTML). Clickable elements carry stable `data-testid`s for the browser tests.

import { isRed, prettyCard, sameCards, spokenCard, suitSymbol, rankOf } from "./cards.js";
import { num } from "./table-state.js";

// --- a small DOM helper -------------------------------------------------------------------------
/** `h("button", {testid: "draw", class: "legal", on: {click}}, "Draw")` */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "testid") el.dataset.testid = value;
    else if (key === "data") for (const [k, v] of Object.entries(value)) { if (v !== undefined && v !== null) el.dataset[k] = String(v); }
    else if (key === "on") for (const [k, v] of Object.entries(value)) el.addEventListener(k, v);
    else if (key === "text") el.textContent = value;
    else if (key === "disabled") el.disabled = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function chips(value) {
  return `${num(value).toLocaleString("en-US")} chips`;
}

export function clock(ms) {
  if (ms === null || ms === undefined) return "";
  const total = Math.ceil(ms / 1000);
  return `${Math.floor(total / 60)}:${String(total % 60).padStart(2, "0")}`;
}

const CANASTRAS = {
  CANASTRA_DIRTY: "dirty canastra",
  CANASTRA_CLEAN: "clean canastra",
  CANASTRA_ROYAL: "royal canastra",
  CANASTRA_ACE_TO_ACE: "ace-to-ace canastra",
};
const OUTCOMES = {
  OUTCOME_WON: "won",
  OUTCOME_LOST: "lost",
  OUTCOME_ABANDONED: "abandoned",
  OUTCOME_VOID: "void (annulled)",
};

// --- cards --------------------------------------------------------------------------------------
/** One card; `tag` "button" for a card that can be clicked. */
export function cardElement(card, { tag = "span", testid = "card", classes = [], data = {}, on = null, title = null } = {}) {
  const color = card === "JK" ? "joker" : isRed(card) ? "red" : "black";
  return h(
    tag,
    {
      class: ["card", color, ...classes],
      testid,
      data: { card, ...data },
      "aria-label": spokenCard(card),
      title: title || prettyCard(card),
      type: tag === "button" ? "button" : null,
      on,
    },
    h("span", { class: "rank" }, rankOf(card)),
    h("span", { class: "suit" }, suitSymbol(card)),
  );
}

function cardRow(cards, testid = "card") {
  return h("span", { class: "card-row" }, cards.map((card) => cardElement(card, { testid })));
}

// --- the table ----------------------------------------------------------------------------------
/** What the server's hints allow now (none when they are not for the table's current seq). */
export function legalMoves(state, ui) {
  const hints = ui.hints && state.myTurn && !ui.busy ? ui.hints : null;
  const melds = hints ? hints.melds || [] : [];
  const additions = hints ? hints.additions || [] : [];
  const discards = hints ? hints.discards || [] : [];
  const playable = new Set();
  for (const option of [...melds, ...additions]) for (const card of option.cards || []) playable.add(card);
  return {
    hints,
    canDraw: Boolean(hints && hints.canDraw),
    canTake: Boolean(hints && hints.canTakeDiscard),
    melds,
    additions,
    discards: new Set(discards),
    playable,
  };
}

/** The whole table as its viewer sees it. `act` holds the page's handlers. */
export function renderTable(state, ui, act) {
  const legal = legalMoves(state, ui);
  const selectedCards = [...ui.selected].sort((a, b) => a - b).map((i) => state.hand[i]).filter(Boolean);
  const matchingMeld = selectedCards.length >= 3
    ? legal.melds.find((option) => sameCards(option.cards || [], selectedCards))
    : null;
  const additionTargets = new Map(); // meld index -> the addition the selection makes
  if (selectedCards.length) {
    for (const option of legal.additions) {
      if (sameCards(option.cards || [], selectedCards)) additionTargets.set(num(option.meld), option);
    }
  }
  const root = h("div", {
    class: ["table", state.myTurn && "my-turn", state.finished && "finished"],
    testid: "table",
    data: {
      table: state.tableName,
      seq: state.seq,
      hintsSeq: ui.hints ? num(ui.hints.seq) : -1,
      myTurn: state.myTurn,
      phase: state.phase || "none",
      finished: state.finished,
      viewerSeat: state.viewerSeat === null ? "" : state.viewerSeat,
      busy: ui.busy,
      handNumber: state.handNumber,
      loaded: state.loaded,
    },
  });
  root.append(renderTop(state), renderSeats(state));

  const sides = state.viewerSide === null ? [0, 1] : [1 - state.viewerSide, state.viewerSide];
  const felt = h("div", { class: "felt" });
  felt.append(renderSide(state, sides[0], additionTargets, act));
  felt.append(renderCenter(state, legal, act));
  felt.append(renderSide(state, sides[1], additionTargets, act));
  root.append(felt);

  if (!state.spectator) root.append(renderHand(state, ui, legal, selectedCards, matchingMeld, act));
  else root.append(h("p", { class: "spectating", testid: "spectator-note" }, "You are watching: players' hands are hidden."));
  return root;
}

function renderTop(state) {
  const options = state.options;
  const express = options.length === "MATCH_LENGTH_EXPRESS";
  const length = express ? "express (one hand)" : `to ${num(options.targetPoints)} points`;
  const stake = state.competitive ? `${chips(options.betChips)} each` : "practice";
  let turn;
  if (!state.loaded) turn = "joining the table…";
  else if (state.finished) turn = state.cancelled ? "the table was cancelled" : "the match is over";
  else if (state.handNumber === 0) turn = "waiting for the players: the first hand is dealt when everyone has joined";
  else if (state.phase === "hand_over") turn = "the hand is over";
  else if (state.myTurn) turn = state.phase === "draw" ? "your turn: draw or take the pile" : "your turn: meld, add, then discard";
  else turn = `${state.seatName(state.toAct)} is playing (${state.phase === "draw" ? "to draw" : "melding"})`;
  const timerSeat = state.timer ? state.timer.seat : "";
  return h(
    "div",
    { class: "table-top" },
    h("div", { class: "table-title" },
      h("strong", { testid: "table-name" }, state.tableName),
      h("span", { class: "muted" }, ` · ${(options.ruleset && options.ruleset.preset) || ""} · ${length} · ${stake}`),
      h("span", { class: "muted", testid: "hand-number" }, state.handNumber ? ` · hand ${state.handNumber}` : ""),
    ),
    h("div", { class: "scores" },
      [0, 1].map((side) => h("span", { class: ["score", state.viewerSide === side && "mine"], testid: "score", data: { side, value: state.matchScores[side] } },
        `${state.viewerSide === side ? "You" : state.viewerSide === null ? `Side ${side}` : "Them"}: ${state.matchScores[side]}`))),
    h("div", { class: ["turn", state.myTurn && "mine"], testid: "turn-indicator", data: { myTurn: state.myTurn } },
      h("span", {}, turn),
      h("span", { class: "timer", id: "turn-timer", testid: "turn-timer", data: { seat: timerSeat } }, clock(state.timeLeft()))),
  );
}

function renderSeats(state) {
  return h("div", { class: "seats" }, state.seats.map((info) => {
    const tags = [];
    if (info.seat === state.viewerSeat) tags.push("you");
    if (info.seat === state.dealer && state.handNumber) tags.push("dealer");
    if (info.botControlled) tags.push("a bot plays");
    if (info.autoPlays) tags.push(`${info.autoPlays} timeouts`);
    const acting = !state.finished && state.handNumber && info.seat === state.toAct && (state.phase === "draw" || state.phase === "play");
    return h("div", {
      class: ["seat", acting && "acting", info.seat === state.viewerSeat && "me"],
      testid: "seat",
      data: { seat: info.seat, handSize: info.handSize, side: info.seat & 1 },
    },
    h("strong", {}, info.label),
    h("span", { class: "muted" }, ` seat ${info.seat} · side ${info.seat & 1}`),
    h("span", { class: "hand-size", testid: "seat-hand-size" }, `${info.handSize} ${info.handSize === 1 ? "card" : "cards"}`),
    tags.length ? h("span", { class: "tags" }, tags.join(" · ")) : null);
  }));
}

function renderSide(state, side, additionTargets, act) {
  const mine = state.viewerSide === side;
  const title = state.viewerSide === null ? `Side ${side}` : mine ? "Your side" : "Opponents";
  const seats = state.seats.filter((s) => (s.seat & 1) === side).map((s) => s.label).join(" & ");
  let morto = "not taken";
  let mortoState = "waiting";
  if (state.mortoTaken[side]) { morto = "taken"; mortoState = "taken"; }
  else if (state.mortoInStock[side]) { morto = "became the stock"; mortoState = "stock"; }
  const melds = state.melds[side] || [];
  return h("section", { class: ["side", mine && "mine"], testid: "side", data: { side } },
    h("header", {},
      h("strong", {}, `${title} `), h("span", { class: "muted" }, `(${seats})`),
      h("span", { class: ["morto", mortoState], testid: "morto", data: { side, state: mortoState } }, `morto: ${morto}`)),
    melds.length === 0 ? h("p", { class: "muted empty" }, "no melds yet") : null,
    h("div", { class: "melds" }, melds.map((meld, index) => {
      const target = mine ? additionTargets.get(index) : undefined;
      const canastra = CANASTRAS[meld.canastra] || "";
      return h(target ? "button" : "div", {
        class: ["meld", canastra && "canastra", target && "legal"],
        testid: "table-meld",
        data: { side, index, canastra: meld.canastra || "" },
        type: target ? "button" : null,
        title: target ? "add the selected cards to this meld" : null,
        on: target ? { click: () => act.addToMeld(index, target.cards) } : null,
      },
      cardRow(meld.cards, "meld-card"),
      canastra ? h("span", { class: "badge" }, canastra) : null);
    })));
}

function renderCenter(state, legal, act) {
  const top = state.pile.length ? state.pile[state.pile.length - 1] : null;
  const playing = !state.spectator;
  return h("div", { class: "center" },
    h("div", { class: "stock", testid: "stock", data: { count: state.stockCount } },
      h("div", { class: "card back" }, h("span", {}, String(state.stockCount))),
      h("span", { class: "muted" }, `stock: ${state.stockCount}`),
      playing ? h("button", {
        type: "button", testid: "draw", class: ["action", legal.canDraw && "legal"],
        disabled: !legal.canDraw, on: { click: act.draw },
      }, "Draw") : null),
    h("div", { class: "pile", testid: "discard-pile", data: { count: state.pile.length, top: top || "" } },
      h("div", { class: "pile-cards" },
        state.pile.length === 0 ? h("span", { class: "muted" }, "empty pile") : null,
        state.pile.map((card, i) => cardElement(card, { testid: "pile-card", classes: [i === state.pile.length - 1 && "top"] }))),
      playing ? h("button", {
        type: "button", testid: "take-pile", class: ["action", legal.canTake && "legal"],
        disabled: !legal.canTake, on: { click: act.takePile },
      }, `Take the pile (${state.pile.length})`) : null));
}

function renderHand(state, ui, legal, selectedCards, matchingMeld, act) {
  const inPlay = state.myTurn && state.phase === "play" && legal.hints;
  const single = selectedCards.length === 1 ? selectedCards[0] : null;
  const canDiscard = Boolean(inPlay && single && legal.discards.has(single));
  const hand = h("div", { class: "hand", testid: "hand", data: { count: state.hand.length } },
    state.hand.map((card, index) => {
      const discardable = Boolean(inPlay && legal.discards.has(card));
      const playable = Boolean(inPlay && legal.playable.has(card));
      return cardElement(card, {
        tag: "button",
        testid: "hand-card",
        classes: [ui.selected.has(index) && "selected", playable && "playable", discardable && "discardable",
          (playable || discardable) && "legal"],
        data: { index, discardable, playable, selected: ui.selected.has(index) },
        on: { click: () => act.toggle(index) },
      });
    }));
  const bar = h("div", { class: "action-bar" },
    h("button", {
      type: "button", testid: "meld", class: ["action", matchingMeld && "legal"],
      disabled: !(inPlay && selectedCards.length >= 3),
      title: matchingMeld ? "a legal meld" : "select 3 or more cards",
      on: { click: () => act.meld(selectedCards, matchingMeld ? matchingMeld.wildAs || "" : "") },
    }, "Meld selected"),
    h("button", {
      type: "button", testid: "discard", class: ["action", canDiscard && "legal"],
      disabled: !canDiscard, on: { click: () => act.discard(single) },
    }, single ? `Discard ${prettyCard(single)}` : "Discard"),
    h("button", { type: "button", testid: "clear-selection", class: "action quiet", disabled: ui.selected.size === 0, on: { click: act.clearSelection } }, "Clear"),
    h("span", { class: "muted hint-text" }, inPlay
      ? "Select cards: a highlighted meld on your side takes them; or pick a suggestion below. Discard one card to end the turn."
      : ""));
  const moves = h("div", { class: "moves", testid: "legal-moves" });
  if (inPlay) {
    if (legal.melds.length) {
      moves.append(h("span", { class: "muted" }, "Melds: "));
      legal.melds.slice(0, 40).forEach((option, i) => moves.append(h("button", {
        type: "button", class: "option legal", testid: "meld-option",
        data: { index: i, cards: (option.cards || []).join(" "), wildAs: option.wildAs || "" },
        on: { click: () => act.meld(option.cards || [], option.wildAs || "") },
      }, (option.cards || []).map(prettyCard).join(" "), option.wildAs ? ` (wild as ${prettyCard(option.wildAs)})` : "")));
      if (legal.melds.length > 40) moves.append(h("span", { class: "muted" }, ` and ${legal.melds.length - 40} more`));
    }
    if (legal.additions.length) {
      moves.append(h("span", { class: "muted" }, " Add: "));
      legal.additions.slice(0, 40).forEach((option, i) => moves.append(h("button", {
        type: "button", class: "option legal", testid: "add-option",
        data: { index: i, meld: num(option.meld), cards: (option.cards || []).join(" ") },
        on: { click: () => act.addToMeld(num(option.meld), option.cards || []) },
      }, `${(option.cards || []).map(prettyCard).join(" ")} → meld ${num(option.meld) + 1}`)));
    }
    if (!legal.melds.length && !legal.additions.length) moves.append(h("span", { class: "muted" }, "No meld to make: discard a highlighted card."));
  }
  return h("div", { class: "hand-area" },
    h("div", { class: "hand-title" }, h("strong", {}, "Your hand"),
      h("span", { class: "muted" }, ` (${state.hand.length} ${state.hand.length === 1 ? "card" : "cards"}, sorted)`)),
    hand, bar, moves);
}

// --- results ------------------------------------------------------------------------------------
export function renderResults(state, settlement) {
  const box = h("div", { class: "results" });
  state.handResults.slice(-3).reverse().forEach((result) => box.append(renderHandResult(state, result)));
  if (state.matchEnd) box.append(renderMatchResult(state, state.matchEnd, settlement));
  return box;
}

function renderHandResult(state, result) {
  const reason = String(result.reason || "").replace("REASON_", "").toLowerCase().replace(/_/g, " ");
  const wentOut = result.wentOutSeat === undefined ? "" : ` by ${state.seatName(num(result.wentOutSeat))}`;
  const rows = (result.scores || []).map((s) => h("tr", { data: { side: num(s.side) } },
    h("th", {}, state.viewerSide === num(s.side) ? "You" : `Side ${num(s.side)}`),
    ["cards", "bonus", "goingOut", "hand", "morto", "total"].map((k) => h("td", {}, String(num(s[k]))))));
  return h("section", { class: "hand-result", testid: "hand-result", data: { handNumber: num(result.handNumber) } },
    h("h3", {}, `Hand ${num(result.handNumber)}: ${reason}${wentOut}`),
    rows.length ? h("table", { class: "scores-table" },
      h("thead", {}, h("tr", {}, h("th", {}, ""), ["cards", "bonus", "out", "hand", "morto", "total"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows)) : null,
    h("p", {}, `Match: ${(result.matchScores || []).map((x) => num(x)).join(" – ")}`),
    (result.hands || []).length
      ? h("div", { class: "reveals" }, (result.hands || []).map((r) => h("div", { class: "reveal" },
        h("span", { class: "muted" }, `${state.seatName(num(r.seat))} held: `),
        (r.cards || []).length ? cardRow(r.cards, "revealed-card") : h("span", { class: "muted" }, "nothing"))))
      : null);
}

function renderMatchResult(state, end, settlement) {
  const mine = (end.outcomes || []).find((o) => state.viewerSeat !== null && num(o.seat) === state.viewerSeat);
  const winning = end.winningSide === undefined ? "" : num(end.winningSide);
  let headline = "The match is over";
  if (end.annulled) headline = "The match was annulled";
  else if (mine && mine.outcome === "OUTCOME_WON") headline = "You won the match!";
  else if (mine && mine.outcome === "OUTCOME_LOST") headline = "You lost the match";
  else if (winning !== "") headline = `Side ${winning} won the match`;
  return h("section", {
    class: "match-result", testid: "match-result",
    data: { winningSide: winning, myOutcome: mine ? mine.outcome : "", annulled: Boolean(end.annulled) },
  },
  h("h3", {}, headline),
  h("p", {}, `Final score: ${(end.matchScores || []).map((x) => num(x)).join(" – ")}`),
  h("ul", {}, (end.outcomes || []).map((o) => h("li", { testid: "outcome", data: { seat: num(o.seat), outcome: o.outcome } },
    `${(o.player || "").replace(/^players\//, "")} (seat ${num(o.seat)}): ${OUTCOMES[o.outcome] || o.outcome}`))),
  renderSettlement(settlement));
}

function renderSettlement(settlement) {
  if (!settlement) return null;
  if (settlement.state === "practice") {
    return h("p", { class: "settlement", testid: "settlement", data: { state: "practice" } }, "A practice match: no chips at stake.");
  }
  if (settlement.state === "pending") {
    return h("p", { class: "settlement", testid: "settlement", data: { state: "pending" } }, "Settling the chips…");
  }
  if (settlement.state === "error") {
    return h("p", { class: "settlement", testid: "settlement", data: { state: "error" } }, settlement.message);
  }
  const change = settlement.change;
  const sign = change > 0 ? "+" : "";
  return h("p", {
    class: "settlement", testid: "settlement",
    data: { state: "settled", balance: settlement.balance, change: change === null ? "" : change },
  },
  `Settled. Your balance: ${chips(settlement.balance)}`,
  change === null ? "" : ` (${sign}${change.toLocaleString("en-US")} this match)`);
}

// --- annulment, chat, log -------------------------------------------------------------------------
export function renderAnnulment(state, act) {
  const box = h("div", { class: "annulment", testid: "annulment" });
  const a = state.annulment;
  if (!a) {
    if (!state.spectator && !state.finished && state.handNumber) {
      box.append(h("button", { type: "button", class: "action quiet", testid: "annul-propose", on: { click: act.proposeAnnulment } }, "Propose to annul the match"));
    }
    return box;
  }
  box.dataset.proposal = a.proposalId;
  const votes = a.voterSeats.map((seat) => {
    const vote = a.votes[seat];
    return `${state.seatName(seat)}: ${vote === undefined ? "?" : vote ? "yes" : "no"}`;
  }).join(", ");
  box.append(h("p", {}, `${state.seatName(a.proposerSeat)} proposes to annul the match (every player must vote yes). ${votes}`));
  const mayVote = state.viewerSeat !== null && a.voterSeats.includes(state.viewerSeat) && a.votes[state.viewerSeat] === undefined;
  if (mayVote) {
    box.append(
      h("button", { type: "button", class: "action", testid: "annul-yes", on: { click: () => act.voteAnnulment(true) } }, "Vote yes"),
      h("button", { type: "button", class: "action", testid: "annul-no", on: { click: () => act.voteAnnulment(false) } }, "Vote no"),
    );
  }
  return box;
}

export function renderChat(state) {
  return h("ol", { class: "chat-log", testid: "chat-log" }, state.chat.map((line) => h("li", {
    testid: "chat-message", data: { seq: line.seq, sender: line.sender },
  },
  h("strong", {}, line.sender), line.seat === null ? h("span", { class: "muted" }, " (watching)") : null, ": ",
  line.text ? h("span", { class: "text" }, line.text) : h("em", { class: "muted" }, "(muted)"))));
}

export function renderLog(state) {
  return h("ol", { class: "event-log", testid: "event-log" }, state.log.slice(-60).map((line) => h("li", {}, line)));
}

// --- the home screen ------------------------------------------------------------------------------
export function renderProfile(profile) {
  // undefined: not read yet; null: not on the leaderboard (GetLeaderboardRank said NOT_FOUND)
  const rank = profile.rank === undefined ? "…" : profile.rank === null ? "—" : `#${profile.rank}`;
  return [
    h("span", { class: "who", testid: "player-name" }, profile.displayName || profile.player),
    h("span", { class: "stat", testid: "balance", data: { value: profile.balance ?? "" }, title: "chips" },
      profile.balance === null ? "… chips" : chips(profile.balance)),
    profile.held ? h("span", { class: "stat muted", testid: "held", data: { value: profile.held } }, `(${chips(profile.held)} at stake)`) : null,
    h("span", { class: "stat", testid: "xp", data: { value: profile.xp ?? "" } }, `XP ${profile.xp ?? "…"}`),
    h("span", { class: "stat", testid: "level", data: { value: profile.level ?? "" } }, `Level ${profile.level ?? "…"}`),
    h("span", { class: "stat", testid: "rank", data: { value: profile.rank ?? "" }, title: "global XP leaderboard, all time" }, `Rank ${rank}`),
  ];
}

const TICKET_STATES = {
  STATE_SEARCHING: "Searching for players…",
  STATE_PROPOSED: "A match was found: confirm to play",
  STATE_MATCHED: "Matched: joining the table…",
  STATE_FAILED: "The match could not start",
  STATE_CANCELLED: "Cancelled",
};

export function renderTicket(ticket, local, act) {
  const state = ticket.state || "STATE_UNSPECIFIED";
  const lines = [h("strong", { testid: "ticket-status" }, TICKET_STATES[state] || state)];
  const p = ticket.preferences || {};
  lines.push(h("p", { class: "muted" }, `${p.preset} · ${p.players} players · ${p.length === "MATCH_LENGTH_POINTS" ? `to ${p.targetPoints} points` : "express"} · ${p.mode === "TABLE_MODE_COMPETITIVE" ? chips(p.betChips) : "practice"}`));
  if (state === "STATE_SEARCHING") {
    const low = ticket.ratingLow;
    const high = ticket.ratingHigh;
    const windowText = typeof low === "string" || typeof high === "string" ? "any rating" : `ratings ${num(low).toFixed(1)} to ${num(high).toFixed(1)}`;
    const wait = ticket.estimatedWait ? ` · about ${Math.round(parseFloat(ticket.estimatedWait))} s` : "";
    lines.push(h("p", {}, `Position ${num(ticket.position) || "?"}${wait} · ${windowText}`));
  }
  if (state === "STATE_PROPOSED") {
    lines.push(h("p", {}, "Confirm within ", h("span", { class: "timer", id: "confirm-timer" }, ""), "."));
    if (local.confirmed) lines.push(h("p", { class: "muted", testid: "ticket-confirmed" }, "Confirmed: waiting for the others…"));
    else lines.push(h("button", { type: "button", class: "action legal", testid: "ticket-confirm", on: { click: act.confirm } }, "Confirm"));
  }
  if (state === "STATE_FAILED") lines.push(h("p", { class: "error" }, ticket.failureReason || ""));
  if (state === "STATE_SEARCHING" || state === "STATE_PROPOSED") {
    lines.push(h("button", { type: "button", class: "action quiet", testid: "ticket-cancel", on: { click: act.cancel } }, "Cancel"));
  }
  if (state === "STATE_FAILED" || state === "STATE_CANCELLED") {
    lines.push(h("button", { type: "button", class: "action quiet", testid: "ticket-dismiss", on: { click: act.dismiss } }, "OK"));
  }
  return h("div", { class: "ticket", testid: "ticket", data: { state, name: ticket.name || "" } }, lines);
}

const LOBBY_STATES = {
  STATE_OPEN: "Setting the table up…",
  STATE_STARTING: "Starting the match…",
  STATE_IN_MATCH: "Playing",
  STATE_CLOSED: "Closed",
};

export function renderLobbyTable(lobby, note) {
  const seats = (lobby.seats || []).map((s) => {
    const who = s.participant ? (s.participant.player || "").replace(/^players\//, "") || `bot (${String(s.participant.bot || "").replace("BOT_LEVEL_", "").toLowerCase()})` : "free";
    return h("li", {}, `seat ${num(s.seat)}: ${who}${s.ready ? " · ready" : ""}`);
  });
  return h("div", { class: "lobby-table", testid: "lobby-table", data: { state: lobby.state || "", name: lobby.name || "" } },
    h("strong", { testid: "lobby-status" }, LOBBY_STATES[lobby.state] || lobby.state || ""),
    note ? h("p", { class: "muted" }, note) : null,
    h("ul", {}, seats));
}
