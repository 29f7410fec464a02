// Virtual hosts: a paged table of /api/vhosts and a form to add one.

import { apiPath, put } from "../api.js";
import { $, link } from "../dom.js";
import { num, rate, rateOf } from "../format.js";
import { onSubmit } from "../forms.js";
import { PagedTable } from "../table.js";

const table = new PagedTable({
  id: "vhosts-table",
  container: $("vhosts"),
  url: () => apiPath("vhosts"),
  sort: "name",
  empty: "No virtual hosts",
  columns: [
    { label: "Name", key: "name", render: (v) => link("vhost", { name: v.name }, v.name) },
    { label: "Description", key: "description", render: (v) => v.description ?? "" },
    { label: "Tags", render: (v) => (v.tags || []).join(", ") },
    { label: "Ready", key: "messages_ready", num: true, render: (v) => num(v.messages_ready) },
    { label: "Unacked", key: "messages_unacknowledged", num: true, render: (v) => num(v.messages_unacknowledged) },
    { label: "Total", key: "messages", num: true, render: (v) => num(v.messages) },
    { label: "Publish", key: "message_stats.publish_details.rate", num: true, render: (v) => rate(rateOf(v.message_stats, "publish")) },
    { label: "Deliver / get", key: "message_stats.deliver_get_details.rate", num: true, render: (v) => rate(rateOf(v.message_stats, "deliver_get")) },
  ],
});

onSubmit(
  $("add-vhost-form"),
  async (v) => {
    await put(apiPath("vhosts", v.name), { description: v.description, tags: v.tags });
    await table.reload();
    return v.name;
  },
  { success: (name) => `Virtual host ${name} added` },
);
