// One virtual host (?name=): details, permissions (set, clear), limits (set,
// clear), delete.

import { apiPath, del, get, put } from "../api.js";
import { $, dl, el, fill, link, param, simpleTable } from "../dom.js";
import { num, rate, rateOf } from "../format.js";
import { onConfirmedClick, onSubmit } from "../forms.js";
import { showError } from "../ui.js";
import { confirmedButton } from "./common.js";

const name = param("name");
$("vhost-name").textContent = name;
document.title = `Virtual host ${name} · LavinMQ`;

/** A "Clear" button that asks, runs `action`, then `after`. */
function removeButton(testid, question, action, after) {
  return confirmedButton({ testid, label: "Clear", question, confirmLabel: "Remove", action, done: "Removed", after });
}

async function loadDetails() {
  const v = await get(apiPath("vhosts", name));
  fill(
    "vhost-details",
    dl(
      [
        ["Description", v.description ?? ""],
        ["Tags", (v.tags || []).join(", ")],
        ["Default queue type", v.default_queue_type ?? ""],
        ["Messages ready", num(v.messages_ready)],
        ["Messages unacked", num(v.messages_unacknowledged)],
        ["Publish rate", rate(rateOf(v.message_stats, "publish"))],
        ["Queues", link("queues", {}, "show (choose this vhost in the header)")],
      ],
      "vhost-details-list",
    ),
  );
}

async function loadPermissions() {
  const perms = await get(apiPath("vhosts", name, "permissions"));
  fill(
    "vhost-permissions",
    simpleTable(
      "vhost-permissions-table",
      ["User", "Configure", "Write", "Read", ""],
      perms.map((p) => [
        link("user", { name: p.user }, p.user),
        p.configure,
        p.write,
        p.read,
        removeButton("clear-permission", `Clear the permissions of ${p.user} in ${name}?`, () => del(apiPath("permissions", name, p.user)), loadPermissions),
      ]),
      "No user has access",
    ),
  );
}

async function loadLimits() {
  const limits = await get(apiPath("vhost-limits", name));
  const values = limits[0]?.value || {};
  fill(
    "vhost-limits",
    simpleTable(
      "vhost-limits-table",
      ["Limit", "Value", ""],
      Object.entries(values).map(([k, v]) => [
        k,
        num(v),
        removeButton("clear-limit", `Clear limit ${k}?`, () => del(apiPath("vhost-limits", name, k)), loadLimits),
      ]),
      "No limits",
    ),
  );
}

async function loadUsers() {
  const select = $("set-permission-user");
  try {
    const users = await get(`${apiPath("users")}?columns=name`);
    select.replaceChildren(...users.map((u) => el("option", { value: u.name }, u.name)));
  } catch (e) {
    if (e.status !== 403) throw e;
  }
}

Promise.all([loadDetails(), loadPermissions(), loadLimits(), loadUsers()]).catch(showError);

onSubmit(
  $("set-permission-form"),
  async (v) => {
    await put(apiPath("permissions", name, v.user), { configure: v.configure, write: v.write, read: v.read });
    await loadPermissions();
  },
  { success: "Permission set", reset: false },
);

onSubmit(
  $("set-limit-form"),
  async (v) => {
    await put(apiPath("vhost-limits", name, v.type), { value: v.value });
    await loadLimits();
  },
  { success: "Limit set" },
);

onConfirmedClick(
  $("vhost-delete"),
  () => `Delete virtual host ${name} and everything in it?`,
  async () => {
    await del(apiPath("vhosts", name));
    location.assign("/vhosts");
  },
);
