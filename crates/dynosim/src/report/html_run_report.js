// Page script of dynosim's HTML run report: reads the #run-data JSON written by
// report::html::render_run_report and draws it with Chart.js 3 (inlined above). When done it
// writes into #render-status how many plots hold a drawing, or the errors met.
(function () {
  "use strict";
  var status = document.getElementById("render-status");
  var expected = [];
  try {
    var data = JSON.parse(document.getElementById("run-data").textContent);
    var report = data.report;
    var series = data.series;
    var seconds = series.bucket_ms / 1000;

    Chart.defaults.animation = false;
    Chart.defaults.responsive = true;
    Chart.defaults.maintainAspectRatio = false;
    Chart.defaults.font.size = 11;

    var palette = function (i, n) {
      return "hsl(" + Math.round((360 * i) / Math.max(n, 1)) + ", 65%, 45%)";
    };
    var fmt = function (v, digits) {
      if (v === null || v === undefined) return "";
      if (Number.isInteger(v)) return v.toLocaleString("en-US");
      return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 3 : digits });
    };
    // Bucket i covers [i*w, (i+1)*w) s of model time; points sit at its start.
    var points = function (values, scale) {
      return values.map(function (v, i) {
        return { x: i * seconds, y: v === null ? null : v * (scale === undefined ? 1 : scale) };
      });
    };
    var timeAxis = {
      type: "linear",
      title: { display: true, text: "model time (s)" },
      min: 0,
      max: series.output_tokens.length * seconds,
    };
    var lineOptions = function (yTitle, extra) {
      var options = {
        parsing: true,
        spanGaps: true,
        elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
        scales: { x: timeAxis, y: { beginAtZero: true, title: { display: true, text: yTitle } } },
        plugins: { legend: { display: true, labels: { boxWidth: 12 } } },
      };
      if (extra) extra(options);
      return options;
    };
    // A planner run: its scaling events, drawn as vertical lines on every time plot.
    var scaling = data.scaling || null;
    var scalingMarks = {
      id: "scalingMarks",
      afterDatasetsDraw: function (chart) {
        if (!scaling || !chart.scales.x || chart.scales.x.type !== "linear") return;
        var area = chart.chartArea;
        var ctx = chart.ctx;
        ctx.save();
        ctx.lineWidth = 1;
        ctx.setLineDash([4, 3]);
        scaling.events.forEach(function (e) {
          var x = chart.scales.x.getPixelForValue(e.at_s);
          if (x < area.left || x > area.right) return;
          ctx.strokeStyle = e.to > e.from ? "rgba(30, 132, 73, 0.7)" : "rgba(176, 58, 46, 0.7)";
          ctx.beginPath();
          ctx.moveTo(x, area.top);
          ctx.lineTo(x, area.bottom);
          ctx.stroke();
        });
        ctx.restore();
      },
    };
    var draw = function (id, config) {
      expected.push(id);
      if (scaling && config.type === "line") config.plugins = [scalingMarks];
      return new Chart(document.getElementById(id), config);
    };

    // Summary and all keys.
    var summaryKeys = [
      ["completed_requests", "completed requests"],
      ["num_requests", "requests"],
      ["duration_ms", "duration (ms)"],
      ["request_throughput_rps", "request throughput (req/s)"],
      ["output_throughput_tok_s", "output throughput (tok/s)"],
      ["mean_ttft_ms", "TTFT mean (ms)"],
      ["p50_ttft_ms", "TTFT p50 (ms)"],
      ["p99_ttft_ms", "TTFT p99 (ms)"],
      ["mean_itl_ms", "ITL mean (ms)"],
      ["p99_itl_ms", "ITL p99 (ms)"],
      ["mean_e2e_latency_ms", "E2E mean (ms)"],
      ["p99_e2e_latency_ms", "E2E p99 (ms)"],
      ["prefix_cache_reused_ratio", "prefix cache reused ratio"],
    ];
    var row = function (table, name, value) {
      var tr = document.createElement("tr");
      var th = document.createElement("th");
      th.textContent = name;
      var td = document.createElement("td");
      td.className = "num";
      td.textContent = fmt(value);
      tr.appendChild(th);
      tr.appendChild(td);
      table.appendChild(tr);
    };
    var summary = document.getElementById("summary");
    summaryKeys.forEach(function (k) {
      if (k[0] in report) row(summary, k[1], report[k[0]]);
    });
    var allKeys = document.getElementById("report-keys");
    Object.keys(report).forEach(function (k) {
      row(allKeys, k, report[k]);
    });

    // Latency histograms: one bar per log-spaced bin.
    var histogram = function (id, h, color) {
      var labels = h.counts.map(function (_, i) {
        return fmt(h.edges[i], 2) + "–" + fmt(h.edges[i + 1], 2);
      });
      draw(id, {
        type: "bar",
        data: { labels: labels, datasets: [{ label: "count", data: h.counts, backgroundColor: color }] },
        options: {
          plugins: { legend: { display: false } },
          scales: {
            x: { title: { display: true, text: "ms" }, ticks: { maxRotation: 60, autoSkip: true } },
            y: { beginAtZero: true, title: { display: true, text: "count" } },
          },
        },
      });
    };
    histogram("plot-ttft", series.histograms.ttft_ms, "#3b7dd8");
    histogram("plot-itl", series.histograms.itl_ms, "#d8873b");
    histogram("plot-e2e", series.histograms.e2e_ms, "#4a9c5d");

    // Throughput.
    draw("plot-throughput", {
      type: "line",
      data: {
        datasets: [
          { label: "output tokens/s", data: points(series.output_tokens, 1 / seconds), borderColor: "#3b7dd8", yAxisID: "y" },
          { label: "completed requests/s", data: points(series.completed_requests, 1 / seconds), borderColor: "#c0392b", yAxisID: "y2" },
        ],
      },
      options: lineOptions("tokens/s", function (o) {
        o.scales.y2 = { position: "right", beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: "requests/s" } };
      }),
    });

    // Queue depth: sum over every worker of every pool (a worker without a pass adds 0).
    var rows = [];
    series.pools.forEach(function (pool) {
      pool.workers.forEach(function (w) {
        rows.push(w);
      });
    });
    var queue = series.output_tokens.map(function (_, i) {
      var total = 0;
      series.pools.forEach(function (pool) {
        var summarised = pool.workers.length > 0 && / \((mean|max) of \d+\)$/.test(pool.workers[0].label);
        if (summarised) {
          // Mean over the workers times their count.
          var n = Number(/of (\d+)\)$/.exec(pool.workers[0].label)[1]);
          total += (pool.workers[0].waiting[i] || 0) * n;
        } else {
          pool.workers.forEach(function (w) {
            total += w.waiting[i] || 0;
          });
        }
      });
      return total;
    });
    draw("plot-queue", {
      type: "line",
      data: { datasets: [{ label: "waiting requests", data: points(queue), borderColor: "#8e44ad", fill: false }] },
      options: lineOptions("requests"),
    });

    // Per-worker lines.
    var perWorker = function (id, key, scale, yTitle) {
      var datasets = rows.map(function (w, i) {
        return { label: w.label, data: points(w[key], scale), borderColor: palette(i, rows.length) };
      });
      draw(id, { type: "line", data: { datasets: datasets }, options: lineOptions(yTitle) });
    };
    perWorker("plot-running", "running", 1, "running requests");
    perWorker("plot-kv", "kv_used", 100, "% of KV cache");

    // Prefix reuse, per interval and cumulative.
    var perInterval = series.prompt_tokens.map(function (p, i) {
      return p > 0 ? series.reused_prompt_tokens[i] / p : null;
    });
    var reused = 0;
    var prompt = 0;
    var cumulative = series.prompt_tokens.map(function (p, i) {
      prompt += p;
      reused += series.reused_prompt_tokens[i];
      return prompt > 0 ? reused / prompt : null;
    });
    draw("plot-reuse", {
      type: "line",
      data: {
        datasets: [
          { label: "in interval", data: points(perInterval, 100), borderColor: "#16a085" },
          { label: "cumulative", data: points(cumulative, 100), borderColor: "#2c3e50", borderDash: [5, 3] },
        ],
      },
      options: lineOptions("% of prompt tokens", function (o) {
        o.scales.y.max = 100;
      }),
    });

    // The scaling section: the events as a table, and the workers asked for over time (a
    // step line per pool, from its initial count through each event).
    if (scaling) {
      document.getElementById("scaling-summary").textContent =
        scaling.events.length + " scaling events over " + scaling.ticks + " planner ticks.";
      var events = document.getElementById("scaling-events");
      scaling.events.forEach(function (e) {
        var tr = document.createElement("tr");
        [fmt(e.at_s, 1), e.component, e.from, e.to, e.reason].forEach(function (v, i) {
          var td = document.createElement("td");
          td.textContent = String(v);
          if (i >= 2 && i <= 3) td.className = "num";
          if (i === 4) td.className = e.reason === "scale_up" ? "up" : "down";
          tr.appendChild(td);
        });
        events.appendChild(tr);
      });
      var end = Math.max(timeAxis.max, scaling.events.length > 0 ? scaling.events[scaling.events.length - 1].at_s : 0);
      var components = Object.keys(scaling.initial);
      var datasets = components.map(function (component, i) {
        var count = scaling.initial[component];
        var steps = [{ x: 0, y: count }];
        scaling.events.forEach(function (e) {
          if (e.component !== component) return;
          steps.push({ x: e.at_s, y: e.to });
          count = e.to;
        });
        steps.push({ x: end, y: count });
        return { label: component, data: steps, stepped: "after", borderColor: palette(i, components.length) };
      });
      draw("plot-workers", {
        type: "line",
        data: { datasets: datasets },
        options: lineOptions("workers", function (o) {
          o.scales.x = { type: "linear", min: 0, max: end, title: { display: true, text: "model time (s)" } };
          o.scales.y.ticks = { precision: 0 };
        }),
      });
    }

    // A plot counts as drawn when its canvas holds any non-transparent pixel.
    var drawn = expected.filter(function (id) {
      var canvas = document.getElementById(id);
      if (!canvas.width || !canvas.height) return false;
      var pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      for (var i = 3; i < pixels.length; i += 4) {
        if (pixels[i] !== 0) return true;
      }
      return false;
    });
    var errors = window.dynosimErrors || [];
    status.textContent =
      errors.length > 0
        ? "errors: " + errors.join("; ")
        : "drawn " + drawn.length + " of " + expected.length + " plots";
  } catch (e) {
    status.textContent = "errors: " + String(e && e.message ? e.message : e);
    throw e;
  }
})();
