// Federation: the `federation-upstream` parameters (edit, delete, and a form
// that stores one) and the links policies started, from /api/federation-links.

import { apiPath, del, put, scoped, selectedVhost } from "../api.js";
import { $, el } from "../dom.js";
import { num } from "../format.js";
import { onSubmit } from "../forms.js";
import { PagedTable } from "../table.js";
import { confirmDialog, showError, toast } from "../ui.js";
import { fillVhostSelect } from "./common.js";

/** Form fields and the upstream keys they hold. */
const FIELDS = [
  ["uri", "uri"],
  ["exchange", "exchange"],
  ["queue", "queue"],
  ["prefetch", "prefetch-count"],
  ["reconnect_delay", "reconnect-delay"],
  ["ack_mode", "ack-mode"],
  ["max_hops", "max-hops"],
  ["expires", "expires"],
  ["message_ttl", "message-ttl"],
  ["trust_user_id", "trust-user-id"],
];

function edit(p) {
  const f = $("upstream-form");
  f.elements.vhost.value = p.vhost;
  f.elements.name.value = p.name;
  for (const [field, key] of FIELDS) {
    const input = f.elements[field];
    const v = p.value[key];
    if (input.type === "checkbox") input.checked = v === true;
    else if (Array.isArray(v)) input.value = v.join(" ");
    else input.value = v ?? (input.tagName === "SELECT" ? input.options[0].value : "");
  }
  f.elements.name.focus();
}

async function remove(p) {
  if (!(await confirmDialog(`Delete upstream ${p.name} of ${p.vhost}?`, "Delete"))) return;
  try {
    await del(apiPath("parameters", "federation-upstream", p.vhost, p.name));
    toast(`Upstream ${p.name} deleted`);
    await upstreams.reload();
  } catch (e) {
    showError(e);
  }
}

const upstreams = new PagedTable({
  id: "upstreams-table",
  container: $("upstreams"),
  url: () => apiPath("parameters", "federation-upstream", ...(selectedVhost() ? [selectedVhost()] : [])),
  sort: "name",
  empty: "No upstreams",
  columns: [
    { label: "Virtual host", key: "vhost", render: (p) => p.vhost },
    { label: "Name", key: "name", render: (p) => p.name },
    { label: "URI", render: (p) => [p.value.uri].flat().join(", ") },
    { label: "Exchange", render: (p) => p.value.exchange ?? "" },
    { label: "Queue", render: (p) => p.value.queue ?? "" },
    { label: "Max hops", num: true, render: (p) => String(p.value["max-hops"] ?? 1) },
    {
      label: "",
      render: (p) => [
        el("button", { type: "button", class: "small secondary", "data-testid": "edit-upstream", "data-name": p.name, onclick: () => edit(p) }, "Edit"),
        " ",
        el("button", { type: "button", class: "small danger", "data-testid": "delete-upstream", "data-name": p.name, onclick: () => remove(p) }, "Delete"),
      ],
    },
  ],
});

new PagedTable({
  id: "links-table",
  container: $("links"),
  url: () => scoped("federation-links"),
  sort: "upstream",
  filter: false,
  empty: "No links: no policy applies an upstream",
  columns: [
    { label: "Virtual host", key: "vhost", render: (l) => l.vhost },
    { label: "Upstream", key: "upstream", render: (l) => l.upstream },
    { label: "Type", key: "type", render: (l) => l.type },
    { label: "Resource", render: (l) => l.exchange ?? l.queue ?? "" },
    { label: "URI", render: (l) => l.uri },
    {
      label: "State",
      key: "status",
      render: (l) => [
        el("span", { class: l.status === "running" ? "badge" : "badge warn", "data-testid": "link-status" }, l.status),
        l.error ? el("div", { class: "hint" }, l.error) : "",
      ],
    },
    { label: "Moved", num: true, render: (l) => num(l.messages_federated ?? 0) },
  ],
});

/** The `federation-upstream` parameter value of the form's values. */
function upstreamValue(v) {
  const value = {};
  for (const [field, key] of FIELDS) {
    const x = v[field];
    if (x === undefined || x === "" || x === false) continue;
    value[key] = x;
  }
  // Several URIs, separated by spaces, are tried in turn.
  const uris = String(v.uri ?? "").trim().split(/\s+/).filter(Boolean);
  if (uris.length > 1) value.uri = uris;
  else if (uris.length === 1) value.uri = uris[0];
  return value;
}

fillVhostSelect($("upstream-vhost")).catch(showError);

onSubmit(
  $("upstream-form"),
  async (v) => {
    await put(apiPath("parameters", "federation-upstream", v.vhost, v.name), { value: upstreamValue(v) });
    await upstreams.reload();
    return v.name;
  },
  { success: (name) => `Upstream ${name} saved` },
);
