// Calls to the management API, with the credentials the login page keeps in
// cookie "m". Failures throw an ApiError carrying the API's "reason"; a 401
// sends the user back to the login page.

const COOKIE = "m";

/** An API call that failed: HTTP status and the API's reason. */
export class ApiError extends Error {
  constructor(status, reason, body) {
    super(reason);
    this.status = status;
    this.reason = reason;
    this.body = body;
  }
}

/** The value of cookie `name`, or null. */
export function getCookie(name) {
  for (const part of document.cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return null;
}

/** Base64 of UTF-8 text. */
export function base64(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

/** UTF-8 text of base64. */
export function unbase64(b64) {
  const bin = atob(b64);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

/** Stores credentials in the login cookie (kept for the browser session). */
export function setCredentials(user, password) {
  const value = encodeURIComponent(base64(`${user}:${password}`));
  document.cookie = `${COOKIE}=${value}; path=/; SameSite=Strict`;
}

/** Forgets the credentials. */
export function clearCredentials() {
  document.cookie = `${COOKIE}=; path=/; SameSite=Strict; expires=Thu, 01 Jan 1970 00:00:00 GMT`;
}

/** Marks the cookie of a single sign-on session: "name:" with no password. */
const SIGN_ON_PREFIX = "|oauth:";

/**
 * True in a single sign-on session: its access token is in an HttpOnly
 * cookie the browser sends by itself, and the "m" cookie only names the user.
 */
export function isSignOnSession() {
  const raw = getCookie(COOKIE);
  return raw !== null && decodeURIComponent(raw).startsWith(SIGN_ON_PREFIX);
}

/** The base64 "user:" part of the cookie, or null. */
function storedValue() {
  const raw = getCookie(COOKIE);
  if (!raw) return null;
  const value = decodeURIComponent(raw);
  return value.slice(value.lastIndexOf(":") + 1) || null;
}

/** The base64 credentials to send, or null (none, or a sign-on session). */
function storedAuth() {
  return isSignOnSession() ? null : storedValue();
}

/** The logged-in user's name from the cookie, or null. */
export function currentUser() {
  const value = storedValue();
  if (!value) return null;
  try {
    const text = unbase64(value);
    // A sign-on session's name may hold colons: it is all before the last one.
    return text.slice(0, isSignOnSession() ? text.lastIndexOf(":") : text.indexOf(":"));
  } catch {
    return null;
  }
}

/**
 * Ends the session: forgets the credentials, or for a sign-on session has
 * the broker expire its cookies (HttpOnly: out of this script's reach).
 */
export function logout() {
  if (isSignOnSession()) {
    location.assign("/oauth/logout");
    return;
  }
  clearCredentials();
  location.assign("/login");
}

/** Sends the browser to the login page, coming back here afterwards. */
export function toLogin() {
  const next = location.pathname + location.search;
  location.assign(`/login?next=${encodeURIComponent(next)}`);
}

/**
 * One API call. `body` is sent as JSON unless it is a string. Options:
 * `auth` (base64 credentials instead of the cookie's), `noAuth` (send none),
 * `headers`,
 * `noRedirect` (do not go to the login page on 401), `raw` (return the Response).
 */
export async function request(method, path, body, opts = {}) {
  const headers = { "X-Requested-With": "XMLHttpRequest", Accept: "application/json", ...(opts.headers || {}) };
  const auth = opts.auth || (opts.noAuth ? null : storedAuth());
  if (auth) headers.Authorization = `Basic ${auth}`;
  let payload;
  if (body !== undefined && body !== null) {
    if (typeof body === "string") {
      payload = body;
    } else {
      payload = JSON.stringify(body);
    }
    headers["Content-Type"] = "application/json";
  }
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: payload, credentials: "same-origin" });
  } catch (e) {
    throw new ApiError(0, `The broker cannot be reached (${e.message})`);
  }
  if (resp.status === 401 && !opts.noRedirect) {
    if (isSignOnSession()) {
      // The token has expired or was revoked: the session ends.
      logout();
    } else {
      clearCredentials();
      toLogin();
    }
  }
  if (!resp.ok) {
    let reason = `${resp.status} ${resp.statusText}`;
    let data = null;
    try {
      data = await resp.json();
      if (data && data.reason) reason = data.reason;
      else if (data && data.error) reason = data.error;
    } catch {
      // not JSON: keep the status line
    }
    throw new ApiError(resp.status, reason, data);
  }
  if (opts.raw) return resp;
  if (resp.status === 204) return null;
  const text = await resp.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** GET `path`. */
export const get = (path, opts) => request("GET", path, undefined, opts);
/** PUT `body` to `path`. */
export const put = (path, body, opts) => request("PUT", path, body ?? {}, opts);
/** POST `body` to `path`. */
export const post = (path, body, opts) => request("POST", path, body ?? {}, opts);
/** DELETE `path`. */
export const del = (path, opts) => request("DELETE", path, undefined, opts);

/** An API path from segments, each percent-encoded: apiPath("queues", "/", "q1"). */
export function apiPath(...segments) {
  return "/api/" + segments.map((s) => encodeURIComponent(s)).join("/");
}

/** A path with query parameters (empty values left out). */
export function withQuery(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** The vhost chosen in the header's selector ("" for all). */
export function selectedVhost() {
  return localStorage.getItem("vhost") || "";
}

/** Remembers the vhost chosen in the header's selector. */
export function selectVhost(name) {
  if (name) localStorage.setItem("vhost", name);
  else localStorage.removeItem("vhost");
}

/**
 * A listing path scoped to the selected vhost: `scoped("queues")` is
 * /api/queues or /api/queues/<vhost>; `scoped("connections", "vhosts")` is
 * /api/connections or /api/vhosts/<vhost>/connections.
 */
export function scoped(kind, style) {
  const vhost = selectedVhost();
  if (!vhost) return apiPath(kind);
  if (style === "vhosts") return apiPath("vhosts", vhost, kind);
  return apiPath(kind, vhost);
}
