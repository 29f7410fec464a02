// Forms that send JSON to the API, and buttons for destructive actions that
// ask first. Failures go to the error banner, successes to the toast.

import { clearError, confirmDialog, showError, toast } from "./ui.js";

/**
 * The form's values as an object: checkboxes as booleans, number inputs as
 * numbers (empty ones left out), everything else as text.
 */
export function formValues(form) {
  const out = {};
  for (const field of form.elements) {
    if (!field.name || field.disabled) continue;
    if (field.type === "checkbox") out[field.name] = field.checked;
    else if (field.type === "radio") {
      if (field.checked) out[field.name] = field.value;
    } else if (field.type === "number") {
      if (field.value !== "") out[field.name] = Number(field.value);
    } else if (field.type === "file") {
      out[field.name] = field.files;
    } else out[field.name] = field.value;
  }
  return out;
}

/** Parses JSON typed into field `label`; empty text is `{}`. */
export function parseJson(text, label) {
  if (!text || !text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${label} is not valid JSON: ${e.message}`);
  }
}

/**
 * Calls `handler(values, form)` when `form` is submitted; shows `success` (a
 * text, or a function of the handler's result) when it resolves, resets the
 * form unless `reset` is false, and shows any failure in the error banner.
 */
export function onSubmit(form, handler, { success, reset = true } = {}) {
  if (!form) return;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearError();
    const buttons = form.querySelectorAll("button[type=submit], button:not([type])");
    buttons.forEach((b) => (b.disabled = true));
    try {
      const result = await handler(formValues(form), form);
      const text = typeof success === "function" ? success(result) : success;
      if (text) toast(text);
      if (reset) form.reset();
    } catch (e) {
      showError(e);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });
}

/**
 * Makes `button` run `action` after the user confirms `question` (none when
 * it is null), then shows `success`; failures go to the error banner.
 */
export function onConfirmedClick(button, question, action, success) {
  if (!button) return;
  button.addEventListener("click", async () => {
    clearError();
    const q = typeof question === "function" ? question() : question;
    if (q !== null && !(await confirmDialog(q))) return;
    button.disabled = true;
    try {
      await action();
      if (success) toast(success);
    } catch (e) {
      showError(e);
    } finally {
      button.disabled = false;
    }
  });
}

/** Makes `button` run `action` (no confirmation), with the same feedback. */
export function onClick(button, action, success) {
  onConfirmedClick(button, null, action, success);
}

/** Fills a <select> with `options` ([value, label] or strings), keeping `selected`. */
export function fillSelect(select, options, selected) {
  if (!select) return;
  select.replaceChildren();
  for (const o of options) {
    const [value, label] = Array.isArray(o) ? o : [o, o];
    const opt = document.createElement("option");
    opt.value = value;
    opt.textContent = label;
    if (value === selected) opt.selected = true;
    select.append(opt);
  }
}
