// Policies and operator policies (the same page over /api/policies or
// /api/operator-policies): a paged table with edit and delete, and a form.

import { apiPath, del, put, scoped } from "../api.js";
import { $, el } from "../dom.js";
import { json } from "../format.js";
import { onSubmit, parseJson } from "../forms.js";
import { PagedTable } from "../table.js";
import { confirmDialog, showError, toast } from "../ui.js";
import { fillVhostSelect } from "./common.js";

/** "policies" or "operator-policies", from the page. */
export const kind = document.body.dataset.page === "operator-policies" ? "operator-policies" : "policies";

function edit(p) {
  const f = $("policy-form");
  f.elements.vhost.value = p.vhost;
  f.elements.name.value = p.name;
  f.elements.pattern.value = p.pattern;
  f.elements.apply_to.value = p["apply-to"];
  f.elements.priority.value = p.priority;
  f.elements.definition.value = JSON.stringify(p.definition, null, 2);
  f.elements.name.focus();
}

async function remove(p) {
  if (!(await confirmDialog(`Delete policy ${p.name} of ${p.vhost}?`, "Delete"))) return;
  try {
    await del(apiPath(kind, p.vhost, p.name));
    toast("Policy deleted");
    await table.reload();
  } catch (e) {
    showError(e);
  }
}

const table = new PagedTable({
  id: "policies-table",
  container: $("policies"),
  url: () => scoped(kind),
  sort: "name",
  empty: "No policies",
  columns: [
    { label: "Virtual host", key: "vhost", render: (p) => p.vhost },
    { label: "Name", key: "name", render: (p) => p.name },
    { label: "Pattern", key: "pattern", render: (p) => p.pattern },
    { label: "Apply to", key: "apply-to", render: (p) => p["apply-to"] },
    { label: "Definition", render: (p) => json(p.definition) },
    { label: "Priority", key: "priority", num: true, render: (p) => String(p.priority) },
    {
      label: "",
      render: (p) => [
        el("button", { type: "button", class: "small secondary", "data-testid": "edit-policy", "data-name": p.name, onclick: () => edit(p) }, "Edit"),
        " ",
        el("button", { type: "button", class: "small danger", "data-testid": "delete-policy", "data-name": p.name, onclick: () => remove(p) }, "Delete"),
      ],
    },
  ],
});

fillVhostSelect($("policy-vhost")).catch(showError);

onSubmit(
  $("policy-form"),
  async (v) => {
    await put(apiPath(kind, v.vhost, v.name), {
      pattern: v.pattern,
      "apply-to": v.apply_to,
      priority: v.priority ?? 0,
      definition: parseJson(v.definition, "Definition"),
    });
    await table.reload();
    return v.name;
  },
  { success: (name) => `Policy ${name} saved` },
);
