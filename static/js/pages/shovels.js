// Shovels: their state from /api/shovels (paused, resumed, restarted or
// deleted from the table) and a form that stores a `shovel` parameter.

import { apiPath, del, put, scoped } from "../api.js";
import { $, el } from "../dom.js";
import { num } from "../format.js";
import { onSubmit } from "../forms.js";
import { PagedTable } from "../table.js";
import { confirmDialog, showError, toast } from "../ui.js";
import { fillVhostSelect } from "./common.js";

/** Where a shovel reads or writes: its URI and queue or exchange. */
function endpoint(s, side) {
  const queue = s[`${side}_queue`];
  const exchange = s[`${side}_exchange`];
  const key = s[`${side}_exchange_key`];
  const what = queue !== undefined && queue !== null ? `queue ${queue}` : exchange !== undefined && exchange !== null ? `exchange ${exchange}${key ? ` (${key})` : ""}` : "";
  return [el("div", {}, s[`${side}_uri`] ?? ""), what ? el("div", { class: "hint" }, what) : ""];
}

/** The state, with the reason of a terminated shovel. */
function state(s) {
  const badge = el("span", { class: s.state === "running" ? "badge" : "badge warn", "data-testid": "shovel-state", "data-name": s.name }, s.state);
  return s.reason ? [badge, el("div", { class: "hint" }, s.reason)] : badge;
}

/** Runs a table action on shovel `s`, then reloads the table. */
async function act(s, action, done) {
  try {
    await action();
    toast(done);
    await table.reload();
  } catch (e) {
    showError(e);
  }
}

function actions(s) {
  const button = (label, testid, cls, onclick) =>
    el("button", { type: "button", class: `small ${cls}`, "data-testid": testid, "data-name": s.name, onclick }, label);
  const paused = s.state === "paused";
  return [
    paused
      ? button("Resume", "resume-shovel", "secondary", () => act(s, () => put(apiPath("shovels", s.vhost, s.name, "resume")), `Shovel ${s.name} resumed`))
      : button("Pause", "pause-shovel", "secondary", () => act(s, () => put(apiPath("shovels", s.vhost, s.name, "pause")), `Shovel ${s.name} paused`)),
    " ",
    button("Restart", "restart-shovel", "secondary", () =>
      act(s, () => del(apiPath("shovels", "vhost", s.vhost, s.name, "restart")), `Shovel ${s.name} restarted`),
    ),
    " ",
    button("Delete", "delete-shovel", "danger", async () => {
      if (!(await confirmDialog(`Delete shovel ${s.name} of ${s.vhost}?`, "Delete"))) return;
      await act(s, () => del(apiPath("parameters", "shovel", s.vhost, s.name)), `Shovel ${s.name} deleted`);
    }),
  ];
}

const table = new PagedTable({
  id: "shovels-table",
  container: $("shovels"),
  url: () => scoped("shovels"),
  sort: "name",
  empty: "No shovels",
  columns: [
    { label: "Virtual host", key: "vhost", render: (s) => s.vhost },
    { label: "Name", key: "name", render: (s) => s.name },
    { label: "State", key: "state", render: state },
    { label: "Source", render: (s) => endpoint(s, "src") },
    { label: "Destination", render: (s) => endpoint(s, "dest") },
    { label: "Ack mode", key: "ack_mode", render: (s) => s.ack_mode ?? "" },
    { label: "Moved", key: "message_count", num: true, render: (s) => num(s.message_count) },
    { label: "", render: actions },
  ],
});

/** The `shovel` parameter value of the form's values. */
export function shovelValue(v) {
  const value = { "src-uri": v.src_uri, "dest-uri": v.dest_uri, "ack-mode": v.ack_mode };
  if (v.src_type === "queue") value["src-queue"] = v.src;
  else {
    value["src-exchange"] = v.src;
    value["src-exchange-key"] = v.src_key || "#";
  }
  if (v.prefetch !== undefined) value["src-prefetch-count"] = v.prefetch;
  if (v.delete_after !== "never") value["src-delete-after"] = v.delete_after;
  if (v.dest_type === "queue") {
    if (v.dest) value["dest-queue"] = v.dest;
  } else {
    value["dest-exchange"] = v.dest;
    if (v.dest_key) value["dest-exchange-key"] = v.dest_key;
  }
  if (v.forward_headers) value["dest-add-forward-headers"] = true;
  if (v.reconnect_delay !== undefined) value["reconnect-delay"] = v.reconnect_delay;
  return value;
}

fillVhostSelect($("shovel-vhost")).catch(showError);

onSubmit(
  $("shovel-form"),
  async (v) => {
    await put(apiPath("parameters", "shovel", v.vhost, v.name), { value: shovelValue(v) });
    await table.reload();
    return v.name;
  },
  { success: (name) => `Shovel ${name} added` },
);
