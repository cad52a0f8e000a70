// The player's one WebSocket (`/v1/socket`, services/gateway/sockets.py has the protocol):
// subscriptions (a table, a ticket, a lobby table...) and the moves of a table.
//
// It survives a network drop by itself: the socket is reopened with backoff, says hello again
// (with the current token), every subscription is opened again (a table's with `afterSeq`, the
// last seq its handler applied, so nothing is missed or applied twice) and every move that had
// no answer is sent again with the same `requestId` (the table applies it once). A socket that
// stops answering (no message for a while, pings included) is taken for dropped.

const PING_EVERY_MS = 15_000;
const SILENT_LIMIT_MS = 35_000; // no message for this long (pongs included): the socket is dead
const ACT_TIMEOUT_MS = 45_000;
const BACKOFF_FIRST_MS = 250;
const BACKOFF_MAX_MS = 8_000;

export class SocketError extends Error {
  constructor(body) {
    super((body && body.message) || (body && body.code) || "refused");
    this.name = "SocketError";
    this.code = (body && body.code) || "unknown";
    this.details = (body && body.details) || [];
  }

  get currentSeq() {
    const detail = this.details.find((d) => d && d.currentSeq !== undefined);
    return detail ? Number(detail.currentSeq) : null;
  }
}

export class GameSocket extends EventTarget {
  /** `api`: the Api (its token, its refresh); `url`: the socket's address. */
  constructor(api, url) {
    super();
    this.api = api;
    this.url = url;
    this.ws = null;
    this.state = "idle"; // idle, connecting, open, waiting (to reconnect), failed
    this.attempt = 0;
    this.reconnectTimer = null;
    this.pingTimer = null;
    this.lastHeard = 0;
    this.subs = new Map(); // id -> {id, spec, handlers, open}
    this.acts = new Map(); // message id -> {id, sub, method, request, resolve, reject, timer}
    this.counter = 0;
    this.stopped = false;
    this.onOnline = () => {
      if (this.state === "waiting") this.connect();
    };
    window.addEventListener("online", this.onOnline);
  }

  // --- the connection -------------------------------------------------------------------------
  status(state, detail = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("status", { detail: { state, attempt: this.attempt, ...detail } }));
  }

  /** Open the socket unless it is open or opening. */
  ensure() {
    if (this.stopped) return;
    if (this.ws || this.state === "waiting") return;
    this.connect();
  }

  connect() {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    if (this.stopped || !this.api.token) return;
    if (this.ws) this.detach();
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (_) {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.status("connecting");
    ws.onopen = () => {
      if (ws !== this.ws) return;
      this.lastHeard = Date.now();
      this.sendRaw({ type: "hello", token: this.api.token });
    };
    ws.onmessage = (message) => {
      if (ws !== this.ws) return;
      this.lastHeard = Date.now();
      let data;
      try {
        data = JSON.parse(message.data);
      } catch (_) {
        return;
      }
      if (data && typeof data.type === "string") this.receive(data);
    };
    ws.onclose = (event) => {
      if (ws !== this.ws) return;
      this.dropped(event.code, event.reason);
    };
  }

  /** Forget the current socket (closing it quietly). */
  detach() {
    const ws = this.ws;
    this.ws = null;
    clearInterval(this.pingTimer);
    this.pingTimer = null;
    for (const sub of this.subs.values()) {
      sub.open = false;
      sub.sent = false;
    }
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = null;
      try {
        ws.close(1000, "reconnecting");
      } catch (_) {
        // closed already
      }
    }
  }

  /** The socket closed (or went silent): reopen it as its close code says. */
  dropped(code, reason) {
    this.detach();
    if (this.stopped) return;
    if (code === 4403) {
      this.status("failed", { code, reason: reason || "this page's origin may not open the socket" });
      return;
    }
    if (code === 4401) {
      // a token refused or expired: a new one, then again (or sign in again)
      this.status("waiting", { code, reason });
      this.api.refresh().then(
        () => this.scheduleReconnect(0),
        () => this.api.signOut("your session ended: sign in again"),
      );
      return;
    }
    if (code === 1008 && this.subs.size === 0 && this.acts.size === 0) {
      this.status("idle", { code, reason }); // idle with nothing to follow: reopened when needed
      return;
    }
    this.status("waiting", { code, reason });
    this.scheduleReconnect();
  }

  scheduleReconnect(delay = null) {
    clearTimeout(this.reconnectTimer);
    const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** this.attempt);
    const wait = delay === null ? backoff * (0.5 + Math.random() / 2) : delay;
    this.attempt += 1;
    this.state = "waiting";
    this.reconnectTimer = setTimeout(() => this.connect(), wait);
  }

  sendRaw(message) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    try {
      this.ws.send(JSON.stringify(message));
      return true;
    } catch (_) {
      return false;
    }
  }

  startPinging() {
    clearInterval(this.pingTimer);
    this.pingTimer = setInterval(() => {
      if (Date.now() - this.lastHeard > SILENT_LIMIT_MS) {
        this.dropped(4000, "the server stopped answering");
        return;
      }
      this.sendRaw({ type: "ping" });
    }, PING_EVERY_MS);
  }

  /** A refreshed token, for the open socket (and the next hello). */
  sendToken(token) {
    this.sendRaw({ type: "token", token });
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    window.removeEventListener("online", this.onOnline);
    this.detach();
    for (const act of this.acts.values()) {
      clearTimeout(act.timer);
      act.reject(new SocketError({ code: "cancelled", message: "signed out" }));
    }
    this.acts.clear();
    this.subs.clear();
    this.status("idle");
  }

  // --- messages from the gateway ----------------------------------------------------------------
  receive(message) {
    const { type } = message;
    if (type === "ready") {
      this.attempt = 0;
      this.status("open", { player: message.player });
      this.startPinging();
      for (const sub of this.subs.values()) this.sendSubscribe(sub);
      return;
    }
    const id = message.id === undefined || message.id === null ? "" : String(message.id);
    const subId = message.sub === undefined ? "" : String(message.sub);
    if (type === "subscribed") {
      const sub = this.subs.get(id);
      if (!sub) return;
      sub.open = true;
      if (sub.handlers.onSubscribed) sub.handlers.onSubscribed();
      for (const act of this.acts.values()) {
        if (act.sub === id) this.sendAct(act); // unanswered moves, again with their requestId
      }
      return;
    }
    if (type === "changes") {
      const sub = this.subs.get(subId);
      if (sub && sub.handlers.onChanges) sub.handlers.onChanges(message.events || [], Number(message.seq));
      return;
    }
    if (type === "update") {
      const sub = this.subs.get(subId);
      if (sub && sub.handlers.onUpdate) sub.handlers.onUpdate(message.message || {});
      return;
    }
    if (type === "end") {
      const sub = this.subs.get(subId);
      if (!sub) return;
      const error = message.error;
      if (error && (error.code === "unavailable" || error.code === "deadline_exceeded")) {
        // the stream could not go on by itself: open it again, from where it was
        sub.open = false;
        sub.sent = false;
        setTimeout(() => {
          if (this.subs.get(subId) === sub) this.sendSubscribe(sub);
        }, 1000);
        return;
      }
      this.subs.delete(subId);
      this.failActs(subId, new SocketError(error || { code: "failed_precondition", message: "the stream ended" }));
      if (sub.handlers.onEnd) sub.handlers.onEnd(message);
      return;
    }
    if (type === "result") {
      const act = this.acts.get(id);
      if (!act) return;
      this.acts.delete(id);
      clearTimeout(act.timer);
      act.resolve(message);
      return;
    }
    if (type === "error") {
      const error = new SocketError(message.error);
      const act = this.acts.get(id);
      if (act) {
        this.acts.delete(id);
        clearTimeout(act.timer);
        act.reject(error);
        return;
      }
      const sub = this.subs.get(id);
      if (sub) {
        if (error.code === "resource_exhausted" || error.code === "unavailable") {
          setTimeout(() => {
            if (this.subs.get(id) === sub) this.sendSubscribe(sub);
          }, 1000);
          return;
        }
        this.subs.delete(id);
        if (sub.handlers.onError) sub.handlers.onError(error);
        return;
      }
      if (error.code === "not_found" && /subscription/.test(error.message)) return; // unsubscribed twice
      this.dispatchEvent(new CustomEvent("problem", { detail: error }));
    }
    // token, pong, unsubscribed: nothing to do (hearing them is enough)
  }

  // --- subscriptions ----------------------------------------------------------------------------
  /** Follow a stream; its id (`prefix` and a number: never an id in use). `spec`: {stream, table,
   * play} or {stream, request}; `handlers`: onChanges, onUpdate, onEnd, onError, onSubscribed, and
   * for a table afterSeq() (the last seq applied). */
  subscribe(prefix, spec, handlers) {
    this.counter += 1;
    const id = `${prefix}-${this.counter}`;
    const sub = { id, spec, handlers, open: false, sent: false };
    this.subs.set(id, sub);
    if (this.state === "open") this.sendSubscribe(sub);
    else this.ensure();
    return id;
  }

  sendSubscribe(sub) {
    const message = { type: "subscribe", id: sub.id, ...sub.spec };
    if (sub.spec.stream === "table") message.afterSeq = sub.handlers.afterSeq ? sub.handlers.afterSeq() : 0;
    sub.sent = this.sendRaw(message);
  }

  unsubscribe(id) {
    const sub = this.subs.get(id);
    if (!sub) return;
    this.subs.delete(id);
    this.failActs(id, new SocketError({ code: "cancelled", message: "left the table" }));
    if (sub.sent) this.sendRaw({ type: "unsubscribe", id });
  }

  // --- moves ------------------------------------------------------------------------------------
  /** Send a move on a table subscription; resolves with the `result` (its seq), rejects with a
   * SocketError. `request` must carry its `requestId` (kept for a retry after a reconnect). */
  act(sub, method, request) {
    return new Promise((resolve, reject) => {
      this.counter += 1;
      const act = { id: `m${this.counter}`, sub, method, request, resolve, reject, timer: null };
      act.timer = setTimeout(() => {
        this.acts.delete(act.id);
        reject(new SocketError({ code: "deadline_exceeded", message: `${method}: no answer from the table` }));
      }, ACT_TIMEOUT_MS);
      this.acts.set(act.id, act);
      const target = this.subs.get(sub);
      if (target && target.open) this.sendAct(act);
      else this.ensure();
    });
  }

  sendAct(act) {
    this.sendRaw({ type: "act", id: act.id, sub: act.sub, method: act.method, request: act.request });
  }

  failActs(sub, error) {
    for (const act of [...this.acts.values()]) {
      if (act.sub !== sub) continue;
      this.acts.delete(act.id);
      clearTimeout(act.timer);
      act.reject(error);
    }
  }
}
