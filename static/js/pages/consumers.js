// Consumers: a paged table of /api/consumers (or one vhost's); cancel one.

import { scoped, selectedVhost } from "../api.js";
import { $, link } from "../dom.js";
import { bool, json, num } from "../format.js";
import { PagedTable } from "../table.js";
import { cancelButton } from "./common.js";

const table = new PagedTable({
  id: "consumers-table",
  container: $("consumers"),
  url: () => scoped("consumers"),
  sort: "consumer_tag",
  filter: false,
  empty: "No consumers",
  columns: [
    ...(selectedVhost() ? [] : [{ label: "Virtual host", key: "queue.vhost", render: (c) => c.queue.vhost }]),
    { label: "Queue", key: "queue.name", render: (c) => link("queue", { vhost: c.queue.vhost, name: c.queue.name }, c.queue.name) },
    { label: "Channel", key: "channel_details.name", render: (c) => link("channel", { name: c.channel_details.name }, c.channel_details.name) },
    { label: "Consumer tag", key: "consumer_tag", render: (c) => c.consumer_tag },
    { label: "Ack required", key: "ack_required", render: (c) => bool(c.ack_required) },
    { label: "Exclusive", key: "exclusive", render: (c) => bool(c.exclusive) },
    { label: "Prefetch", key: "prefetch_count", num: true, render: (c) => num(c.prefetch_count) },
    { label: "Arguments", render: (c) => json(c.arguments) },
    { label: "", render: (c) => cancelButton(c, () => table.reload()) },
  ],
});
