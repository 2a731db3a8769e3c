// The dashboard of `cca server`: reads the API with the user's bearer token and follows
// `/changes` live. The design (why fetch and not EventSource, where the token lives) is in the
// docs of examples/src/cca/api/ui.rs. No dependency, no build step.
"use strict";

const TOKEN_KEY = "ccattler.token";
const PREFIXES = {
  instances: "observed/instance/",
  desired: "desired/instance/",
  effective: "effective/service/",
  telemetry: "telemetry/node/",
};
const REFRESH_MS = 300;
const EVENTS_SHOWN = 50;

/** Everything the page knows; each map is `key -> value` as `GET /state` gives it. */
const cluster = {
  status: null,
  nodes: [],
  events: null,
  eventsError: null,
  instances: new Map(),
  desired: new Map(),
  effective: new Map(),
  telemetry: new Map(),
};

let token = null;
let session = null; // { abort: AbortController, lastId: number|null }

class Unauthorized extends Error {}
class Relist extends Error {}
class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const $ = (id) => document.getElementById(id);

// ---- tokens -------------------------------------------------------------------------------

/** A `#token=...` fragment fills the token in, then leaves the address bar. */
function tokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const fromUrl = params.get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl.trim());
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function showLogin(message) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (session) session.abort.abort();
  session = null;
  document.body.dataset.phase = "login";
  $("login").hidden = false;
  $("dashboard").hidden = true;
  $("sign-out").hidden = true;
  $("connection").textContent = "not signed in";
  $("login-error").textContent = message || "";
  $("token").focus();
}

function signIn(value) {
  token = value;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("sign-out").hidden = false;
  $("login-error").textContent = "";
  session = { abort: new AbortController(), lastId: null };
  watch(session);
}

// ---- the API ------------------------------------------------------------------------------

async function failure(res) {
  let message = res.status + " " + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error) message = body.error;
  } catch (_) {
    // Not JSON: keep the status line.
  }
  return res.status === 401 ? new Unauthorized(message) : new HttpError(res.status, message);
}

async function api(path, signal) {
  const res = await fetch(path, {
    headers: { Authorization: "Bearer " + token, Accept: "application/json" },
    cache: "no-store",
    signal,
  });
  if (!res.ok) throw await failure(res);
  return res.json();
}

/** Reads the prefixes the page applies changes to; returns the oldest revision read. */
async function loadSnapshot(signal) {
  const names = Object.keys(PREFIXES);
  const answers = await Promise.all(
    names.map((name) => api("/state?prefix=" + encodeURIComponent(PREFIXES[name]), signal)),
  );
  let oldest = null;
  names.forEach((name, i) => {
    const map = cluster[name];
    map.clear();
    for (const fact of answers[i].facts || []) map.set(fact.key, fact.value);
    const revision = answers[i].revision;
    if (typeof revision === "number" && (oldest === null || revision < oldest)) oldest = revision;
  });
  return oldest;
}

let refreshTimer = null;
let refreshSeq = 0;

function scheduleRefresh() {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refresh();
  }, REFRESH_MS);
}

/** Re-reads the counts, the nodes and the events; a later refresh wins over an earlier one. */
async function refresh() {
  const seq = ++refreshSeq;
  const signal = session && session.abort.signal;
  const events = api("/api/events?limit=" + EVENTS_SHOWN, signal).then(
    (body) => ({ events: Array.isArray(body.events) ? body.events : [] }),
    (err) => ({ error: err }),
  );
  try {
    const [status, nodes] = await Promise.all([
      api("/api/status", signal),
      api("/api/nodes", signal),
    ]);
    const ev = await events;
    if (seq !== refreshSeq) return;
    cluster.status = status;
    cluster.nodes = Array.isArray(nodes.nodes) ? nodes.nodes : [];
    if (ev.error instanceof Unauthorized) throw ev.error;
    cluster.events = ev.events || null;
    cluster.eventsError = ev.error
      ? ev.error.status === 404
        ? "no events: this server has no /api/events"
        : "events: " + ev.error.message
      : null;
    showError(null);
    render();
  } catch (err) {
    if (seq !== refreshSeq || (signal && signal.aborted)) return;
    if (err instanceof Unauthorized) return showLogin("The API refused the token: " + err.message);
    showError("cannot read the cluster: " + err.message);
  }
}

// ---- following /changes -------------------------------------------------------------------

/** Loads, then follows the stream until signed out, resuming after each break. */
async function watch(s) {
  const signal = s.abort.signal;
  let delay = 1000;
  document.body.dataset.phase = "loading";
  $("connection").textContent = "loading…";
  while (!signal.aborted) {
    try {
      if (s.lastId === null) {
        s.lastId = await loadSnapshot(signal);
        render();
        refresh();
      }
      await follow(s, () => {
        delay = 1000;
      });
      throw new Error("the stream ended");
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof Unauthorized) {
        return showLogin("The API refused the token: " + err.message);
      }
      if (err instanceof Relist) {
        s.lastId = null;
        continue;
      }
      document.body.dataset.phase = "reconnecting";
      $("connection").textContent = "reconnecting in " + delay / 1000 + " s (" + err.message + ")";
      await sleep(delay, signal);
      delay = Math.min(delay * 2, 10000);
    }
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** One connection to `/changes`: a server-sent event reader over `fetch`, so that the bearer
 * token goes in a header (EventSource cannot send one). Resumes after `s.lastId`. */
async function follow(s, onReady) {
  const headers = { Authorization: "Bearer " + token, Accept: "text/event-stream" };
  if (s.lastId !== null) headers["Last-Event-ID"] = String(s.lastId);
  const res = await fetch("/changes", { headers, cache: "no-store", signal: s.abort.signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    await readEvents(s, reader, onReady);
  } finally {
    reader.cancel().catch(() => {});
  }
}

async function readEvents(s, reader, onReady) {
  let buffer = "";
  let event = { type: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line === "") {
        if (event.data.length > 0) dispatch(s, event, onReady);
        event = { type: "message", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) continue; // a keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? "" : line.slice(colon + 1);
      if (text.startsWith(" ")) text = text.slice(1);
      if (field === "event") event.type = text;
      else if (field === "data") event.data.push(text);
      else if (field === "id") event.id = text;
    }
  }
}

function dispatch(s, event, onReady) {
  let data;
  try {
    data = JSON.parse(event.data.join("\n"));
  } catch (_) {
    return;
  }
  if (event.type === "ready") {
    if (s.lastId === null && typeof data.revision === "number") s.lastId = data.revision;
    const streams = Number(document.body.dataset.streams || 0) + 1;
    document.body.dataset.streams = String(streams);
    document.body.dataset.phase = "live";
    $("connection").textContent = "live";
    onReady();
    return;
  }
  if (event.type === "error") {
    if (data.relist) throw new Relist(data.error);
    throw new Error(data.error || "the stream failed");
  }
  if (event.type !== "put" && event.type !== "delete") return;
  const revision = Number(event.id);
  if (Number.isFinite(revision)) s.lastId = revision;
  applyChange(event.type, data.key, data.value);
  const live = Number(document.body.dataset.changes || 0) + 1;
  document.body.dataset.changes = String(live);
  scheduleRender();
  scheduleRefresh();
}

function applyChange(kind, key, value) {
  if (typeof key !== "string") return;
  for (const name of Object.keys(PREFIXES)) {
    if (key.startsWith(PREFIXES[name])) {
      if (kind === "put") cluster[name].set(key, value);
      else cluster[name].delete(key);
    }
  }
}

// ---- quantities ---------------------------------------------------------------------------

/** `"500m"` or `"2"` → millicores. */
function millicores(text) {
  if (typeof text !== "string" || text === "") return 0;
  const n = text.endsWith("m") ? Number(text.slice(0, -1)) : Number(text) * 1000;
  return Number.isFinite(n) ? n : 0;
}

const UNITS = { K: 1e3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };

/** `"512Mi"`, `"1G"` or `"1024"` → bytes. */
function bytes(text) {
  const m = /^([0-9.]+)([KkMGTPE]i?)?$/.exec(typeof text === "string" ? text : "");
  if (!m) return 0;
  const n = Number(m[1]) * (m[2] ? UNITS[m[2]] || 1 : 1);
  return Number.isFinite(n) ? n : 0;
}

function showCpu(millis) {
  return millis % 1000 === 0 ? String(millis / 1000) : millis + "m";
}

function showBytes(n) {
  const units = ["", "Ki", "Mi", "Gi", "Ti"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return (Number.isInteger(n) ? n : n.toFixed(1)) + units[i];
}

// ---- drawing ------------------------------------------------------------------------------

let renderTimer = null;

function scheduleRender() {
  if (renderTimer !== null) return;
  renderTimer = setTimeout(() => {
    renderTimer = null;
    render();
  }, 50);
}

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, String(value));
  }
  return node;
}

function row(cells, attrs) {
  const tr = el("tr", null, attrs);
  for (const cell of cells) tr.append(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function num(n) {
  return el("td", n, { class: "num" });
}

function badge(text, kind) {
  const td = el("td");
  td.append(el("span", text, { class: "state " + (kind || "") }));
  return td;
}

function fill(id, rows, emptyId) {
  $(id).replaceChildren(...rows);
  if (emptyId) $(emptyId).hidden = rows.length > 0;
}

function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message || "";
}

const lastSegment = (key) => key.slice(key.lastIndexOf("/") + 1);

/**
 * The rollout column: what the rollout controller says when it holds, rolled back or fails
 * (`status.rollout`, with why), else how far instances are at the version in force.
 */
function rollout(service, status) {
  const held = status && status.rollout;
  if (held && ["paused", "rolled back", "failing"].includes(held.phase)) {
    return {
      text: held.phase + " at version " + String(held.version).slice(0, 8) + ": " + held.reason,
      state: held.phase.replace(" ", "-"),
    };
  }
  const effective = cluster.effective.get(PREFIXES.effective + service);
  if (!effective || typeof effective.version !== "string") return { text: "—", state: "none" };
  const target = effective.version;
  let current = 0;
  let old = 0;
  for (const d of cluster.desired.values()) {
    if (!d || d.service !== service || (d.state && d.state !== "running")) continue;
    if (d.version === target) current += 1;
    else old += 1;
  }
  const version = "version " + target.slice(0, 8);
  if (old === 0) return { text: "up to date (" + version + ")", state: "done" };
  const wanted = Number(effective.instances) || current + old;
  return {
    text: "rolling out: " + current + " of " + wanted + " at new version (" + version + ")",
    state: "rolling",
  };
}

/**
 * What the init steps of a service's instances hold up (`status.init`), for the rollout
 * column: empty once every instance is through them.
 */
function initProgress(status) {
  const init = status && status.init;
  if (!init) return { text: "", state: "none" };
  const pending = (init.waiting || 0) + (init.running || 0) + (init.failed || 0);
  if (pending === 0) return { text: "", state: "done" };
  let text = "init: " + init.done + " done, " + init.running + " running, " + init.failed +
    " failed, " + init.waiting + " waiting";
  const failed = (init.instances || []).find((i) => i.phase === "failed");
  if (failed) {
    text += " (" + failed.id + ": step " + failed.step + " of " + failed.of + " failed " +
      failed.failures + "x" + (failed.reason ? ": " + failed.reason : "") + ")";
  }
  return { text, state: init.failed > 0 ? "failed" : "running" };
}

function renderServices() {
  const services = (cluster.status && cluster.status.services) || [];
  const rows = services.map((s) => {
    const r = rollout(s.name, s);
    const init = initProgress(s);
    const state = s.converged
      ? badge("converged", "ok")
      : s.unplaced > 0
        ? badge("unplaced", "bad")
        : badge("converging", "warn");
    return row(
      [el("td", s.name), num(s.desired), num(s.placed), num(s.present), num(s.running),
        num(s.ready), el("td", init.text ? r.text + "; " + init.text : r.text), state],
      {
        "data-service": s.name,
        "data-desired": s.desired,
        "data-placed": s.placed,
        "data-running": s.running,
        "data-ready": s.ready,
        "data-converged": Boolean(s.converged),
        "data-rollout": r.state,
        "data-init": init.state,
      },
    );
  });
  fill("services", rows, "no-services");
  const unplaced = services
    .filter((s) => s.unplaced > 0)
    .map((s) => {
      const reasons = (s.reasons || []).join("; ") || "no reason given";
      return el("li", s.name + ": " + s.unplaced + " unplaced: " + reasons, {
        "data-unplaced": s.name,
      });
    });
  $("unplaced").replaceChildren(...unplaced);
  $("no-unplaced").hidden = unplaced.length > 0;
  const scaling = services
    .filter((s) => s.autoscaler)
    .map((s) => {
      const a = s.autoscaler;
      const said = a.reason ? ": " + a.reason : "";
      return el("li", s.name + ": autoscaler recommends " + a.instances + said, {
        "data-autoscaled": s.name,
        "data-recommended": a.instances,
      });
    });
  $("autoscaling").replaceChildren(...scaling);
  $("no-autoscaling").hidden = scaling.length > 0;
}

function renderNodes() {
  const active = new Set(["pending", "pulling", "starting", "running"]);
  const rows = cluster.nodes.map((n) => {
    const status = n.status || {};
    let count = 0;
    for (const o of cluster.instances.values()) {
      if (!o || o.node !== n.name || !active.has(o.state)) continue;
      count += 1;
    }
    // What the node's running instances use, as its agent last wrote it (at most every 10 s).
    const used = cluster.telemetry.get(PREFIXES.telemetry + n.name) || {};
    const cpu = millicores(used.cpu);
    const memory = bytes(used.memory);
    const capacity = n.status
      ? (status.cpu || "?") + " CPU, " + (status.memory || "?") + " memory"
      : "not reported";
    return row(
      [el("td", n.name), badge(n.alive ? "alive" : "lease lapsed", n.alive ? "ok" : "bad"),
        el("td", status.zone || "—"), el("td", capacity), num(count),
        el("td", showCpu(cpu) + " CPU, " + showBytes(memory) + " memory")],
      { "data-node": n.name, "data-alive": Boolean(n.alive), "data-instances": count },
    );
  });
  fill("nodes", rows, "no-nodes");
}

function instanceState(o) {
  if (o.state === "running") return o.ready ? "ok" : "warn";
  if (o.state === "failed") return "bad";
  if (o.state === "exited" || o.state === "stopped") return "";
  return "warn";
}

function renderInstances() {
  const list = [...cluster.instances.entries()]
    .filter(([, o]) => o && typeof o === "object")
    .map(([key, o]) => ({ id: lastSegment(key), ...o }))
    .sort((a, b) => (a.service + "/" + a.id).localeCompare(b.service + "/" + b.id));
  const rows = list.map((o) =>
    row(
      [el("td", o.id), el("td", o.service), el("td", o.node), badge(o.state, instanceState(o)),
        el("td", o.ready ? "yes" : "no"), num(o.restarts || 0), el("td", o.reason || "")],
      { "data-instance": o.id, "data-state": o.state, "data-ready": Boolean(o.ready) },
    ),
  );
  fill("instances", rows, "no-instances");
}

function when(ms) {
  return typeof ms === "number" ? new Date(ms).toLocaleTimeString([], { hour12: false }) : "";
}

function renderEvents() {
  const events = cluster.events || [];
  const rows = events
    .slice(-EVENTS_SHOWN)
    .reverse()
    .map((e) =>
      row(
        [el("td", when(e.at_ms)), el("td", e.object), el("td", e.reason),
          el("td", e.message), el("td", e.source)],
        { "data-event": e.reason || "" },
      ),
    );
  $("events").replaceChildren(...rows);
  $("no-events").hidden = rows.length > 0;
  $("no-events").textContent = cluster.eventsError || "No events.";
}

function renderHeader() {
  const status = cluster.status;
  const badgeEl = $("cluster");
  if (!status) {
    badgeEl.textContent = "…";
    badgeEl.className = "badge";
    return;
  }
  const converged = Boolean(status.converged);
  document.body.dataset.converged = String(converged);
  badgeEl.textContent = converged ? "converged" : "converging";
  badgeEl.className = "badge " + (converged ? "ok" : "warn");
  const cp = status.control_plane;
  let text = status.nodes + " node" + (status.nodes === 1 ? "" : "s") + " alive";
  if (cp) {
    text += " · " + cp.up + " replica" + (cp.up === 1 ? "" : "s") + " up";
    if (cp.elected) text += ", leader " + (cp.leader || "none");
  }
  $("control-plane").textContent = text;
}

function render() {
  renderHeader();
  renderServices();
  renderNodes();
  renderInstances();
  renderEvents();
}

// ---- start --------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = $("token").value.trim();
    $("token").value = "";
    if (value) signIn(value);
  });
  $("sign-out").addEventListener("click", () => showLogin("Signed out."));
  const saved = tokenFromFragment();
  if (saved) signIn(saved);
  else showLogin();
});
