// Stream connections: a paged table of /api/stream/connections (or one
// vhost's), with how many publishers and consumers each one has.

import { apiPath, get, selectedVhost } from "../api.js";
import { $, link } from "../dom.js";
import { bytes, num, timestamp } from "../format.js";
import { PagedTable } from "../table.js";

/** A stream listing ("connections", "publishers", ...), scoped to the selected vhost. */
function streamPath(kind) {
  const vhost = selectedVhost();
  return vhost ? apiPath("stream", kind, vhost) : apiPath("stream", kind);
}

/** Publishers and consumers per connection name, as of the last load. */
let counts = new Map();

/** Counts the publishers and consumers of every connection. */
async function countClients() {
  const [publishers, consumers] = await Promise.all([get(streamPath("publishers")), get(streamPath("consumers"))]);
  const next = new Map();
  const tally = (list, key) => {
    for (const item of list) {
      const name = item.connection_details?.name;
      const c = next.get(name) ?? { publishers: 0, consumers: 0 };
      c[key] += 1;
      next.set(name, c);
    }
  };
  tally(publishers, "publishers");
  tally(consumers, "consumers");
  counts = next;
}

const countOf = (c, key) => num(counts.get(c.name)?.[key] ?? 0);

new PagedTable({
  id: "stream-connections-table",
  container: $("stream-connections"),
  url: () => streamPath("connections"),
  prepare: countClients,
  sort: "name",
  empty: "No stream connections",
  columns: [
    { label: "Name", key: "name", render: (c) => link("stream-connection", { vhost: c.vhost, name: c.name }, c.name) },
    { label: "Client name", key: "user_provided_name", render: (c) => c.user_provided_name ?? "" },
    ...(selectedVhost() ? [] : [{ label: "Virtual host", key: "vhost", render: (c) => c.vhost }]),
    { label: "User", key: "user", render: (c) => c.user },
    { label: "Client", key: "peer_host", render: (c) => `${c.peer_host}:${c.peer_port}` },
    { label: "State", key: "state", render: (c) => c.state },
    { label: "Publishers", num: true, render: (c) => countOf(c, "publishers") },
    { label: "Consumers", num: true, render: (c) => countOf(c, "consumers") },
    { label: "From client", key: "recv_oct_details.rate", num: true, render: (c) => `${bytes(c.recv_oct_details?.rate ?? 0)}/s` },
    { label: "To client", key: "send_oct_details.rate", num: true, render: (c) => `${bytes(c.send_oct_details?.rate ?? 0)}/s` },
    { label: "Connected at", key: "connected_at", render: (c) => timestamp(c.connected_at) },
  ],
});
