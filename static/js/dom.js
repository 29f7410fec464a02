// A small DOM builder: pages build their content from API data with text
// nodes only, never with HTML strings.

/**
 * el("a", {href: "/x", "data-testid": "y"}, "text", child...) builds an
 * element. Attributes: `class`, `dataset` keys as `data-*`, `on<event>`
 * functions as listeners, booleans as present/absent, others as attributes.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (v === true) node.setAttribute(k, "");
    else node.setAttribute(k, String(v));
  }
  append(node, children);
  return node;
}

/** Appends children (nodes, text, arrays of them; null skipped). */
export function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Replaces the children of the element with id `id` (or the element itself). */
export function fill(target, ...children) {
  const node = typeof target === "string" ? document.getElementById(target) : target;
  if (!node) return null;
  node.replaceChildren();
  append(node, children);
  return node;
}

/** The element with id `id`. */
export const $ = (id) => document.getElementById(id);

/** Query-string parameter `name` of the current page ("" when absent). */
export function param(name) {
  return new URLSearchParams(location.search).get(name) ?? "";
}

/** A page URL with query parameters: pageUrl("queue", {vhost, name}). */
export function pageUrl(page, params = {}) {
  const q = new URLSearchParams(params).toString();
  return q ? `/${page}?${q}` : `/${page}`;
}

/** A link to an entity page. */
export function link(page, params, text) {
  return el("a", { href: pageUrl(page, params) }, text);
}

/** A definition list from [label, value] pairs; `testid` names it. */
export function dl(pairs, testid) {
  const list = el("dl", { class: "props", "data-testid": testid });
  for (const [k, v] of pairs) {
    list.append(el("dt", {}, k), el("dd", {}, v ?? ""));
  }
  return list;
}

/** A simple (not paged) table from rows of cells; `testid` names it. */
export function simpleTable(id, headers, rows, empty = "Nothing here") {
  const table = el(
    "table",
    { id, "data-testid": id, class: "data" },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
  );
  const body = el("tbody");
  if (rows.length === 0) body.append(el("tr", { class: "empty" }, el("td", { colspan: headers.length }, empty)));
  for (const r of rows) body.append(el("tr", {}, r.map((c) => el("td", {}, c))));
  table.append(body);
  return table;
}
