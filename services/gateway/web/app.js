// The web table's page: sign-in, the player's profile (chips, XP, level, rank), quick match with
// a live ticket, practice tables with bots, watching a table, and the table itself (table-view.js).
//
//   api.js          the HTTP API and the session's token      socket.js      the WebSocket
//   table-state.js  a table's state, from its events           render.js      DOM from state
//   table-view.js   one table: stream, hints, moves, chat      cards.js       card strings
//
// Everything shown comes from the server's answers and streams; the page keeps no game rules.

import { Api, ApiError, newRequestId } from "./api.js";
import { GameSocket } from "./socket.js";
import { TableView } from "./table-view.js";
import { h, renderLobbyTable, renderProfile, renderTicket, clock } from "./render.js";
import { num, parseTime } from "./table-state.js";

const PRESETS = [
  ["aberto", "Aberto"],
  ["aberto_sujo", "Aberto Sujo"],
  ["fechado", "Fechado"],
  ["fechado_stbl", "Fechado STBL"],
  ["fechado_sujo", "Fechado Sujo"],
  ["classico_104", "Clássico 104"],
  ["buraco_2005", "Buraco 2005"],
  ["aberto_joker50", "Aberto Joker 50"],
];
const OIDC_STATE = "buraco.oidc.state";
const OIDC_NONCE = "buraco.oidc.nonce";
const NOTICE_MS = 8000;

const $ = (id) => document.getElementById(id);

function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/socket`;
}

function randomText() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The claims of a JWT, unverified (the gateway verifies it; the page only compares its nonce). */
function jwtClaims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), "=")));
  } catch (_) {
    return {};
  }
}

class App {
  constructor() {
    this.api = new Api();
    this.socket = null;
    this.config = null;
    this.profile = this.emptyProfile();
    this.ticket = null;
    this.ticketSub = null;
    this.ticketLocal = { confirmed: false };
    this.lobby = null;
    this.lobbySub = null;
    this.lobbyNote = "";
    this.view = null;
    this.noticeTimer = null;
    this.confirmTimer = null;
  }

  emptyProfile() {
    return { player: "", displayName: "", balance: null, held: 0, xp: null, level: null, rank: undefined };
  }

  // --- start ----------------------------------------------------------------------------------
  async boot() {
    this.wire();
    this.api.addEventListener("token", (event) => {
      if (this.socket) this.socket.sendToken(event.detail.token);
    });
    this.api.addEventListener("signedout", (event) => this.signedOut(event.detail));
    try {
      this.config = await this.api.config();
    } catch (error) {
      this.config = { signIn: "dev" };
      this.notice(`The server's settings could not be read: ${error.message}`);
    }
    if (this.config.signIn === "oidc") {
      $("oidc-signin").hidden = false;
      $("oidc-issuer").textContent = this.config.issuer ? `Provider: ${this.config.issuer}` : "";
      if (await this.oidcReturn()) return;
    } else {
      $("signin-form").hidden = false;
    }
    if (this.api.restore()) {
      await this.enter();
      return;
    }
    this.show("signin-view");
    if (this.config.signIn !== "oidc") $("signin-name").focus();
  }

  wire() {
    for (const select of document.querySelectorAll(".preset-select")) {
      for (const [value, label] of PRESETS) select.append(h("option", { value }, label));
    }
    for (const form of [$("quick-match-form"), $("practice-form")]) {
      const update = () => {
        const points = form.elements.matchLength.value === "MATCH_LENGTH_POINTS";
        form.querySelector(".target-field").hidden = !points;
        const bet = form.querySelector(".bet-field");
        if (bet) bet.hidden = form.elements.mode.value !== "TABLE_MODE_COMPETITIVE";
      };
      form.addEventListener("change", update);
      update();
    }
    $("signin-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.devSignIn($("signin-name").value);
    });
    $("oidc-button").addEventListener("click", () => this.oidcRedirect());
    $("signout").addEventListener("click", () => this.api.signOut(""));
    $("quick-match-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.quickMatch(event.target);
    });
    $("practice-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.practice(event.target);
    });
    $("spectate-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const name = event.target.elements.table.value.trim();
      if (name) this.openTable(name.startsWith("tables/") ? name : `tables/${name}`, false);
    });
    $("back-home").addEventListener("click", () => this.home());
    $("leave-table").addEventListener("click", () => {
      if (this.view && window.confirm("Leave the match? A bot takes your seat and the match counts as abandoned.")) this.view.leave();
    });
    $("chat-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const input = $("chat-input");
      if (this.view && (await this.view.sendChat(input.value))) input.value = "";
    });
  }

  show(id) {
    for (const view of ["signin-view", "home-view", "table-view"]) $(view).hidden = view !== id;
  }

  notice(text) {
    const box = $("notice");
    box.textContent = text;
    box.hidden = false;
    clearTimeout(this.noticeTimer);
    this.noticeTimer = setTimeout(() => { box.hidden = true; }, NOTICE_MS);
  }

  // --- signing in -------------------------------------------------------------------------------
  async devSignIn(name) {
    $("signin-error").textContent = "";
    try {
      await this.api.signIn({ name: name.trim() });
      await this.enter();
    } catch (error) {
      $("signin-error").textContent = error.message;
    }
  }

  /** Back from the provider: `#id_token=...&state=...` (or `#error=...`). */
  async oidcReturn() {
    const params = new URLSearchParams(location.hash.slice(1));
    const idToken = params.get("id_token");
    const failure = params.get("error");
    if (!idToken && !failure) return false;
    history.replaceState(null, "", location.pathname + location.search); // the token leaves the address bar
    const expectedState = sessionStorage.getItem(OIDC_STATE);
    const expectedNonce = sessionStorage.getItem(OIDC_NONCE);
    sessionStorage.removeItem(OIDC_STATE);
    sessionStorage.removeItem(OIDC_NONCE);
    this.show("signin-view");
    if (failure) {
      $("signin-error").textContent = params.get("error_description") || failure;
      return true;
    }
    if (expectedState && params.get("state") !== expectedState) {
      $("signin-error").textContent = "The sign-in answer does not match this page's request: sign in again.";
      return true;
    }
    if (expectedNonce && jwtClaims(idToken).nonce !== expectedNonce) {
      $("signin-error").textContent = "The ID token was not issued for this sign-in: sign in again.";
      return true;
    }
    try {
      await this.api.signIn({ idToken });
      await this.enter();
    } catch (error) {
      $("signin-error").textContent = error.message;
    }
    return true;
  }

  /** To the provider's authorization endpoint (implicit flow: an ID token in the fragment). */
  async oidcRedirect() {
    const { issuer, clientId } = this.config;
    try {
      const response = await fetch(`${issuer.replace(/\/$/, "")}/.well-known/openid-configuration`);
      const discovery = await response.json();
      const state = randomText();
      const nonce = randomText();
      sessionStorage.setItem(OIDC_STATE, state);
      sessionStorage.setItem(OIDC_NONCE, nonce);
      const url = new URL(discovery.authorization_endpoint);
      url.searchParams.set("client_id", clientId);
      url.searchParams.set("response_type", "id_token");
      url.searchParams.set("response_mode", "fragment");
      url.searchParams.set("scope", "openid profile");
      url.searchParams.set("redirect_uri", `${location.origin}/`);
      url.searchParams.set("state", state);
      url.searchParams.set("nonce", nonce);
      location.assign(url.toString());
    } catch (_) {
      $("signin-error").textContent = "The sign-in provider cannot be reached.";
    }
  }

  async enter() {
    this.profile = { ...this.emptyProfile(), player: this.api.player, displayName: this.api.session.displayName };
    this.renderProfile();
    $("signout").hidden = false;
    this.socket = new GameSocket(this.api, socketUrl());
    this.socket.addEventListener("status", (event) => this.connectionChanged(event.detail));
    this.socket.addEventListener("problem", (event) => this.notice(event.detail.message));
    this.socket.ensure();
    this.home();
  }

  signedOut(reason) {
    if (this.view) this.view.stop();
    this.view = null;
    if (this.socket) this.socket.stop();
    this.socket = null;
    this.ticket = null;
    this.lobby = null;
    clearInterval(this.confirmTimer);
    this.profile = this.emptyProfile();
    $("profile").replaceChildren();
    $("signout").hidden = true;
    $("ticket-panel").replaceChildren();
    $("lobby-panel").replaceChildren();
    $("signin-error").textContent = reason || "";
    this.show("signin-view");
  }

  connectionChanged({ state, code, reason }) {
    const el = $("connection");
    el.dataset.state = state;
    const words = { open: "online", connecting: "connecting…", waiting: "reconnecting…", idle: "", failed: "offline" };
    el.textContent = words[state] ?? state;
    el.title = reason ? `${reason} (${code})` : "connection to the server";
    if (state === "failed") this.notice(reason || "The connection was refused.");
  }

  // --- the profile --------------------------------------------------------------------------------
  /** Chips, XP, level and rank, fresh from the services; the profile. */
  async refreshProfile() {
    const id = this.api.playerId;
    if (!id) return this.profile;
    const [account, player, rank] = await Promise.allSettled([
      this.api.call("WalletService", "GetAccount", { name: `accounts/player-${id}` }),
      this.api.call("RankingService", "GetPlayer", { name: `players/${id}` }),
      this.api.call("RankingService", "GetLeaderboardRank", {
        leaderboard: { scope: "SCOPE_GLOBAL", period: "PERIOD_ALL_TIME", metric: "METRIC_XP" },
        player: `players/${id}`,
      }),
    ]);
    if (account.status === "fulfilled") {
      this.profile.balance = num(account.value.balanceChips);
      this.profile.held = num(account.value.heldChips);
    } else if (account.reason.code === "not_found") {
      this.profile.balance = 0;
    }
    if (player.status === "fulfilled") {
      this.profile.xp = num(player.value.xp);
      this.profile.level = num(player.value.level);
    }
    if (rank.status === "fulfilled") this.profile.rank = num(rank.value.rank) || null;
    else if (rank.reason.code === "not_found") this.profile.rank = null;
    this.renderProfile();
    if (account.status === "rejected" && account.reason.code !== "not_found") throw account.reason;
    return this.profile;
  }

  renderProfile() {
    $("profile").replaceChildren(...renderProfile(this.profile).filter(Boolean));
  }

  // --- home -------------------------------------------------------------------------------------
  home() {
    if (this.view) this.view.stop();
    this.view = null;
    this.show("home-view");
    this.refreshProfile().catch((error) => this.notice(`Profile: ${error.message}`));
    this.loadTables();
    this.renderTicket();
    this.renderLobby();
  }

  async loadTables() {
    const list = $("resume-list");
    try {
      const answer = await this.api.call("GameSessionService", "ListTables", { state: "STATE_PLAYING", pageSize: 20 });
      const tables = answer.tables || [];
      if (!tables.length) {
        list.replaceChildren(h("span", { class: "muted" }, "No match in progress."));
        return;
      }
      list.replaceChildren(...tables.map((table) => h("div", { class: "resume" },
        h("span", {}, `${table.name} · ${(table.options && table.options.ruleset && table.options.ruleset.preset) || ""}`),
        h("button", {
          type: "button", class: "action", testid: "resume-table", data: { table: table.name },
          on: { click: () => this.openTable(table.name, true) },
        }, "Return to the table"))));
    } catch (error) {
      list.replaceChildren(h("span", { class: "muted" }, `Your tables could not be listed: ${error.message}`));
    }
  }

  // --- quick match --------------------------------------------------------------------------------
  async quickMatch(form) {
    if (this.ticket && ["STATE_SEARCHING", "STATE_PROPOSED"].includes(this.ticket.state)) {
      this.notice("You are already searching for a match.");
      return;
    }
    const f = form.elements;
    const competitive = f.mode.value === "TABLE_MODE_COMPETITIVE";
    const points = f.matchLength.value === "MATCH_LENGTH_POINTS";
    const preferences = {
      preset: f.preset.value,
      players: Number(f.players.value),
      length: f.matchLength.value,
      targetPoints: points ? Number(f.target.value) : 0,
      mode: f.mode.value,
      betChips: competitive ? String(Math.max(0, Math.floor(Number(f.bet.value) || 0))) : "0",
    };
    const button = form.querySelector("[type=submit]");
    button.disabled = true;
    try {
      const ticket = await this.api.call("MatchmakingService", "CreateTicket", {
        requestId: newRequestId("ticket"), ticket: { preferences },
      });
      this.followTicket(ticket);
    } catch (error) {
      this.notice(`Quick match: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  }

  followTicket(ticket) {
    if (this.ticketSub) this.socket.unsubscribe(this.ticketSub);
    this.ticket = ticket;
    this.ticketLocal = { confirmed: false };
    this.ticketSub = this.socket.subscribe("ticket", { stream: "ticket", request: { name: ticket.name } }, {
      onUpdate: (update) => this.ticketUpdated(update),
      onEnd: () => this.renderTicket(),
      onError: (error) => this.notice(`Ticket: ${error.message}`),
    });
    this.renderTicket();
  }

  ticketUpdated(ticket) {
    if (!this.ticket || ticket.name !== this.ticket.name) return;
    this.ticket = ticket;
    if (ticket.state === "STATE_MATCHED" && ticket.assignment && ticket.assignment.table) {
      this.socket.unsubscribe(this.ticketSub);
      this.ticket = null;
      this.renderTicket();
      this.openTable(ticket.assignment.table, true);
      return;
    }
    if (ticket.state !== "STATE_PROPOSED") this.ticketLocal.confirmed = false;
    this.renderTicket();
  }

  renderTicket() {
    const panel = $("ticket-panel");
    clearInterval(this.confirmTimer);
    if (!this.ticket) {
      panel.replaceChildren();
      return;
    }
    panel.replaceChildren(renderTicket(this.ticket, this.ticketLocal, {
      confirm: () => this.confirmTicket(),
      cancel: () => this.cancelTicket(),
      dismiss: () => {
        this.socket.unsubscribe(this.ticketSub);
        this.ticket = null;
        this.renderTicket();
      },
    }));
    const deadline = parseTime(this.ticket.confirmDeadline);
    if (this.ticket.state === "STATE_PROPOSED" && Number.isFinite(deadline)) {
      const tick = () => {
        const el = $("confirm-timer");
        if (el) el.textContent = clock(Math.max(0, deadline - Date.now()));
      };
      tick();
      this.confirmTimer = setInterval(tick, 250);
    }
  }

  async confirmTicket() {
    if (!this.ticket) return;
    try {
      await this.api.call("MatchmakingService", "ConfirmTicket", { name: this.ticket.name, requestId: newRequestId("confirm") });
      this.ticketLocal.confirmed = true;
      this.renderTicket();
    } catch (error) {
      this.notice(`Confirm: ${error.message}`);
    }
  }

  async cancelTicket() {
    if (!this.ticket) return;
    try {
      const ticket = await this.api.call("MatchmakingService", "CancelTicket", { name: this.ticket.name, requestId: newRequestId("cancel") });
      this.ticketUpdated(ticket);
    } catch (error) {
      this.notice(`Cancel: ${error.message}`);
    }
  }

  // --- practice with bots --------------------------------------------------------------------------
  async practice(form) {
    const f = form.elements;
    const points = f.matchLength.value === "MATCH_LENGTH_POINTS";
    const options = {
      ruleset: { preset: f.preset.value },
      players: Number(f.players.value),
      length: f.matchLength.value,
      targetPoints: points ? Number(f.target.value) : 0,
      mode: "TABLE_MODE_PRACTICE",
      betChips: "0",
      drawSeconds: Number(f.drawSeconds.value) || 0,
      playSeconds: Number(f.playSeconds.value) || 0,
      spectatorsAllowed: f.spectators.checked,
      // the bots' level is the table's too: a bot of this level takes the seat of a player who drops
      botLevel: f.level.value,
    };
    const button = form.querySelector("[type=submit]");
    button.disabled = true;
    const call = (method, body) => this.api.call("MatchmakingService", method, { ...body, requestId: newRequestId("lobby") });
    try {
      this.lobbyNote = "creating the table";
      const lobby = await call("CreateLobbyTable", { lobbyTable: { options } });
      this.followLobby(lobby);
      this.lobbyNote = "seating the bots";
      this.renderLobby();
      this.lobbyUpdated(await call("FillWithBots", { name: lobby.name, level: f.level.value }));
      this.lobbyNote = "getting ready";
      this.lobbyUpdated(await call("SetReady", { name: lobby.name, ready: true }));
      this.lobbyNote = "starting the match";
      this.lobbyUpdated(await call("StartMatch", { name: lobby.name }));
    } catch (error) {
      this.lobbyNote = "";
      this.notice(`Practice table: ${error.message}`);
      this.renderLobby();
    } finally {
      button.disabled = false;
    }
  }

  followLobby(lobby) {
    if (this.lobbySub) this.socket.unsubscribe(this.lobbySub);
    this.lobby = lobby;
    this.lobbySub = this.socket.subscribe("lobby", { stream: "lobby_table", request: { name: lobby.name } }, {
      onUpdate: (update) => this.lobbyUpdated(update),
      onError: (error) => this.notice(`Lobby table: ${error.message}`),
    });
    this.renderLobby();
  }

  lobbyUpdated(lobby) {
    if (!this.lobby || lobby.name !== this.lobby.name) return;
    this.lobby = lobby;
    if (lobby.state === "STATE_IN_MATCH" && lobby.gameTable && lobby.gameTable.table) {
      this.socket.unsubscribe(this.lobbySub);
      this.lobby = null;
      this.lobbyNote = "";
      this.renderLobby();
      this.openTable(lobby.gameTable.table, true);
      return;
    }
    this.renderLobby();
  }

  renderLobby() {
    const panel = $("lobby-panel");
    panel.replaceChildren(this.lobby ? renderLobbyTable(this.lobby, this.lobbyNote) : "");
  }

  // --- a table -----------------------------------------------------------------------------------
  openTable(name, play) {
    if (this.view) {
      if (this.view.state.tableName === name && this.view.play === play) {
        this.show("table-view");
        return;
      }
      this.view.stop();
    }
    $("chat-input").value = "";
    this.view = new TableView({
      api: this.api,
      socket: this.socket,
      table: name,
      play,
      app: this,
      elements: {
        main: $("table-main"),
        results: $("results"),
        annulment: $("annulment-panel"),
        chat: $("chat"),
        log: $("log"),
        leave: $("leave-table"),
      },
    });
    this.show("table-view");
    this.view.start();
    if (play) this.refreshProfile().catch(() => {}); // the chips now at stake
  }
}

const app = new App();
app.boot().catch((error) => {
  const box = document.getElementById("notice");
  box.hidden = false;
  box.textContent = `The page could not start: ${error instanceof ApiError ? error.message : error}`;
});
