// Exchanges: a paged table of /api/exchanges (or one vhost's) and a declare form.

import { apiPath, put, scoped, selectedVhost } from "../api.js";
import { $, link } from "../dom.js";
import { rate, rateOf } from "../format.js";
import { onSubmit, parseJson } from "../forms.js";
import { PagedTable } from "../table.js";
import { showError } from "../ui.js";
import { features, fillVhostSelect } from "./common.js";

const table = new PagedTable({
  id: "exchanges-table",
  container: $("exchanges"),
  url: () => scoped("exchanges"),
  sort: "name",
  empty: "No exchanges",
  columns: [
    {
      label: "Name",
      key: "name",
      render: (e) => link("exchange", { vhost: e.vhost, name: e.name }, e.name === "" ? "(AMQP default)" : e.name),
    },
    ...(selectedVhost() ? [] : [{ label: "Virtual host", key: "vhost", render: (e) => e.vhost }]),
    { label: "Type", key: "type", render: (e) => e.type },
    { label: "Features", render: features },
    {
      label: "Message rate in",
      key: "message_stats.publish_in_details.rate",
      num: true,
      render: (e) => rate(rateOf(e.message_stats, "publish_in")),
    },
    {
      label: "Message rate out",
      key: "message_stats.publish_out_details.rate",
      num: true,
      render: (e) => rate(rateOf(e.message_stats, "publish_out")),
    },
  ],
});

fillVhostSelect($("declare-exchange-vhost")).catch(showError);

onSubmit(
  $("declare-exchange-form"),
  async (v) => {
    await put(apiPath("exchanges", v.vhost, v.name), {
      type: v.type,
      durable: v.durable,
      auto_delete: v.auto_delete,
      internal: v.internal,
      arguments: parseJson(v.arguments, "Arguments"),
    });
    await table.reload();
    return v.name;
  },
  { success: (name) => `Exchange ${name} added` },
);
