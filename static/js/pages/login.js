// The login page: checks the credentials with GET /api/whoami, keeps them in
// cookie "m" and goes on to the page asked for (?next=) or the overview.

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
