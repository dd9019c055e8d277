// The Rally demo's dashboard: asks /api/live ten times a second and draws what it says.
// Plain script, no framework and no build step: the binary serves this file as it is.
"use strict";

const POLL_MS = 100;
const COLORS = ["#4cc2ff", "#ff9f43", "#a78bfa", "#5ad48a", "#ff6b9d", "#ffd166"];
let updates = 0;
let lastVersion = -1;
// A scene demo's static geometry (from /api/scene, read once); null in the table-tennis demo.
let scene = null;

const $ = (id) => document.getElementById(id);
const fmt = (v, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : "-");

async function loadScene() {
  try {
    const response = await fetch("/api/scene", { cache: "no-store" });
    scene = await response.json();
  } catch (err) {
    scene = null;
  }
  if (scene) {
    $("view-title").textContent = `The scene ${scene.file}, from above`;
  }
}

async function poll() {
  try {
    const response = await fetch("/api/live", { cache: "no-store" });
    const view = await response.json();
    if (view.version !== lastVersion) {
      lastVersion = view.version;
      render(view);
      updates += 1;
      document.body.dataset.updates = String(updates);
    }
    $("status").textContent = `live: ${updates} updates`;
    $("status").className = "status live";
  } catch (err) {
    $("status").textContent = "the demo is not answering (stopped?)";
    $("status").className = "status";
  }
  setTimeout(poll, POLL_MS);
}

function render(view) {
  const joined = view.clients.filter((c) => c.client !== null).length;
  $("summary").textContent =
    `${fmt(view.seconds, 0)} s · ${view.rooms} room · ${joined}/${view.clients.length} players · ` +
    `${view.hz} Hz · ${view.pipeline} pipeline`;
  if (scene) drawScene(scene, view.sandbox);
  else drawSandbox(view.sandbox);
  drawLatency(view.latency);
  drawPhases(view);
  drawClients(view.clients);
}

// The table from above: its long axis (z) across the canvas, its width (x) down it.
function drawSandbox(sandbox) {
  const canvas = $("sandbox");
  const g = canvas.getContext("2d");
  const [hx, hz] = sandbox.table_half;
  const scale = Math.min(canvas.width / (2 * hz + 1.7), canvas.height / (2 * hx + 0.7));
  const at = (x, z) => [canvas.width / 2 + z * scale, canvas.height / 2 + x * scale];
  g.clearRect(0, 0, canvas.width, canvas.height);
  let drawn = 0;
  const table = sandbox.entities.find((e) => e.role === "table");
  if (table) {
    const [left, top] = at(table.position[0] - hx, table.position[2] - hz);
    g.fillStyle = "#1d4e89";
    g.fillRect(left, top, 2 * hz * scale, 2 * hx * scale);
    g.strokeStyle = "#e6edf3";
    g.lineWidth = 2;
    g.strokeRect(left, top, 2 * hz * scale, 2 * hx * scale);
    g.beginPath();
    g.moveTo(...at(0, -hz));
    g.lineTo(...at(0, hz));
    g.lineWidth = 1;
    g.stroke();
    drawn += 1;
  }
  for (const e of sandbox.entities) {
    const [x, y, z] = e.position;
    const [cx, cy] = at(x, z);
    const color = COLORS[(e.player ?? 0) % COLORS.length];
    if (e.role === "net") {
      g.strokeStyle = "#f0f0f0";
      g.lineWidth = 3;
      g.beginPath();
      g.moveTo(...at(-hx - 0.15, z));
      g.lineTo(...at(hx + 0.15, z));
      g.stroke();
    } else if (e.role === "paddle") {
      g.save();
      g.translate(cx, cy);
      g.rotate(-e.yaw);
      g.fillStyle = color;
      g.fillRect(-0.02 * scale, -0.08 * scale, 0.04 * scale, 0.16 * scale);
      g.restore();
    } else if (e.role === "hand") {
      g.strokeStyle = color;
      g.lineWidth = 2;
      g.beginPath();
      g.arc(cx, cy, 0.04 * scale, 0, 2 * Math.PI);
      g.stroke();
      g.fillStyle = color;
      g.font = "12px system-ui";
      g.fillText(`P${e.player}`, cx + (z < 0 ? -28 : 10), cy + 4);
    } else if (e.role === "ball") {
      // Its shadow on the table, and the ball bigger the higher it flies.
      const lift = Math.max(0, y - sandbox.table_top);
      g.fillStyle = "rgba(0,0,0,0.35)";
      g.beginPath();
      g.arc(cx, cy, 0.025 * scale, 0, 2 * Math.PI);
      g.fill();
      g.fillStyle = "#ffffff";
      g.beginPath();
      g.arc(cx, cy - lift * 20, (0.025 + lift * 0.03) * scale, 0, 2 * Math.PI);
      g.fill();
    } else if (e.role !== "table") {
      g.fillStyle = "#8b97a6";
      g.fillRect(cx - 3, cy - 3, 6, 6);
    }
    if (e.role !== "table") drawn += 1;
  }
  canvas.dataset.entities = String(drawn);
  $("score").textContent =
    `${drawn} entities drawn · serves ${sandbox.serves} · paddle hits ${sandbox.hits} · ` +
    "circles are hands, bars the paddles they hold through the grab graph";
}

// Any scene from above: x across the canvas, z down it. Planes are the ground; colliders are
// drawn from their static geometry; bodies where player 0's replicated state puts them, boxes
// as rectangles, spheres and capsules (upright) as circles, coloured by class, grabbable ones
// outlined; entities the scene does not list (players' heads and hands) as small rings. In a
// scene demo the view's serves and hits count the room's grabs and releases.
function drawScene(layout, sandbox) {
  const entities = sandbox.entities;
  const canvas = $("sandbox");
  const g = canvas.getContext("2d");
  const [x0, z0, x1, z1] = layout.bounds;
  const scale = Math.min(canvas.width / (x1 - x0), canvas.height / (z1 - z0));
  const ox = (canvas.width - (x1 - x0) * scale) / 2;
  const oz = (canvas.height - (z1 - z0) * scale) / 2;
  const at = (x, z) => [ox + (x - x0) * scale, oz + (z - z0) * scale];
  g.clearRect(0, 0, canvas.width, canvas.height);
  const classes = [...new Set(layout.pieces.map((p) => p.class))];
  const classColor = (c) => COLORS[classes.indexOf(c) % COLORS.length];
  const shape = (piece, x, z, yaw, fill, stroke) => {
    const [cx, cy] = at(x, z);
    g.save();
    g.translate(cx, cy);
    g.rotate(-yaw);
    g.beginPath();
    if (piece.shape === "box") {
      g.rect(-piece.half[0] * scale, -piece.half[2] * scale, 2 * piece.half[0] * scale, 2 * piece.half[2] * scale);
    } else {
      g.arc(0, 0, Math.max(piece.half[0] * scale, 2), 0, 2 * Math.PI);
    }
    g.fillStyle = fill;
    g.fill();
    if (stroke) {
      g.strokeStyle = stroke;
      g.lineWidth = 1.5;
      g.stroke();
    }
    g.restore();
  };
  const byId = new Map(entities.map((e) => [e.id, e]));
  const statics = layout.pieces.filter((p) => p.kind === "collider");
  if (statics.some((p) => p.shape === "plane")) {
    g.fillStyle = "#1f2d24";
    g.fillRect(0, 0, canvas.width, canvas.height);
  }
  // Lower colliders first, so that a shelf shows over the floor it stands above.
  const low = (p) => p.position[1] - p.half[1];
  for (const p of [...statics].sort((a, b) => low(a) - low(b))) {
    if (p.shape === "plane") continue;
    const shade = Math.min(80, 40 + Math.round(p.position[1] * 15));
    shape(p, p.position[0], p.position[2], p.yaw, `rgb(${shade},${shade + 8},${shade + 20})`, "#5b6b7d");
  }
  let drawn = 0;
  for (const p of layout.pieces) {
    if (p.kind === "collider") continue;
    const e = byId.get(p.id);
    const [x, , z] = e ? e.position : p.position;
    shape(p, x, z, e ? e.yaw : p.yaw, classColor(p.class), p.grabbable ? "#ffffff" : null);
    drawn += 1;
  }
  const listed = new Set(layout.pieces.map((p) => p.id));
  for (const e of entities) {
    if (listed.has(e.id)) continue;
    const [cx, cy] = at(e.position[0], e.position[2]);
    g.strokeStyle = "#e6edf3";
    g.lineWidth = 2;
    g.beginPath();
    g.arc(cx, cy, 4, 0, 2 * Math.PI);
    g.stroke();
    drawn += 1;
  }
  g.fillStyle = "#e6edf3";
  for (const [k, s] of layout.spawns.entries()) {
    const [cx, cy] = at(s[0], s[2]);
    g.font = "11px system-ui";
    g.fillText(`S${k}`, cx - 6, cy + 4);
  }
  canvas.dataset.entities = String(drawn);
  $("score").textContent =
    `${drawn} entities drawn · grabs ${sandbox.serves} · releases ${sandbox.hits} · ` +
    `classes: ${classes.filter((c) => c !== "static").join(", ")} · ` +
    "shapes from /api/scene, poses from player 0's replicated state; outlined: grabbable; " +
    "S: spawn points";
}

// The histogram of total latency, with the model's best and worst as lines.
function drawLatency(latency) {
  const canvas = $("latency");
  const g = canvas.getContext("2d");
  const pad = { left: 36, right: 10, top: 10, bottom: 26 };
  const w = canvas.width - pad.left - pad.right;
  const h = canvas.height - pad.top - pad.bottom;
  g.clearRect(0, 0, canvas.width, canvas.height);
  // Show up to a little past the larger of the worst bound and the largest sample.
  const top = Math.max(latency.worst_ms, latency.max_ms, 5) * 1.25;
  const bins = latency.bins.slice(0, Math.ceil(top / latency.bin_ms));
  const peak = Math.max(1, ...bins);
  const xOf = (ms) => pad.left + (ms / (bins.length * latency.bin_ms)) * w;
  g.fillStyle = "#4cc2ff";
  bins.forEach((count, k) => {
    const barH = (count / peak) * h;
    const x = xOf(k * latency.bin_ms);
    g.fillRect(x, pad.top + h - barH, Math.max(1, xOf(latency.bin_ms) - pad.left - 1), barH);
  });
  g.strokeStyle = "#3a4656";
  g.beginPath();
  g.moveTo(pad.left, pad.top + h);
  g.lineTo(pad.left + w, pad.top + h);
  g.stroke();
  g.fillStyle = "#8b97a6";
  g.font = "11px system-ui";
  const step = top > 40 ? 10 : top > 15 ? 5 : 2;
  for (let ms = 0; ms <= bins.length * latency.bin_ms; ms += step) {
    g.fillText(String(ms), xOf(ms) - 4, pad.top + h + 14);
  }
  g.fillText("ms", pad.left + w - 14, pad.top + h + 24);
  const bound = (ms, color, label) => {
    if (!(ms > 0)) return;
    g.strokeStyle = color;
    g.setLineDash([4, 3]);
    g.beginPath();
    g.moveTo(xOf(ms), pad.top);
    g.lineTo(xOf(ms), pad.top + h);
    g.stroke();
    g.setLineDash([]);
    g.fillStyle = color;
    g.fillText(label, xOf(ms) + 3, pad.top + 10);
  };
  bound(latency.best_ms, "#5ad48a", "L best");
  bound(latency.worst_ms, "#ffb347", "L worst");
  $("latency-figures").innerHTML = figures([
    ["mean", `${fmt(latency.mean_ms)} ms`],
    ["p99", `${fmt(latency.p99_ms)} ms`],
    ["max", `${fmt(latency.max_ms)} ms`],
    ["within model", `${fmt(latency.within_percent, 0)}%`],
    ["round trip", `${fmt(latency.round_trip_ms, 2)} ms`],
    ["server hold", `${fmt(latency.server_hold_ms, 2)} ms`],
  ]);
}

function drawPhases(view) {
  const rows = view.phases.map((p) => {
    const full = Math.max(p.budget_us, p.p99_us) || 1;
    const over = p.p99_us > p.budget_us ? " over" : "";
    return `<div class="phase"><span>${p.name}</span>` +
      `<div class="bar${over}"><div class="mean" style="width:${(p.mean_us / full) * 100}%"></div>` +
      `<div class="p99" style="left:${(p.p99_us / full) * 100}%"></div></div>` +
      `<span>${fmt(p.mean_us)} / ${fmt(p.p99_us)} of ${fmt(p.budget_us, 0)} us</span></div>`;
  });
  $("phases").innerHTML = rows.join("") ||
    "<p class=\"legend\">waiting for the host's first second of telemetry</p>";
  const overruns = view.phases.reduce((sum, p) => sum + p.overruns, 0);
  $("host-figures").innerHTML = figures([
    ["tick late p99", `${fmt(view.lateness_ms.p99, 2)} ms`],
    ["host CPU", `${fmt(view.host_cpu_percent)}% of a core`],
    ["overruns", String(overruns)],
    ["connections", String(view.connections)],
    ["dashboard CPU", `${fmt(view.dashboard_cpu_percent, 2)}%`],
    // The browser's gateways: sessions open / opened, datagrams both ways, and bad input.
    ...(view.gateways || []).map((g) => [`browser gateway (${g.transport})`,
      `${g.open} / ${g.sessions} sessions, ${g.to_room} / ${g.to_browser} datagrams in / out; ` +
      `bad input ${g.refused + g.oversized + g.garbage + g.too_large + g.broken}`]),
    ["bars", "mean, p99 line"],
  ]);
}

function drawClients(clients) {
  $("clients").querySelector("tbody").innerHTML = clients.map((c) =>
    (c.client === null
      ? `<tr><td>bot ${c.bot} (joining)</td>`
      : `<tr><td style="color:${COLORS[c.client % COLORS.length]}">P${c.client}</td>`) +
    `<td>${c.end}</td><td>${fmt(c.rtt_ms, 2)}</td><td>${fmt(c.loss_percent)}</td>` +
    `<td>${fmt(c.latency_ms)}</td></tr>`).join("");
}

function figures(pairs) {
  return pairs.map(([name, value]) => `<div><dt>${name}</dt><dd>${value}</dd></div>`).join("");
}

loadScene().then(poll);
