// Definitions: export (a plain download link, authenticated by the login
// cookie) and import (the chosen file POSTed as JSON to /api/definitions).

import { apiPath, get, post } from "../api.js";
import { $, el } from "../dom.js";
import { onSubmit } from "../forms.js";
import { showError } from "../ui.js";

const exportSelect = $("export-definitions-vhost");
const importSelect = $("import-definitions-vhost");
const exportLink = $("export-definitions-link");

async function fillVhosts() {
  const vhosts = await get(`${apiPath("vhosts")}?columns=name`);
  for (const v of vhosts) {
    exportSelect.append(el("option", { value: v.name }, v.name));
    importSelect.append(el("option", { value: v.name }, v.name));
  }
}
fillVhosts().catch(showError);

exportSelect.addEventListener("change", () => {
  const v = exportSelect.value;
  exportLink.href = v ? apiPath("definitions", v) : "/api/definitions";
  exportLink.download = v ? `definitions-${v.replace(/[^\w.-]+/g, "_")}.json` : "definitions.json";
});

onSubmit(
  $("import-definitions-form"),
  async (v) => {
    const file = v.file?.[0];
    if (!file) throw new Error("Choose a file to import");
    const text = await file.text();
    let defs;
    try {
      defs = JSON.parse(text);
    } catch (e) {
      throw new Error(`${file.name} is not valid JSON: ${e.message}`);
    }
    await post(v.vhost ? apiPath("definitions", v.vhost) : "/api/definitions", defs);
    return file.name;
  },
  { success: (name) => `Definitions imported from ${name}` },
);
