// A table over one of the API's listings, paged, sorted and filtered by the
// server (page, page_size, sort, sort_reverse, name, use_regex). Its state
// lives in the page's query string, so a reload or a shared link shows the
// same rows. Controls are real buttons and inputs, usable from the keyboard.

import { get, withQuery } from "./api.js";
import { el } from "./dom.js";
import { num } from "./format.js";
import { clearError, showError } from "./ui.js";

const PAGE_SIZES = [20, 50, 100, 500];

/**
 * A paged table. Options:
 * - `id`: id of the <table> (and prefix of its controls' ids and test ids);
 * - `container`: element the table is built in;
 * - `url`: function returning the listing's API path;
 * - `columns`: [{label, key (sort key, optional), render(row) -> node|text, num}];
 * - `sort`: default sort key; `filter`: show the name filter (default true);
 * - `prefix`: query-string key prefix when a page has several tables;
 * - `refresh`: milliseconds between reloads (0: none; default 5000);
 * - `prepare`: async function awaited with each answer before it is drawn
 *   (to fetch what the columns show besides the listing);
 * - `empty`: text when there are no rows.
 */
export class PagedTable {
  constructor(opts) {
    this.opts = { filter: true, prefix: "", refresh: 5000, empty: "Nothing to show", pageSize: 100, ...opts };
    this.loading = false;
    this.build();
    this.load();
    if (this.opts.refresh) {
      this.timer = setInterval(() => {
        if (!document.hidden) this.load();
      }, this.opts.refresh);
    }
  }

  /** The query-string key of state `name`. */
  key(name) {
    return this.opts.prefix + name;
  }

  /** State `name` from the query string. */
  state(name, fallback = "") {
    return new URLSearchParams(location.search).get(this.key(name)) ?? fallback;
  }

  /** Stores state (empty values removed) in the query string, without reloading. */
  setState(changes) {
    const q = new URLSearchParams(location.search);
    for (const [k, v] of Object.entries(changes)) {
      if (v === "" || v === null || v === undefined || v === false) q.delete(this.key(k));
      else q.set(this.key(k), String(v));
    }
    const s = q.toString();
    history.replaceState(null, "", s ? `${location.pathname}?${s}` : location.pathname);
  }

  build() {
    const { id, container, columns } = this.opts;
    const controls = el("div", { class: "table-controls" });
    if (this.opts.filter) {
      this.filterInput = el("input", {
        type: "search",
        id: `${id}-filter`,
        "data-testid": `${id}-filter`,
        placeholder: "Filter by name",
        "aria-label": "Filter by name",
        value: this.state("name"),
      });
      this.regexBox = el("input", {
        type: "checkbox",
        id: `${id}-regex`,
        "data-testid": `${id}-regex`,
        checked: this.state("use_regex") === "true",
      });
      let debounce = null;
      this.filterInput.addEventListener("input", () => {
        clearTimeout(debounce);
        debounce = setTimeout(() => {
          this.setState({ name: this.filterInput.value, page: "" });
          this.load();
        }, 300);
      });
      this.regexBox.addEventListener("change", () => {
        this.setState({ use_regex: this.regexBox.checked ? "true" : "", page: "" });
        this.load();
      });
      controls.append(this.filterInput, el("label", { class: "inline" }, this.regexBox, " Regex"));
    }
    this.sizeSelect = el(
      "select",
      { id: `${id}-page-size`, "data-testid": `${id}-page-size`, "aria-label": "Rows per page" },
      PAGE_SIZES.map((n) => el("option", { value: n, selected: String(n) === this.pageSize() }, n)),
    );
    this.sizeSelect.addEventListener("change", () => {
      this.setState({ page_size: this.sizeSelect.value, page: "" });
      this.load();
    });
    this.countEl = el("span", { class: "count", id: `${id}-count`, "data-testid": `${id}-count`, "aria-live": "polite" });
    controls.append(el("label", { class: "inline" }, "Rows ", this.sizeSelect), this.countEl);

    this.headRow = el("tr");
    for (const col of columns) {
      const th = el("th", { scope: "col", class: col.num ? "num" : "" });
      if (col.key) {
        const b = el("button", { type: "button", class: "sort", "data-sort": col.key }, col.label);
        b.addEventListener("click", () => this.sortBy(col.key));
        th.append(b);
      } else {
        th.append(col.label);
      }
      this.headRow.append(th);
    }
    this.body = el("tbody");
    this.table = el("table", { id, "data-testid": id, class: "data" }, el("thead", {}, this.headRow), this.body);
    this.pager = el("nav", { class: "pager", id: `${id}-pages`, "data-testid": `${id}-pages`, "aria-label": "Pages" });
    container.replaceChildren(controls, el("div", { class: "table-scroll" }, this.table), this.pager);
  }

  pageSize() {
    return this.state("page_size", String(this.opts.pageSize));
  }

  sortBy(key) {
    const current = this.state("sort", this.opts.sort || "");
    const reverse = current === key ? this.state("sort_reverse") !== "true" : false;
    this.setState({ sort: key, sort_reverse: reverse ? "true" : "", page: "" });
    this.load();
  }

  /** Fetches the current page and redraws. */
  async load() {
    if (this.loading) return;
    this.loading = true;
    const page = Number(this.state("page", "1")) || 1;
    const params = {
      page,
      page_size: this.pageSize(),
      sort: this.state("sort", this.opts.sort || ""),
      sort_reverse: this.state("sort_reverse") === "true" ? "true" : "",
      name: this.opts.filter ? this.state("name") : "",
      use_regex: this.opts.filter && this.state("use_regex") === "true" ? "true" : "",
    };
    try {
      const data = await get(withQuery(this.opts.url(), params));
      if (this.opts.prepare) await this.opts.prepare(data);
      this.render(data, params);
      this.table.dataset.loaded = "true";
    } catch (e) {
      if (e.reason === "page out of range" && page > 1) {
        this.setState({ page: "" });
        this.loading = false;
        return this.load();
      }
      showError(e);
    } finally {
      this.loading = false;
    }
  }

  /** Reloads now (after a change the user made). */
  reload() {
    clearError();
    return this.load();
  }

  render(data, params) {
    const items = Array.isArray(data) ? data : data.items || [];
    const { columns } = this.opts;
    for (const th of this.headRow.children) {
      const b = th.querySelector("button.sort");
      if (!b) continue;
      const active = b.dataset.sort === params.sort;
      th.setAttribute("aria-sort", active ? (params.sort_reverse ? "descending" : "ascending") : "none");
      b.classList.toggle("active", active);
    }
    const rows = items.map((row) =>
      el(
        "tr",
        {},
        columns.map((c) => el("td", { class: c.num ? "num" : "" }, c.render ? c.render(row) : row[c.key])),
      ),
    );
    if (rows.length === 0) {
      rows.push(el("tr", { class: "empty" }, el("td", { colspan: columns.length }, this.opts.empty)));
    }
    this.body.replaceChildren(...rows);
    if (Array.isArray(data)) {
      this.countEl.textContent = `${num(items.length)} items`;
      this.pager.replaceChildren();
      return;
    }
    const start = data.item_count ? (data.page - 1) * data.page_size + 1 : 0;
    const end = start ? start + data.item_count - 1 : 0;
    let text = `${num(start)}–${num(end)} of ${num(data.filtered_count)}`;
    if (data.filtered_count !== data.total_count) text += ` (filtered from ${num(data.total_count)})`;
    this.countEl.textContent = text;
    this.renderPager(data.page, data.page_count);
  }

  renderPager(page, count) {
    const go = (p) => {
      this.setState({ page: p === 1 ? "" : p });
      this.load();
    };
    const button = (p, label, extra = {}) =>
      el(
        "button",
        {
          type: "button",
          class: p === page && !extra.nav ? "page current" : "page",
          "data-page": p,
          "aria-current": p === page && !extra.nav ? "page" : null,
          disabled: extra.disabled,
          "aria-label": extra.aria,
          onclick: () => go(p),
        },
        label,
      );
    const parts = [button(page - 1, "‹ Prev", { nav: true, disabled: page <= 1, aria: "Previous page" })];
    const shown = new Set([1, count, page - 2, page - 1, page, page + 1, page + 2].filter((p) => p >= 1 && p <= count));
    let last = 0;
    for (const p of [...shown].sort((a, b) => a - b)) {
      if (p - last > 1) parts.push(el("span", { class: "gap" }, "…"));
      parts.push(button(p, String(p)));
      last = p;
    }
    parts.push(button(page + 1, "Next ›", { nav: true, disabled: page >= count, aria: "Next page" }));
    this.pager.replaceChildren(...parts);
  }
}
