// A stream queue (?vhost=&name=): reads messages from an offset with
// POST /api/queues/{vhost}/{name}/stream, without consuming them, and lists
// its stream-protocol publishers and consumers.

import { apiPath, get, post } from "../api.js";
import { poll } from "../chart.js";
import { $, dl, el, fill, link, pageUrl, param, simpleTable } from "../dom.js";
import { bool, bytes, json, num } from "../format.js";
import { onClick, onSubmit } from "../forms.js";
import { showError } from "../ui.js";

const vhost = param("vhost");
const name = param("name");
$("stream-name").textContent = name;
$("stream-queue-link").href = pageUrl("queue", { vhost, name });
document.title = `Stream ${name} · LavinMQ`;
let nextOffset = null;

/** The offset a text field holds: a number when it is one. */
function offsetOf(text) {
  const t = String(text ?? "").trim();
  return /^\d+$/.test(t) ? Number(t) : t || "first";
}

async function read(offset, count, encoding) {
  const msgs = await post(`${apiPath("queues", vhost, name)}/stream`, { offset, count, encoding });
  const out = msgs.map((m) => {
    const off = m.properties?.headers?.["x-stream-offset"];
    if (off !== undefined) nextOffset = Number(off) + 1;
    return el(
      "div",
      { class: "message", "data-testid": "message", "data-offset": off },
      el("h3", {}, `Offset ${off ?? "?"}`),
      dl([
        ["Exchange", m.exchange === "" ? "(AMQP default)" : m.exchange],
        ["Routing key", m.routing_key],
        ["Redelivered", bool(m.redelivered)],
        ["Properties", json(m.properties)],
        ["Payload", `${bytes(m.payload_bytes)}, encoding: ${m.payload_encoding}`],
      ]),
      el("pre", { class: "payload", "data-testid": "message-payload" }, m.payload),
    );
  });
  if (!out.length) out.push(el("p", { class: "hint" }, "No messages from this offset."));
  fill("stream-messages", out);
  $("stream-read-more").hidden = nextOffset === null || msgs.length === 0;
  return msgs.length;
}

onSubmit(
  $("stream-read-form"),
  (v) => {
    nextOffset = null;
    return read(offsetOf(v.offset), v.count ?? 10, v.encoding);
  },
  { success: (n) => `${n} message(s)`, reset: false },
);

onClick($("stream-read-more"), async () => {
  const f = $("stream-read-form");
  f.elements.offset.value = String(nextOffset);
  await read(nextOffset, Number(f.elements.count.value) || 10, f.elements.encoding.value);
});

/** A link to the stream connection of a publisher or consumer. */
const connectionLink = (x) => link("stream-connection", { vhost, name: x.connection_details.name }, x.connection_details.name);

/** The stream's publishers and consumers over the stream protocol. */
async function loadClients() {
  const [publishers, consumers] = await Promise.all([
    get(apiPath("stream", "publishers", vhost, name)),
    get(apiPath("stream", "consumers", vhost)),
  ]);
  fill(
    "stream-publishers",
    simpleTable(
      "stream-publishers-table",
      ["Connection", "Publisher id", "Reference", "Published", "Confirmed", "Errored"],
      publishers.map((p) => [connectionLink(p), String(p.publisher_id), p.reference, num(p.published), num(p.confirmed), num(p.errored)]),
      "No publishers",
    ),
  );
  fill(
    "stream-consumers",
    simpleTable(
      "stream-consumers-table",
      ["Connection", "Subscription id", "Offset", "Offset lag", "Credits", "Consumed", "Active"],
      consumers
        .filter((c) => c.queue.name === name)
        .map((c) => [connectionLink(c), String(c.subscription_id), num(c.offset), num(c.offset_lag), num(c.credits), num(c.consumed), bool(c.active)]),
      "No consumers",
    ),
  );
}

poll(loadClients, showError);
