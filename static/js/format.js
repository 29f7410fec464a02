// Formatting of numbers, rates, sizes, durations and JSON for display.

const nf = new Intl.NumberFormat("en-US");
const nf1 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

/** A count: 12,345. */
export function num(n) {
  if (n === undefined || n === null || Number.isNaN(Number(n))) return "";
  return nf.format(Number(n));
}

/** A rate: 12.3/s. */
export function rate(r) {
  if (r === undefined || r === null) return "";
  return `${nf1.format(Number(r))}/s`;
}

/** The rate of `stats[key + "_details"]`, or 0. */
export function rateOf(stats, key) {
  return stats?.[`${key}_details`]?.rate ?? 0;
}

/** A size in bytes: 1.2 MiB. */
export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : nf1.format(v)} ${units[i]}`;
}

/** A duration in seconds: 3d 4h, 5m 6s. */
export function duration(seconds) {
  let s = Math.floor(Number(seconds) || 0);
  const d = Math.floor(s / 86400);
  s %= 86400;
  const h = Math.floor(s / 3600);
  s %= 3600;
  const m = Math.floor(s / 60);
  s %= 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

/** A time in milliseconds since the epoch, as local date and time. */
export function timestamp(ms) {
  if (!ms) return "";
  const d = new Date(Number(ms));
  return d.toLocaleString();
}

/** "yes" or "no". */
export function bool(b) {
  return b ? "yes" : "no";
}

/** JSON, compact: {"a":1}. Empty objects give "". */
export function json(v) {
  if (v === undefined || v === null) return "";
  if (typeof v === "object" && Object.keys(v).length === 0) return "";
  return JSON.stringify(v);
}

/** The vhost name as people read it. */
export function vhost(name) {
  return name;
}
