// Channels: a paged table of /api/channels (or one vhost's).

import { scoped, selectedVhost } from "../api.js";
import { $, link } from "../dom.js";
import { num, rate, rateOf } from "../format.js";
import { PagedTable } from "../table.js";

new PagedTable({
  id: "channels-table",
  container: $("channels"),
  url: () => scoped("channels", "vhosts"),
  sort: "name",
  empty: "No channels",
  columns: [
    { label: "Channel", key: "name", render: (ch) => link("channel", { name: ch.name }, ch.name) },
    ...(selectedVhost() ? [] : [{ label: "Virtual host", key: "vhost", render: (ch) => ch.vhost }]),
    { label: "User", key: "user", render: (ch) => ch.user },
    { label: "Mode", key: "confirm", render: (ch) => [ch.confirm ? "confirm" : "", ch.transactional ? "tx" : ""].filter(Boolean).join(", ") },
    { label: "Consumers", key: "consumer_count", num: true, render: (ch) => num(ch.consumer_count) },
    { label: "Prefetch", key: "prefetch_count", num: true, render: (ch) => num(ch.prefetch_count) },
    { label: "Unacked", key: "messages_unacknowledged", num: true, render: (ch) => num(ch.messages_unacknowledged) },
    { label: "Unconfirmed", key: "messages_unconfirmed", num: true, render: (ch) => num(ch.messages_unconfirmed) },
    { label: "Publish", key: "message_stats.publish_details.rate", num: true, render: (ch) => rate(rateOf(ch.message_stats, "publish")) },
    { label: "Deliver / get", key: "message_stats.deliver_get_details.rate", num: true, render: (ch) => rate(rateOf(ch.message_stats, "deliver_get")) },
    { label: "Ack", key: "message_stats.ack_details.rate", num: true, render: (ch) => rate(rateOf(ch.message_stats, "ack")) },
    { label: "Flow", key: "state", render: (ch) => ch.state },
  ],
});
