// The overview: object and queue totals, live charts of queued messages and
// message rates (GET /api/overview every 5 s), the node's figures (GET
// /api/nodes) and the listeners.

import { get } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, dl, el, fill, simpleTable } from "../dom.js";
import { bytes, duration, num, rateOf } from "../format.js";
import { showError } from "../ui.js";

/** The message rates charted, as [message_stats key, label]. */
const RATES = [
  ["publish", "Publish"],
  ["confirm", "Confirm"],
  ["deliver_get", "Deliver / get"],
  ["ack", "Ack"],
  ["redeliver", "Redeliver"],
  ["return_unroutable", "Returned"],
  ["drop_unroutable", "Dropped"],
];
const QUEUED = [
  ["messages", "Total"],
  ["messages_ready", "Ready"],
  ["messages_unacknowledged", "Unacked"],
];

const queuedChart = new LiveChart($("queue-totals-chart"), QUEUED.map(([, l]) => l));
const rateChart = new LiveChart($("message-rates-chart"), RATES.map(([, l]) => l), { unit: "/s" });
let listenersShown = false;

function stat(label, value, href, testid) {
  const v = el("span", { class: "value", "data-testid": testid }, value);
  return el("div", { class: "stat" }, href ? el("a", { href }, v) : v, el("span", { class: "label" }, label));
}

async function refresh() {
  const o = await get("/api/overview");
  const t = o.object_totals || {};
  const q = o.queue_totals || {};
  fill(
    "object-totals",
    stat("Connections", num(t.connections), "/connections", "total-connections"),
    stat("Channels", num(t.channels), "/channels", "total-channels"),
    stat("Consumers", num(t.consumers), "/consumers", "total-consumers"),
    stat("Exchanges", num(t.exchanges), "/exchanges", "total-exchanges"),
    stat("Queues", num(t.queues), "/queues", "total-queues"),
    stat("Bindings", num(t.bindings), null, "total-bindings"),
    stat("Messages", num(q.messages), null, "total-messages"),
    stat("Ready", num(q.messages_ready), null, "total-ready"),
    stat("Unacked", num(q.messages_unacknowledged), null, "total-unacked"),
  );
  queuedChart.push(QUEUED.map(([k]) => q[k] ?? 0));
  const ms = o.message_stats || {};
  rateChart.push(RATES.map(([k]) => rateOf(ms, k)));
  if (!listenersShown) {
    listenersShown = true;
    fill(
      "listeners",
      simpleTable(
        "listeners-table",
        ["Protocol", "Address", "Port"],
        (o.listeners || []).map((l) => [l.protocol, l.ip_address, String(l.port)]),
        "No listeners",
      ),
    );
  }
}

async function refreshNode() {
  try {
    const [n] = await get("/api/nodes");
    if (!n) return;
    fill(
      "node-info",
      dl(
        [
          ["Name", n.name],
          ["Uptime", duration((n.uptime || 0) / 1000)],
          ["Processors", num(n.processors)],
          ["Memory used", `${bytes(n.mem_used)}${n.mem_limit ? ` of ${bytes(n.mem_limit)}` : ""}`],
          ["Disk free", `${bytes(n.disk_free)} (limit ${bytes(n.disk_free_limit)})${n.disk_free_alarm ? " — ALARM" : ""}`],
          ["File descriptors", `${num(n.fd_used)} of ${num(n.fd_total)}`],
          ["Sockets", num(n.sockets_used)],
        ],
        "node-props",
      ),
    );
  } catch (e) {
    if (e.status === 403) fill("node-info", el("p", { class: "hint" }, "Node figures need the monitoring or administrator tag."));
    else throw e;
  }
}

poll(async () => {
  await Promise.all([refresh(), refreshNode()]);
}, showError);
