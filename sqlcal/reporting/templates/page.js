// sqlcal's page: sorts the groups' table, opens a group, draws its charts with Plotly.
// Every text from the data (a group's name) reaches the DOM as text, and Plotly as escaped
// entities (Plotly reads a few HTML tags in its labels).
function sqlcalPage(root) {
  "use strict";
  performance.mark("sqlcal:start");  // bench/bench_page.py reads these marks
  const data = JSON.parse(root.querySelector("script.sqlcal-data").textContent);
  performance.mark("sqlcal:data");
  const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const colour = (g) => palette[g % palette.length];
  // Plotly decodes &amp; &lt; &gt; (and no other entity a name needs) in its labels
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;");
  const name = (g) => esc(data.groups[g].name);
  const config = {displaylogo: false, responsive: true,
                  modeBarButtonsToRemove: ["select2d", "lasso2d"]};
  // an overview shows the worst groups' lines; the others wait in its legend (a click shows
  // one): a hundred lines read as none, and cost a second to draw
  const SHOWN = 12;
  const shown = (g) => g < SHOWN ? true : "legendonly";
  const base = {margin: {l: 56, r: 16, t: 16, b: 44}, hovermode: "closest",
                font: {size: 12}, legend: {font: {size: 11}}};

  // -- Plotly, inlined once per page (gzip, base64), inflated by the browser ----------------
  function plotly() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (window.__sqlcalPlotly) return window.__sqlcalPlotly;
    const packed = root.querySelector("script.sqlcal-plotly");
    if (!packed) {  // a later notebook output: the first one brings it
      return new Promise((resolve, reject) => {
        let waited = 0;
        const poll = setInterval(() => {
          if (window.__sqlcalPlotly) { clearInterval(poll); window.__sqlcalPlotly.then(resolve, reject); }
          else if ((waited += 100) > 20000) {
            clearInterval(poll);
            reject(new Error("Plotly was sent with the session's first sqlcal output: run that cell again"));
          }
        }, 100);
      });
    }
    window.__sqlcalPlotly = (async () => {
      const text = atob(packed.textContent.trim());
      const bytes = new Uint8Array(text.length);
      for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      const source = await new Response(stream).text();
      performance.mark("sqlcal:inflated");
      const amd = window.define;  // a notebook's require.js would take Plotly as a module
      window.define = undefined;
      try { (0, eval)(source); } finally { window.define = amd; }
      performance.mark("sqlcal:plotly");
      return window.Plotly;
    })();
    return window.__sqlcalPlotly;
  }

  // -- the charts ------------------------------------------------------------------------
  const diagonal = (lo, hi) => ({x: [lo, hi], y: [lo, hi], mode: "lines", name: "calibrated",
    line: {color: "#999", dash: "dash", width: 1}, hoverinfo: "skip"});
  const interval = (d) => d.lo && d.lo.some((v) => v !== null) ? {
    type: "data", symmetric: false, thickness: 1.2, width: 3,
    array: d.hi.map((h, i) => h === null || d.y[i] === null ? null : h - d.y[i]),
    arrayminus: d.lo.map((l, i) => l === null || d.y[i] === null ? null : d.y[i] - l)} : undefined;
  const share = (w) => { const s = w.reduce((a, b) => a + (b || 0), 0) || 1; return w.map((v) => (v || 0) / s); };
  const withBars = (extra) => Object.assign({}, base, {
    yaxis: {domain: [0.26, 1], title: {text: extra.ytitle}},
    yaxis2: {domain: [0, 0.2], title: {text: "weight"}, tickformat: ".0%", rangemode: "tozero"},
    xaxis: {title: {text: extra.xtitle}, anchor: "y2"}, legend: {orientation: "h", y: -0.2},
    barmode: "group", bargap: 0.05});

  const charts = {
    reliability(g) {
      const d = data.groups[g].reliability;
      const text = d.x.map((_, i) => `bin [${fmt(d.bin_lower[i])}, ${fmt(d.bin_upper[i])})` +
        `<br>interval [${fmt(d.lo[i])}, ${fmt(d.hi[i])}]<br>weight ${fmt(d.W[i])}`);
      const top = Math.max(1e-9, ...d.bin_upper.filter((v) => v !== null));
      // on log axes the diagonal starts at the lowest bin's mean score, not at 0
      const bottom = d.log ? Math.min(...d.x.filter((v) => v > 0)) / 2 : 0;
      return {data: [diagonal(bottom, top),
        {x: d.x, y: d.y, error_y: interval(d), mode: "lines+markers", name: name(g),
         line: {color: colour(g)}, text: text,
         hovertemplate: "mean score %{x:.4g}<br>observed %{y:.4g}<br>%{text}<extra></extra>"},
        {type: "bar", x: d.bin_lower.map((l, i) => (l + d.bin_upper[i]) / 2),
         width: d.bin_lower.map((l, i) => 0.9 * (d.bin_upper[i] - l)), y: share(d.W),
         yaxis: "y2", name: "weight per bin", marker: {color: colour(g), opacity: 0.4},
         customdata: d.W, hovertemplate: "weight %{customdata:,.0f} (%{y:.1%})<extra></extra>"}],
        layout: d.log ? logAxes(withBars({xtitle: "mean score in bin (log axis)",
                                          ytitle: "observed rate (log axis)"}))
                      : withBars({xtitle: "mean score in bin", ytitle: "observed rate"})};
    },
    smooth(g) {
      const d = data.groups[g].smooth;
      const top = Math.max(...d.density.filter((v) => v !== null)) || 1;
      const half = d.density.map((v) => 0.02 * (v || 0) / top);
      return {data: [diagonal(0, 1),
        {x: d.t.concat(d.t.slice().reverse()),
         y: d.y.map((v, i) => v + half[i]).concat(d.y.map((v, i) => v - half[i]).reverse()),
         fill: "toself", fillcolor: colour(g), opacity: 0.25, line: {width: 0},
         name: "score density", hoverinfo: "skip"},
        {x: d.t, y: d.y, mode: "lines", name: name(g), line: {color: colour(g)},
         customdata: d.density,
         hovertemplate: "score %{x:.4g}<br>smoothed rate %{y:.4g}<br>density %{customdata:.3g}<extra></extra>"}],
        layout: Object.assign({}, base, {xaxis: {title: {text: "score"}, range: [0, 1]},
          yaxis: {title: {text: "smoothed observed rate"}}, legend: {orientation: "h", y: -0.2}})};
    },
    cumulative(g) {
      const d = data.groups[g].cumulative;
      const two = (k) => d.sd.map((v) => k * 2 * v);
      return {data: [
        {x: d.x.concat(d.x.slice().reverse()), y: d.hi.concat(d.lo.slice().reverse()),
         fill: "toself", fillcolor: colour(g), opacity: 0.2, line: {width: 0},
         name: "reach inside a cell", hoverinfo: "skip"},
        {x: d.x, y: two(1), mode: "lines", line: {color: "#888", dash: "dot", width: 1},
         name: "±2σ under calibration", legendgroup: "band", hovertemplate: "+2σ %{y:.4g}<extra></extra>"},
        {x: d.x, y: two(-1), mode: "lines", line: {color: "#888", dash: "dot", width: 1},
         name: "−2σ", legendgroup: "band", showlegend: false, hovertemplate: "−2σ %{y:.4g}<extra></extra>"},
        {x: d.x, y: d.s, mode: "lines", name: name(g), line: {color: colour(g), width: 2},
         customdata: d.score,
         hovertemplate: "share of weight %{x:.3f}<br>score up to %{customdata:.4g}<br>S/W %{y:.4g}<extra></extra>"}],
        layout: Object.assign({}, base, {xaxis: {title: {text: "cumulative share of weight"}},
          yaxis: {title: {text: "Σw(y − p)/W"}, zeroline: true},
          legend: {orientation: "h", y: -0.2}})};
    },
    tce(g) {
      const d = data.groups[g].tce;
      const seg = {rate: [[], [], []], pred: [[], []], ok: [[], []]};
      d.lo.forEach((lo, i) => {
        const hi = d.hi[i];
        seg.rate[0].push(lo, hi, null); seg.rate[1].push(d.rate[i], d.rate[i], null);
        const text = `bin ${i + 1}: scores ${fmt(lo)} .. ${fmt(hi)}, observed ${fmt(d.rate[i])},` +
          ` rejected ${fmt(d.rejected[i])} of ${fmt(d.W[i])}`;
        seg.rate[2].push(text, text, null);
        seg.pred[0].push(lo, hi, null); seg.pred[1].push(lo, hi, null);
        for (const [a0, b0] of d.accepted[i]) {
          const a = Math.max(a0, lo), b = Math.min(b0, hi);
          if (a <= b) { seg.ok[0].push(a, b, null); seg.ok[1].push(a, b, null); }
        }
      });
      return {data: [diagonal(0, 1),
        {x: seg.pred[0], y: seg.pred[1], mode: "lines", name: "rejected predictions",
         line: {color: "#d62728", dash: "dot", width: 1.5}, hoverinfo: "skip"},
        {x: seg.ok[0], y: seg.ok[1], mode: "lines", name: "accepted predictions",
         line: {color: "#2ca02c", width: 3}, hoverinfo: "skip"},
        {x: seg.rate[0], y: seg.rate[1], text: seg.rate[2], mode: "lines", name: "observed rate of the bin",
         line: {color: colour(g), width: 3}, hovertemplate: "%{text}<extra></extra>"}],
        layout: Object.assign({}, base, {xaxis: {title: {text: "prediction (bin's score range)"}, range: [0, 1]},
          yaxis: {title: {text: "observed rate of the bin"}, range: [0, 1]},
          legend: {orientation: "h", y: -0.2}})};
    },
    series() { return series(data.series.panels.map((p) => p), null); },
    "group-series"(g) { return series(data.series.panels, g); },
    "evidence-all"() {
      const traces = [], shapes = [];
      data.groups.forEach((d, g) => {
        const e = d.evidence;
        traces.push({x: e.day, y: e.log_M, mode: "lines", name: name(g), legendgroup: "g" + g,
          visible: shown(g),
          line: {color: colour(g), width: 1.5}, customdata: e.n,
          hovertemplate: `${name(g)}<br>%{x}: log M %{y:.3g} (%{customdata:,} rows)<extra></extra>`});
        if (d.alarm) traces.push(Object.assign(alarmMarker(d, g, false), {visible: shown(g)}));
      });
      traces.push(threshold(data.groups[0] ? data.groups[0].evidence.day : []));
      return {data: traces, layout: Object.assign({}, base, {shapes: shapes,
        xaxis: {title: {text: "day"}}, yaxis: {title: {text: "log M (detector evidence)"}}})};
    },
    evidence(g) {
      const d = data.groups[g], e = d.evidence;
      const traces = [
        {type: "bar", x: e.day, y: e.log_e, name: "log e of the day", yaxis: "y2",
         marker: {color: "#aaa"}, hovertemplate: "%{x}: log e %{y:.3g}<extra></extra>"},
        {x: e.day, y: e.log_M, mode: "lines+markers", marker: {size: 4}, name: name(g),
         line: {color: colour(g), width: 2}, customdata: e.n,
         hovertemplate: "%{x}: log M %{y:.3g} (%{customdata:,} rows)<extra></extra>"},
        threshold(e.day)];
      const layout = Object.assign({}, base, {xaxis: {title: {text: "day"}, anchor: "y2"},
        yaxis: {title: {text: "log M"}, domain: [0.3, 1]},
        yaxis2: {title: {text: "log e"}, domain: [0, 0.22]}, legend: {orientation: "h", y: -0.2}});
      if (d.alarm) {
        traces.push(alarmMarker(d, g, true));
        layout.shapes = [{type: "line", xref: "x", yref: "paper", x0: d.alarm.change_day,
          x1: d.alarm.change_day, y0: 0, y1: 1, line: {color: "#a40e26", dash: "dot", width: 1.5}}];
        layout.annotations = [{x: d.alarm.change_day, y: 1, xref: "x", yref: "paper",
          text: "estimated change " + d.alarm.change_day, showarrow: false, yanchor: "bottom",
          font: {color: "#a40e26", size: 11}}];
      }
      return {data: traces, layout: layout};
    },
    daily(g) {
      const d = data.groups[g], e = d.evidence, r = d.daily;
      const traces = [
        {x: e.day, y: r.p, mode: "lines", name: "mean score", line: {color: "#888", dash: "dash"},
         hovertemplate: "%{x}: mean score %{y:.4g}<extra></extra>"},
        {x: e.day, y: r.y, mode: "lines+markers", marker: {size: 4}, name: name(g),
         line: {color: colour(g)}, customdata: e.n,
         error_y: {type: "data", array: r.sd.map((v) => v === null ? null : 2 * v), thickness: 1, width: 2},
         hovertemplate: "%{x}: observed %{y:.4g} (%{customdata:,} rows)<extra></extra>"}];
      const layout = Object.assign({}, base, {xaxis: {title: {text: "day"}},
        yaxis: {title: {text: "rate"}}, legend: {orientation: "h", y: -0.2}});
      if (d.alarm) {
        const i = e.day.indexOf(d.alarm.alarm_day);
        traces.push({x: [d.alarm.alarm_day], y: [i >= 0 ? r.y[i] : null], mode: "markers",
          name: "alarm", marker: {symbol: "star", size: 13, color: "#a40e26"},
          hovertemplate: "alarm %{x}<extra></extra>"});
        layout.shapes = [{type: "line", xref: "x", yref: "paper", x0: d.alarm.change_day,
          x1: d.alarm.change_day, y0: 0, y1: 1, line: {color: "#a40e26", dash: "dot", width: 1.5}}];
      }
      return {data: traces, layout: layout};
    },
    prepost(g) {
      const d = data.groups[g].prepost;
      const w = (d.windows || {});
      const side = (f, label, c, dash) => ({x: f.x, y: f.y, mode: "lines+markers", name: label,
        line: {color: c, dash: dash}, customdata: f.W,
        hovertemplate: `${label}<br>mean score %{x:.4g}<br>observed %{y:.4g}<br>weight %{customdata:,.0f}<extra></extra>`});
      // the detector's diagrams: 16 equal-width bins of the score
      const bars = (f, label, c) => ({type: "bar", x: f.x, y: share(f.W), yaxis: "y2", name: label + " weight",
        width: f.x.map(() => 0.4 / 16),
        marker: {color: c, opacity: 0.45}, customdata: f.W,
        hovertemplate: "weight %{customdata:,.0f} (%{y:.1%})<extra></extra>"});
      const top = Math.max(0.05, ...d.pre.x.concat(d.post.x, d.pre.y, d.post.y).filter((v) => v !== null));
      return {data: [diagonal(0, top), side(d.pre, "before " + (w.pre || ""), "#888", "dash"),
                     side(d.post, "since " + (w.post || ""), colour(g), "solid"),
                     bars(d.pre, "before", "#888"), bars(d.post, "since", colour(g))],
        layout: withBars({xtitle: "mean score in bin", ytitle: "observed rate"})};
    },
    maturity(g) {
      const d = data.groups[g].maturity;
      return {data: [
        {x: d.delay.concat(d.delay.slice().reverse()), y: d.hi.concat(d.lo.slice().reverse()),
         fill: "toself", fillcolor: colour(g), opacity: 0.2, line: {width: 0}, name: "interval",
         hoverinfo: "skip"},
        {x: d.delay, y: d.F, mode: "lines+markers", name: name(g), line: {color: colour(g)},
         hovertemplate: "%{x} days: %{y:.2%} of the positives known<extra></extra>"}],
        layout: Object.assign({}, base, {xaxis: {title: {text: "delay (days)"}},
          yaxis: {title: {text: "share known F(a)"}, tickformat: ".2%"},
          legend: {orientation: "h", y: -0.2}})};
    },
  };

  function logAxes(layout) {  // a low base rate: the bins are equal in log-odds
    Object.assign(layout.xaxis, {type: "log", exponentformat: "power"});
    Object.assign(layout.yaxis, {type: "log", exponentformat: "power"});
    return layout;
  }
  function threshold(days) {
    const c = data.threshold;
    return {x: [days[0], days[days.length - 1]], y: [c, c], mode: "lines", name: "threshold log c",
      line: {color: "#a40e26", dash: "dash", width: 1.5}, hovertemplate: "threshold %{y:.3g}<extra></extra>"};
  }
  function alarmMarker(d, g, legend) {
    return {x: [d.alarm.alarm_day], y: [d.alarm.log_M], mode: "markers", name: "alarm",
      legendgroup: legend ? undefined : "g" + g, showlegend: legend,
      marker: {symbol: "star", size: 13, color: "#a40e26", line: {color: "white", width: 1}},
      hovertemplate: `${name(g)}: alarm %{x} (log M %{y:.3g}), change about ${esc(d.alarm.change_day)}<extra></extra>`};
  }

  // one panel per (metric, statistic), stacked; one line per group; ✕ where a rule is crossed
  function series(panels, only) {
    const traces = [], shapes = [], layout = Object.assign({}, base, {grid: undefined,
      legend: only === null ? {font: {size: 11}} : {orientation: "h", y: -0.12}});
    const gap = 0.08, h = (1 - gap * (panels.length - 1)) / panels.length;
    panels.forEach((p, k) => {
      const ax = k === 0 ? "" : String(k + 1);
      const lo = 1 - (k + 1) * h - k * gap;
      layout["yaxis" + ax] = {domain: [Math.max(lo, 0), lo + h], title: {text: esc(p.label), font: {size: 11}}};
      layout["xaxis" + ax] = {anchor: "y" + ax, matches: k === 0 ? undefined : "x",
        showticklabels: k === panels.length - 1};
      const times = data.series.times;
      // error bars on a group's chart, and on the overview while they stay readable
      const bars = only !== null || p.lines.length <= 12;
      for (const line of p.lines) {
        if (only !== null && line.g !== only) continue;
        const y = line.v;
        traces.push({x: times, y: y, xaxis: "x" + ax, yaxis: "y" + ax,
          mode: bars ? "lines+markers" : "lines", marker: {size: 4},
          visible: only === null ? shown(line.g) : true, name: name(line.g), legendgroup: "g" + line.g, showlegend: k === 0,
          line: {color: colour(line.g), width: 1.4}, connectgaps: false,
          error_y: bars ? interval({y: y, lo: line.lo, hi: line.hi}) : undefined,
          hovertemplate: `${name(line.g)}<br>%{x}: ${esc(p.label)} %{y:.4g}<extra></extra>`});
        const crossed = {x: [], y: []};
        y.forEach((v, i) => {
          if (v !== null && p.rules.some((r) => (r.side === "above" ? v > r.value : v < r.value))) {
            crossed.x.push(times[i]); crossed.y.push(v);
          }
        });
        if (crossed.x.length) traces.push({x: crossed.x, y: crossed.y, xaxis: "x" + ax,
          visible: only === null ? shown(line.g) : true,
          yaxis: "y" + ax, mode: "markers", name: "threshold crossed", legendgroup: "g" + line.g,
          showlegend: false, marker: {symbol: "x", size: 9, color: "#a40e26"},
          hovertemplate: `${name(line.g)}: %{x} crosses a threshold (%{y:.4g})<extra></extra>`});
      }
      for (const r of p.rules) shapes.push({type: "line", xref: "x" + ax + " domain", x0: 0, x1: 1,
        yref: "y" + ax, y0: r.value, y1: r.value, line: {color: "#a40e26", dash: "dash", width: 1}});
    });
    layout.shapes = shapes;
    return {data: traces, layout: layout};
  }

  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const a = Math.abs(v);
    if (a >= 1000) return v.toLocaleString("en-US", {maximumFractionDigits: 0});
    if (a === 0 || a >= 1e-4) return String(Number(v.toPrecision(4)));
    return v.toExponential(1);
  }

  // -- drawing, opening, sorting ---------------------------------------------------------
  async function draw(el) {
    if (el.dataset.drawn) return;
    el.dataset.drawn = "pending";
    try {
      const P = await plotly();
      const g = el.dataset.group === undefined ? null : Number(el.dataset.group);
      const fig = charts[el.dataset.chart](g);
      await P.newPlot(el, fig.data, fig.layout, config);
      el.dataset.drawn = "yes";
    } catch (err) {
      el.dataset.drawn = "failed";
      const p = document.createElement("p");
      p.className = "chart-error";
      p.textContent = "This chart could not be drawn: " + err.message;
      el.replaceChildren(p);
      console.error(err);
    }
  }
  function open(g, scroll) {
    const section = root.querySelector(`section.group[data-group="${g}"]`);
    if (!section) return;
    section.hidden = false;
    section.querySelectorAll(".chart").forEach(draw);
    if (scroll) section.scrollIntoView({block: "start"});
  }
  root.querySelectorAll("tbody tr[data-group]").forEach((tr) =>
    tr.addEventListener("click", () => open(tr.dataset.group, true)));
  root.querySelectorAll("button.close").forEach((b) => b.addEventListener("click", () => {
    root.querySelector(`section.group[data-group="${b.dataset.group}"]`).hidden = true;
  }));
  const all = (hidden) => () => root.querySelectorAll("section.group").forEach((s) => {
    if (hidden) s.hidden = true; else open(s.dataset.group, false);
  });
  root.querySelector("#open-all").addEventListener("click", all(false));
  root.querySelector("#close-all").addEventListener("click", all(true));

  const table = root.querySelector("table.groups");
  table.querySelectorAll("thead th").forEach((th) => {
    const sort = () => {
      const col = Number(th.dataset.col);
      const down = th.getAttribute("aria-sort") !== "descending";
      table.querySelectorAll("thead th").forEach((o) => o.setAttribute("aria-sort", "none"));
      th.setAttribute("aria-sort", down ? "descending" : "ascending");
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      const key = (tr) => tr.cells[col].dataset.sort;
      rows.sort((a, b) => {
        const x = key(a), y = key(b);
        if (x === "" || x === "None") return y === "" || y === "None" ? 0 : 1;
        if (y === "" || y === "None") return -1;
        const nx = Number(x), ny = Number(y);
        const c = !Number.isNaN(nx) && !Number.isNaN(ny) ? nx - ny : x.localeCompare(y);
        return down ? -c : c;
      });
      body.append(...rows);
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (e) => { if (e.key === "Enter") sort(); });
  });

  root.querySelectorAll(".overview .chart").forEach(draw);
  const hash = /^#group-(\d+)$/.exec(window.location.hash);
  if (hash) open(hash[1], true);
  window.addEventListener("beforeprint", () => {
    if (!window.Plotly) return;
    root.querySelectorAll('.chart[data-drawn="yes"]').forEach((el) => window.Plotly.Plots.resize(el));
  });
}
