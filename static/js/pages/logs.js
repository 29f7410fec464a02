// The live log: server-sent events from GET /api/livelog (authenticated by
// the login cookie, as EventSource cannot set headers), each
// [severity, source, message]. An event's id is the line's time in
// milliseconds since the Unix epoch (moved up by one when lines share a
// millisecond), so the time shown is when the broker logged the line, also
// for the kept lines sent on connecting.

import { $, el } from "../dom.js";
import { showError } from "../ui.js";

const MAX_LINES = 5000;
const log = $("log");
const status = $("log-status");
const filter = $("log-filter");
let paused = false;
let source = null;
// The newest line shown: after a pause the new stream starts over with every
// kept line, and those already shown are skipped.
let lastId = 0;

function matches(line) {
  const f = filter.value.trim().toLowerCase();
  return !f || line.textContent.toLowerCase().includes(f);
}

/** The time of a line from its event id (ms since the epoch); now when it has none. */
function lineTime(id) {
  const ms = /^\d+$/.test(id || "") ? Number(id) : Date.now();
  const d = new Date(ms);
  return `${d.toLocaleDateString()} ${d.toLocaleTimeString()}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

function add(ev) {
  const id = /^\d+$/.test(ev.lastEventId || "") ? Number(ev.lastEventId) : 0;
  if (id) {
    if (id <= lastId) return;
    lastId = id;
  }
  let severity = "";
  let from = "";
  let message = ev.data;
  try {
    [severity, from, message] = JSON.parse(ev.data);
  } catch {
    // not LavinMQ's array: show the text as it is
  }
  const line = el(
    "div",
    { class: `line lvl-${severity}`, "data-testid": "log-line", "data-id": ev.lastEventId || null },
    `${lineTime(ev.lastEventId)} ${severity} ${from}: ${message}`,
  );
  line.hidden = !matches(line);
  log.append(line);
  while (log.childElementCount > MAX_LINES) log.firstElementChild.remove();
  if ($("log-follow").checked) log.scrollTop = log.scrollHeight;
}

function connect() {
  source = new EventSource("/api/livelog");
  status.textContent = "Connecting…";
  source.onopen = () => {
    status.textContent = "Live";
  };
  source.onmessage = add;
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      status.textContent = "Disconnected";
      showError("The live log was refused or closed (it needs the administrator tag)");
    } else {
      status.textContent = "Reconnecting…";
    }
  };
}

$("log-pause").addEventListener("click", () => {
  paused = !paused;
  if (paused) {
    source?.close();
    status.textContent = "Paused";
    $("log-pause").textContent = "Resume";
  } else {
    connect();
    $("log-pause").textContent = "Pause";
  }
});
$("log-clear").addEventListener("click", () => log.replaceChildren());
filter.addEventListener("input", () => {
  for (const line of log.children) line.hidden = !matches(line);
});

connect();
