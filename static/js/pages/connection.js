// One connection (?name=): details, data-rate chart, its channels, client
// properties, and closing it with a reason (DELETE with X-Reason).

import { apiPath, get, request } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, dl, fill, link, param } from "../dom.js";
import { bool, bytes, duration, json, num, timestamp } from "../format.js";
import { onSubmit } from "../forms.js";
import { PagedTable } from "../table.js";
import { confirmDialog, showError } from "../ui.js";

const name = param("name");
const path = apiPath("connections", name);
$("connection-name").textContent = name;
document.title = `Connection ${name} · LavinMQ`;
const chart = new LiveChart($("connection-rates-chart"), ["From client", "To client"], { unit: " B/s" });
let propsShown = false;

function show(c) {
  fill(
    "connection-details",
    dl(
      [
        ["Client name", c.user_provided_name ?? ""],
        ["Virtual host", link("vhost", { name: c.vhost }, c.vhost)],
        ["User", c.user],
        ["Protocol", c.protocol],
        ["TLS", bool(c.ssl)],
        ["Authentication", c.auth_mechanism ?? ""],
        ["Peer", `${c.peer_host}:${c.peer_port}`],
        ["Local", `${c.host}:${c.port}`],
        ["Connected at", timestamp(c.connected_at)],
        ["Heartbeat", c.timeout ? duration(c.timeout) : "off"],
        ["Frame max", num(c.frame_max)],
        ["Channel max", num(c.channel_max)],
        ["Channels", num(c.channels)],
        ["Received", bytes(c.recv_oct)],
        ["Sent", bytes(c.send_oct)],
      ],
      "connection-details-list",
    ),
  );
  chart.push([c.recv_oct_details?.rate ?? 0, c.send_oct_details?.rate ?? 0]);
  if (!propsShown) {
    propsShown = true;
    const props = Object.entries(c.client_properties || {}).map(([k, v]) => [k, typeof v === "object" ? json(v) : String(v)]);
    fill("connection-client-properties", dl(props, "connection-client-properties-list"));
  }
}

poll(async () => show(await get(path)), showError);

new PagedTable({
  id: "connection-channels-table",
  container: $("connection-channels"),
  url: () => `${path}/channels`,
  prefix: "ch_",
  sort: "number",
  empty: "No channels",
  columns: [
    { label: "Channel", key: "name", render: (ch) => link("channel", { name: ch.name }, ch.name) },
    { label: "Number", key: "number", num: true, render: (ch) => String(ch.number) },
    { label: "Consumers", key: "consumer_count", num: true, render: (ch) => num(ch.consumer_count) },
    { label: "Prefetch", key: "prefetch_count", num: true, render: (ch) => num(ch.prefetch_count) },
    { label: "Unacked", key: "messages_unacknowledged", num: true, render: (ch) => num(ch.messages_unacknowledged) },
    { label: "Confirm", key: "confirm", render: (ch) => bool(ch.confirm) },
    { label: "State", key: "state", render: (ch) => ch.state },
  ],
});

onSubmit(
  $("close-connection-form"),
  async (v) => {
    if (!(await confirmDialog(`Close connection ${name}?`, "Close"))) return false;
    await request("DELETE", path, undefined, { headers: { "X-Reason": v.reason } });
    location.assign("/connections");
    return true;
  },
  { success: (done) => (done ? "Connection closed" : ""), reset: false },
);
