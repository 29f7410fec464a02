// One queue (?vhost=&name=): details, live charts, consumers, bindings (add and
// remove), publish, get messages, purge, delete, pause and resume, and move
// the messages elsewhere.

import { apiPath, del, get, post, put } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, dl, el, fill, link, pageUrl, param, simpleTable } from "../dom.js";
import { bool, bytes, json, num, rateOf } from "../format.js";
import { onClick, onConfirmedClick, onSubmit, parseJson } from "../forms.js";
import { confirmDialog, showError, toast } from "../ui.js";
import { endpointLink, exchangeSegment, publishFrom, publishResult } from "./common.js";

const vhost = param("vhost");
const name = param("name");
const path = apiPath("queues", vhost, name);
$("queue-name").textContent = name;
document.title = `Queue ${name} · LavinMQ`;

const RATES = [
  ["publish", "Publish"],
  ["deliver_get", "Deliver / get"],
  ["ack", "Ack"],
  ["redeliver", "Redeliver"],
];
const msgChart = new LiveChart($("queue-messages-chart"), ["Ready", "Unacked"]);
const rateChart = new LiveChart($("queue-rates-chart"), RATES.map(([, l]) => l), { unit: "/s" });

function showQueue(q) {
  fill(
    "queue-details",
    dl(
      [
        ["Virtual host", link("vhost", { name: q.vhost }, q.vhost)],
        ["Type", q.type],
        ["State", q.state],
        ["Durable", bool(q.durable)],
        ["Auto delete", bool(q.auto_delete)],
        ["Exclusive", bool(q.exclusive)],
        ["Arguments", json(q.arguments)],
        ["Policy", q.policy ? link("policies", {}, q.policy) : ""],
        ["Operator policy", q.operator_policy || ""],
        ["Effective policy definition", json(q.effective_policy_definition)],
        ["Consumers", num(q.consumers)],
        ["Ready", num(q.messages_ready)],
        ["Unacked", num(q.messages_unacknowledged)],
        ["Total", num(q.messages)],
      ],
      "queue-details-list",
    ),
  );
  const paused = q.state === "paused";
  $("queue-pause").hidden = paused;
  $("queue-resume").hidden = !paused;
  const stream = q.type === "stream";
  $("queue-stream-link").hidden = !stream;
  $("queue-stream-link").href = pageUrl("stream", { vhost, name });
  $("get-panel").hidden = stream;
  msgChart.push([q.messages_ready, q.messages_unacknowledged]);
  rateChart.push(RATES.map(([k]) => rateOf(q.message_stats, k)));
  fill(
    "queue-consumers",
    simpleTable(
      "queue-consumers-table",
      ["Channel", "Consumer tag", "Ack required", "Exclusive", "Prefetch", "Arguments"],
      (q.consumer_details || []).map((c) => [
        link("channel", { name: c.channel_details?.name }, c.channel_details?.name ?? ""),
        c.consumer_tag,
        bool(c.ack_required),
        bool(c.exclusive),
        num(c.prefetch_count),
        json(c.arguments),
      ]),
      "No consumers",
    ),
  );
}

async function loadBindings() {
  const bindings = await get(`${path}/bindings`);
  fill(
    "queue-bindings",
    simpleTable(
      "queue-bindings-table",
      ["From", "Routing key", "Arguments", ""],
      bindings.map((b) => [
        endpointLink(vhost, "exchange", b.source),
        b.routing_key,
        json(b.arguments),
        b.source === ""
          ? ""
          : el(
              "button",
              {
                type: "button",
                class: "small danger",
                "data-testid": "unbind",
                "data-source": b.source,
                "data-routing-key": b.routing_key,
                onclick: () => unbind(b),
              },
              "Unbind",
            ),
      ]),
      "No bindings",
    ),
  );
}

async function unbind(b) {
  if (!(await confirmDialog(`Remove the binding from ${b.source} with key "${b.routing_key}"?`, "Unbind"))) return;
  try {
    await del(apiPath("bindings", vhost, "e", b.source, "q", name, b.properties_key));
    toast("Binding removed");
    await loadBindings();
  } catch (e) {
    showError(e);
  }
}

poll(async () => showQueue(await get(path)), showError);
loadBindings().catch(showError);

onSubmit(
  $("bind-queue-form"),
  async (v) => {
    await post(apiPath("bindings", vhost, "e", exchangeSegment(v.exchange), "q", name), {
      routing_key: v.routing_key,
      arguments: parseJson(v.arguments, "Arguments"),
    });
    await loadBindings();
  },
  { success: "Binding added" },
);

onSubmit($("publish-form"), (v) => publishFrom(vhost, "", { ...v, routing_key: name }), {
  success: publishResult,
  reset: false,
});

onSubmit(
  $("get-messages-form"),
  async (v) => {
    const body = { count: v.count ?? 1, ackmode: v.ackmode, encoding: v.encoding };
    if (v.truncate !== undefined) body.truncate = v.truncate;
    const msgs = await post(`${path}/get`, body);
    showMessages(msgs);
    return msgs.length;
  },
  { success: (n) => (n ? `${n} message(s)` : "The queue is empty"), reset: false },
);

function showMessages(msgs) {
  const out = msgs.map((m, i) =>
    el(
      "div",
      { class: "message", "data-testid": "message" },
      el("h3", {}, `Message ${i + 1}`),
      dl([
        ["Exchange", m.exchange === "" ? "(AMQP default)" : m.exchange],
        ["Routing key", m.routing_key],
        ["Redelivered", bool(m.redelivered)],
        ["Remaining in queue", num(m.message_count)],
        ["Properties", json(m.properties)],
        ["Payload", `${bytes(m.payload_bytes)}, encoding: ${m.payload_encoding}`],
      ]),
      el("pre", { class: "payload", "data-testid": "message-payload" }, m.payload),
    ),
  );
  if (!out.length) out.push(el("p", { class: "hint" }, "No messages were in the queue."));
  fill("get-messages-result", out);
}

onConfirmedClick(
  $("queue-purge"),
  () => `Purge all ready messages of queue ${name}?`,
  async () => {
    await del(`${path}/contents`);
    showQueue(await get(path));
  },
  "Queue purged",
);

onConfirmedClick(
  $("queue-delete"),
  () => `Delete queue ${name}?`,
  async () => {
    await del(path);
    location.assign("/queues");
  },
);

onClick($("queue-pause"), async () => {
  await put(`${path}/pause`);
  showQueue(await get(path));
}, "Queue paused");

onClick($("queue-resume"), async () => {
  await put(`${path}/resume`);
  showQueue(await get(path));
}, "Queue resumed");

/** A host-less URI for this broker's vhost `v`. */
const localUri = (v) => `amqp:///${encodeURIComponent(v)}`;

// "Move messages": a one-off shovel that moves the queue's current length and
// then deletes itself; plain "amqp://" means this broker and this vhost.
onSubmit(
  $("move-form"),
  async (v) => {
    const dest = v.uri.trim() === "amqp://" ? localUri(vhost) : v.uri.trim();
    await put(apiPath("parameters", "shovel", vhost, `Move from ${name}`), {
      value: {
        "src-uri": localUri(vhost),
        "src-queue": name,
        "src-delete-after": "queue-length",
        "dest-uri": dest,
        "dest-queue": v.queue,
        "ack-mode": "on-confirm",
      },
    });
    return v.queue;
  },
  { success: (q) => `Moving the messages to ${q}` },
);
