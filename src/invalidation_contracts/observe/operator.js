// The operator page's live updates: poll the state document, re-render each section from it.
// Plain DOM (textContent only: no HTML from data), no build step. Served by observe/page.py.
"use strict";
(function () {
  const body = document.body;
  const stateUrl = body.dataset.stateUrl;
  const pollMs = Number(body.dataset.pollMs) || 500;
  const node = body.dataset.node;
  let lastSeq = null;
  let lastEpoch = null;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c ?? ""));
    return e;
  }
  const code = (text) => el("code", {}, text);
  const json = (value) => code(JSON.stringify(value === undefined ? null : sortKeys(value)));
  function sortKeys(v) {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (v && typeof v === "object") {
      return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]));
    }
    return v;
  }
  function table(caption, heads, rows) {
    const head = el("tr", {}, ...heads.map((h) => el("th", { scope: "col" }, h)));
    return el("table", {}, el("caption", {}, caption), el("thead", {}, head),
      el("tbody", {}, ...rows));
  }
  function replace(id, ...children) {
    const box = document.getElementById(id);
    box.replaceChildren(...children);
  }

  function worker(w) {
    const status = w.ready ? el("span", { class: "ok" }, "ready")
      : el("span", { class: "bad" }, "not ready");
    const parts = ["Worker ", code(w.worker), ": ", status];
    if (!w.ready) parts.push(`: ${w.reason ?? ""}`);
    parts.push(`; follower ${w.state}${w.live ? "" : " (not live)"}; lag ${w.lag_s} s ` +
      `(ready within ${w.max_lag_s} s)`);
    const leads = Object.entries(w.leads || {})
      .map(([k, v]) => `${k}: ${v ? "leads" : "follows"}`).join(", ");
    if (leads) parts.push(`; capture: ${leads}`);
    parts.push(".");
    return el("p", {}, ...parts);
  }
  function tables(ts) {
    return table("Every table at the served seq", ["Table", "Version", "Rows", "Changed at seq"],
      ts.map((t) => el("tr", { "data-table": t.table }, el("th", { scope: "row" }, t.table),
        el("td", { class: "version" }, t.version), el("td", {}, t.rows),
        el("td", {}, t.changed_at))));
  }
  function changes(cs) {
    if (!cs.length) return [el("p", {}, "No change since this worker started.")];
    const out = [];
    for (const c of cs) {
      for (const m of c.tables) {
        const more = m.changed_rows - m.rows.length;
        const caption = `seq ${c.seq} (${c.origin}): ${m.table} ${m.old_version} → ` +
          `${m.new_version}, ${m.changed_rows} row(s)${more > 0 ? `, ${more} not shown` : ""}`;
        const t = table(caption, ["Change", "Key", "Before", "After"], m.rows.map((r) =>
          el("tr", { class: r.op }, el("td", {}, r.op), el("td", {}, code(r.key)),
            el("td", {}, json(r.old)), el("td", {}, json(r.new)))));
        t.className = "change";
        t.dataset.seq = c.seq;
        out.push(t);
      }
    }
    return out;
  }
  function graph(g) {
    if (!g) return [el("p", {}, "Name a node to see its edges.")];
    if (!g.exists) return [el("p", {}, "No row ", code(g.node), ".")];
    const items = [
      ...g.out.map((e) => el("li", {}, "→ ", code(e.to), ` (${e.relation})`)),
      ...g.in.map((e) => el("li", {}, "← ", code(e.from), ` (${e.relation})`)),
    ];
    return [el("p", {}, code(g.node), " = ", json(g.row)),
      el("ul", { "aria-label": `edges of ${g.node}` }, ...items)];
  }
  function clients(cs) {
    if (!cs.length) return [el("p", {}, "No scored request yet.")];
    const rate = (v) => (v === null ? "–" : v.toFixed(2));
    return [table("Per client, from requests alone",
      ["Client key", "Requests", "Episodes", "First tries", "First-try rate", "Retries",
        "Stale values sent"],
      cs.map((c) => el("tr", {}, el("th", { scope: "row" }, code(c.client)),
        el("td", {}, c.requests), el("td", {}, c.episodes), el("td", {}, c.first_try),
        el("td", {}, rate(c.first_try_rate)), el("td", {}, c.retries),
        el("td", {}, c.stale_values_sent))))];
  }

  const FLEET_HEADS = ["Worker", "Seq", "Ready", "Live", "Available", "Confirmed (s ago)",
    "Adopted"];
  const TOTALS = [["answers", "Answers"], ["episodes", "Episodes"], ["first_try", "First tries"],
    ["first_try_rate", "First-try rate"], ["retries", "Retries"],
    ["stale_values_sent", "Stale values sent"], ["change_sets", "Change sets"],
    ["rows_changed", "Rows changed"], ["clients_forgotten", "Clients forgotten"]];
  const rate = (v) => (v === null || v === undefined ? "–" : v.toFixed(2));
  function fleet(f) {
    if (!f) return [el("p", {}, "No metrics exposition: instrument with Prometheus to see every worker.")];
    const yes = (v) => (v === 1 ? "yes" : v === 0 ? "no" : "–");
    const workers = table(`${f.workers.length} worker(s)`, FLEET_HEADS, f.workers.map((w) =>
      el("tr", { "data-worker": w.worker }, el("th", { scope: "row" }, code(w.worker)),
        el("td", { class: "seq" }, Math.trunc(w.seq ?? 0)), el("td", {}, yes(w.ready)),
        el("td", {}, yes(w.live)), el("td", {}, yes(w.available)),
        el("td", {}, Math.round((w.confirmation_age_s ?? 0) * 1000) / 1000),
        el("td", {}, Math.trunc(w.adopted ?? 0)))));
    const cells = TOTALS.map(([k]) => el("td", { "data-total": k },
      k === "first_try_rate" ? rate(f.totals[k]) : f.totals[k]));
    const totals = table("Totals over every worker", TOTALS.map(([, h]) => h),
      [el("tr", {}, ...cells)]);
    return [workers, totals];
  }

  // The figures over time, kept in the page since it opened (one point per update).
  const SERIES = [
    ["stale_values_sent", "Stale values sent", (t) => t.stale_values_sent],
    ["first_try_rate", "First-try rate", (t) => t.first_try_rate],
    ["change_sets", "Change sets (evict agents' cached fixes)", (t) => t.change_sets],
    ["clients_forgotten", "Clients forgotten", (t) => t.clients_forgotten],
  ];
  const MAX_POINTS = 600;
  const history = [];
  const SVG = "http://www.w3.org/2000/svg";
  function chart(id, title, points) {
    const w = 320, h = 80;
    const values = points.map((p) => p[1]).filter((v) => v !== null && v !== undefined);
    const last = values.length ? values[values.length - 1] : null;
    const shown = last === null ? "–" : Number.isInteger(last) ? String(last) : last.toFixed(2);
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "series");
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `${title}: ${shown} now, ${points.length} point(s)`);
    if (values.length) {
      const t0 = points[0][0], t1 = points[points.length - 1][0];
      const lo = Math.min(...values), hi = Math.max(...values);
      const xs = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * (w - 8) + 4 : w / 2);
      const ys = (v) => (hi > lo ? h - 4 - ((v - lo) / (hi - lo)) * (h - 8) : h / 2);
      const line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", points.filter((p) => p[1] !== null && p[1] !== undefined)
        .map((p) => `${xs(p[0]).toFixed(1)},${ys(p[1]).toFixed(1)}`).join(" "));
      svg.append(line);
    }
    const caption = el("figcaption", {}, `${title}: `, el("strong", { class: "now" }, shown));
    const figure = el("figure", { "data-series": id, "data-points": points.length }, caption);
    figure.append(svg);
    return figure;
  }
  function series(s) {
    if (!s.fleet) return [];
    history.push([s.at, s.fleet.totals]);
    if (history.length > MAX_POINTS) history.shift();
    return SERIES.map(([id, title, pick]) =>
      chart(id, title, history.map(([t, totals]) => [t, pick(totals)])));
  }

  function render(s) {
    document.getElementById("epoch").textContent = s.epoch;
    document.getElementById("seq").textContent = s.seq;
    document.title = `Contract operator — seq ${s.seq}`;
    replace("worker", worker(s.worker));
    replace("fleet", ...fleet(s.fleet));
    replace("series", ...series(s));
    replace("tables", tables(s.tables));
    replace("graph", ...graph(s.graph));
    replace("clients", ...clients(s.clients));
    if (s.seq !== lastSeq || s.epoch !== lastEpoch) {
      replace("changes", ...changes(s.changes));
      if (lastSeq !== null) {
        document.getElementById("updated").textContent = `Updated to seq ${s.seq}.`;
      }
      lastSeq = s.seq;
      lastEpoch = s.epoch;
    }
  }

  async function poll() {
    try {
      // From the origin, never the page's own URL: a page opened as http://user:token@host/...
      // would lend its credentials to the relative URL, which fetch refuses ("unreachable").
      const url = new URL(stateUrl, window.location.origin);
      if (node) url.searchParams.set("node", node);
      const reply = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (reply.ok) render(await reply.json());
      else document.getElementById("updated").textContent = `Update failed: ${reply.status}.`;
    } catch (err) {
      document.getElementById("updated").textContent = "Update failed: the server is unreachable.";
    } finally {
      setTimeout(poll, pollMs);
    }
  }
  lastSeq = Number(document.getElementById("seq").textContent);
  lastEpoch = document.getElementById("epoch").textContent;
  setTimeout(poll, pollMs);
})();
