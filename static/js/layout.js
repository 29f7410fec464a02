// Runs on every page: highlights the current section in the navigation, fills
// the vhost selector (the choice scopes listings and is kept in
// localStorage), shows the signed-in user and handles logout.

import { apiPath, currentUser, get, logout, selectVhost, selectedVhost } from "./api.js";
import { clearError } from "./ui.js";

/** The navigation entry each page belongs to. */
const SECTION = {
  queue: "queues",
  stream: "queues",
  exchange: "exchanges",
  connection: "connections",
  "stream-connection": "stream-connections",
  channel: "channels",
  vhost: "vhosts",
  user: "users",
};

function highlightNav(page) {
  const section = SECTION[page] || page;
  for (const a of document.querySelectorAll("#nav a[data-nav]")) {
    if (a.dataset.nav === section) a.setAttribute("aria-current", "page");
  }
}

async function fillVhosts() {
  const select = document.getElementById("vhost-select");
  if (!select) return;
  const current = selectedVhost();
  try {
    const vhosts = await get(`${apiPath("vhosts")}?columns=name`);
    for (const v of vhosts) {
      const opt = document.createElement("option");
      opt.value = v.name;
      opt.textContent = v.name;
      select.append(opt);
    }
    if (current && !vhosts.some((v) => v.name === current)) selectVhost("");
  } catch {
    // the page shows its own errors; the selector stays at "all"
  }
  select.value = selectedVhost();
  select.addEventListener("change", () => {
    selectVhost(select.value);
    // Listings start over on their first page in the new scope.
    const q = new URLSearchParams(location.search);
    for (const k of [...q.keys()]) if (k === "page" || k.endsWith("_page")) q.delete(k);
    const s = q.toString();
    location.assign(s ? `${location.pathname}?${s}` : location.pathname);
  });
}

function init() {
  const page = document.body.dataset.page;
  highlightNav(page);
  document.getElementById("error-close")?.addEventListener("click", clearError);
  document.getElementById("logout")?.addEventListener("click", logout);
  if (page === "login" || page === "404") return;
  const user = currentUser();
  const name = document.getElementById("username");
  if (name && user) name.textContent = user;
  fillVhosts();
}

init();
