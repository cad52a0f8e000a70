// The gateway's HTTP API: sign-in, the session's token (refreshed before it expires), and the
// players' unary calls as JSON (`POST /buraco.v1.{Service}/{Method}`).
//
// A failed call rejects with an `ApiError` carrying the gateway's error body
// ({"code": "failed_precondition", "message": ..., "details": [...]}) and the HTTP status. A call
// that is safe to repeat (a read, or a change carrying a `requestId`) is retried on a network
// failure, UNAVAILABLE and RESOURCE_EXHAUSTED, after the wait the gateway names.

const PACKAGE = "buraco.v1";
const SESSION_KEY = "buraco.session";
const REFRESH_MARGIN_MS = 60_000; // refresh this long before the token expires
const RETRIES = 4;

export class ApiError extends Error {
  constructor(status, body) {
    const code = (body && body.code) || (status ? `http_${status}` : "unavailable");
    super((body && body.message) || code);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = (body && body.details) || [];
  }

  /** The wait the gateway asked for before a retry, in milliseconds (null when none). */
  get retryAfterMs() {
    const detail = this.details.find((d) => d && d.retryAfterMs !== undefined);
    return detail ? Number(detail.retryAfterMs) : null;
  }

  /** The table's current seq, after an action sent with a stale `expectedSeq` (null when none). */
  get currentSeq() {
    const detail = this.details.find((d) => d && d.currentSeq !== undefined);
    return detail ? Number(detail.currentSeq) : null;
  }
}

/** A fresh idempotency key (32 hex digits; works outside secure contexts too). */
export function newRequestId(prefix = "web") {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return `${prefix}-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class Api extends EventTarget {
  constructor(base = "") {
    super();
    this.base = base;
    this.session = null; // {player, displayName, token, expiresAt, sessionEndsAt}
    this.refreshTimer = null;
    this.refreshing = null;
  }

  get player() {
    return this.session ? this.session.player : "";
  }

  /** The player's id: "alice" for "players/alice". */
  get playerId() {
    return this.player.replace(/^players\//, "");
  }

  get token() {
    return this.session ? this.session.token : "";
  }

  // --- the session --------------------------------------------------------------------------
  async config() {
    return this.request("GET", "/v1/config");
  }

  /** Sign in: `{name}` (development) or `{idToken}` (OpenID Connect). */
  async signIn(body) {
    const answer = await this.request("POST", "/v1/sign-in", body, { auth: false });
    this.setSession(answer);
    return this.session;
  }

  /** A new token for the session, before the current one expires. */
  async refresh() {
    if (!this.session) throw new ApiError(401, { code: "unauthenticated", message: "not signed in" });
    if (!this.refreshing) {
      this.refreshing = this.request("POST", "/v1/session:refresh", {}, { retry: true })
        .then((answer) => {
          this.setSession(answer);
          this.dispatchEvent(new CustomEvent("token", { detail: this.session }));
          return this.session;
        })
        .finally(() => {
          this.refreshing = null;
        });
    }
    return this.refreshing;
  }

  setSession(answer) {
    const now = Date.now();
    this.session = {
      player: answer.player,
      displayName: answer.displayName || answer.player,
      token: answer.token,
      expiresAt: now + Number(answer.expiresIn) * 1000,
      sessionEndsAt: now + Number(answer.sessionEndsIn) * 1000,
    };
    try {
      sessionStorage.setItem(SESSION_KEY, JSON.stringify(this.session));
    } catch (_) {
      // storage refused (private mode): the session lasts as long as the page
    }
    this.scheduleRefresh();
  }

  /** The session kept by this tab (a reload), when its token is still valid. */
  restore() {
    let saved = null;
    try {
      saved = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
    } catch (_) {
      saved = null;
    }
    if (!saved || !saved.token || saved.expiresAt <= Date.now() + 5000) return null;
    this.session = saved;
    this.scheduleRefresh();
    return saved;
  }

  signOut(reason = "") {
    clearTimeout(this.refreshTimer);
    this.session = null;
    try {
      sessionStorage.removeItem(SESSION_KEY);
    } catch (_) {
      // nothing kept
    }
    this.dispatchEvent(new CustomEvent("signedout", { detail: reason }));
  }

  scheduleRefresh() {
    clearTimeout(this.refreshTimer);
    if (!this.session) return;
    const { expiresAt, sessionEndsAt } = this.session;
    const lifetime = expiresAt - Date.now();
    // a minute before it expires (half its life for a token shorter than two minutes)
    const wait = lifetime > 2 * REFRESH_MARGIN_MS ? lifetime - REFRESH_MARGIN_MS : lifetime / 2;
    if (sessionEndsAt - Date.now() < 1000) return; // the session ends: sign in again then
    this.refreshTimer = setTimeout(() => {
      this.refresh().catch((error) => {
        if (error.status === 401) this.signOut("your session ended: sign in again");
        else this.refreshTimer = setTimeout(() => this.scheduleRefresh(), 5000);
      });
    }, Math.max(1000, wait));
  }

  // --- calls --------------------------------------------------------------------------------
  /** A player's unary call: `call("WalletService", "GetAccount", {name: ...})`. */
  async call(service, method, body = {}) {
    const safe = /^(Get|List|BatchGet|Export)/.test(method) || Boolean(body.requestId);
    return this.request("POST", `/${PACKAGE}.${service}/${method}`, body, { retry: safe });
  }

  async request(verb, path, body, { auth = true, retry = false } = {}) {
    let refreshed = false;
    for (let attempt = 0; ; attempt += 1) {
      const headers = { "content-type": "application/json" };
      if (auth && this.session) headers.authorization = `Bearer ${this.session.token}`;
      let response;
      try {
        response = await fetch(this.base + path, {
          method: verb,
          headers,
          body: verb === "GET" ? undefined : JSON.stringify(body || {}),
          cache: "no-store",
        });
      } catch (_) {
        if (retry && attempt < RETRIES) {
          await sleep(250 * 2 ** attempt);
          continue;
        }
        throw new ApiError(0, { code: "unavailable", message: "the server cannot be reached; check the connection" });
      }
      let data = null;
      try {
        data = await response.json();
      } catch (_) {
        data = null;
      }
      if (response.ok) return data || {};
      const error = new ApiError(response.status, data);
      if (
        error.status === 401 && auth && this.session && !refreshed &&
        path !== "/v1/session:refresh" && this.session.sessionEndsAt > Date.now()
      ) {
        refreshed = true;
        try {
          await this.refresh();
          continue;
        } catch (_) {
          this.signOut("your session ended: sign in again");
          throw error;
        }
      }
      const transient = error.code === "unavailable" || error.code === "resource_exhausted";
      if (retry && transient && attempt < RETRIES) {
        const header = Number(response.headers.get("retry-after"));
        const wait = error.retryAfterMs ?? (Number.isFinite(header) && header > 0 ? header * 1000 : 250 * 2 ** attempt);
        await sleep(Math.min(wait, 5000));
        continue;
      }
      throw error;
    }
  }
}
