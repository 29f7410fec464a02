// Page-wide feedback: the error banner, the status toast and the confirm dialog.

let toastTimer = null;

/** Shows `err` (an ApiError, Error or text) in the error banner. */
export function showError(err) {
  const banner = document.getElementById("error-banner");
  const text = document.getElementById("error-text");
  const message = typeof err === "string" ? err : err?.reason || err?.message || String(err);
  if (!banner || !text) {
    console.error(message);
    return;
  }
  text.textContent = message;
  banner.hidden = false;
  console.error(err);
}

/** Hides the error banner. */
export function clearError() {
  const banner = document.getElementById("error-banner");
  if (banner) banner.hidden = true;
}

/** Shows a short confirmation message. */
export function toast(message) {
  const el = document.getElementById("toast");
  if (!el) return;
  el.textContent = message;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    el.hidden = true;
  }, 4000);
}

/** Asks the user to confirm `message`; resolves to true when confirmed. */
export function confirmDialog(message, okLabel = "Confirm") {
  const dialog = document.getElementById("confirm-dialog");
  if (!dialog || typeof dialog.showModal !== "function") return Promise.resolve(window.confirm(message));
  document.getElementById("confirm-text").textContent = message;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

/** Runs `fn`, showing any failure in the error banner; returns its result or undefined. */
export async function guard(fn) {
  try {
    return await fn();
  } catch (e) {
    showError(e);
    return undefined;
  }
}

window.addEventListener("unhandledrejection", (ev) => showError(ev.reason));
