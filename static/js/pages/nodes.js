// Nodes: each node's figures from /api/nodes, refreshed every 5 s, and a
// memory chart. A clustered broker (its leader answers) lists every node, and
// each entry carries its role, in-sync state and replication lag: those
// columns are shown when the entries have them. A follower's own figures
// (uptime, memory, ...) are not known to the leader and are left blank.

import { get } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, fill, simpleTable } from "../dom.js";
import { bool, bytes, duration, num } from "../format.js";
import { showError } from "../ui.js";

const chart = new LiveChart($("node-memory-chart"), ["Memory used (MiB)"]);

/** `a / b`, or "" when neither is known. */
function ratio(a, b) {
  if (a === undefined && b === undefined) return "";
  return `${num(a)} / ${num(b)}`;
}

poll(async () => {
  const nodes = await get("/api/nodes");
  const clustered = nodes.some((n) => n.cluster_role !== undefined);
  const headers = ["Name"];
  if (clustered) headers.push("Role", "Running", "In sync", "Lag");
  headers.push(
    "Uptime",
    "Processors",
    "Memory used",
    "Memory limit",
    "Disk free",
    "Disk alarm",
    "File descriptors",
    "Sockets",
  );
  fill(
    "nodes",
    simpleTable(
      "nodes-table",
      headers,
      nodes.map((n) => {
        const row = [n.name];
        if (clustered) {
          row.push(n.cluster_role ?? "", bool(n.running), bool(n.in_sync), bytes(n.lag_bytes));
        }
        row.push(
          n.uptime === undefined ? "" : duration(n.uptime / 1000),
          num(n.processors),
          bytes(n.mem_used),
          bytes(n.mem_limit),
          n.disk_free === undefined ? "" : `${bytes(n.disk_free)} (limit ${bytes(n.disk_free_limit)})`,
          n.disk_free_alarm === undefined ? "" : bool(n.disk_free_alarm),
          ratio(n.fd_used, n.fd_total),
          num(n.sockets_used),
        );
        return row;
      }),
      "No nodes",
    ),
  );
  if (nodes[0]) chart.push([(nodes[0].mem_used || 0) / 1048576]);
}, showError);
