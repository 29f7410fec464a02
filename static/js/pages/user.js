// One user (?name=): details, tags and password, permissions and topic
// permissions (set, clear), delete.

import { apiPath, currentUser, del, get, put, setCredentials } from "../api.js";
import { $, dl, fill, link, param, simpleTable } from "../dom.js";
import { onConfirmedClick, onSubmit } from "../forms.js";
import { showError } from "../ui.js";
import { confirmedButton, fillVhostSelect } from "./common.js";

const name = param("name");
const path = apiPath("users", name);
$("user-name").textContent = name;
document.title = `User ${name} · LavinMQ`;
let tags = "";

async function loadUser() {
  const u = await get(path);
  tags = Array.isArray(u.tags) ? u.tags.join(",") : u.tags ?? "";
  $("update-user-tags").value = tags;
  fill(
    "user-details",
    dl(
      [
        ["Tags", tags],
        ["Password hashing", u.hashing_algorithm ?? ""],
        ["Password", u.password_hash ? "set" : "none (cannot log in with a password)"],
      ],
      "user-details-list",
    ),
  );
}

// A "Clear" button that asks, deletes `target` and reloads with `reload`.
function clearButton(testid, question, target, reload) {
  return confirmedButton({
    testid,
    label: "Clear",
    question,
    confirmLabel: "Clear",
    action: () => del(target),
    done: "Permission cleared",
    after: reload,
  });
}

async function loadPermissions() {
  const perms = await get(`${path}/permissions`);
  fill(
    "user-permissions",
    simpleTable(
      "user-permissions-table",
      ["Virtual host", "Configure", "Write", "Read", ""],
      perms.map((p) => [
        link("vhost", { name: p.vhost }, p.vhost),
        p.configure,
        p.write,
        p.read,
        clearButton(
          "clear-permission",
          `Clear the permissions of ${name} in ${p.vhost}?`,
          apiPath("permissions", p.vhost, name),
          loadPermissions,
        ),
      ]),
      "No permissions",
    ),
  );
}

async function loadTopicPermissions() {
  const perms = await get(`${path}/topic-permissions`);
  fill(
    "user-topic-permissions",
    simpleTable(
      "user-topic-permissions-table",
      ["Virtual host", "Exchange", "Write", "Read", ""],
      perms.map((p) => [
        link("vhost", { name: p.vhost }, p.vhost),
        link("exchange", { vhost: p.vhost, name: p.exchange }, p.exchange),
        p.write,
        p.read,
        clearButton(
          "clear-topic-permission",
          `Clear the topic permissions of ${name} on ${p.exchange} in ${p.vhost}?`,
          `${apiPath("topic-permissions", p.vhost, name)}?exchange=${encodeURIComponent(p.exchange)}`,
          loadTopicPermissions,
        ),
      ]),
      "No topic permissions",
    ),
  );
}

Promise.all([
  loadUser(),
  loadPermissions(),
  loadTopicPermissions(),
  fillVhostSelect($("set-permission-vhost")),
  fillVhostSelect($("set-topic-permission-vhost")),
]).catch(showError);

onSubmit(
  $("update-user-form"),
  async (v) => {
    // Without a password the API keeps the current one.
    const body = { tags: v.tags };
    if (v.password) body.password = v.password;
    await put(path, body);
    // Changing one's own password: the login cookie follows.
    if (v.password && name === currentUser()) setCredentials(name, v.password);
    $("update-user-password").value = "";
    await loadUser();
  },
  { success: "User updated", reset: false },
);

onSubmit(
  $("set-permission-form"),
  async (v) => {
    await put(apiPath("permissions", v.vhost, name), { configure: v.configure, write: v.write, read: v.read });
    await loadPermissions();
  },
  { success: "Permission set", reset: false },
);

onSubmit(
  $("set-topic-permission-form"),
  async (v) => {
    await put(apiPath("topic-permissions", v.vhost, name), { exchange: v.exchange, write: v.write, read: v.read });
    await loadTopicPermissions();
  },
  { success: "Topic permission set", reset: false },
);

onConfirmedClick(
  $("user-delete"),
  () => `Delete user ${name}?`,
  async () => {
    await del(path);
    location.assign("/users");
  },
);
