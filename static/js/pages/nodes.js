// Nodes: each node's figures from /api/nodes, refreshed every 5 s, and a
// memory chart.

import { get } from "../api.js";
import { LiveChart, poll } from "../chart.js";
import { $, fill, simpleTable } from "../dom.js";
import { bool, bytes, duration, num } from "../format.js";
import { showError } from "../ui.js";

const chart = new LiveChart($("node-memory-chart"), ["Memory used (MiB)"]);

poll(async () => {
  const nodes = await get("/api/nodes");
  fill(
    "nodes",
    simpleTable(
      "nodes-table",
      ["Name", "Uptime", "Processors", "Memory used", "Memory limit", "Disk free", "Disk alarm", "File descriptors", "Sockets"],
      nodes.map((n) => [
        n.name,
        duration((n.uptime || 0) / 1000),
        num(n.processors),
        bytes(n.mem_used),
        bytes(n.mem_limit),
        `${bytes(n.disk_free)} (limit ${bytes(n.disk_free_limit)})`,
        bool(n.disk_free_alarm),
        `${num(n.fd_used)} / ${num(n.fd_total)}`,
        num(n.sockets_used),
      ]),
      "No nodes",
    ),
  );
  if (nodes[0]) chart.push([(nodes[0].mem_used || 0) / 1048576]);
}, showError);
