// One exchange (?vhost=&name=): details, rates chart, bindings from and to it
// (add and remove), publish, delete.

import { apiPath, del, get, post } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, dl, el, fill, link, param, simpleTable } from "../dom.js";
import { bool, json, rateOf } from "../format.js";
import { onConfirmedClick, onSubmit, parseJson } from "../forms.js";
import { confirmDialog, showError, toast } from "../ui.js";
import { endpointLink, exchangeSegment, publishFrom, publishResult } from "./common.js";

const vhost = param("vhost");
const name = param("name");
const segment = exchangeSegment(name);
const path = apiPath("exchanges", vhost, segment);
const shown = name === "" ? "(AMQP default)" : name;
$("exchange-name").textContent = shown;
document.title = `Exchange ${shown} · LavinMQ`;
const chart = new LiveChart($("exchange-rates-chart"), ["In", "Out"], { unit: "/s" });

function showExchange(e) {
  fill(
    "exchange-details",
    dl(
      [
        ["Virtual host", link("vhost", { name: e.vhost }, e.vhost)],
        ["Type", e.type],
        ["Durable", bool(e.durable)],
        ["Auto delete", bool(e.auto_delete)],
        ["Internal", bool(e.internal)],
        ["Arguments", json(e.arguments)],
        ["Policy", e.policy || ""],
      ],
      "exchange-details-list",
    ),
  );
  chart.push([rateOf(e.message_stats, "publish_in"), rateOf(e.message_stats, "publish_out")]);
}

function unbindButton(b) {
  if (b.source === "") return "";
  return el(
    "button",
    {
      type: "button",
      class: "small danger",
      "data-testid": "unbind",
      "data-destination": b.destination,
      "data-routing-key": b.routing_key,
      onclick: async () => {
        if (!(await confirmDialog(`Remove the binding to ${b.destination} with key "${b.routing_key}"?`, "Unbind"))) return;
        try {
          const kind = b.destination_type === "queue" ? "q" : "e";
          await del(apiPath("bindings", vhost, "e", b.source, kind, b.destination, b.properties_key));
          toast("Binding removed");
          await loadBindings();
        } catch (e) {
          showError(e);
        }
      },
    },
    "Unbind",
  );
}

async function loadBindings() {
  const [source, destination] = await Promise.all([
    get(`${path}/bindings/source`),
    get(`${path}/bindings/destination`),
  ]);
  fill(
    "exchange-bindings-source",
    simpleTable(
      "exchange-bindings-source-table",
      ["To", "Type", "Routing key", "Arguments", ""],
      source.map((b) => [
        endpointLink(vhost, b.destination_type, b.destination),
        b.destination_type,
        b.routing_key,
        json(b.arguments),
        unbindButton(b),
      ]),
      "No bindings",
    ),
  );
  fill(
    "exchange-bindings-destination",
    simpleTable(
      "exchange-bindings-destination-table",
      ["From", "Routing key", "Arguments", ""],
      destination.map((b) => [endpointLink(vhost, "exchange", b.source), b.routing_key, json(b.arguments), unbindButton(b)]),
      "No bindings",
    ),
  );
}

poll(async () => showExchange(await get(path)), showError);
loadBindings().catch(showError);

onSubmit(
  $("bind-exchange-form"),
  async (v) => {
    await post(apiPath("bindings", vhost, "e", segment, v.destination_type, v.destination), {
      routing_key: v.routing_key,
      arguments: parseJson(v.arguments, "Arguments"),
    });
    await loadBindings();
  },
  { success: "Binding added" },
);

onSubmit($("publish-form"), (v) => publishFrom(vhost, name, v), { success: publishResult, reset: false });

onConfirmedClick(
  $("exchange-delete"),
  () => `Delete exchange ${shown}?`,
  async () => {
    await del(path);
    location.assign("/exchanges");
  },
);
