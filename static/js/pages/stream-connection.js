// One stream connection (?vhost=&name=): details, data-rate chart, its
// publishers and consumers with their counters, client properties, and
// closing it with a reason (DELETE /api/connections/{name} with X-Reason).

import { apiPath, get, request } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, dl, fill, link, param } from "../dom.js";
import { bool, bytes, duration, json, num, timestamp } from "../format.js";
import { onSubmit } from "../forms.js";
import { PagedTable } from "../table.js";
import { confirmDialog, showError } from "../ui.js";

const vhost = param("vhost");
const name = param("name");
const path = apiPath("stream", "connections", vhost, name);
$("stream-connection-name").textContent = name;
document.title = `Stream connection ${name} · LavinMQ`;
const chart = new LiveChart($("stream-connection-rates-chart"), ["From client", "To client"], { unit: " B/s" });
let propsShown = false;

function show(c) {
  fill(
    "stream-connection-details",
    dl(
      [
        ["Client name", c.user_provided_name ?? ""],
        ["Virtual host", link("vhost", { name: c.vhost }, c.vhost)],
        ["User", c.user],
        ["State", c.state],
        ["TLS", bool(c.ssl)],
        ["Authentication", c.auth_mechanism ?? ""],
        ["Client", `${c.peer_host}:${c.peer_port}`],
        ["Local", `${c.host}:${c.port}`],
        ["Connected at", timestamp(c.connected_at)],
        ["Heartbeat", c.timeout ? duration(c.timeout) : "off"],
        ["Frame max", num(c.frame_max)],
        ["Received", bytes(c.recv_oct)],
        ["Sent", bytes(c.send_oct)],
      ],
      "stream-connection-details-list",
    ),
  );
  chart.push([c.recv_oct_details?.rate ?? 0, c.send_oct_details?.rate ?? 0]);
  if (!propsShown) {
    propsShown = true;
    const props = Object.entries(c.client_properties || {}).map(([k, v]) => [k, typeof v === "object" ? json(v) : String(v)]);
    fill("stream-connection-client-properties", dl(props, "stream-connection-client-properties-list"));
  }
}

poll(async () => show(await get(path)), showError);

/** A link to the stream page of a publisher's or consumer's stream. */
const streamLink = (x) => link("stream", { vhost: x.queue.vhost, name: x.queue.name }, x.queue.name);

new PagedTable({
  id: "stream-connection-publishers-table",
  container: $("stream-connection-publishers"),
  url: () => `${path}/publishers`,
  prefix: "pub_",
  sort: "publisher_id",
  filter: false,
  empty: "No publishers",
  columns: [
    { label: "Stream", key: "queue.name", render: streamLink },
    { label: "Publisher id", key: "publisher_id", num: true, render: (p) => String(p.publisher_id) },
    { label: "Reference", key: "reference", render: (p) => p.reference },
    { label: "Published", key: "published", num: true, render: (p) => num(p.published) },
    { label: "Confirmed", key: "confirmed", num: true, render: (p) => num(p.confirmed) },
    { label: "Errored", key: "errored", num: true, render: (p) => num(p.errored) },
  ],
});

new PagedTable({
  id: "stream-connection-consumers-table",
  container: $("stream-connection-consumers"),
  url: () => `${path}/consumers`,
  prefix: "con_",
  sort: "subscription_id",
  filter: false,
  empty: "No consumers",
  columns: [
    { label: "Stream", key: "queue.name", render: streamLink },
    { label: "Subscription id", key: "subscription_id", num: true, render: (c) => String(c.subscription_id) },
    { label: "Offset", key: "offset", num: true, render: (c) => num(c.offset) },
    { label: "Offset lag", key: "offset_lag", num: true, render: (c) => num(c.offset_lag) },
    { label: "Credits", key: "credits", num: true, render: (c) => num(c.credits) },
    { label: "Consumed", key: "consumed", num: true, render: (c) => num(c.consumed) },
    { label: "Active", key: "active", render: (c) => bool(c.active) },
    { label: "Properties", render: (c) => json(c.properties) },
  ],
});

onSubmit(
  $("close-stream-connection-form"),
  async (v) => {
    if (!(await confirmDialog(`Close stream connection ${name}?`, "Close"))) return false;
    await request("DELETE", apiPath("connections", name), undefined, { headers: { "X-Reason": v.reason } });
    location.assign("/stream-connections");
    return true;
  },
  { success: (done) => (done ? "Connection closed" : ""), reset: false },
);
