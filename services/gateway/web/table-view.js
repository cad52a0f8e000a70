// One table on the page: its subscription on the socket, its state, the legal-move hints, the
// player's clicks turned into moves, the chat, the annulment, and the settlement at the end.
//
// After each change, when it is the player's turn, the hints are asked for (GetLegalMoves) and
// shown only while they are for the table's current seq. A move goes on the socket with a fresh
// `requestId` and the `expectedSeq` the page saw; while it is in flight the page takes no other.

import { newRequestId } from "./api.js";
import { h, renderAnnulment, renderChat, renderLog, renderResults, renderTable, clock } from "./render.js";
import { TableState, num } from "./table-state.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const SETTLE_WAIT_MS = 120_000;

export class TableView {
  /**
   * @param {object} o
   * @param {import("./api.js").Api} o.api
   * @param {import("./socket.js").GameSocket} o.socket
   * @param {string} o.table  `tables/{id}`
   * @param {boolean} o.play  a seated player (false: spectating)
   * @param {object} o.elements  {main, results, annulment, chat, log, leave}
   * @param {object} o.app  notice(text), refreshProfile() -> the account, profile
   */
  constructor({ api, socket, table, play, elements, app }) {
    this.api = api;
    this.socket = socket;
    this.play = play;
    this.el = elements;
    this.app = app;
    this.state = new TableState(table);
    this.subId = null; // the socket's id of the table's subscription
    this.ui = { selected: new Set(), hints: null, busy: false };
    this.hintsRaw = null; // the last GetLegalMoves answer
    this.hintsInFlight = false;
    this.hintsFailedSeq = -1;
    this.handKey = "";
    this.settlement = null;
    this.ended = null; // the subscription's end
    this.timer = null;
    this.closed = false;
    this.actions = {
      toggle: (index) => this.toggle(index),
      clearSelection: () => { this.ui.selected.clear(); this.render(); },
      draw: () => this.move("Draw", {}),
      takePile: () => this.move("TakeDiscard", {}),
      meld: (cards, wildAs) => this.move("Meld", wildAs ? { cards, wildAs } : { cards }),
      addToMeld: (meld, cards) => this.move("AddToMeld", { meld, cards }),
      discard: (card) => this.move("Discard", { card }),
      proposeAnnulment: () => this.proposeAnnulment(),
      voteAnnulment: (approve) => this.voteAnnulment(approve),
    };
  }

  start() {
    this.subId = this.socket.subscribe("table", { stream: "table", table: this.state.tableName, play: this.play }, {
      afterSeq: () => this.state.seq,
      onChanges: (events) => this.changed(events),
      onEnd: (message) => this.streamEnded(message),
      onError: (error) => this.refused(error),
    });
    this.timer = setInterval(() => this.tick(), 250);
    this.render();
  }

  stop() {
    this.closed = true;
    clearInterval(this.timer);
    this.socket.unsubscribe(this.subId);
  }

  // --- the stream -----------------------------------------------------------------------------
  changed(events) {
    if (this.closed) return;
    const wasOver = Boolean(this.state.matchEnd);
    for (const event of events) this.state.apply(event);
    const key = this.state.hand.join(",");
    if (key !== this.handKey) {
      this.handKey = key;
      this.ui.selected.clear(); // the cards moved: a selection by position means nothing now
    }
    if (!wasOver && this.state.matchEnd) this.settle();
    this.sync();
  }

  streamEnded(message) {
    this.ended = message;
    if (message.error) this.app.notice(`The table's stream ended: ${message.error.message || message.error.code}`);
    if (message.finished && !this.state.matchEnd && !this.state.cancelled) this.settle();
    this.sync();
  }

  refused(error) {
    this.ended = { error: { code: error.code, message: error.message } };
    const words = error.code === "permission_denied"
      ? "This table cannot be watched (it does not allow spectators, or you are not seated there)."
      : error.code === "not_found" ? "There is no such table." : error.message;
    this.app.notice(words);
    this.render();
  }

  // --- hints ----------------------------------------------------------------------------------
  /** Show the hints when they are for the current seq; ask for them when none are. */
  sync() {
    const s = this.state;
    const raw = this.hintsRaw;
    this.ui.hints = s.myTurn && raw && num(raw.seq) === s.seq ? raw : null;
    if (s.myTurn && !this.ui.hints && !this.ui.busy) this.fetchHints();
    this.render();
  }

  fetchHints() {
    const s = this.state;
    if (this.hintsInFlight || !s.myTurn) return;
    if (this.hintsRaw && num(this.hintsRaw.seq) > s.seq) return; // the stream will catch up with them
    if (this.hintsFailedSeq === s.seq) return;
    this.hintsInFlight = true;
    const asked = s.seq;
    this.api.call("GameSessionService", "GetLegalMoves", { table: s.tableName })
      .then((answer) => { this.hintsRaw = answer; })
      .catch((error) => {
        this.hintsFailedSeq = asked;
        if (error.code !== "failed_precondition") this.app.notice(`Legal moves: ${error.message}`);
        setTimeout(() => {
          if (this.hintsFailedSeq === asked) { this.hintsFailedSeq = -1; this.sync(); }
        }, 1500);
      })
      .finally(() => {
        this.hintsInFlight = false;
        if (!this.closed) this.sync();
      });
  }

  // --- moves ----------------------------------------------------------------------------------
  toggle(index) {
    if (this.ui.selected.has(index)) this.ui.selected.delete(index);
    else this.ui.selected.add(index);
    this.render();
  }

  async move(method, request) {
    if (this.ui.busy || !this.play) return;
    this.ui.busy = true;
    this.render();
    const body = { ...request, requestId: newRequestId("move") };
    if (method !== "LeaveTable") body.expectedSeq = String(this.state.seq);
    try {
      await this.socket.act(this.subId, method, body);
      this.ui.selected.clear();
    } catch (error) {
      this.app.notice(`${method} refused: ${error.message}`);
      this.hintsRaw = null; // ask again for the table as it is now
    } finally {
      this.ui.busy = false;
      if (!this.closed) this.sync();
    }
  }

  async leave() {
    if (!this.play || this.state.finished) return;
    await this.move("LeaveTable", {});
  }

  // --- chat and annulment -----------------------------------------------------------------------
  async sendChat(text) {
    const words = text.trim();
    if (!words) return false;
    try {
      await this.api.call("GameSessionService", "SendChat", {
        table: this.state.tableName, requestId: newRequestId("chat"), text: words.slice(0, 200),
      });
      return true;
    } catch (error) {
      this.app.notice(`Chat: ${error.message}`);
      return false;
    }
  }

  async proposeAnnulment() {
    try {
      await this.api.call("GameSessionService", "ProposeAnnulment", {
        table: this.state.tableName, requestId: newRequestId("annul"),
      });
    } catch (error) {
      this.app.notice(`Annulment: ${error.message}`);
    }
  }

  async voteAnnulment(approve) {
    const a = this.state.annulment;
    if (!a) return;
    try {
      await this.api.call("GameSessionService", "VoteAnnulment", {
        table: this.state.tableName, requestId: newRequestId("vote"), proposalId: a.proposalId, approve,
      });
    } catch (error) {
      this.app.notice(`Vote: ${error.message}`);
    }
  }

  // --- the settlement ---------------------------------------------------------------------------
  /** After the match: the chips as the wallet settled them (competitive), and the new profile. */
  async settle() {
    if (this.settlement || this.state.spectator) return;
    if (!this.state.competitive) {
      this.settlement = { state: "practice" };
      this.render();
      this.app.refreshProfile().catch(() => {});
      return;
    }
    this.settlement = { state: "pending" };
    this.render();
    const matchId = this.state.table && this.state.table.matchId;
    const account = `accounts/player-${this.api.playerId}`;
    const started = Date.now();
    while (!this.closed && Date.now() - started < SETTLE_WAIT_MS) {
      try {
        const statement = await this.api.call("WalletService", "ListTransfers", { parent: account, pageSize: 50 });
        const mine = (statement.transfers || []).filter((t) => t.matchId === matchId);
        // settled (or voided) once the stake's hold is resolved: its posting, refund or expiry
        if (mine.some((t) => t.state && t.state !== "STATE_PENDING")) {
          let change = 0;
          for (const t of mine) {
            if (t.state !== "STATE_POSTED") continue;
            if (t.creditAccount === account) change += num(t.amountChips);
            if (t.debitAccount === account) change -= num(t.amountChips);
          }
          const profile = await this.app.refreshProfile();
          this.settlement = { state: "settled", balance: profile.balance, change };
          this.render();
          // the XP comes from the ranking service's record of the match, a moment later
          setTimeout(() => this.app.refreshProfile().catch(() => {}), 3000);
          return;
        }
      } catch (error) {
        if (error.status === 401 || error.status === 403) break;
      }
      await sleep(1000);
    }
    if (!this.closed && this.settlement.state === "pending") {
      this.settlement = { state: "error", message: "The chips are not settled yet: your balance will show them when they are." };
      this.render();
    }
  }

  // --- drawing --------------------------------------------------------------------------------
  tick() {
    const timer = document.getElementById("turn-timer");
    if (timer) timer.textContent = clock(this.state.timeLeft());
    const deadline = this.state.annulment && this.state.annulment.deadline;
    const annulTimer = document.getElementById("annul-timer");
    if (annulTimer && Number.isFinite(deadline)) annulTimer.textContent = clock(Math.max(0, deadline - Date.now() - this.state.clockSkew));
  }

  render() {
    if (this.closed) return;
    const { main, results, annulment, chat, log, leave } = this.el;
    main.replaceChildren(renderTable(this.state, this.ui, this.actions));
    results.replaceChildren(renderResults(this.state, this.settlement));
    annulment.replaceChildren(renderAnnulment(this.state, this.actions));
    const follow = chat.scrollTop + chat.clientHeight >= chat.scrollHeight - 8;
    chat.replaceChildren(renderChat(this.state));
    if (follow) chat.scrollTop = chat.scrollHeight;
    log.replaceChildren(renderLog(this.state));
    log.scrollTop = log.scrollHeight;
    leave.hidden = !this.play || this.state.finished;
    if (this.ended && this.ended.error && !this.state.loaded) {
      main.append(h("p", { class: "error", testid: "table-error" }, this.ended.error.message || this.ended.error.code));
    }
  }
}
