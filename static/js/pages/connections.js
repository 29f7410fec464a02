// Connections: a paged table of /api/connections (or one vhost's).

import { scoped, selectedVhost } from "../api.js";
import { $, link } from "../dom.js";
import { bool, bytes, num, timestamp } from "../format.js";
import { PagedTable } from "../table.js";

new PagedTable({
  id: "connections-table",
  container: $("connections"),
  url: () => scoped("connections", "vhosts"),
  sort: "name",
  empty: "No connections",
  columns: [
    { label: "Name", key: "name", render: (c) => link("connection", { name: c.name }, c.name) },
    { label: "Client name", key: "user_provided_name", render: (c) => c.user_provided_name ?? "" },
    ...(selectedVhost() ? [] : [{ label: "Virtual host", key: "vhost", render: (c) => c.vhost }]),
    { label: "User", key: "user", render: (c) => c.user },
    { label: "Protocol", key: "protocol", render: (c) => c.protocol },
    { label: "TLS", key: "ssl", render: (c) => bool(c.ssl) },
    { label: "Channels", key: "channels", num: true, render: (c) => num(c.channels) },
    { label: "From client", key: "recv_oct_details.rate", num: true, render: (c) => `${bytes(c.recv_oct_details?.rate ?? 0)}/s` },
    { label: "To client", key: "send_oct_details.rate", num: true, render: (c) => `${bytes(c.send_oct_details?.rate ?? 0)}/s` },
    { label: "Connected at", key: "connected_at", render: (c) => timestamp(c.connected_at) },
  ],
});
