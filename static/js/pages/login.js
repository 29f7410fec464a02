// The login page: checks the credentials with GET /api/whoami, keeps them in
// cookie "m" and goes on to the page asked for (?next=) or the overview.
// When the broker offers single sign-on (GET /oauth/enabled), a second button
// sends the browser to the identity provider; the broker's /oauth/callback
// brings it back, or back here with ?error= saying why not.

import { base64, clearCredentials, get, setCredentials } from "../api.js";
import { param } from "../dom.js";
import { clearError, showError } from "../ui.js";

/** Where to go after logging in: a local path only. */
function nextPage() {
  const next = param("next");
  return next.startsWith("/") && !next.startsWith("//") && !next.startsWith("/login") ? next : "/";
}

const form = document.getElementById("login-form");
form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  clearError();
  const user = form.elements.username.value;
  const password = form.elements.password.value;
  const button = document.getElementById("login-submit");
  button.disabled = true;
  try {
    await get("/api/whoami", { auth: base64(`${user}:${password}`), noRedirect: true });
    setCredentials(user, password);
    location.assign(nextPage());
  } catch (e) {
    clearCredentials();
    showError(e);
    button.disabled = false;
  }
});

/** Offers single sign-on when the broker has it. */
async function offerSignOn() {
  let enabled = false;
  try {
    enabled = (await get("/oauth/enabled", { noRedirect: true, noAuth: true }))?.enabled === true;
  } catch {
    // an older broker or a proxy in the way: password login only
  }
  if (!enabled) return;
  document.getElementById("sso").hidden = false;
  const button = document.getElementById("sso-login");
  button.addEventListener("click", async () => {
    clearError();
    button.disabled = true;
    try {
      const { authorize_url: url } = await get("/oauth/authorize", { noRedirect: true, noAuth: true });
      location.assign(url);
    } catch (e) {
      showError(e);
      button.disabled = false;
    }
  });
}

const failed = param("error");
if (failed) showError(`Single sign-on failed: ${failed}`);
offerSignOn();
