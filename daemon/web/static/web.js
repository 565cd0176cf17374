// admitd web view: the time control, the plots (uPlot) and following the log without reloading.
// At the present (data-live=1), polls {root}/api/head; when the log's last seq changes, fetches the page again and
// replaces only the fragments (data-frag) whose HTML changed, and feeds new points to the plots (no flicker).
(function () {
  "use strict";
  const body = document.body;
  const root = body.dataset.root || "";
  const form = document.getElementById("time-form");

  function showTime(ms, virtual) {
    if (virtual) {
      let s = Math.max(0, Math.round(ms / 1000));
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
      s = s % 60;
      return "+" + (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
    }
    return new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
  }

  if (form) {
    const slider = document.getElementById("time-slider");
    const text = document.getElementById("time-at");
    const virtual = form.dataset.virtual === "1";
    slider.addEventListener("input", () => { text.value = showTime(Number(slider.value), virtual); });
    slider.addEventListener("change", () => {
      text.value = showTime(Number(slider.value), virtual);
      form.submit();
    });
  }

  const plots = {};
  window.admitdPlots = plots;  // for the browser tests: each uPlot and the points it drew

  function plotData() {
    const el = document.getElementById("plot-data");
    return el ? JSON.parse(el.textContent) : null;
  }

  function tick(virtual) {
    return (u, vals) => vals.map((v) => (virtual ? showTime(v * 1000, true) : new Date(v * 1000).toISOString().slice(11, 16)));
  }

  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

  function atMarker(at) {
    return {
      hooks: {
        draw: [(u) => {
          const x = u.valToPos(at, "x", true);
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = "#e0a800";
          ctx.lineWidth = 2;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.restore();
        }],
      },
    };
  }

  function depthArgs(d) {
    return [[d.t, d.pending, d.admitted], {
      width: 560, height: 220, plugins: [atMarker(d.at)],
      scales: { x: { time: false } },
      axes: [{ values: tick(d.virtual) }, {}],
      series: [{}, { label: "pending", stroke: "#d62728", width: 2, paths: uPlot.paths.stepped({ align: 1 }) },
        { label: "admitted", stroke: "#1f77b4", width: 2, paths: uPlot.paths.stepped({ align: 1 }) }],
    }];
  }

  function usageArgs(d) {
    const names = Object.keys(d.usage);
    const data = [d.t];
    const series = [{}];
    names.forEach((fr, i) => {
      data.push(d.usage[fr]);
      series.push({ label: fr, stroke: COLORS[i % COLORS.length], width: 2, paths: uPlot.paths.stepped({ align: 1 }) });
      if (fr in d.nominal) {
        data.push(d.t.map(() => d.nominal[fr]));
        series.push({ label: fr + " nominal", stroke: COLORS[i % COLORS.length], dash: [6, 4], width: 1 });
      }
    });
    return [data, {
      width: 560, height: 220, plugins: [atMarker(d.at)],
      scales: { x: { time: false } },
      axes: [{ values: tick(d.virtual) }, {}],
      series: series,
    }];
  }

  function drawPlots() {
    const d = plotData();
    if (!d || typeof uPlot === "undefined") return;
    for (const [id, make] of [["plot-depth", depthArgs], ["plot-usage", usageArgs]]) {
      const el = document.getElementById(id);
      if (!el) continue;
      const [data, opts] = make(d);
      if (plots[id] && plots[id].series.length === opts.series.length) {
        plots[id].setData(data);
      } else {
        if (plots[id]) plots[id].destroy();
        plots[id] = new uPlot(opts, data, el);
      }
      el.dataset.points = String(d.t.length);
      el.dataset.lastPending = String(d.pending[d.pending.length - 1]);
    }
  }

  async function refresh() {
    const res = await fetch(location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (!res.ok) return;
    const doc = new DOMParser().parseFromString(await res.text(), "text/html");
    let changed = false;
    for (const el of doc.querySelectorAll("[data-frag]")) {
      const mine = document.querySelector(`[data-frag="${el.dataset.frag}"]`);
      if (mine && mine.outerHTML !== el.outerHTML) {
        mine.replaceWith(document.importNode(el, true));
        changed = true;
      }
    }
    const seq = doc.body.dataset.seq;
    body.dataset.seq = seq;
    const slider = document.getElementById("time-slider");
    const fresh = doc.getElementById("time-slider");
    if (slider && fresh) { slider.max = fresh.max; slider.value = fresh.value; }
    if (changed) drawPlots();
    body.dataset.refreshes = String(Number(body.dataset.refreshes || "0") + 1);
  }

  async function poll() {
    try {
      const res = await fetch(root + "/api/head", { credentials: "same-origin" });
      if (res.ok) {
        const head = await res.json();
        if (String(head.seq) !== body.dataset.seq || document.querySelector("[data-later]")) await refresh();
      }
    } catch (err) {
      // the daemon restarting: try again at the next tick
    }
  }

  window.addEventListener("load", () => {
    drawPlots();
    body.dataset.ready = "1";
    if (body.dataset.live === "1") setInterval(poll, Number(body.dataset.pollMs || 2000));
  });
})();
