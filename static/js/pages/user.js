// One user (?name=): details, tags and password, permissions (set, clear), delete.

import { apiPath, currentUser, del, get, put, setCredentials } from "../api.js";
import { $, dl, el, fill, link, param, simpleTable } from "../dom.js";
import { onConfirmedClick, onSubmit } from "../forms.js";
import { confirmDialog, showError, toast } from "../ui.js";
import { fillVhostSelect } from "./common.js";

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
        el(
          "button",
          {
            type: "button",
            class: "small danger",
            "data-testid": "clear-permission",
            onclick: async () => {
              if (!(await confirmDialog(`Clear the permissions of ${name} in ${p.vhost}?`, "Clear"))) return;
              try {
                await del(apiPath("permissions", p.vhost, name));
                toast("Permission cleared");
                await loadPermissions();
              } catch (e) {
                showError(e);
              }
            },
          },
          "Clear",
        ),
      ]),
      "No permissions",
    ),
  );
}

Promise.all([loadUser(), loadPermissions(), fillVhostSelect($("set-permission-vhost"))]).catch(showError);

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

onConfirmedClick(
  $("user-delete"),
  () => `Delete user ${name}?`,
  async () => {
    await del(path);
    location.assign("/users");
  },
);
