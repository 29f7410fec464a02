// One channel (?name=): details, rates chart, its consumers (cancel one).

import { apiPath, get } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, dl, fill, link, param, simpleTable } from "../dom.js";
import { bool, json, num, rateOf } from "../format.js";
import { showError } from "../ui.js";
import { cancelButton } from "./common.js";

const name = param("name");
const path = apiPath("channels", name);
$("channel-name").textContent = name;
document.title = `Channel ${name} · LavinMQ`;
const RATES = [
  ["publish", "Publish"],
  ["confirm", "Confirm"],
  ["deliver_get", "Deliver / get"],
  ["ack", "Ack"],
];
const chart = new LiveChart($("channel-rates-chart"), RATES.map(([, l]) => l), { unit: "/s" });

async function load() {
  const ch = await get(path);
  fill(
    "channel-details",
    dl(
      [
        ["Connection", link("connection", { name: ch.connection_details?.name }, ch.connection_details?.name ?? "")],
        ["Virtual host", link("vhost", { name: ch.vhost }, ch.vhost)],
        ["User", ch.user],
        ["State", ch.state],
        ["Prefetch", num(ch.prefetch_count)],
        ["Global prefetch", num(ch.global_prefetch_count)],
        ["Confirm mode", bool(ch.confirm)],
        ["Transactional", bool(ch.transactional)],
        ["Consumers", num(ch.consumer_count)],
        ["Unacked", num(ch.messages_unacknowledged)],
        ["Unconfirmed", num(ch.messages_unconfirmed)],
      ],
      "channel-details-list",
    ),
  );
  chart.push(RATES.map(([k]) => rateOf(ch.message_stats, k)));
  fill(
    "channel-consumers",
    simpleTable(
      "channel-consumers-table",
      ["Queue", "Consumer tag", "Ack required", "Exclusive", "Prefetch", "Arguments", ""],
      (ch.consumer_details || []).map((c) => [
        link("queue", { vhost: c.queue.vhost, name: c.queue.name }, c.queue.name),
        c.consumer_tag,
        bool(c.ack_required),
        bool(c.exclusive),
        num(c.prefetch_count),
        json(c.arguments),
        cancelButton(c, load),
      ]),
      "No consumers",
    ),
  );
}

poll(load, showError);
