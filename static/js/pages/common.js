// Pieces several pages share: the vhost choice of declare forms, the publish
// form, binding tables and the features column.

import { apiPath, del, get, post, selectedVhost } from "../api.js";
import { el, link } from "../dom.js";
import { parseJson } from "../forms.js";
import { confirmDialog, showError, toast } from "../ui.js";

/** Fills `select` with the vhosts the user sees, the header's choice first selected. */
export async function fillVhostSelect(select) {
  if (!select) return;
  const vhosts = await get(`${apiPath("vhosts")}?columns=name`);
  const current = selectedVhost();
  select.replaceChildren(
    ...vhosts.map((v) => el("option", { value: v.name, selected: v.name === current }, v.name)),
  );
}

/** The path segment of an exchange: the default exchange is amq.default in paths. */
export function exchangeSegment(name) {
  return name === "" ? "amq.default" : name;
}

/** Badges for a queue's or exchange's flags (durable, auto delete, ...). */
export function features(item) {
  const out = [];
  if (item.durable) out.push(el("span", { class: "badge", title: "Durable" }, "D"));
  if (item.auto_delete) out.push(el("span", { class: "badge", title: "Auto delete" }, "AD"));
  if (item.exclusive) out.push(el("span", { class: "badge", title: "Exclusive" }, "Excl"));
  if (item.internal) out.push(el("span", { class: "badge", title: "Internal" }, "I"));
  for (const k of Object.keys(item.arguments || {})) out.push(el("span", { class: "badge", title: JSON.stringify(item.arguments[k]) }, k));
  if (item.policy) out.push(el("span", { class: "badge warn", title: "Policy" }, `policy: ${item.policy}`));
  if (item.operator_policy) out.push(el("span", { class: "badge warn", title: "Operator policy" }, `op: ${item.operator_policy}`));
  return out;
}

/** A link to a binding's source or destination. */
export function endpointLink(vhost, kind, name) {
  if (kind === "queue") return link("queue", { vhost, name }, name);
  return link("exchange", { vhost, name }, name === "" ? "(AMQP default)" : name);
}

/**
 * Publishes the values of a publish form (routing_key, payload,
 * payload_encoding, delivery_mode, headers, properties) to exchange `exchange`.
 */
export async function publishFrom(vhost, exchange, v) {
  const properties = parseJson(v.properties, "Properties");
  const headers = parseJson(v.headers, "Headers");
  if (Object.keys(headers).length) properties.headers = headers;
  if (v.delivery_mode) properties.delivery_mode = Number(v.delivery_mode);
  return post(apiPath("exchanges", vhost, exchangeSegment(exchange), "publish"), {
    routing_key: v.routing_key ?? "",
    payload: v.payload ?? "",
    payload_encoding: v.payload_encoding || "string",
    properties,
  });
}

/** The toast text for a publish answer. */
export function publishResult(r) {
  return r && r.routed === false ? "Message published, but not routed to any queue" : "Message published";
}

/**
 * A small danger button labelled `label` that asks `question` (confirmed with
 * `confirmLabel`), runs `action`, shows `done` and runs `after` (a reload of
 * the table it sits in); `attrs` are extra attributes.
 */
export function confirmedButton({ testid, label, question, confirmLabel, action, done, after, attrs = {} }) {
  return el(
    "button",
    {
      type: "button",
      class: "small danger",
      "data-testid": testid,
      ...attrs,
      onclick: async () => {
        if (!(await confirmDialog(question, confirmLabel))) return;
        try {
          await action();
          toast(done);
          await after();
        } catch (e) {
          showError(e);
        }
      },
    },
    label,
  );
}

/**
 * A button cancelling consumer `c` (as listed with its channel_details), then
 * running `after` (a reload of the table it sits in).
 */
export function cancelButton(c, after) {
  const ch = c.channel_details;
  return confirmedButton({
    testid: "cancel-consumer",
    label: "Cancel",
    question: `Cancel consumer ${c.consumer_tag}?`,
    confirmLabel: "Cancel consumer",
    action: () => del(apiPath("consumers", c.queue.vhost, ch.connection_name, String(ch.number), c.consumer_tag)),
    done: "Consumer cancelled",
    after,
    attrs: { "data-consumer-tag": c.consumer_tag },
  });
}
