// The modelcompare dashboard: the comparison list, and for one comparison live charts and the
// evidence table, fed by GET /history (the past) and the websocket (snapshot, then updates).
"use strict";

(() => {
  const KEY_STORAGE = "modelcompare.apiKey";
  const LIST_REFRESH_MS = 5000;
  const LIST_PAGE = 50; // comparisons per request of the list; "More" adds a page
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf"];
  const PLOT_CONFIG = { responsive: true, displaylogo: false };
  // Kass & Raftery (1995) on the natural-log scale: |log BF| of 1, 3 and 5 nats separate "barely
  // worth mentioning", "positive", "strong" and "very strong" evidence.
  const EVIDENCE_GRADES = [[-1, "positive"], [-3, "strong"], [-5, "very strong"]];
  // nats: the headline's lowest default edge, so the contest near 0 stays readable; models below
  // it are listed on the chart with their log BF (double-click the chart to see everything).
  const BF_FLOOR = -10;
  const EVENT_PAGES = 20; // pages of 1,000 stored decision events read when a comparison opens
  const EVENT_COLOR = "#b35900";

  const view = {
    comparisons: [],
    listCursor: null, // next_cursor of the last page read: "More" reads it
    listWanted: LIST_PAGE, // how many comparisons a refresh reads (pages of LIST_PAGE)
    cid: null,
    comparison: null, // GET /v1/comparisons/{id}: names, families, prior probabilities
    evidence: null, // the newest evidence body
    series: new Map(), // model name -> {n, logZ, stderr, probability, ess, steps}
    updateTimes: { n: [], seconds: [] },
    socket: null,
    retryMs: 500,
    listError: null,
    error: null,
    renderQueued: false,
  };

  const $ = (id) => document.getElementById(id);

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function apiKey() {
    return localStorage.getItem(KEY_STORAGE) || "";
  }

  async function api(path) {
    const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
    let response;
    try {
      response = await fetch(path, { headers });
    } catch (exc) {
      throw Object.assign(new Error(`cannot reach the server (${exc.message})`), { status: 0 });
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const error = (body && body.error) || { message: response.statusText };
      throw Object.assign(new Error(error.message), { status: response.status });
    }
    return body;
  }

  function describeError(exc) {
    if (exc.status === 401) return "This server needs an API key: enter it at the top right.";
    if (exc.status === 403) return "Your API key may not read this comparison.";
    return exc.message;
  }

  // ---- the comparison list -------------------------------------------------------------------

  // The list is paginated (newest first, a cursor per page): a refresh reads as many pages as
  // are shown, "More" reads the next one.
  async function listPage(cursor) {
    const query = `?limit=${LIST_PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    return api(`/v1/comparisons${query}`);
  }

  async function refreshList() {
    try {
      const comparisons = [];
      let cursor = null;
      do {
        const page = await listPage(cursor);
        comparisons.push(...page.comparisons);
        cursor = page.next_cursor;
      } while (cursor && comparisons.length < view.listWanted);
      Object.assign(view, { comparisons, listCursor: cursor, listError: null });
    } catch (exc) {
      view.listError = describeError(exc);
    }
    renderList();
    renderNotices();
  }

  async function moreList() {
    if (!view.listCursor) return;
    try {
      const page = await listPage(view.listCursor);
      const known = new Set(view.comparisons.map((c) => c.id));
      view.comparisons.push(...page.comparisons.filter((c) => !known.has(c.id)));
      view.listCursor = page.next_cursor;
      view.listWanted = Math.max(view.listWanted, view.comparisons.length);
      view.listError = null;
    } catch (exc) {
      view.listError = describeError(exc);
    }
    renderList();
    renderNotices();
  }

  function renderList() {
    const list = $("comparison-list");
    list.replaceChildren(...view.comparisons.map((c) => {
      const link = element("a", c.name);
      link.href = `#${encodeURIComponent(c.id)}`;
      if (c.id === view.cid) link.setAttribute("aria-current", "page");
      const models = `${c.models.length} model${c.models.length === 1 ? "" : "s"}`;
      link.append(element("small", `${models} · ${c.estimator.method} · ${c.id.slice(0, 8)}`));
      const item = element("li");
      item.append(link);
      return item;
    }));
    $("list-empty").hidden = view.comparisons.length > 0 || view.listError !== null;
    $("list-more").hidden = !view.listCursor;
  }

  // ---- one comparison: history, then the websocket -------------------------------------------

  async function select(cid) {
    closeSocket();
    Object.assign(view, {
      cid, comparison: null, evidence: null, series: new Map(), events: new Map(),
      updateTimes: { n: [], seconds: [] }, error: null, retryMs: 500,
    });
    renderList();
    if (!cid) {
      render();
      return;
    }
    try {
      const comparison = await api(`/v1/comparisons/${encodeURIComponent(cid)}`);
      const history = await api(`/v1/comparisons/${encodeURIComponent(cid)}/history`);
      const events = await storedEvents(cid);
      if (view.cid !== cid) return; // the user picked another one meanwhile
      view.comparison = comparison;
      absorbHistory(history.points);
      events.forEach(absorbEvent);
      connect(cid);
    } catch (exc) {
      view.error = exc.status === 404 ? `No comparison with id ${cid}.` : describeError(exc);
    }
    render();
  }

  function connect(cid) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const token = apiKey() ? `?token=${encodeURIComponent(apiKey())}` : "";
    const socket = new WebSocket(`${scheme}//${location.host}/v1/comparisons/${encodeURIComponent(cid)}/ws${token}`);
    view.socket = socket;
    setConnection("connecting", "connecting…");
    socket.onopen = () => setConnection("live", "live");
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "snapshot" || message.type === "update") {
        view.retryMs = 500;
        absorb(message.evidence);
      } else if (message.type === "event") {
        absorbEvent(message.event);
      } else if (message.type === "deleted") {
        view.error = "This comparison was deleted.";
        closeSocket();
        refreshList();
      } else if (message.type === "error") {
        view.error = message.error.message;
        closeSocket();
      }
      queueRender();
    };
    socket.onclose = () => {
      if (view.socket !== socket) return; // replaced or closed on purpose
      setConnection("closed", `disconnected, retrying in ${Math.round(view.retryMs / 1000)} s`);
      setTimeout(() => { if (view.socket === socket) connect(cid); }, view.retryMs);
      view.retryMs = Math.min(view.retryMs * 2, 10000);
    };
  }

  // Decision events (docs/guide/decisions.md): those stored before the page connected, then
  // the websocket's; an id seen twice is one event.
  async function storedEvents(cid) {
    const found = [];
    let after = 0;
    for (let page = 0; page < EVENT_PAGES && after !== null; page++) {
      const reply = await api(`/v1/comparisons/${encodeURIComponent(cid)}/events?after=${after}&limit=1000`);
      found.push(...reply.events);
      after = reply.next_after;
    }
    return found;
  }

  function absorbEvent(event) {
    view.events.set(event.id, event);
  }

  function closeSocket() {
    const socket = view.socket;
    view.socket = null;
    if (socket) socket.close();
    setConnection("idle", "not connected");
  }

  function setConnection(state, text) {
    const badge = $("connection");
    badge.dataset.state = state;
    badge.textContent = text;
  }

  // ---- series --------------------------------------------------------------------------------

  function priors() {
    return new Map(view.comparison.models.map((m) => [m.name, m.prior_probability]));
  }

  // The trace holds log Z, ESS and annealing steps per model but not the probabilities: they are
  // the server's softmax(log Z + log prior) over the models in each point (service/evidence.py).
  function absorbHistory(points) {
    const prior = priors();
    for (const point of points) {
      addUpdateTime(point.n_observations, point.compute_seconds);
      const scores = Object.entries(point.models)
        .filter(([name, m]) => m.log_evidence !== null && prior.has(name))
        .map(([name, m]) => [name, m.log_evidence + Math.log(prior.get(name))]);
      const top = Math.max(...scores.map(([, s]) => s));
      const total = scores.reduce((sum, [, s]) => sum + Math.exp(s - top), 0);
      for (const [name, score] of scores) {
        const m = point.models[name];
        addPoint(name, m.n_observations, {
          logZ: m.log_evidence, stderr: m.log_evidence_stderr,
          probability: Math.exp(score - top) / total, ess: m.ess ?? null,
          steps: m.annealing_steps ?? null,
        });
      }
    }
  }

  function absorb(evidence) {
    if (view.evidence && evidence.version < view.evidence.version) return;
    view.evidence = evidence;
    for (const m of evidence.models) {
      if (m.n_observations === 0 || m.log_evidence === null) continue;
      addPoint(m.name, m.n_observations, {
        logZ: m.log_evidence, stderr: m.log_evidence_stderr,
        probability: m.posterior_probability, ess: m.ess,
        steps: m.info?.annealing_steps ?? null,  // methods without annealing have none
      });
    }
    addUpdateTime(evidence.n_observations, evidence.compute_seconds);
  }

  function addUpdateTime(n, seconds) {
    const times = view.updateTimes;
    if (seconds == null || times.n.at(-1) >= n) return;
    times.n.push(n);
    times.seconds.push(seconds);
  }

  function addPoint(name, n, values) {
    if (!view.series.has(name)) {
      view.series.set(name, { n: [], logZ: [], stderr: [], probability: [], ess: [], steps: [] });
    }
    const series = view.series.get(name);
    const last = series.n.length - 1;
    if (last >= 0 && n < series.n[last]) return;
    if (last >= 0 && n === series.n[last]) {
      // the snapshot repeats the newest history point: keep it, fill in what the trace lacks
      for (const key of ["probability", "ess", "steps"]) series[key][last] ??= values[key];
      return;
    }
    series.n.push(n);
    for (const key of ["logZ", "stderr", "probability", "ess", "steps"]) series[key].push(values[key]);
  }

  // ---- rendering -----------------------------------------------------------------------------

  function queueRender() {
    if (view.renderQueued) return;
    view.renderQueued = true;
    requestAnimationFrame(() => {
      view.renderQueued = false;
      render();
    });
  }

  function render() {
    renderNotices();
    const ready = view.comparison !== null && view.evidence !== null;
    $("welcome").hidden = view.cid !== null;
    $("comparison").hidden = !ready;
    if (!ready) return;
    renderHeading();
    renderTable();
    renderCharts();
  }

  function notices() {
    const out = [];
    if (view.listError) out.push(["bad", view.listError]);
    if (view.error) out.push(["bad", view.error]);
    const evidence = view.evidence;
    if (!evidence) return out;
    if (evidence.status === "degraded") {
      const reason = evidence.status_reason || (evidence.last_error && evidence.last_error.message);
      out.push(["bad", `Degraded: ${reason || "see the server log"}`]);
    } else if (evidence.status === "waiting") {
      out.push(["warn", `Waiting: ${evidence.status_reason}`]);
    } else if (evidence.last_error) {
      out.push(["warn", `Chunk ${evidence.last_error.sequence} was not applied: ${evidence.last_error.message}`]);
    }
    for (const m of evidence.models) {
      if (m.failed) {
        out.push(["bad", `Model ${m.name} failed: ${m.failed}`]);
      } else if (isCatchingUp(m, evidence)) {
        out.push(["warn", `Catching up: model ${m.name} has seen ${m.n_observations} of ${evidence.n_observations} rows; it joins the probabilities when it has seen them all.`]);
      }
      if (!m.failed && isUnreliable(m)) out.push(["warn", `Model ${m.name} unreliable: ${m.reliability.reason}`]);
    }
    if (evidence.n_observations === 0) {
      out.push(["info", `No data yet. Post a chunk to /v1/comparisons/${view.cid}/chunks (or run modelcompare ingest) and the charts fill in live.`]);
    }
    return out;
  }

  // service/reliability.py: once an update's SGHMC moves diverged, log Z may be off by more
  // than its error bar, for good.
  function isUnreliable(m) {
    return m.reliability != null && m.reliability.reliable === false;
  }

  function isCatchingUp(m, evidence) {
    return m.catching_up || (!m.failed && m.n_observations < evidence.n_observations);
  }

  function renderNotices() {
    $("notices").replaceChildren(...notices().map(([kind, text]) => element("div", text, `notice ${kind}`)));
  }

  function renderHeading() {
    const { comparison, evidence } = view;
    $("comparison-title").textContent = comparison.name;
    const estimator = Object.entries(comparison.estimator).map(([k, v]) => `${k}=${v}`).join(", ");
    $("comparison-meta").textContent = `${comparison.id} · ${evidence.n_observations} rows in ` +
      `${evidence.sequence} chunks · version ${evidence.version} · estimator ${estimator}`;
  }

  function color(name) {
    const index = view.comparison.models.findIndex((m) => m.name === name);
    return COLORS[(index < 0 ? view.comparison.models.length : index) % COLORS.length];
  }

  function fixed(value, digits) {
    return value === null || value === undefined ? "—" : value.toFixed(digits);
  }

  function hasData(m) {
    return m.n_observations > 0 && m.log_evidence !== null;
  }

  // The current best: the highest log Z among the models that have seen every row.
  function currentBest() {
    const evidence = view.evidence;
    const current = evidence.models.filter((m) => hasData(m) && !m.failed && !isCatchingUp(m, evidence));
    return current.reduce((best, m) => (best === null || m.log_evidence > best.log_evidence ? m : best), null);
  }

  // log BF = log Z_m − log Z_best at the same rows; the two estimates come from independent
  // particle systems, so their variances add.
  function bayesFactor(m, reference) {
    return {
      value: m.log_evidence - reference.log_evidence,
      stderr: Math.hypot(m.log_evidence_stderr ?? 0, reference.log_evidence_stderr ?? 0),
    };
  }

  // A cell that may wrap only between head and tail ("-84.33" above "± 0.29"): in a narrow
  // window the table grows taller, not wider.
  function pair(head, tail) {
    return [`${head} `, element("span", tail, "nowrap")];
  }

  function plusMinus(value, stderr) {
    return pair(fixed(value, 2), `± ${fixed(stderr, 2)}`);
  }

  // A model or family name may wrap after its separators (_ . -).
  function breakable(name) {
    return name.split(/(?<=[_.-])/).flatMap((part, i) => (i ? [element("wbr"), part] : [part]));
  }

  // A model's formula by its right side ("~ bmi + bp"): every model's left side names the same
  // target. None for a model read by column index (or added since the page loaded).
  function formulaOf(name) {
    const model = view.comparison.models.find((m) => m.name === name);
    const formula = model && model.formula;
    return formula ? `~ ${formula.slice(formula.indexOf("~") + 1).trim()}` : null;
  }

  // The ELBO covers the rows seen when it was last computed (it is refreshed when n doubles).
  function elboCell(m) {
    if (m.elbo == null) return "—";
    const rows = m.elbo_n_observations;
    return rows != null && rows < m.n_observations ? pair(fixed(m.elbo, 2), `(of ${rows} rows)`) : fixed(m.elbo, 2);
  }

  // Windowed evidence (service/window.py): this model's log Z over the last rows minus the best
  // model's on the same rows.
  function windowCell(m) {
    const w = m.window;
    if (!w || w.log_bayes_factor == null) return "—";
    if (w.best === m.name) return pair("best", `(last ${w.rows} rows)`);
    return plusMinus(w.log_bayes_factor, w.log_bayes_factor_stderr);
  }

  function renderTable() {
    const evidence = view.evidence;
    const reference = currentBest();
    const top = Math.max(...evidence.models.map((m) => m.posterior_probability ?? -1));
    const table = $("evidence-table");
    const withElbo = evidence.models.some((m) => m.elbo != null);
    table.classList.toggle("with-elbo", withElbo);
    $("elbo-note").hidden = !withElbo;
    table.tBodies[0].replaceChildren(...evidence.models.map((m) => {
      const row = element("tr");
      row.dataset.model = m.name;
      if (m.posterior_probability === top && top >= 0) row.className = "best";
      const name = element("td");
      const swatch = element("span", null, "swatch");
      swatch.style.background = color(m.name);
      const family = element("small", null, "muted");
      family.append(" ", ...breakable(m.family));
      name.append(swatch, ...breakable(m.name), family);
      const formula = formulaOf(m.name);
      if (formula) name.append(element("small", formula, "formula muted"));
      const seen = hasData(m); // a model that has seen no row has no log Z yet: "—", not 0 ± 0
      const logZ = seen ? plusMinus(m.log_evidence, m.log_evidence_stderr) : "—";
      const factor = seen && reference && m !== reference ? bayesFactor(m, reference) : null;
      const versusBest = m === reference ? "best" : factor ? plusMinus(factor.value, factor.stderr) : "—";
      const cells = [logZ, versusBest,
        seen ? fixed(m.log_evidence / m.n_observations, 4) : "—", fixed(m.posterior_probability, 4),
        String(m.n_observations), fixed(m.ess, 1), m.info?.annealing_steps != null ? String(m.info.annealing_steps) : "—",
        elboCell(m), windowCell(m)];
      row.append(name, ...cells.map((content, i) => {
        const cell = element("td", null, i === 7 ? "elbo" : "");
        cell.append(...[content].flat());
        return cell;
      }));
      const state = element("td");
      if (m.failed) state.append(element("span", "failed", "badge bad"));
      else if (isCatchingUp(m, evidence)) state.append(element("span", `catching up ${m.n_observations}/${evidence.n_observations}`, "badge warn"));
      else state.append(element("span", "current", "badge"));
      if (!m.failed && isUnreliable(m)) state.append(" ", element("span", "unreliable", "badge warn"));
      row.append(state);
      return row;
    }));
  }

  function layout(title, yTitle, extra) {
    return {
      title: { text: title, font: { size: 13 } },
      margin: { l: 60, r: 10, t: 32, b: 38 },
      xaxis: { title: { text: "rows n" }, automargin: true },
      yaxis: { title: { text: yTitle }, automargin: true, ...(extra || {}) },
      showlegend: false,
      uirevision: view.cid, // keep the user's zoom across updates
      datarevision: `${view.evidence.version}:${view.series.size}`, // arrays grow in place
    };
  }

  function traces(value, options) {
    return [...view.series.entries()].map(([name, s]) => ({
      name, x: s.n, y: s.n.map((n, i) => value(s, i, n)), type: "scatter", mode: "lines+markers",
      marker: { size: 4 }, line: { color: color(name) }, ...(options ? options(s) : {}),
    }));
  }

  function renderCharts() {
    renderBayesFactors();
    Plotly.react("chart-log-evidence-per-row", traces((s, i, n) => s.logZ[i] / n),
      layout("log Z / n", "nats per row"), PLOT_CONFIG);
    Plotly.react("chart-probability", traces((s, i) => s.probability[i]),
      layout("posterior model probability", "P(model | data)", { range: [0, 1.02] }), PLOT_CONFIG);
    Plotly.react("chart-ess", traces((s, i) => s.ess[i]),
      layout("ESS after each update", "effective sample size", { rangemode: "tozero" }), PLOT_CONFIG);
    Plotly.react("chart-annealing-steps", traces((s, i) => s.steps[i]),
      layout("annealing steps per chunk", "steps", { rangemode: "tozero" }), PLOT_CONFIG);
    Plotly.react("chart-update-time", [{
      name: "all models", x: view.updateTimes.n, y: view.updateTimes.seconds, type: "scatter",
      mode: "lines+markers", marker: { size: 4 }, line: { color: "#444" },
    }], layout("estimator time per chunk, all models", "seconds", { rangemode: "tozero" }),
    PLOT_CONFIG);
  }

  // The headline: each model's log Bayes factor against the current best, at every n where both
  // have a point, with ± the combined standard error (see bayesFactor).
  function renderBayesFactors() {
    const best = currentBest();
    const reference = best && view.series.get(best.name);
    const data = [];
    let low = -1;
    if (reference) {
      const at = new Map(reference.n.map((n, i) => [n, i]));
      for (const [name, s] of view.series) {
        const points = s.n.map((n, i) => [n, i, at.get(n)]).filter(([, , j]) => j !== undefined);
        const y = points.map(([, i, j]) => s.logZ[i] - reference.logZ[j]);
        const spread = points.map(([, i, j]) => (name === best.name ? 0 : Math.hypot(s.stderr[i] ?? 0, reference.stderr[j] ?? 0)));
        low = Math.min(low, ...y.filter((v) => v >= BF_FLOOR).map((v, k) => v - spread[k]));
        const now = y.at(-1);
        data.push({
          name: name === best.name ? `${name} (current best)` : `${name} ${fixed(now, 1)} ± ${fixed(spread.at(-1), 1)}`,
          x: points.map(([n]) => n), y, type: "scatter", mode: "lines+markers",
          marker: { size: 5 }, line: { color: color(name), width: name === best.name ? 3 : 2 },
          error_y: { type: "data", array: spread, visible: name !== best.name, thickness: 1.5, width: 4 },
          hovertemplate: `${name}: log BF %{y:.2f} ± %{error_y.array:.2f} at n = %{x}<extra></extra>`,
        });
      }
    }
    const bottom = Math.max(low - 0.5, BF_FLOOR);
    const grades = EVIDENCE_GRADES.filter(([y]) => y >= bottom);
    const below = data.filter((trace) => trace.y.length && trace.y.at(-1) < bottom)
      .map((trace) => `${trace.name.split(" ")[0]} ${fixed(trace.y.at(-1), 1)}`);
    const off = below.length ? [{
      xref: "paper", yref: "paper", x: 0.01, y: 0.02, xanchor: "left", yanchor: "bottom",
      text: `below the axis now: ${below.join(", ")}`, showarrow: false,
      font: { size: 11, color: "#5d6677" }, bgcolor: "rgba(255,255,255,0.8)",
    }] : [];
    Plotly.react("chart-bayes-factor", data, {
      ...layout(best ? `log Bayes factor against the current best, ${best.name} (± 1 combined stderr)`
        : "log Bayes factor against the current best", "log BF (nats)",
      { range: [bottom, 1], zeroline: true }),
      showlegend: true,
      legend: { orientation: "h", x: 0, xanchor: "left", y: -0.18, yanchor: "top" },
      margin: { l: 60, r: 90, t: 32, b: 40 },
      shapes: [...grades.map(([y]) => ({
        type: "line", xref: "paper", x0: 0, x1: 1, y0: y, y1: y,
        line: { color: "#9aa3b2", width: 1, dash: "dot" },
      })), ...eventLines()],
      annotations: [...grades.map(([y, text]) => ({
        xref: "paper", x: 1, xanchor: "left", y, text, showarrow: false,
        font: { size: 11, color: "#5d6677" },
      })), ...off, ...eventLabels()],
    }, PLOT_CONFIG);
  }

  // The decision events of a chunk are a vertical line at the rows they were decided on, solid
  // where a rule fired and dashed where rules only cleared, labelled with the rules.
  function eventsByRows() {
    const rows = new Map();
    for (const e of view.events.values()) {
      rows.set(e.n_observations, [...(rows.get(e.n_observations) || []), e]);
    }
    return [...rows.entries()];
  }

  function eventLines() {
    return eventsByRows().map(([n, events]) => ({
      type: "line", xref: "x", yref: "paper", x0: n, x1: n, y0: 0, y1: 1,
      line: { color: EVENT_COLOR, width: 1.5,
        dash: events.some((e) => e.kind === "fired") ? "solid" : "dash" },
    }));
  }

  function eventLabels() {
    return eventsByRows().map(([n, events]) => ({
      xref: "x", yref: "paper", x: n, y: 1, xanchor: "left", yanchor: "top",
      text: events.map((e) => `${e.rule} ${e.kind}`).join(", "), showarrow: false,
      textangle: -90, font: { size: 10, color: EVENT_COLOR }, bgcolor: "rgba(255,255,255,0.8)",
    }));
  }

  // ---- start ---------------------------------------------------------------------------------

  function selectFromLocation() {
    select(decodeURIComponent(location.hash.slice(1)) || null);
  }

  const keyInput = $("api-key");
  keyInput.value = apiKey();
  keyInput.addEventListener("change", () => {
    localStorage.setItem(KEY_STORAGE, keyInput.value.trim());
    refreshList();
    selectFromLocation();
  });
  window.addEventListener("hashchange", selectFromLocation);
  $("list-more").addEventListener("click", moreList);
  refreshList();
  setInterval(refreshList, LIST_REFRESH_MS);
  selectFromLocation();
})();
