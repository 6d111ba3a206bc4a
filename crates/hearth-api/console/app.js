// The Hearth console (docs/console.md): pages over the API, under the
// session the user logs in to (the token is an HttpOnly cookie no script
// reads; calls prove they are the console's with its CSRF value). Preact components written with htm; charts
// by uPlot. Everything a tenant wrote (names, bodies, logs) is rendered as
// text, never as markup.
import {
  html, render, useState, useEffect, useRef,
} from "./vendor/htm-preact-3.1.1.module.js";

const CSRF = "hearth.csrf";

// ---- the API ----

/// `fetch` under the session: its cookie goes by itself, the CSRF value
/// (which only this origin's scripts can read) with it.
function authorized(path, options = {}) {
  const csrf = sessionStorage.getItem(CSRF) || "";
  return fetch(path, {
    ...options,
    credentials: "same-origin",
    headers: { ...(options.headers || {}), "hearth-csrf": csrf },
  });
}

/// Logs in with `token` (or, without one, takes up the browser's session
/// if it has one): who it is, or an Error.
async function session(token) {
  const resp = token === undefined
    ? await fetch("/v1/session", { credentials: "same-origin" })
    : await fetch("/v1/session", {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token }),
    });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(body?.error?.message || resp.statusText);
  sessionStorage.setItem(CSRF, body.csrf);
  return { tenant: body.tenant, scope: body.scope };
}

async function logOut() {
  sessionStorage.removeItem(CSRF);
  await fetch("/v1/session", { method: "DELETE", credentials: "same-origin" }).catch(() => {});
}

async function api(path, options = {}) {
  const resp = await authorized(path, options);
  const text = await resp.text();
  let body = text;
  try { body = JSON.parse(text); } catch { /* not JSON: an invocation's answer */ }
  if (resp.status === 401) {
    sessionStorage.removeItem(CSRF);
    location.hash = "#/login";
  }
  return { resp, body, text };
}

/// The body, or an Error naming what the API said.
async function json(path, options) {
  const { resp, body, text } = await api(path, options);
  if (!resp.ok) throw new Error(body?.error?.message || text || resp.statusText);
  return body;
}

/// Runs `load` now and every `ms` (if given) while the component lives.
function useLoad(load, deps, ms) {
  const [state, setState] = useState({ data: null, error: null });
  useEffect(() => {
    let live = true;
    const run = () => load().then(
      (data) => live && setState({ data, error: null }),
      (e) => live && setState((s) => ({ data: s.data, error: e.message })),
    );
    run();
    const timer = ms ? setInterval(run, ms) : null;
    return () => { live = false; if (timer) clearInterval(timer); };
  }, deps);
  return state;
}

// ---- small parts ----

const time = (ms) => new Date(ms).toLocaleString();
const duration = (us) => us >= 1e6 ? `${(us / 1e6).toFixed(2)} s`
  : us >= 1e3 ? `${(us / 1e3).toFixed(1)} ms` : `${us} µs`;

/// What runs a function here: wasm, the js isolate, compiled js, or a process.
function mode(f) {
  const runtime = f.latest.spec.runtime;
  if (runtime === "wasm" || runtime === "component") return "wasm";
  if (runtime !== "js") return "process";
  if (f.pinned) return "process";
  return f.compiled === "compiled" ? "compiled" : "isolate";
}

/// Invocations counted by mode, as "wasm 3 · isolate 2 · …".
const byMode = (ran) => ["wasm", "isolate", "compiled", "process"].map((m) => `${m} ${ran[m]}`).join(" · ");

function Body({ body }) {
  if (!body) return null;
  const note = body.truncated ? ` (first ${body.text.length} of ${body.bytes} bytes)` : "";
  return html`<pre>${body.text}</pre><div class="muted">${body.bytes} bytes${note}${body.binary ? ", binary" : ""}</div>`;
}

function Headers({ headers }) {
  if (!headers || headers.length === 0) return html`<div class="muted">no headers</div>`;
  return html`<table>${headers.map(([k, v]) => html`<tr><td>${k}</td><td>${v}</td></tr>`)}</table>`;
}

/// A y-axis tick in as few characters as say it (214,637 is "214.6K"),
/// so a label fits the axis whatever the count: uPlot's axis is 50 px
/// wide, and 214,637 showed as "0,000".
const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });
export function tick(v) {
  return v == null ? "" : compact.format(v);
}

/// A uPlot chart of minutes: `series` is [{label, values, color}], over `xs`
/// (seconds). A minute with nothing is a gap; a minute alone between gaps
/// is drawn as a point (a line needs two).
function Chart({ title, xs, series, id }) {
  const el = useRef(null);
  useEffect(() => {
    const opts = {
      title, width: 360, height: 160,
      scales: { x: { time: true } },
      axes: [{}, { values: (u, splits) => splits.map(tick) }],
      series: [{}, ...series.map((s) => ({
        label: s.label, stroke: s.color, width: 1.5,
        points: { show: s.values.some((v) => v == null), size: 4 },
      }))],
      legend: { live: false },
    };
    const plot = new uPlot(opts, [xs, ...series.map((s) => s.values)], el.current);
    return () => plot.destroy();
  }, [JSON.stringify([xs, series])]);
  return html`<div class="chart" id=${id} ref=${el}></div>`;
}

/// The last hour as 60 minutes, with zeros where nothing ran.
function hour(minutes, nowMs) {
  const last = Math.floor(nowMs / 60000);
  const xs = [], count = [], errors = [], refused = [], p50 = [], p99 = [];
  const at = new Map((minutes || []).map((m) => [m.t_ms / 60000, m]));
  for (let m = last - 59; m <= last; m++) {
    const s = at.get(m);
    xs.push(m * 60);
    count.push(s ? s.count : 0);
    errors.push(s ? s.errors : 0);
    refused.push(s ? s.refused || 0 : 0);
    p50.push(s ? s.p50_ms : null);
    p99.push(s ? s.p99_ms : null);
  }
  return { xs, count, errors, refused, p50, p99 };
}

// ---- pages ----

function Login({ onLogin }) {
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    try {
      onLogin(await session(e.target.token.value.trim()));
    } catch (err) {
      setError(err.message);
    }
  };
  return html`<div class="card login">
    <h1>Hearth console</h1>
    <form onSubmit=${submit}>
      <label>API token<input id="token" name="token" type="password" autocomplete="off" placeholder="hth_…" /></label>
      <button id="login" class="primary" type="submit">Log in</button>
    </form>
    ${error && html`<p class="error" id="login-error">${error}</p>`}
    <p class="muted">The token is kept in a cookie no page script can read, sent only to this server.</p>
  </div>`;
}

function Invoke({ tenant, name }) {
  const [body, setBody] = useState("");
  const [answer, setAnswer] = useState(null);
  const run = async () => {
    const { resp, text } = await api(`/fn/${tenant}/${name}`, { method: "POST", body });
    setAnswer({
      status: resp.status,
      text: text.slice(0, 65536),
      id: resp.headers.get("hearth-invocation-id"),
    });
  };
  return html`<div>
    <textarea id=${`body-${name}`} rows="2" cols="40" placeholder="request body" value=${body}
      onInput=${(e) => setBody(e.target.value)}></textarea>
    <button class="primary" id=${`invoke-${name}`} onClick=${run}>Invoke</button>
    ${answer && html`<div class="answer">
      <span class=${answer.status < 400 ? "ok" : "error"}>${answer.status}</span>
      ${answer.id && html` <a id="open-invocation" href=${`#/invocation/${answer.id}`}>open invocation</a>`}
      <pre>${answer.text}</pre></div>`}
  </div>`;
}

function Functions({ who }) {
  const { data, error } = useLoad(async () => {
    const [list, stats] = await Promise.all([json("/v1/functions"), json("/v1/stats")]);
    return { list, stats, now: Date.now() };
  }, [], 10000);
  if (!data) return html`<p class=${error ? "error" : "muted"}>${error || "Loading…"}</p>`;
  const fns = data.list.functions;
  return html`<h1>Functions</h1>
    ${error && html`<p class="error">${error}</p>`}
    ${fns.length === 0 && html`<p class="muted">No functions yet: deploy one with <code>hearth deploy</code>.</p>`}
    ${fns.map((f) => {
      const h = hour(data.stats.functions[f.name], data.now);
      const spec = f.latest.spec;
      const total = h.count.reduce((a, b) => a + b, 0);
      return html`<div class="card" data-fn=${f.name}>
        <div class="row">
          <div style=${{ minWidth: "16rem" }}>
            <h2><a href=${`#/invocations?function=${encodeURIComponent(f.name)}`}>${f.name}</a></h2>
            <span class="tag mode">${mode(f)}</span><span class="tag">${spec.runtime}</span>
            <span class="tag">${f.live == null ? "nothing live" : `live v${f.live}`}</span>
            <a class="tag" id=${`versions-${f.name}`} href=${`#/versions/${encodeURIComponent(f.name)}`}>${f.versions} versions</a>
            <div class="muted">${spec.limits.memory_mib} MiB, ${spec.limits.timeout_ms} ms${spec.public ? ", public" : ""}</div>
            <div class="muted">deployed ${time(f.latest.created_at_ms)}</div>
            <div class="muted">${total} invocations in the last hour</div>
            <${Invoke} tenant=${who.tenant} name=${f.name} />
          </div>
          <${Chart} id=${`rate-${f.name}`} title="invocations / errors / refused per minute" xs=${h.xs}
            series=${[{ label: "invocations", values: h.count, color: "#2563eb" },
                      { label: "errors", values: h.errors, color: "#cf222e" },
                      { label: "refused", values: h.refused, color: "#9333ea" }]} />
          <${Chart} id=${`latency-${f.name}`} title="latency p50 / p99, ms" xs=${h.xs}
            series=${[{ label: "p50", values: h.p50, color: "#16a34a" },
                      { label: "p99", values: h.p99, color: "#c2410c" }]} />
        </div>
      </div>`;
    })}`;
}

/// A function's versions, where its aliases point, and `live`'s moves;
/// promote a version to live, or roll live back one move.
function Versions({ name }) {
  const [moved, setMoved] = useState(null);
  const [acting, setActing] = useState(null);
  const [percent, setPercent] = useState("10");
  const fn = encodeURIComponent(name);
  const { data, error } = useLoad(async () => {
    const [versions, history] = await Promise.all([
      json(`/v1/functions/${fn}`),
      json(`/v1/functions/${fn}/aliases/live/history?limit=20`),
    ]);
    return { versions, history };
  }, [name, moved], 10000);
  const act = async (what, path, body) => {
    setActing({ what });
    try {
      const m = await json(path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      setActing(null);
      setMoved(m);
    } catch (e) {
      setActing({ what, error: e.message });
    }
  };
  // The session's CSRF value goes in a header, which a plain link cannot
  // send: fetch the code, then save it from memory.
  const download = async (version) => {
    const resp = await authorized(`/v1/functions/${fn}/versions/${version}/code`);
    if (!resp.ok) {
      setActing({ what: "download", error: resp.statusText });
      return;
    }
    const url = URL.createObjectURL(await resp.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = `${name}@${version}`;
    a.click();
    URL.revokeObjectURL(url);
  };
  if (!data) return html`<p class=${error ? "error" : "muted"}>${error || "Loading…"}</p>`;
  const aliasesOf = (v) => data.versions.aliases.filter((a) => a.version === v).map((a) => a.alias);
  const liveAlias = data.versions.aliases.find((a) => a.alias === "live");
  const live = liveAlias?.version;
  const promote = (body) => act("promote", `/v1/functions/${fn}/aliases/live`, body);
  const gateSaid = (g) => `gate: ${g.replayed} tapes of v${g.tapes_of} replayed against v${g.against}, ${g.replayed - g.not_identical} identical`;
  return html`<h1>${name}: versions</h1>
    ${error && html`<p class="error">${error}</p>`}
    <p>
      ${live == null ? html`<span class="muted">No version is live.</span>` : html`Live: <b id="live-version">v${live}</b> `}
      ${liveAlias?.split && html`<span id="live-split">(${liveAlias.split.percent}% to v${liveAlias.split.version}) </span>`}
      <button id="rollback" disabled=${live == null} onClick=${() => act("rollback", `/v1/functions/${fn}/aliases/live/rollback`)}>Roll back live</button>
      <label> Split share <input id="split-percent" type="number" min="1" max="99" size="3" value=${percent}
        onInput=${(e) => setPercent(e.target.value)} />%</label>
    </p>
    ${acting?.error && html`<p class="error" id="release-error">${acting.what}: ${acting.error}</p>`}
    ${moved && html`<p class="ok" id="moved">live is v${moved.version}${moved.split ? ` with ${moved.split.percent}% to v${moved.split.version}` : ""} (was ${moved.previous == null ? "nothing" : `v${moved.previous}`})${moved.gate ? `; ${gateSaid(moved.gate)}` : ""}</p>`}
    <table id="versions">
      <tr><th>version</th><th>aliases</th><th>deployed</th><th>runtime</th><th>limits</th><th></th></tr>
      ${[...data.versions.versions].reverse().map((v) => html`<tr data-version=${v.version}>
        <td>v${v.version}</td>
        <td>${aliasesOf(v.version).map((a) => html`<span class="tag">${a}</span>`)}</td>
        <td>${time(v.created_at_ms)}</td>
        <td>${v.spec.runtime}</td>
        <td class="muted">${v.spec.limits.memory_mib} MiB, ${v.spec.limits.timeout_ms} ms</td>
        <td>${v.version !== live && html`<button id=${`promote-${v.version}`}
          onClick=${() => promote({ version: v.version })}>Promote to live</button>
          <button id=${`gate-${v.version}`} disabled=${live == null} title="Replay live's newest 100 tapes against this version first; move only if each answers as recorded"
          onClick=${() => promote({ version: v.version, gate: {} })}>Promote, gated by replay</button>
          <button id=${`split-${v.version}`} disabled=${live == null}
          onClick=${() => promote({ version: live, split: { version: v.version, percent: Number(percent) } })}>Split ${percent}% here</button>`}
          <button id=${`code-${v.version}`} onClick=${() => download(v.version)}>Code</button></td>
      </tr>`)}
    </table>
    <h2>Moves of live</h2>
    <table id="history">
      <tr><th>when</th><th>to</th><th>from</th><th></th></tr>
      ${data.history.moves.map((m) => html`<tr>
        <td>${time(m.at_ms)}</td><td>v${m.version}</td>
        <td>${m.previous == null ? "—" : `v${m.previous}`}</td>
        <td>${m.rollback ? "rollback" : "promotion"}</td></tr>`)}
    </table>
    <${Events} name=${name} />`;
}

/// A function's events (docs/events.md): its schedules and broker
/// bindings, paused and resumed here, and its dead letters, queued again
/// or purged here.
function Events({ name }) {
  const fn = encodeURIComponent(name);
  const [changed, setChanged] = useState(0);
  const [said, setSaid] = useState(null);
  const { data, error } = useLoad(async () => {
    const [schedules, triggers, dlq] = await Promise.all([
      json(`/v1/functions/${fn}/schedules`),
      json(`/v1/functions/${fn}/triggers`),
      json(`/v1/functions/${fn}/dlq?limit=100`),
    ]);
    return {
      schedules: schedules.schedules,
      triggers: triggers.triggers,
      dead: dlq.dead,
      queue: dlq.queue,
    };
  }, [name, changed], 5000);
  const act = async (what, path, method = "POST") => {
    try {
      const r = await json(path, { method });
      setSaid({ ok: r?.count === undefined ? what : `${what}: ${r.count}` });
    } catch (e) {
      setSaid({ error: `${what}: ${e.message}` });
    }
    setChanged((n) => n + 1);
  };
  if (!data) return html`<p class=${error ? "error" : "muted"}>${error || "Loading…"}</p>`;
  const toggle = (s, kind = "schedules") => {
    const to = s.paused ? "resume" : "pause";
    return html`<button id=${`${to}-${s.id}`}
      onClick=${() => act(s.paused ? "resumed" : "paused", `/v1/functions/${fn}/${kind}/${s.id}/${to}`)}>
      ${s.paused ? "Resume" : "Pause"}</button>`;
  };
  // A binding's spec as its kind keeps it (JSON): where it reads, and how.
  const binding = (t) => {
    try {
      const b = JSON.parse(t.spec);
      return {
        source: `${t.kind}://${b.host}:${b.port}/${b.stream}${b.subject ? ` (${b.subject})` : ""}`,
        how: `batch ${b.batch}, ${b.attempts} attempts`,
        dlq: b.dlq || "— (ended in its stream)",
      };
    } catch {
      return { source: t.kind, how: "", dlq: "" };
    }
  };
  return html`<h2>Schedules</h2>
    ${said?.error && html`<p class="error" id="events-error">${said.error}</p>`}
    ${said?.ok && html`<p class="ok" id="events-done">${said.ok}</p>`}
    ${data.schedules.length === 0
      ? html`<p class="muted" id="no-schedules">No schedules (deploy with <code>--schedule</code>).</p>`
      : html`<table id="schedules">
        <tr><th>schedule</th><th>next tick</th><th>last fired</th><th></th></tr>
        ${data.schedules.map((s) => html`<tr data-schedule=${s.id}>
          <td><code>${s.expr}</code>${s.paused && html` <span class="tag">paused</span>`}</td>
          <td>${s.paused ? "—" : time(s.next_ms)}</td>
          <td>${s.fired_ms == null ? "never" : time(s.fired_ms)}</td>
          <td>${toggle(s)}</td></tr>`)}
      </table>`}
    <h2>Triggers</h2>
    ${data.triggers.length === 0
      ? html`<p class="muted" id="no-triggers">No broker bindings (deploy with <code>--trigger</code>).</p>`
      : html`<table id="triggers">
        <tr><th>source</th><th>settings</th><th>dead letters to</th><th></th></tr>
        ${data.triggers.map((t) => {
          const b = binding(t);
          return html`<tr data-trigger=${t.id}>
            <td><code>${b.source}</code>${t.paused && html` <span class="tag">paused</span>`}</td>
            <td>${b.how}</td><td>${b.dlq}</td><td>${toggle(t, "triggers")}</td></tr>`;
        })}
      </table>`}
    <h2>Queue</h2>
    <p id="queue">${data.queue.ready} waiting or running${data.queue.retrying ? `, ${data.queue.retrying} of them retrying` : ""}${data.queue.oldest_ms == null ? "" : `, the oldest since ${time(data.queue.oldest_ms)}`}; ${data.queue.dead} dead <span class="muted">(counted every 2 s)</span></p>
    <h2>Dead letters</h2>
    ${data.dead.length === 0
      ? html`<p class="muted" id="no-dead">None: every queued invocation ran, or waits to.</p>`
      : html`<p>
        <button id="dlq-replay" onClick=${() => act("queued again", `/v1/functions/${fn}/dlq/replay`)}>Queue all again</button>
        <button id="dlq-purge" onClick=${() => act("purged", `/v1/functions/${fn}/dlq`, "DELETE")}>Purge all</button></p>
        <table id="dlq">
        <tr><th>invocation</th><th>queued</th><th>source</th><th>attempts</th><th>why</th></tr>
        ${data.dead.map((l) => html`<tr data-dead=${l.id}>
          <td><a href=${`#/invocation/${l.id}`}>${l.id}</a></td><td>${time(l.enqueued_ms)}</td>
          <td>${l.source}</td><td>${l.attempts}</td><td>${l.error}</td></tr>`)}
        </table>`}`;
}

/// The tenant's secrets by name: no call answers a value, so none can
/// be shown.
function Secrets() {
  const { data, error } = useLoad(() => json("/v1/secrets"), [], 10000);
  if (!data) return html`<p class=${error ? "error" : "muted"}>${error || "Loading…"}</p>`;
  return html`<h1>Secrets</h1>
    ${error && html`<p class="error">${error}</p>`}
    <p class="muted">Values are never shown. Set or rotate one with <code>hearth secret set NAME</code>;
      bind it with <code>hearth deploy … --secret NAME</code>.</p>
    ${data.secrets.length === 0
      ? html`<p class="muted" id="no-secrets">No secrets.</p>`
      : html`<table id="secrets">
        <tr><th>name</th><th>updated</th><th>created</th><th>bound by (live)</th></tr>
        ${data.secrets.map((s) => html`<tr data-secret=${s.name}>
          <td>${s.name}</td><td>${time(s.updated_ms)}</td><td>${time(s.created_ms)}</td>
          <td>${s.bound_by.length ? s.bound_by.map((b) => html`<span class="tag">${b}</span>`) : "—"}</td></tr>`)}
      </table>`}`;
}

/// The filters an invocations view can have, as its URL names them.
const FILTERS = ["function", "status", "since", "slower", "version", "trace", "node", "before"];

/// Invocations, newest first, filtered by what the URL says (so a view can
/// be bookmarked and shared), a page at a time. The search box takes an
/// invocation id (opens it) or a trace id (lists the trace's invocations).
function Invocations({ params }) {
  const filter = Object.fromEntries(FILTERS.map((k) => [k, params.get(k) || ""]));
  const show = (changes) => {
    const next = new URLSearchParams();
    for (const k of FILTERS) {
      const v = k in changes ? changes[k] : filter[k];
      if (v) next.set(k, v);
    }
    location.hash = `#/invocations?${next}`;
  };
  const [live, setLive] = useState(true);
  const [search, setSearch] = useState("");
  const [searchError, setSearchError] = useState(null);
  const fns = useLoad(() => json("/v1/functions"), []);
  const query = new URLSearchParams({ limit: "100" });
  if (filter.function) query.set("function", filter.function);
  if (filter.status && filter.status !== "any") query.set("status", filter.status);
  if (filter.since) query.set("since", filter.since);
  if (filter.slower) query.set("slower_than_ms", filter.slower);
  if (filter.version) query.set("version", filter.version);
  if (filter.trace) query.set("trace_id", filter.trace);
  if (filter.before) query.set("before", filter.before);
  // An older page does not change: only the newest is refreshed.
  const refresh = live && !filter.before;
  const { data, error } = useLoad(() => json(`/v1/recordings?${query}`),
    [query.toString(), refresh], refresh ? 2000 : 0);
  // A filter changed: back to the newest page.
  const set = (k) => (e) => show({ [k]: e.target.value, before: "" });
  const find = async (e) => {
    e.preventDefault();
    const q = search.trim().toLowerCase();
    setSearchError(null);
    if (!/^[0-9a-f]{32}$/.test(q)) {
      setSearchError("give an invocation id or a trace id: 32 hex digits");
      return;
    }
    // Both are 32 hex digits: an invocation, if there is one by that id.
    const { resp } = await api(`/v1/recordings/${q}`);
    if (resp.ok) location.hash = `#/invocation/${q}`;
    else show({ trace: q, before: "" });
  };
  const rows = (data?.recordings || []).filter((r) => !filter.node || (r.node || "").includes(filter.node));
  return html`<h1>Invocations</h1>
    <form class="filters" id="search" onSubmit=${find}>
      <label>invocation or trace id<input id="search-id" size="34" value=${search}
        onInput=${(e) => setSearch(e.target.value)} /></label>
      <button type="submit">Find</button>
      ${searchError && html`<span class="error">${searchError}</span>`}
    </form>
    <div class="filters">
      <label>function<select id="filter-function" value=${filter.function} onChange=${set("function")}>
        <option value="">all</option>
        ${(fns.data?.functions || []).map((f) => html`<option value=${f.name}>${f.name}</option>`)}
      </select></label>
      <label>status<select id="filter-status" value=${filter.status || "any"} onChange=${set("status")}>
        <option value="any">any</option><option value="error">errors</option>
        <option value="200">200</option><option value="500">500</option>
      </select></label>
      <label>since<select id="filter-since" value=${filter.since} onChange=${set("since")}>
        <option value="">any time</option><option value="15m">15 minutes</option>
        <option value="1h">1 hour</option><option value="1d">1 day</option>
      </select></label>
      <label>version<input id="filter-version" size="4" value=${filter.version} onChange=${set("version")} /></label>
      <label>slower than (ms)<input id="filter-slower" size="6" value=${filter.slower} onChange=${set("slower")} /></label>
      <label>node<input id="filter-node" size="14" value=${filter.node} onChange=${set("node")} /></label>
      <label><span><input id="live" type="checkbox" checked=${live} onChange=${(e) => setLive(e.target.checked)} /> live</span></label>
    </div>
    ${filter.trace && html`<p id="trace-filter">In trace <code>${filter.trace}</code>
      <button id="clear-trace" onClick=${() => show({ trace: "", before: "" })}>all traces</button></p>`}
    ${error && html`<p class="error">${error}</p>`}
    <table id="invocations">
      <tr><th>started</th><th>function</th><th>version</th><th>status</th><th>took</th><th>tier</th><th>node</th></tr>
      ${rows.map((r) => html`<tr class="link" data-id=${r.id} onClick=${() => { location.hash = `#/invocation/${r.id}`; }}>
        <td>${time(r.started_ms)}</td><td>${r.function}</td><td>${r.version}</td>
        <td class=${r.outcome === "ok" ? "ok" : "error"}>${r.status} ${r.outcome === "ok" ? "" : r.outcome}</td>
        <td>${duration(r.duration_us)}</td><td>${r.tier}</td><td>${r.node || "this node"}</td>
      </tr>`)}
    </table>
    ${data && rows.length === 0 && html`<p class="muted">No invocations match.</p>`}
    <div class="pages">
      ${filter.before && html`<button id="newest" onClick=${() => show({ before: "" })}>Newest</button>`}
      ${data?.next_before && html`<button id="older" onClick=${() => show({ before: data.next_before })}>Older</button>`}
    </div>`;
}

function Replay({ id, version }) {
  const [against, setAgainst] = useState(String(version));
  const [report, setReport] = useState(null);
  const run = async (v) => {
    setReport({ verdict: "replaying…" });
    try {
      const q = v ? `?version=${encodeURIComponent(v)}` : "";
      setReport(await json(`/v1/recordings/${encodeURIComponent(id)}/replay${q}`, { method: "POST" }));
    } catch (e) {
      setReport({ verdict: e.message, failed: true });
    }
  };
  return html`<div class="card">
    <button class="primary" id="replay" onClick=${() => run(null)}>Replay</button>
    ${" "}against version <input id="against" size="4" value=${against} onInput=${(e) => setAgainst(e.target.value)} />
    <button class="primary" id="replay-against" onClick=${() => run(against)}>Replay against version</button>
    ${report && html`<div>
      <p class=${"verdict " + (report.identical ? "ok" : "error")} id="verdict">${report.verdict}</p>
      ${report.replayed_version && html`<div class="muted">recorded by v${report.recorded_version}, replayed on v${report.replayed_version} in the ${report.tier} tier</div>`}
      ${report.diff && html`<pre id="diff">${report.diff}</pre>`}
    </div>`}
  </div>`;
}

// When a KV or HTTP call ran within its invocation: the figures, and a
// bar placed on the invocation's span of time.
function Timing({ call, total }) {
  if (call.at_us == null) return html`<td></td><td></td>`;
  const pct = (us) => `${Math.min(100, (100 * us) / Math.max(total, 1)).toFixed(2)}%`;
  return html`<td class="muted timing">at ${duration(call.at_us)}, took ${duration(call.took_us)}</td>
    <td class="waterfall"><div class="bar" style=${{ marginLeft: pct(call.at_us), width: pct(call.took_us) }}></div></td>`;
}

function Invocation({ id }) {
  const [offset, setOffset] = useState(0);
  const rec = useLoad(() => json(`/v1/recordings/${encodeURIComponent(id)}?offset=${offset}&limit=200`), [id, offset]);
  const fn = rec.data?.function;
  const logs = useLoad(async () => fn
    ? json(`/v1/functions/${encodeURIComponent(fn)}/logs?invocation=${encodeURIComponent(id)}&limit=200`) : null, [fn]);
  if (!rec.data) return html`<p class=${rec.error ? "error" : "muted"}>${rec.error || "Loading…"}</p>`;
  const r = rec.data;
  const out = r.outcome;
  return html`<h1>Invocation <code>${r.id}</code></h1>
    <div class="card">
      <span class="tag mode">${r.tier}</span><span class="tag">${r.function} v${r.version}</span>
      <span class="muted">started ${time(r.started_ms)}, took ${duration(r.duration_us)}</span>
      ${r.trace_id && html`<div class="muted">trace <a id="trace-link" title="this trace's invocations"
        href=${`#/invocations?trace=${r.trace_id}`}><code>${r.trace_id}</code></a></div>`}
    </div>
    <${Replay} id=${r.id} version=${r.version} />
    <div class="card">
      <h2>Host calls (${r.calls_total})</h2>
      ${r.calls_total === 0 && html`<p class="muted">It made none.</p>`}
      <table id="calls">
        ${r.calls.map((c) => html`<tr><td>${c.n}</td><td><code>${c.call}</code></td><td>${c.answer}</td>
          <td class="muted">${c.payload_bytes != null ? `${c.payload_bytes} bytes` : ""}</td>
          <${Timing} call=${c} total=${r.duration_us} /></tr>`)}
      </table>
      ${offset > 0 && html`<button onClick=${() => setOffset(Math.max(0, offset - 200))}>earlier calls</button>`}
      ${r.next_offset != null && html`<button onClick=${() => setOffset(r.next_offset)}>later calls</button>`}
    </div>
    <div class="row">
      <div class="card" style=${{ flex: 1 }}>
        <h2>Request</h2>
        <div><code>${r.request.method} ${r.request.path}${r.request.query ? "?" + r.request.query : ""}</code></div>
        <${Headers} headers=${r.request.headers} />
        <${Body} body=${r.request.body} />
      </div>
      <div class="card" style=${{ flex: 1 }}>
        <h2>Response</h2>
        <div id="outcome" class=${out.kind === "ok" ? "ok" : "error"}>${out.status} ${out.kind === "ok" ? "" : `${out.kind}: ${out.message}`}</div>
        ${out.kind === "ok" && html`<${Headers} headers=${out.headers} /><${Body} body=${out.body} />`}
      </div>
    </div>
    <div class="card">
      <h2>Logs</h2>
      ${logs.error && html`<p class="error">${logs.error}</p>`}
      ${logs.data && logs.data.lines.length === 0 && html`<p class="muted">None.</p>`}
      ${logs.data && html`<pre id="logs">${logs.data.lines.map((l) => `${new Date(l.ts_ms).toISOString()} ${l.stream} ${l.level} ${l.message}`).join("\n")}</pre>`}
    </div>`;
}

function Cluster({ who }) {
  const { data, error } = useLoad(async () => {
    const status = await json("/v1/status");
    let nodes = null;
    if (who.scope === "admin") {
      const { resp, body } = await api("/v1/cluster/nodes");
      nodes = resp.ok ? body.nodes : null;
    }
    return { status, nodes };
  }, [], 5000);
  if (!data) return html`<p class=${error ? "error" : "muted"}>${error || "Loading…"}</p>`;
  const s = data.status;
  return html`<h1>Cluster</h1>
    <div class="card">
      <h2>This server</h2>
      <div>Hearth ${s.version}: ${s.in_flight} of ${s.max_concurrency} invocations running; colocation <code>${s.colocation}</code></div>
      ${s.ran && html`<div id="ran">Ran since start, by mode: ${byMode(s.ran)}</div>`}
      ${s.degraded?.length > 0 && html`<p class="error">Degraded: ${s.degraded.join("; ")}</p>`}
    </div>
    ${data.nodes === null
      ? html`<p class="muted">${who.scope === "admin" ? "A single Hearth: no gateway, no other nodes." : "Nodes are shown to the operator's token."}</p>`
      : html`<table id="nodes"><tr><th>node</th><th>alive</th><th>running</th><th>memory committed</th><th>functions loaded</th><th>tenants</th>
          <th title="Invocations this gateway placed there, by the placer's rule">placed: on its function's node / its tenant's / least loaded</th>
          <th title="Invocations the node ran since it started, from any gateway, by mode (as of its last heartbeat)">ran, by mode</th></tr>
        ${data.nodes.map((n) => html`<tr data-node=${n.id}><td>${n.url}</td><td class=${n.alive ? "ok" : "error"}>${n.alive ? "yes" : n.out_because || "no"}</td>
          <td>${n.running}${n.max_concurrency ? ` / ${n.max_concurrency}` : ""}</td>
          <td>${n.committed_mib} / ${n.capacity_mib} MiB</td><td>${n.loaded}</td><td>${n.tenants}</td>
          <td class="placed">${n.placed_by.function} / ${n.placed_by.tenant} / ${n.placed_by.least_loaded}</td>
          <td class="ran">${byMode(n.ran)}</td></tr>`)}
      </table>`}
    ${who.scope === "admin" && html`<${TraceReport} />`}`;
}

/// The trace bench's charts, when the operator pointed --trace-report at
/// a report: fetched with the token, shown as images.
function TraceReport() {
  const [charts, setCharts] = useState({ urls: [], note: null });
  useEffect(() => {
    let urls = [];
    (async () => {
      for (const name of ["summary.svg", "memory.svg"]) {
        const resp = await authorized(`/v1/cluster/trace-report/${name}`);
        if (!resp.ok) {
          const body = await resp.json().catch(() => null);
          setCharts({ urls: [], note: body?.error?.message || resp.statusText });
          return;
        }
        urls = [...urls, URL.createObjectURL(await resp.blob())];
      }
      setCharts({ urls, note: null });
    })();
    return () => urls.forEach((u) => URL.revokeObjectURL(u));
  }, []);
  return html`<div class="card" id="trace-report">
    <h2>Trace bench: colocation modes compared</h2>
    ${charts.note && html`<p class="muted">${charts.note}</p>`}
    ${charts.urls.map((u) => html`<img class="chart" src=${u} alt="trace bench chart" />`)}
  </div>`;
}

// ---- the frame ----

function route() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  return { parts: path.split("/").filter(Boolean), params: new URLSearchParams(query || "") };
}

function App() {
  const [who, setWho] = useState(null);
  const [where, setWhere] = useState(route());
  const [checked, setChecked] = useState(false);
  useEffect(() => {
    const moved = () => setWhere(route());
    addEventListener("hashchange", moved);
    session().then(setWho, () => {}).finally(() => setChecked(true));
    return () => removeEventListener("hashchange", moved);
  }, []);
  if (!checked) return html`<p class="muted">Loading…</p>`;
  if (!who || where.parts[0] === "login") {
    return html`<${Login} onLogin=${(w) => { setWho(w); location.hash = "#/functions"; }} />`;
  }
  const page = where.parts[0] || "functions";
  const logout = () => { logOut().then(() => { setWho(null); location.hash = "#/login"; }); };
  const nav = (name, label) => html`<a id=${`nav-${name}`} class=${page === name ? "active" : ""} href=${`#/${name}`}>${label}</a>`;
  return html`<header>
      <span class="brand">Hearth</span>
      ${nav("functions", "Functions")}${nav("invocations", "Invocations")}${nav("secrets", "Secrets")}${nav("cluster", "Cluster")}
      <span class="who" id="tenant" title=${`a token of scope ${who.scope}`}>${who.tenant}</span>
      <button id="logout" onClick=${logout}>Log out</button>
    </header>
    <main>
      ${page === "functions" && html`<${Functions} who=${who} />`}
      ${page === "invocations" && html`<${Invocations} params=${where.params} />`}
      ${page === "invocation" && html`<${Invocation} id=${where.parts[1]} />`}
      ${page === "versions" && html`<${Versions} name=${decodeURIComponent(where.parts[1] || "")} />`}
      ${page === "secrets" && html`<${Secrets} />`}
      ${page === "cluster" && html`<${Cluster} who=${who} />`}
    </main>`;
}

render(html`<${App} />`, document.getElementById("app"));
