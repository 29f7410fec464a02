// Users: a paged table of /api/users and a form to add one.

import { apiPath, put } from "../api.js";
import { $, link } from "../dom.js";
import { onSubmit } from "../forms.js";
import { PagedTable } from "../table.js";

const table = new PagedTable({
  id: "users-table",
  container: $("users"),
  url: () => apiPath("users"),
  sort: "name",
  empty: "No users",
  columns: [
    { label: "Name", key: "name", render: (u) => link("user", { name: u.name }, u.name) },
    { label: "Tags", render: (u) => (Array.isArray(u.tags) ? u.tags.join(", ") : u.tags ?? "") },
    { label: "Password", render: (u) => (u.password_hash ? "set" : "none") },
  ],
});

onSubmit(
  $("add-user-form"),
  async (v) => {
    const body = { tags: v.tags };
    if (v.password) body.password = v.password;
    else body.password_hash = "";
    await put(apiPath("users", v.name), body);
    await table.reload();
    return v.name;
  },
  { success: (name) => `User ${name} added` },
);
