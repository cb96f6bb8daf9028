// rooflinesim explore: the page asks the JSON API (the command line's own code) for every number and only draws.
// State lives in the URL: ?view=speculation&hw=h100&batch=8... (the same names as the API's parameters).
"use strict";

const VIEWS = ["roofline", "speculation", "load", "calibrated"];
const DEPLOYMENT = ["hw", "model", "weight-dtype", "kv-dtype", "activation-dtype", "attention", "tp", "calibration"];
const SPECULATION = ["drafter", "draft", "alpha", "acceptance"];
const PREDICT = [...DEPLOYMENT, ...SPECULATION, "alpha-per-position", "batch", "ctx", "k"];
const SERVE = [...DEPLOYMENT, ...SPECULATION, "alpha-per-position", "rate", "policy", "requests"];
const SWEEP = [...DEPLOYMENT, ...SPECULATION];
const MAP_BATCHES = 64, MAP_CONTEXTS = 16;  // the speedup map's grid: 64 batches x 16 contexts
const BOUND_COLOURS = {memory: "#1f77b4", compute: "#d62728"};
const PLOT_CONFIG = {displaylogo: false, responsive: true};

const form = document.getElementById("controls");
let generation = 0;
let view = "roofline";
let server = {calibration: null};
let models = [];

class ApiError extends Error {}

async function api(endpoint, params = {}) {
  const response = await fetch(`/api/${endpoint}?${new URLSearchParams(params)}`);
  const stderr = JSON.parse(response.headers.get("X-Rooflinesim-Stderr") || "[]");
  const text = await response.text();
  if (!response.ok) {
    let message = text;
    try { message = JSON.parse(text).error; } catch (e) { /* not JSON: show it as it is */ }
    throw new ApiError(message);
  }
  const json = (response.headers.get("Content-Type") || "").startsWith("application/json");
  return {data: json ? JSON.parse(text) : text, stderr};
}

function controls() {
  const out = {};
  for (const el of form.elements) {
    if (el.name && el.value.trim() !== "") out[el.name] = el.value.trim();
  }
  return out;
}

function pick(values, names, extra = {}) {
  const out = {};
  for (const name of names) if (name in values) out[name] = values[name];
  return Object.assign(out, extra);
}

// ---- formatting: the table cell keeps the API's number in data-value, the text is rounded for reading
function sig(x, digits = 4) { return Number(x.toPrecision(digits)).toString(); }
function formatValue(value, unit) {
  if (value === null || value === undefined) return "-";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "string") return value;
  if (unit === "s") {
    const a = Math.abs(value);
    return a < 1e-3 ? `${sig(value * 1e6)} µs` : a < 1 ? `${sig(value * 1e3)} ms` : `${sig(value)} s`;
  }
  if (unit === "B") return `${sig(value / 2 ** 30)} GiB`;
  if (unit === "x") return `${sig(value, 3)}x`;
  if (Number.isInteger(value) && !unit) return String(value);  // counts: batch, tokens, k
  return unit ? `${sig(value)} ${unit}` : sig(value);
}
function field(data, path) { return path.split(".").reduce((o, key) => (o == null ? o : o[key]), data); }

function fillNumbers(table, data, rows) {
  table.replaceChildren();
  for (const [label, path, unit] of rows) {
    const value = field(data, path);
    const tr = table.insertRow(), th = document.createElement("th"), td = tr.insertCell();
    th.textContent = label;
    tr.prepend(th);
    td.dataset.field = path;
    td.dataset.value = JSON.stringify(value === undefined ? null : value);
    td.textContent = formatValue(value, unit);
  }
}

function fillRows(table, header, rows) {
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  for (const name of header) head.appendChild(document.createElement("th")).textContent = name;
  const body = table.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const cell of row) tr.insertCell().textContent = cell;
  }
}

function layout(title, xaxis, yaxis, extra = {}) {
  return Object.assign({title: {text: title, font: {size: 14}}, margin: {l: 70, r: 20, t: 40, b: 50}, height: 360,
                        xaxis, yaxis, legend: {orientation: "h", y: -0.2}}, extra);
}

// ---- views: each fetches its answers, then returns a draw() the caller runs if nothing newer started
const RENDERERS = {
  async roofline(p) {
    const {data, stderr} = await api("predict", pick(p, PREDICT));
    return {stderr, draw() {
      const hw = data.hardware, ops = data.ops.filter(op => op.flops > 0 && op.time_s > 0);
      document.getElementById("roofline-title").textContent =
        `${data.model.short_name} on ${hw.name}, batch ${data.workload.batch}, context ${data.workload.context_tokens}`;
      fillNumbers(document.getElementById("roofline-numbers"), data, [
        ["decode step", "decode.step_time_s", "s"], ["decode step (pure roofline)", "decode.roofline_step_time_s", "s"],
        ["decode tokens/s (all sequences)", "decode.tokens_per_s", ""], ["decode bound", "decode.bound"],
        ["decode arithmetic intensity", "decode.arithmetic_intensity", "FLOP/B"],
        ["prefill step", "prefill.step_time_s", "s"], ["memory used", "memory.total_bytes", "B"],
        ["memory usable", "memory.usable_capacity_bytes", "B"], ["fits in memory", "memory.fits_in_memory"],
        ["largest batch that fits", "memory.max_batch", ""],
      ]);
      const intensities = ops.map(op => op.arithmetic_intensity).concat([hw.ridge_point_flops_per_byte]);
      const lo = Math.min(...intensities) / 4, hi = Math.max(...intensities, data.prefill.arithmetic_intensity) * 4;
      const ridge = hw.ridge_point_flops_per_byte;
      const traces = [{x: [lo, ridge, hi], y: [hw.bandwidth_bytes_per_s * lo, hw.peak_flops_per_s, hw.peak_flops_per_s],
                       mode: "lines", name: `roofline (${hw.compute_dtype}, datasheet)`, line: {color: "#333"}}];
      for (const bound of [...new Set(ops.map(op => op.bound))]) {
        const mine = ops.filter(op => op.bound === bound);
        traces.push({x: mine.map(op => op.arithmetic_intensity), y: mine.map(op => op.flops / op.time_s),
                     text: mine.map(op => op.name), mode: "markers", type: "scatter", name: `${bound}-bound ops`,
                     marker: {size: 9, color: BOUND_COLOURS[bound] || "#7f7f7f"},
                     hovertemplate: "%{text}<br>%{x:.3g} FLOP/B, %{y:.3g} FLOP/s<extra></extra>"});
      }
      for (const [step, symbol] of [["decode", "diamond"], ["prefill", "square"]]) {
        const s = data[step];
        traces.push({x: [s.arithmetic_intensity], y: [s.flops / s.step_time_s], mode: "markers", name: `${step} step`,
                     marker: {size: 13, symbol, color: BOUND_COLOURS[s.bound] || "#7f7f7f", line: {width: 1.5, color: "#000"}}});
      }
      Plotly.react("chart-roofline", traces, layout("Ops of one decode step on the roofline (attained = FLOPs / priced time)",
        {type: "log", title: {text: "arithmetic intensity (FLOP/B)"}}, {type: "log", title: {text: "FLOP/s"}}), PLOT_CONFIG);
      const all = data.ops.filter(op => op.time_s > 0);
      Plotly.react("chart-breakdown", [{type: "bar", orientation: "h", y: all.map(op => op.name),
        x: all.map(op => op.time_s * 1e3), marker: {color: all.map(op => BOUND_COLOURS[op.bound] || "#7f7f7f")},
        hovertemplate: "%{y}: %{x:.4g} ms<extra></extra>"}],
        layout(`Decode step time by op: ${formatValue(data.decode.step_time_s, "s")} (blue memory-, red compute-bound)`,
          {title: {text: "ms per step (all layers)"}}, {autorange: "reversed", automargin: true},
          {height: Math.max(300, 22 * all.length + 80), showlegend: false}), PLOT_CONFIG);
    }};
  },

  async speculation(p) {
    const model = models.find(m => m.name === p.model || m.aliases.includes(p.model));
    const maxCtx = model ? model.max_context_tokens : 131072;
    const batches = geometric(1, 512, MAP_BATCHES), contexts = geometric(256, maxCtx, MAP_CONTEXTS);
    const engine = e => api("serve", pick(p, [...SPECULATION, ...DEPLOYMENT, "alpha-per-position"], {"emit-config": e}));
    const [pred, map, sweep, vllm, trtllm, sglang] = await Promise.all([
      api("predict", pick(p, PREDICT)),
      api("sweep/map", pick(p, SWEEP, {batch: batches.join(","), ctx: contexts.join(","), k: server.defaults.k})),
      api("sweep", pick(p, SWEEP, {ctx: p.ctx || server.defaults.ctx})),
      engine("vllm"), engine("trtllm"), engine("sglang")]);
    const stderr = [...new Set([...pred.stderr, ...map.stderr, ...sweep.stderr])];
    return {stderr, draw() {
      const d = pred.data, spec = d.speculative;
      document.getElementById("speculation-title").textContent = spec ?
        `${d.model.short_name} + ${spec.draft} (${spec.drafter_kind}) on ${d.hardware.name}` : "(speculation off)";
      fillNumbers(document.getElementById("speculation-numbers"), d, [
        ["k priced", "speculative.k", ""], ["speedup at k", "speculative.speedup", "x"],
        ["speedup, 90 % interval low", "speculative.speedup_low", "x"],
        ["speedup, 90 % interval high", "speculative.speedup_high", "x"],
        ["verdict (pays / does_not_pay / uncertain)", "speculative.speedup_verdict", ""],
        ["best k", "speculative.best_k", ""], ["best speedup", "speculative.best_speedup", "x"],
        ["expected tokens per step", "speculative.expected_tokens", ""],
        ["speculative step", "speculative.step_time_s", "s"], ["plain decode step", "decode.step_time_s", "s"],
      ]);
      const byK = spec ? spec.speedup_by_k : [];
      Plotly.react("chart-speedup-k", [
        {x: byK.map(r => r.k), y: byK.map(r => r.speedup), mode: "lines+markers", name: "speedup",
         marker: {color: byK.map(r => (r.fits_in_memory ? "#1f77b4" : "#bbb"))}},
        {x: [0, byK.length ? byK[byK.length - 1].k : 1], y: [1, 1], mode: "lines", name: "no speculation",
         line: {dash: "dot", color: "#888"}}],
        layout(`Speedup vs k at batch ${d.workload.batch}, context ${d.workload.context_tokens} (grey: does not fit)`,
          {title: {text: "k (draft tokens per step)"}, dtick: 1}, {title: {text: "speedup"}}), PLOT_CONFIG);
      const m = map.data, a = 0;
      const z = m.best_speculative_speedup.map(row => row.map(cell => cell[a]));
      const traces = [
        {type: "heatmap", x: m.context_tokens, y: m.batch, z, zmid: 1, colorscale: "RdBu", reversescale: false,
         colorbar: {title: {text: "best speedup"}}, hovertemplate: "batch %{y}, context %{x}: %{z:.3f}x<extra></extra>"},
        {type: "contour", x: m.context_tokens, y: m.batch, z, name: "break-even (speedup 1)", showscale: false,
         contours: {start: 1, end: 1, size: 1, coloring: "none"}, line: {color: "#000", width: 2.5}, showlegend: true,
         hoverinfo: "skip"}];
      if (m.speculation_fits_in_memory) {
        traces.push({type: "contour", x: m.context_tokens, y: m.batch, showscale: false, showlegend: true,
          z: m.speculation_fits_in_memory.map(row => row.map(fits => (fits ? 1 : 0))), name: "memory limit",
          contours: {start: 0.5, end: 0.5, size: 1, coloring: "none"}, line: {color: "#e6a000", width: 3, dash: "dash"},
          hoverinfo: "skip"});
      }
      traces.push({x: [d.workload.context_tokens], y: [d.workload.batch], mode: "markers", name: "this workload",
                   marker: {symbol: "x", size: 12, color: "#000"}});
      Plotly.react("chart-speedup-map", traces, layout(
        `Best speculative speedup over k = ${server.defaults.k}, alpha ${m.alpha[a]} (${MAP_BATCHES} batches x ${MAP_CONTEXTS} contexts)` +
        (p["alpha-per-position"] ? "<br>i.i.d. alpha: sweep takes no per-position rates" : ""),
        {type: "log", title: {text: "context tokens"}}, {type: "log", title: {text: "batch"}},
        {height: 480}), PLOT_CONFIG);
      const s = sweep.data.schedules[0], be = sweep.data.break_even[0];
      fillNumbers(document.getElementById("engine-schedule"), {s, be}, [
        ["context tokens", "s.context_tokens", ""], ["alpha", "s.alpha", ""],
        ["break-even batch (speculation stops paying)", "be.break_even_batch", ""],
        ["break-even, earliest within the published error", "be.break_even_batch_earliest", ""],
        ["break-even, latest within the published error", "be.break_even_batch_latest", ""],
        ["vLLM speculative_disable_by_batch_size (V0)", "s.vllm.speculative_disable_by_batch_size", ""],
        ["vLLM num_speculative_tokens", "s.vllm.num_speculative_tokens", ""],
        ["TensorRT-LLM max_concurrency", "s.trtllm.max_concurrency", ""],
      ]);
      const schedule = document.getElementById("engine-schedule").insertRow();
      schedule.appendChild(document.createElement("th")).textContent = "TensorRT-LLM draft_len_schedule";
      schedule.insertCell().textContent = JSON.stringify(s.trtllm.draft_len_schedule);
      for (const [id, answer] of [["vllm", vllm], ["trtllm", trtllm], ["sglang", sglang]]) {
        const text = typeof answer.data === "string" ? answer.data : JSON.stringify(answer.data, null, 1);
        const notes = answer.stderr.filter(line => !line.startsWith("warning:"));
        document.getElementById(`config-${id}`).textContent = [...notes, text.trimEnd()].join("\n");
      }
    }};
  },

  async load(p) {
    // with an engine flag on serve (and engines listed), one serve answer per engine, its curves named "policy (engine)"
    const engines = servesEngines() && p.engines ? p.engines.split(",").map(e => e.trim()).filter(Boolean) : [null];
    const answers = await Promise.all(engines.map(engine => api("serve", pick(p, SERVE, engine ? {engine} : {}))));
    const named = (name, engine) => (engine ? `${name} (${engine})` : name);
    const data = {
      runs: answers.flatMap((a, i) => a.data.runs.map(r => ({...r, policy: named(r.policy, engines[i])}))),
      crossovers: answers.flatMap((a, i) => a.data.crossovers.map(c => ({...c, policy: named(c.policy, engines[i])}))),
    };
    const stderr = [...new Set(answers.flatMap(a => a.stderr))];
    return {stderr, draw() {
      const first = data.runs[0];
      const draft = (data.runs.find(r => r.draft) || {}).draft || "none";
      document.getElementById("load-title").textContent =
        `${first.model} on ${first.hardware}, draft ${draft}, ${first.requests} requests per run`;
      const policies = [...new Set(data.runs.map(r => r.policy))];
      const series = key => policies.map(policy => {
        const rows = data.runs.filter(r => r.policy === policy);
        const trace = {x: rows.map(r => r.rate_per_s), y: rows.map(r => field(r, key)), mode: "lines+markers", name: policy};
        const bands = rows.map(r => field(r.interval, key));  // [low, high] with a calibration profile
        if (bands.every(Array.isArray)) {
          trace.error_y = {type: "data", symmetric: false, array: bands.map((b, i) => b[1] - trace.y[i]),
                           arrayminus: bands.map((b, i) => trace.y[i] - b[0])};
        }
        return trace;
      });
      // a crossover: the rate from which a policy stops paying against off (serve's own get_crossovers)
      const crossing = kind => data.crossovers.filter(c => c[kind]);
      // on a log axis Plotly places shapes at data values but annotations at their log10 (tests/test_explore_browser.py)
      const shapes = kind => crossing(kind).map(c => ({type: "line", xref: "x", yref: "paper", x0: c[kind].rate_per_s,
        x1: c[kind].rate_per_s, y0: 0, y1: 1, line: {dash: "dash", color: "#555"}}));
      const notes = kind => crossing(kind).map((c, i) => ({xref: "x", yref: "paper", x: Math.log10(c[kind].rate_per_s),
        y: 1 - 0.08 * i, text: `${c.policy} stops paying`, showarrow: false, xanchor: "right", font: {size: 11},
        bgcolor: "rgba(255,255,255,0.8)"}));
      // the latency crossover within the engine's published speedup error (serve's latency_range): shaded from the
      // low-end reading to the high-end one (to the right edge where the high end pays at every rate)
      const finiteRate = at => at && typeof at.rate_per_s === "number";
      const ranges = data.crossovers.filter(c => c.latency_range && finiteRate(c.latency_range.earliest)).map(c => ({
        type: "rect", xref: "x", yref: "paper", y0: 0, y1: 1, line: {width: 0}, fillcolor: "rgba(85,85,85,0.12)",
        x0: c.latency_range.earliest.rate_per_s,
        x1: finiteRate(c.latency_range.latest) ? c.latency_range.latest.rate_per_s
          : Math.max(...data.runs.map(r => r.rate_per_s).filter(r => typeof r === "number"))}));
      for (const [id, key, title, axis, kind] of [
        ["chart-load-latency", "latency_s.p50", "Median request latency vs offered rate", "p50 latency (s)", "latency"],
        ["chart-load-throughput", "output_tokens_per_s", "Output tokens/s vs offered rate", "output tokens/s", "throughput"]]) {
        Plotly.react(id, series(key), layout(title, {type: "log", title: {text: "requests per second"}},
          {title: {text: axis}}, {shapes: [...shapes(kind), ...(kind === "latency" ? ranges : [])], annotations: notes(kind)}), PLOT_CONFIG);
      }
      const rangeText = r => !r ? "-" : !r.earliest ? "pays at every rate at either end" :
        `${r.earliest.rate_per_s} req/s to ${r.latest ? `${r.latest.rate_per_s} req/s` : "beyond the highest rate"}` +
        ` (+-${sig(r.error_x, 2)}x)`;
      fillRows(document.getElementById("load-crossovers"),
        ["policy", "stops paying for latency at", "within the published error", "for throughput at"],
        data.crossovers.map(c => [c.policy, ...["latency", "range", "throughput"].map(kind => kind === "range" ?
          rangeText(c.latency_range) :
          (c[kind] ? `${c[kind].rate_per_s} req/s (off's mean batch ${sig(c[kind].mean_batch, 3)})` : "pays at every rate"))]));
      fillRows(document.getElementById("load-rows"),
        ["policy", "rate /s", "output tokens/s", "p50 latency", "p50 TTFT", "p50 TPOT", "mean batch", "mean k"],
        data.runs.map(r => [r.policy, r.rate_per_s, sig(r.output_tokens_per_s), formatValue(r.latency_s.p50, "s"),
          formatValue(r.ttft_s.p50, "s"), formatValue(r.tpot_s.p50, "s"), sig(r.mean_batch, 3), sig(r.mean_k, 3)]));
    }};
  },

  async calibrated(p) {
    const loaded = p.calibration || server.calibration;
    document.getElementById("calibrated-none").hidden = Boolean(loaded);
    if (!loaded) {
      return {stderr: [], draw() {
        document.getElementById("calibrated-numbers").replaceChildren();
        Plotly.purge("chart-intervals");
      }};
    }
    const {data, stderr} = await api("predict", pick(p, PREDICT));
    return {stderr, draw() {
      document.getElementById("calibrated-title").textContent =
        `${data.model.short_name} on ${data.hardware.name}, profile ${data.hardware.calibration_profile}`;
      const rows = [["prefill step", "prefill.step_time_s"], ["decode step", "decode.step_time_s"],
                    ["draft step", "speculative.draft_step_time_s"], ["verify step", "speculative.verify_step_time_s"],
                    ["speculative step", "speculative.step_time_s"]].filter(([, path]) => field(data, path) != null);
      const table = [];
      for (const [label, path] of rows) {
        table.push([`${label} (low)`, `${path}_low`, "s"], [label, path, "s"], [`${label} (high)`, `${path}_high`, "s"]);
      }
      table.push(["speedup (low)", "speculative.speedup_low", "x"], ["speedup", "speculative.speedup", "x"],
                 ["speedup (high)", "speculative.speedup_high", "x"]);
      fillNumbers(document.getElementById("calibrated-numbers"), data, table);
      const mid = rows.map(([, path]) => field(data, path) * 1e3);
      const low = rows.map(([, path]) => field(data, `${path}_low`)), high = rows.map(([, path]) => field(data, `${path}_high`));
      Plotly.react("chart-intervals", [{type: "scatter", mode: "markers", x: rows.map(([label]) => label), y: mid,
        marker: {size: 10}, name: "prediction", error_y: {type: "data", symmetric: false,
          array: high.map((h, i) => (h == null ? 0 : h * 1e3 - mid[i])),
          arrayminus: low.map((l, i) => (l == null ? 0 : mid[i] - l * 1e3))}}],
        layout("Step times with the profile's prediction intervals", {}, {type: "log", title: {text: "ms"}}), PLOT_CONFIG);
    }};
  },
};

function servesEngines() { return Boolean(server.parameters && server.parameters.serve.engine); }

function geometric(lo, hi, n) {
  // n distinct integers from lo to hi, spaced evenly on a log scale (the map's axes; the API prices each one)
  const out = [];
  for (let i = 0; i < n; i++) {
    const value = Math.round(lo * Math.pow(hi / lo, i / (n - 1)));
    out.push(out.length && value <= out[out.length - 1] ? out[out.length - 1] + 1 : value);
  }
  return out;
}

// ---- state: the URL holds the view and every control that is set
function writeUrl(values) {
  const url = new URL(location.href);
  url.search = new URLSearchParams({view, ...values}).toString();
  history.replaceState(null, "", url);
}

function readUrl() {
  const params = new URLSearchParams(location.search);
  if (VIEWS.includes(params.get("view"))) view = params.get("view");
  for (const el of form.elements) {
    if (!el.name) continue;
    const value = params.has(el.name) ? params.get(el.name) : (el.dataset.default || "");
    if (el.tagName === "SELECT" && value && ![...el.options].some(o => o.value === value)) el.add(new Option(value, value));
    el.value = value;
  }
}

function showDefaults(defaults) {
  // the scenario's defaults come from the server (scenario.inputs, scenario.groups): the page writes none itself
  for (const el of form.elements) {
    const value = defaults[el.name];
    if (value === undefined) continue;
    if ("default" in el.dataset) el.dataset.default = value;  // a field filled in with the default
    else if ("blank" in el.dataset) el.dataset.blank = `default (${value})`;  // a choice left blank
    else el.placeholder = el.name === "k" ? `best over ${value}` : value;
  }
}

function fillSelect(select, values) {
  if ("blank" in select.dataset) select.add(new Option(select.dataset.blank, ""));
  for (const [value, label] of values) select.add(new Option(label, value));
}

function showView() {
  for (const name of VIEWS) document.getElementById(`view-${name}`).hidden = name !== view;
  for (const button of document.querySelectorAll("#views button")) button.classList.toggle("active", button.dataset.view === view);
  for (const set of form.querySelectorAll("fieldset[data-for]")) set.hidden = set.dataset.for !== view;
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message;
  box.hidden = !message;
}

function showWarnings(lines) {
  const list = document.getElementById("warnings");
  list.replaceChildren(...lines.filter(l => l.startsWith("warning:")).map(line => {
    const li = document.createElement("li");
    li.textContent = line;
    return li;
  }));
  list.hidden = list.children.length === 0;
}

async function render() {
  const mine = ++generation;
  const values = controls();
  writeUrl(values);
  showView();
  document.body.dataset.state = "loading";
  document.getElementById("status").textContent = "pricing...";
  try {
    const {stderr, draw} = await RENDERERS[view](values);
    if (mine !== generation) return;  // a newer change is on its way
    showError("");
    draw();
    showWarnings(stderr);
    document.body.dataset.state = "ready";
    document.getElementById("status").textContent = "";
  } catch (err) {
    if (mine !== generation) return;
    showError(err instanceof ApiError ? err.message : `page error: ${err.message}`);
    document.body.dataset.state = "error";
    document.getElementById("status").textContent = "";
  }
  document.body.dataset.generation = String(mine);
}

let timer = null;
function renderSoon() {
  clearTimeout(timer);
  timer = setTimeout(render, 300);
}

async function init() {
  const [hardware, modelList, presets, config] = await Promise.all(
    ["list/hardware", "list/models", "list/acceptance", "config"].map(endpoint => api(endpoint)));
  server = config.data;
  models = modelList.data;
  showDefaults(server.defaults);
  fillSelect(form.elements.hw, hardware.data.map(h => [h.name, `${h.name} (${h.full_name})`]));
  fillSelect(form.elements.model, models.map(m => [m.name, m.name]));
  fillSelect(form.elements.draft, models.map(m => [m.name, m.name]));
  fillSelect(form.elements.acceptance, presets.data.map(p => [p.name, p.name]));
  for (const select of form.querySelectorAll("select[data-choices]")) {
    fillSelect(select, select.dataset.choices.split(",").map(v => [v, v]));
  }
  for (const select of form.querySelectorAll("select[data-choices-of]")) {  // the command's own choices
    const choices = server.parameters[select.dataset.choicesOf][select.name].choices || [];
    fillSelect(select, choices.map(v => [v, v]));
  }
  if (servesEngines()) {
    const engine = server.parameters.serve.engine;
    document.getElementById("engines-control").hidden = false;
    if (engine.choices) form.elements.engines.placeholder = engine.choices.join(",");
  }
  if (server.calibration) form.elements.calibration.placeholder = `${server.calibration} (explore --calibration)`;
  readUrl();
  for (const button of document.querySelectorAll("#views button")) {
    button.addEventListener("click", () => { view = button.dataset.view; render(); });
  }
  form.addEventListener("change", render);
  form.addEventListener("input", event => { if (event.target.tagName === "INPUT") renderSoon(); });
  await render();
}

init().catch(err => {
  showError(err instanceof ApiError ? err.message : `page error: ${err.message}`);
  document.body.dataset.state = "error";
});
