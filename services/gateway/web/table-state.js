// One viewer's picture of a table, kept from its event stream (pure: no DOM, no network).
//
// `TableState` starts from the stream's snapshot and applies each TableEvent after it (the
// gateway's `changes` messages, in order), the way services/client/model.py does: a discard passes
// the turn, a draw or a take starts the play phase, a hand's end closes it. It holds only what the
// server sent to this viewer (a spectator's state has no hand); nothing is guessed.
//
// Events arrive in the contracts' JSON form: lowerCamelCase fields, enums by name, int64 as
// strings (seq, scores, chips), timestamps as RFC 3339 strings.

import { removeCards, sortCards } from "./cards.js";

export const PHASES = {
  TURN_PHASE_DRAW: "draw",
  TURN_PHASE_PLAY: "play",
  TURN_PHASE_HAND_OVER: "hand_over",
};
const MORTO_SIZE = 11;
const LOG_LINES = 200;
const CHAT_LINES = 200;

/** The kind of a TableEvent in JSON: its one key besides `seq` and `time`. */
export function eventKind(event) {
  for (const key of Object.keys(event)) {
    if (key !== "seq" && key !== "time") return key;
  }
  return "";
}

/** Milliseconds since the epoch of an RFC 3339 timestamp (NaN when there is none). */
export function parseTime(text) {
  if (typeof text !== "string" || !text) return NaN;
  // Date.parse takes milliseconds: cut nanoseconds to three digits.
  return Date.parse(text.replace(/(\.\d{3})\d+/, "$1"));
}

export function num(value, fallback = 0) {
  if (value === undefined || value === null || value === "") return fallback;
  const n = Number(value);
  return Number.isFinite(n) ? n : fallback;
}

/** "alice" for `{player: "players/alice"}`, "bot (easy)" for `{bot: "BOT_LEVEL_EASY"}`. */
export function participantLabel(participant) {
  if (!participant) return "?";
  if (participant.player) return participant.player.replace(/^players\//, "");
  if (participant.bot) return `bot (${participant.bot.replace(/^BOT_LEVEL_/, "").toLowerCase()})`;
  return "?";
}

function enumWord(value, prefix) {
  return String(value || "").replace(prefix, "").toLowerCase().replace(/_/g, " ");
}

export class TableState {
  constructor(tableName) {
    this.tableName = tableName;
    this.table = null; // the Table message, from the snapshot
    this.loaded = false; // a snapshot was applied
    this.seq = 0; // the last event applied
    this.version = 0; // counts applied events (for re-rendering)
    this.viewerSeat = null; // null: a spectator
    this.players = 0;
    this.seats = []; // {seat, label, player, handSize, botControlled, connected, autoPlays}
    this.hand = []; // the viewer's cards, sorted
    this.melds = [[], []]; // per side: {kind, cards, canastra}
    this.mortoTaken = [false, false];
    this.mortoInStock = [false, false];
    this.pile = []; // bottom first
    this.stockCount = 0;
    this.handNumber = 0;
    this.dealer = 0;
    this.toAct = 0;
    this.phase = ""; // "", draw, play, hand_over
    this.dealCommitment = "";
    this.matchScores = [0, 0];
    this.timer = null; // {seat, phase, deadline (ms since the epoch, server clock)}
    this.handResults = []; // HandEnded messages, in order
    this.matchEnd = null; // the MatchEnded message
    this.finished = false;
    this.cancelled = false;
    this.annulment = null; // {proposalId, proposerSeat, voterSeats, deadline, votes: {seat: bool}}
    this.chat = []; // {seq, sender, seat, text}
    this.log = []; // lines for people, one per event
    this.clockSkew = 0; // server clock minus this browser's, from the events' times
  }

  // --- reading --------------------------------------------------------------------------------
  get spectator() {
    return this.viewerSeat === null;
  }

  get viewerSide() {
    return this.viewerSeat === null ? null : this.viewerSeat & 1;
  }

  get myTurn() {
    return (
      this.viewerSeat !== null &&
      !this.finished &&
      (this.phase === "draw" || this.phase === "play") &&
      this.toAct === this.viewerSeat
    );
  }

  get options() {
    return (this.table && this.table.options) || {};
  }

  get competitive() {
    return this.options.mode === "TABLE_MODE_COMPETITIVE" && num(this.options.betChips) > 0;
  }

  seatName(seat) {
    const info = this.seats[seat];
    return info ? `${info.label} (seat ${seat})` : `seat ${seat}`;
  }

  /** Milliseconds left on the turn timer, by the server's clock (null without a timer). */
  timeLeft(now = Date.now()) {
    if (!this.timer || !Number.isFinite(this.timer.deadline)) return null;
    return Math.max(0, this.timer.deadline - (now + this.clockSkew));
  }

  // --- applying the stream --------------------------------------------------------------------
  /** Apply one event; false (and nothing changes) for a duplicate or an unknown kind. */
  apply(event) {
    const kind = eventKind(event);
    const seq = num(event.seq);
    const time = parseTime(event.time);
    if (Number.isFinite(time)) this.clockSkew = time - Date.now();
    if (kind === "snapshot") {
      this.load(event.snapshot, seq);
      this.version += 1;
      return true;
    }
    if (seq && seq <= this.seq) return false;
    if (seq) this.seq = seq;
    const handler = HANDLERS[kind];
    if (handler) handler.call(this, event[kind] || {}, seq);
    this.version += 1;
    return true;
  }

  say(line) {
    this.log.push(line);
    if (this.log.length > LOG_LINES) this.log.splice(0, this.log.length - LOG_LINES);
  }

  load(snap, seq) {
    const table = snap.table || null;
    this.loaded = true;
    if (table) {
      this.table = table;
      this.players = num(table.options && table.options.players) || (snap.seats || []).length;
      if (table.matchScores && table.matchScores.length) this.matchScores = table.matchScores.map((x) => num(x));
      this.finished = table.state === "STATE_FINISHED" || table.state === "STATE_CANCELLED";
      this.cancelled = table.state === "STATE_CANCELLED";
      this.seq = Math.max(this.seq, num(table.seq));
    }
    this.seq = Math.max(this.seq, seq || 0);
    this.viewerSeat = snap.viewerSeat === undefined || snap.viewerSeat === null ? null : num(snap.viewerSeat);
    this.players = this.players || (snap.seats || []).length;
    this.seats = [...(snap.seats || [])]
      .sort((a, b) => num(a.seat) - num(b.seat))
      .map((s) => ({
        seat: num(s.seat),
        label: participantLabel(s.participant),
        player: (s.participant && s.participant.player) || "",
        handSize: num(s.handSize),
        botControlled: Boolean(s.botControlled),
        connected: Boolean(s.connected),
        autoPlays: num(s.autoPlays),
      }));
    this.hand = sortCards(snap.hand || []);
    this.melds = [[], []];
    this.mortoTaken = [false, false];
    for (const side of snap.sides || []) {
      const index = num(side.side);
      if (index !== 0 && index !== 1) continue;
      this.melds[index] = (side.melds || []).map(meldOf);
      this.mortoTaken[index] = Boolean(side.mortoTaken);
      if (!(table && table.matchScores && table.matchScores.length)) this.matchScores[index] = num(side.matchScore);
    }
    this.pile = [...(snap.discardPile || [])];
    this.stockCount = num(snap.stockCount);
    this.handNumber = num(snap.handNumber);
    this.dealer = num(snap.dealer);
    this.toAct = num(snap.toAct);
    this.phase = PHASES[snap.phase] || "";
    this.dealCommitment = snap.dealCommitment || "";
    const deadline = parseTime(snap.turnDeadline);
    this.timer = Number.isFinite(deadline) && (this.phase === "draw" || this.phase === "play")
      ? { seat: this.toAct, phase: this.phase, deadline }
      : null;
    this.annulment = snap.annulment ? annulmentOf(snap.annulment) : null;
    if (this.handNumber === 0 && !this.finished) this.say("waiting for every player to join: the first hand is dealt then");
  }

  resize(seat, delta) {
    const info = this.seats[seat];
    if (info) info.handSize = Math.max(0, info.handSize + delta);
  }

  give(cards) {
    this.hand = sortCards([...this.hand, ...cards]);
  }

  setMeld(side, index, meld) {
    const melds = this.melds[side];
    if (!melds) return;
    while (melds.length <= index) melds.push({ kind: "", cards: [], canastra: "" });
    melds[index] = meldOf(meld);
  }

  nextTurn(seat) {
    this.toAct = (seat + 1) % (this.players || 2);
    this.phase = "draw";
  }
}

function meldOf(meld) {
  return {
    kind: (meld && meld.kind) || "",
    cards: [...((meld && meld.cards) || [])],
    canastra: (meld && meld.canastra) || "",
  };
}

function annulmentOf(e) {
  const proposer = num(e.proposerSeat);
  return {
    proposalId: e.proposalId || "",
    proposerSeat: proposer,
    voterSeats: (e.voterSeats || []).map((s) => num(s)),
    deadline: parseTime(e.deadline),
    votes: { [proposer]: true }, // the proposer's yes is counted
  };
}

const HANDLERS = {
  handStarted(e) {
    this.handNumber = num(e.handNumber);
    this.dealer = num(e.dealer);
    this.dealCommitment = e.dealCommitment || "";
    this.hand = sortCards(e.hand || []);
    this.toAct = num(e.toAct);
    this.stockCount = num(e.stockCount);
    this.phase = "draw";
    this.melds = [[], []];
    this.pile = [];
    this.mortoTaken = [false, false];
    this.mortoInStock = [false, false];
    for (const info of this.seats) info.handSize = 11;
    this.say(`hand ${this.handNumber} dealt; ${this.seatName(this.toAct)} starts`);
  },

  cardDrawn(e) {
    const seat = num(e.seat);
    this.resize(seat, 1);
    if (e.card && seat === this.viewerSeat) this.give([e.card]);
    this.stockCount = num(e.stockCount);
    this.toAct = seat;
    this.phase = "play";
    this.say(`${this.seatName(seat)} drew${e.card ? ` ${e.card}` : ""}`);
  },

  discardTaken(e) {
    const seat = num(e.seat);
    const cards = e.cards || [];
    this.resize(seat, cards.length);
    if (seat === this.viewerSeat) this.give(cards);
    this.pile = [];
    this.toAct = seat;
    this.phase = "play";
    this.say(`${this.seatName(seat)} took the pile (${cards.length} ${cards.length === 1 ? "card" : "cards"})`);
  },

  meldLaid(e) {
    const seat = num(e.seat);
    const cards = (e.meld && e.meld.cards) || [];
    this.setMeld(num(e.side), num(e.meldIndex), e.meld);
    this.resize(seat, -cards.length);
    if (seat === this.viewerSeat) removeCards(this.hand, cards);
    this.say(`${this.seatName(seat)} melded ${cards.join(" ")}`);
  },

  meldExtended(e) {
    const seat = num(e.seat);
    const cards = e.cards || [];
    this.setMeld(num(e.side), num(e.meldIndex), e.meld);
    this.resize(seat, -cards.length);
    if (seat === this.viewerSeat) removeCards(this.hand, cards);
    this.say(`${this.seatName(seat)} added ${cards.join(" ")} to meld ${num(e.meldIndex) + 1}`);
  },

  cardDiscarded(e) {
    const seat = num(e.seat);
    this.resize(seat, -1);
    if (seat === this.viewerSeat) removeCards(this.hand, [e.card]);
    this.pile.push(e.card);
    this.say(`${this.seatName(seat)} discarded ${e.card}`);
    this.nextTurn(seat);
  },

  mortoTaken(e) {
    const seat = num(e.seat);
    const side = num(e.side);
    const cards = e.cards || [];
    this.mortoTaken[side] = true;
    this.resize(seat, cards.length || MORTO_SIZE);
    if (seat === this.viewerSeat) this.give(cards);
    const how = e.kind === "KIND_INDIRECT" ? " (played from the next turn)" : "";
    this.say(`${this.seatName(seat)} took side ${side}'s morto${how}`);
  },

  mortoBecameStock(e) {
    const side = num(e.side);
    this.mortoInStock[side] = true;
    this.stockCount = num(e.stockCount);
    this.say(`the stock ran out: side ${side}'s morto became the stock`);
  },

  handEnded(e) {
    this.phase = "hand_over";
    this.timer = null;
    this.handResults.push(e);
    if (e.matchScores && e.matchScores.length) this.matchScores = e.matchScores.map((x) => num(x));
    const totals = (e.scores || []).map((s) => `side ${num(s.side)}: ${num(s.total)}`).join(", ");
    this.say(`hand ${num(e.handNumber)} ended (${enumWord(e.reason, "REASON_")}); ${totals}`);
  },

  matchEnded(e) {
    this.finished = true;
    this.timer = null;
    this.matchEnd = e;
    if (e.matchScores && e.matchScores.length) this.matchScores = e.matchScores.map((x) => num(x));
    if (e.annulled) this.say("the match was annulled");
    else if (e.winningSide !== undefined) this.say(`the match is over: side ${num(e.winningSide)} won`);
    else this.say("the match is over");
  },

  turnTimerStarted(e) {
    const seat = num(e.seat);
    const phase = PHASES[e.phase] || this.phase;
    this.toAct = seat;
    this.phase = phase;
    this.timer = { seat, phase, deadline: parseTime(e.deadline) };
  },

  autoPlayed(e) {
    const seat = num(e.seat);
    if (this.seats[seat]) this.seats[seat].autoPlays = num(e.count);
    this.say(`time ran out: the server played for ${this.seatName(seat)} (${num(e.count)})`);
  },

  seatTakenOver(e) {
    const seat = num(e.seat);
    if (this.seats[seat]) this.seats[seat].botControlled = true;
    this.say(`a bot took ${this.seatName(seat)} over (${enumWord(e.reason, "REASON_")})`);
  },

  seatReturned(e) {
    const seat = num(e.seat);
    if (this.seats[seat]) this.seats[seat].botControlled = false;
    this.say(`${this.seatName(seat)} is back`);
  },

  annulmentProposed(e) {
    this.annulment = annulmentOf(e);
    this.say(`${this.seatName(num(e.proposerSeat))} proposes to annul the match`);
  },

  annulmentVoted(e) {
    const seat = num(e.seat);
    if (this.annulment && this.annulment.proposalId === e.proposalId) this.annulment.votes[seat] = Boolean(e.approve);
    this.say(`${this.seatName(seat)} voted ${e.approve ? "yes" : "no"} on the annulment`);
  },

  annulmentResolved(e) {
    this.annulment = null;
    this.say(e.approved ? "the annulment was approved" : "the annulment was refused");
  },

  chatMessage(e, seq) {
    this.chat.push({
      seq,
      sender: (e.sender || "").replace(/^players\//, ""),
      seat: e.seat === undefined ? null : num(e.seat),
      text: e.text || "",
    });
    if (this.chat.length > CHAT_LINES) this.chat.splice(0, this.chat.length - CHAT_LINES);
  },

  tableCancelled(e) {
    this.finished = true;
    this.cancelled = true;
    this.timer = null;
    this.say(`the table was cancelled${e.reason ? `: ${e.reason}` : ""}`);
  },
};
