// Queues: a paged table of /api/queues (or one vhost's), a declare form and
// a form for super streams (RabbitMQ's /api/stream/super-streams endpoint).

import { apiPath, put, scoped, selectedVhost } from "../api.js";
import { $, link } from "../dom.js";
import { num, rate, rateOf } from "../format.js";
import { onSubmit, parseJson } from "../forms.js";
import { PagedTable } from "../table.js";
import { showError } from "../ui.js";
import { features, fillVhostSelect } from "./common.js";

const columns = [
  { label: "Name", key: "name", render: (q) => link("queue", { vhost: q.vhost, name: q.name }, q.name) },
  ...(selectedVhost() ? [] : [{ label: "Virtual host", key: "vhost", render: (q) => q.vhost }]),
  { label: "Type", key: "type", render: (q) => q.type },
  { label: "Features", render: features },
  { label: "State", key: "state", render: (q) => q.state },
  { label: "Consumers", key: "consumers", num: true, render: (q) => num(q.consumers) },
  { label: "Ready", key: "messages_ready", num: true, render: (q) => num(q.messages_ready) },
  { label: "Unacked", key: "messages_unacknowledged", num: true, render: (q) => num(q.messages_unacknowledged) },
  { label: "Total", key: "messages", num: true, render: (q) => num(q.messages) },
  {
    label: "Publish",
    key: "message_stats.publish_details.rate",
    num: true,
    render: (q) => rate(rateOf(q.message_stats, "publish")),
  },
  {
    label: "Deliver / get",
    key: "message_stats.deliver_get_details.rate",
    num: true,
    render: (q) => rate(rateOf(q.message_stats, "deliver_get")),
  },
];

const table = new PagedTable({
  id: "queues-table",
  container: $("queues"),
  url: () => scoped("queues"),
  columns,
  sort: "name",
  empty: "No queues",
});

fillVhostSelect($("declare-queue-vhost")).catch(showError);
fillVhostSelect($("add-super-stream-vhost")).catch(showError);

onSubmit(
  $("declare-queue-form"),
  async (v) => {
    const args = parseJson(v.arguments, "Arguments");
    if (v.type) args["x-queue-type"] = v.type;
    await put(apiPath("queues", v.vhost, v.name), { durable: v.durable, auto_delete: v.auto_delete, arguments: args });
    await table.reload();
    return v.name;
  },
  { success: (name) => `Queue ${name} added` },
);

onSubmit(
  $("add-super-stream-form"),
  async (v) => {
    // Binding keys, when given, name the partitions; else their number does.
    const keys = (v.keys || "").trim();
    const body = keys ? { "binding-keys": keys } : { partitions: v.partitions };
    const args = {};
    if (v.max_length_bytes) args["max-length-bytes"] = v.max_length_bytes;
    if (v.max_age && v.max_age.trim()) args["max-age"] = v.max_age.trim();
    body.arguments = args;
    await put(apiPath("stream", "super-streams", v.vhost, v.name), body);
    await table.reload();
    return v.name;
  },
  { success: (name) => `Super stream ${name} added` },
);
