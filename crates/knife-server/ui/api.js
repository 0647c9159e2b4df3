// The page's access to knife: JSON over fetch (with the API token when the server
// asks for one) and `LiveSocket`, a resumable WebSocket subscription to threads.

const TOKEN_KEY = 'knife.apiToken';

/**
 * Thrown for a non-2xx answer; carries the API's `{error: {code, message, files?}}`
 * (`files`: the paths a `revert_conflict` or `merge_conflict` is about, CHG-04/07).
 */
export class ApiError extends Error {
  constructor(status, code, message, files = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.files = files;
  }
}

/** The API token for this tab (sessionStorage: survives reloads, not the tab). */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** Called with the ApiError when the server answers 401 (set by the app). */
let onUnauthorized = () => {};
export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

/** `fetch` of `/api{path}` with JSON in and out. Rejects with ApiError. */
export async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(`/api${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network', `knife is not reachable (${e.message}); is \`knife serve\` running?`);
  }
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) {
    const err = json && json.error
      ? new ApiError(res.status, json.error.code, json.error.message, json.error.files || [])
      : new ApiError(res.status, 'http', `HTTP ${res.status}: ${text.slice(0, 200)}`);
    if (res.status === 401) onUnauthorized(err);
    throw err;
  }
  return json;
}

/**
 * One WebSocket to `/api/ws` that keeps thread subscriptions alive across
 * reconnects. Each subscription remembers the last sequence it delivered and
 * resubscribes with `after` = that sequence, and events at or below it are dropped:
 * across a reconnect the listener sees every event once, in order, with no gap.
 *
 * `onState(connected: boolean)` reports the connection state; `onError({code,
 * message})` an error the server sent on the socket (a subscription it could not
 * serve, a failed read of the log): the view must show it, its updates may have stopped.
 */
export class LiveSocket {
  constructor(onState = () => {}, onError = () => {}) {
    this.subs = new Map(); // thread id -> {after, onEvent}
    this.liveItems = new Map(); // item ref -> {item_id, thread_id, run_id, ordinal}: its delta introduction
    this.onState = onState;
    this.onError = onError;
    this.ws = null;
    this.closed = false;
    this.backoff = 250;
    this.connect();
  }

  connect() {
    if (this.closed) return;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const t = token();
    const query = t ? `?token=${encodeURIComponent(t)}` : '';
    const ws = new WebSocket(`${proto}//${location.host}/api/ws${query}`);
    this.ws = ws;
    ws.addEventListener('open', () => {
      this.backoff = 250;
      this.liveItems.clear(); // each new subscription introduces its items again
      this.onState(true);
      for (const [id, sub] of this.subs) {
        // Live text not yet durable is dropped: the catch-up delta sends it again.
        if (sub.onLive) sub.onLive({ type: 'reconnect' });
        this.send({ type: 'subscribe', thread_id: id, after: sub.after });
      }
    });
    ws.addEventListener('message', (m) => this.receive(m.data));
    ws.addEventListener('close', () => {
      if (this.ws !== ws) return;
      this.onState(false);
      if (this.closed) return;
      setTimeout(() => this.connect(), this.backoff);
      // At most 2 s: a restarted knife is back in a second or two, and a try is cheap.
      this.backoff = Math.min(this.backoff * 2, 2000);
    });
  }

  send(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  receive(data) {
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return;
    }
    if (msg.type === 'error' && msg.error) {
      this.onError(msg.error);
      return;
    }
    if (msg.type === 'delta' || msg.type === 'reset') {
      // Live text (LIVE-01): not durable, no sequence; see docs/2026-12-01-live-deltas.md.
      // A slim delta names its item only by `ref`, a number unique on this connection:
      // the item's first delta (its introduction) gave the item id, thread, run and
      // ordinal, filled in here. A reset keeps the item id; the item's next delta
      // introduces it again (same ref).
      if (msg.type === 'reset') {
        for (const [ref, intro] of this.liveItems) if (intro.item_id === msg.item_id) this.liveItems.delete(ref);
      } else if (msg.item_id) {
        this.liveItems.set(msg.ref, { item_id: msg.item_id, thread_id: msg.thread_id, run_id: msg.run_id ?? null, ordinal: msg.ordinal });
      } else {
        const intro = this.liveItems.get(msg.ref);
        if (!intro) return; // never introduced: the next resubscription's catch-up carries it
        Object.assign(msg, intro);
      }
      const sub = this.subs.get(msg.thread_id);
      if (sub && sub.onLive) sub.onLive(msg);
      return;
    }
    if (msg.type !== 'event') return;
    const ev = msg.event;
    const sub = this.subs.get(ev.thread_id);
    if (!sub || ev.sequence <= sub.after) return;
    sub.after = ev.sequence;
    sub.onEvent(ev);
  }

  /**
   * Follows `threadId` from sequence `after` (exclusive); replaces an earlier subscription.
   * `onLive(msg)` (optional) gets the live `delta` / `reset` messages, and
   * `{type: 'reconnect'}` before each resubscription.
   */
  subscribe(threadId, after, onEvent, onLive = null) {
    this.subs.set(threadId, { after, onEvent, onLive });
    this.send({ type: 'subscribe', thread_id: threadId, after });
  }

  unsubscribe(threadId) {
    if (this.subs.delete(threadId)) this.send({ type: 'unsubscribe', thread_id: threadId });
  }

  /** Stops for good (no reconnect). */
  close() {
    this.closed = true;
    this.subs.clear();
    if (this.ws) this.ws.close();
  }
}
