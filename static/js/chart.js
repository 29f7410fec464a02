// Live line charts of rates and counts, drawn with the vendored uPlot
// (static/vendor/uplot.iife.min.js, loaded by the layout as window.uPlot).

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/** The chart's width: its container's, so that it never spills out of a narrow panel. */
const widthOf = (container) => Math.max(container.clientWidth, 160);

/**
 * A chart of a few series over time, fed one sample at a time. `series` is a
 * list of labels; `opts.points` is how many samples are kept (default 60) and
 * `opts.unit` is appended to values in the legend ("/s" for rates).
 */
export class LiveChart {
  constructor(container, series, opts = {}) {
    this.container = container;
    this.points = opts.points ?? 60;
    this.unit = opts.unit ?? "";
    this.data = [[], ...series.map(() => [])];
    container.classList.add("chart");
    container.dataset.points = "0";
    if (!window.uPlot) {
      container.textContent = "The chart library did not load.";
      return;
    }
    const fmt = (v) => (v === null || v === undefined ? "–" : `${Math.round(v * 10) / 10}${this.unit}`);
    const timeFmt = window.uPlot.fmtDate("{h}:{mm}:{ss} {aa}");
    // Without the cursor over the chart, the legend shows the newest sample.
    const shown = (u, v, si, idx) => (idx === null || idx === undefined ? latest(u.data[si]) : v);
    // The x axis spans as many samples as are kept and ends at the newest
    // (uPlot's own range for a single sample is a day or more wide).
    const span = (this.points * POLL_MS) / 1000;
    this.plot = new window.uPlot(
      {
        width: widthOf(container),
        height: opts.height ?? 200,
        series: [
          {
            value: (u, v, si, idx) => {
              const t = shown(u, v, si, idx);
              return t === null || t === undefined ? "–" : timeFmt(new Date(t * 1000));
            },
          },
          ...series.map((label, i) => ({
            label,
            stroke: COLORS[i % COLORS.length],
            width: 2,
            points: { size: 5 },
            value: (u, v, si, idx) => fmt(shown(u, v, si, idx)),
          })),
        ],
        axes: [
          // At least 70 px between time ticks, wider than a label such as
          // "12:59pm": a narrow chart gets fewer ticks, not overlapping ones
          // (every 2 minutes rather than uPlot's next step, 5, which leaves a
          // single tick).
          { space: 70, incrs: [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600] },
          { size: 60, values: (u, vals) => vals.map((v) => (Math.abs(v) >= 1000 ? `${v / 1000}k` : v)) },
        ],
        scales: {
          x: {
            time: true,
            range: (u) => {
              const end = latest(u.data[0]) ?? Date.now() / 1000;
              return [end - span, end];
            },
          },
          y: { range: (u, min, max) => [0, Math.max(max, 1)] },
        },
        cursor: { drag: { x: false, y: false } },
      },
      this.data,
      container,
    );
    if (window.ResizeObserver) {
      new ResizeObserver(() => {
        const w = widthOf(container);
        if (this.plot && Math.abs(w - this.plot.width) > 2) this.plot.setSize({ width: w, height: this.plot.height });
      }).observe(container);
    }
  }

  /** Adds one sample: `values` in the order of the series, at time now. */
  push(values) {
    this.data[0].push(Date.now() / 1000);
    values.forEach((v, i) => this.data[i + 1].push(Number(v) || 0));
    if (this.data[0].length > this.points) this.data.forEach((s) => s.shift());
    this.container.dataset.points = String(this.data[0].length);
    // The newest sample, in the order of the series, for whoever reads the page without seeing it.
    this.container.dataset.last = JSON.stringify(this.data.slice(1).map((s) => s[s.length - 1]));
    if (this.plot) {
      this.plot.setData(this.data);
      this.plot.setLegend({});
    }
  }
}

/** The last value of `list`, or null. */
function latest(list) {
  return list && list.length ? list[list.length - 1] : null;
}

/** How often live pages poll the API, in milliseconds. */
export const POLL_MS = 5000;

/**
 * Calls `fn` now and every POLL_MS while the page is visible; failures go to
 * `onError`.
 */
export function poll(fn, onError) {
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden) return;
    busy = true;
    try {
      await fn();
    } catch (e) {
      onError?.(e);
    } finally {
      busy = false;
    }
  };
  tick();
  return setInterval(tick, POLL_MS);
}
