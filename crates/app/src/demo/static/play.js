// The browser player: Rally's own client session (crates/web-client, compiled to wasm) with a
// transport to the demo's gateways as its socket (transport.js: WebTransport, else a
// WebSocket). Each frame: timers and the session's turn, the hand's pose from the mouse,
// every waiting datagram out, the table drawn from the replicated state, and `present` for the
// latency meter.
import init, { WebPlayer } from "/play/pkg/rally_web_client.js";
import { openTransport } from "/transport.js";

const canvas = document.getElementById("table");
const g = canvas.getContext("2d");
const statusLine = document.getElementById("status");
const figuresList = document.getElementById("figures");
// What the browser test reads: the player's figures, the hand it sent, its frame CPU.
const state = (window.rallyPlay = {
  phase: "loading", client: null, hand: null, frames: 0, cpuMs: [], sessionMs: [],
  intervalsMs: [], frameMs: 0, firstFrameMs: null, transport: null, transportWhy: null,
});

const say = (text, bad) => {
  statusLine.textContent = text;
  statusLine.className = bad ? "status" : "status live";
};

// The table seen from above: x across the canvas, z (the table's length) up it.
const VIEW = { halfX: 1.6, halfZ: 2.0 };
let layout = { table_half: [0.76, 1.37], table_top: 0.72, roles: new Map() };
const toCanvas = (x, z) => [
  ((x + VIEW.halfX) / (2 * VIEW.halfX)) * canvas.width,
  ((VIEW.halfZ - z) / (2 * VIEW.halfZ)) * canvas.height,
];
const fromCanvas = (cx, cy) => [
  (cx / canvas.width) * 2 * VIEW.halfX - VIEW.halfX,
  VIEW.halfZ - (cy / canvas.height) * 2 * VIEW.halfZ,
];

// The hand follows the mouse, kept over the far half (z > 0.3), a little above the table.
let mouse = null;
canvas.addEventListener("pointermove", (e) => {
  const r = canvas.getBoundingClientRect();
  // The canvas may be drawn scaled: mouse pixels to canvas pixels first.
  const [x, z] = fromCanvas(
    ((e.clientX - r.left) * canvas.width) / r.width,
    ((e.clientY - r.top) * canvas.height) / r.height,
  );
  mouse = [Math.max(-1.2, Math.min(1.2, x)), Math.max(0.3, Math.min(2.0, z))];
});

async function start() {
  await init();
  const reply = await fetch("/play/token", { cache: "no-store" });
  if (!reply.ok) throw new Error(`no connect token: ${reply.status} ${await reply.text()}`);
  const info = await reply.json();
  const bytes = Uint8Array.from(info.token.match(/../g), (h) => parseInt(h, 16));
  const player = new WebPlayer(crypto.getRandomValues(new Uint8Array(24)), 16667);
  const socket = await openTransport(info, {
    onDatagram: (d) => player.receive(performance.now(), d),
    onOpen: (kind, why) => { state.transport = kind; state.transportWhy = why; },
    onClose: (why) => say(why, true),
  });
  player.connect(performance.now(), bytes, Date.now() / 1000);
  const flush = (now) => {
    for (let d = player.poll_transmit(now); d; d = player.poll_transmit(now)) socket.send(d);
  };
  // A closing tab says goodbye, so that its player leaves at once rather than timing out.
  addEventListener("pagehide", () => {
    player.close();
    flush(performance.now());
    socket.close();
  });
  pollRoles();
  let last = 0;
  const frame = () => {
    const now = performance.now();
    if (last) keep(state.intervalsMs, now - last);
    last = now;
    player.update(now);
    if (mouse) {
      const [x, z] = mouse;
      if (player.send_hand(now, x, layout.table_top + 0.3, z, 0) !== undefined) state.hand = [x, z];
    }
    flush(now);
    const entities = player.entities(now);
    // The session's own share of the frame: its turn, the input, the datagrams, the state.
    keep(state.sessionMs, performance.now() - now);
    draw(entities);
    // Since the page was opened (performance.now's origin is the navigation).
    if (state.firstFrameMs === null) state.firstFrameMs = performance.now();
    player.present(performance.now());
    report(player);
    keep(state.cpuMs, performance.now() - now);
    state.frames += 1;
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
}

// Which entity is which comes from the dashboard's view (the room says it to the demo).
async function pollRoles() {
  try {
    const live = await (await fetch("/api/live", { cache: "no-store" })).json();
    const roles = new Map();
    for (const e of live.sandbox.entities) roles.set(e.id, e);
    layout = { table_half: live.sandbox.table_half, table_top: live.sandbox.table_top, roles };
  } catch (e) {
    // The next poll tries again; the table is drawn with what is known.
  }
  setTimeout(pollRoles, 500);
}

function draw(entities) {
  g.fillStyle = "#0b1020";
  g.fillRect(0, 0, canvas.width, canvas.height);
  const [hx, hz] = layout.table_half;
  const [x0, y0] = toCanvas(-hx, hz);
  const [x1, y1] = toCanvas(hx, -hz);
  g.fillStyle = "#1d4ed8";
  g.fillRect(x0, y0, x1 - x0, y1 - y0);
  g.fillStyle = "#e5e7eb";
  g.fillRect(x0 - 10, (y0 + y1) / 2 - 1, x1 - x0 + 20, 3);
  for (let i = 0; i + 3 < entities.length; i += 4) {
    const [id, x, , z] = [entities[i], entities[i + 1], entities[i + 2], entities[i + 3]];
    const role = layout.roles.get(id);
    if (!role || role.role === "table" || role.role === "net") continue;
    const mine = role.player === state.client;
    const [cx, cy] = toCanvas(x, z);
    g.fillStyle = role.role === "ball" ? "#fbbf24" : mine ? "#22c55e" : "#f87171";
    const r = role.role === "ball" ? 5 : role.role === "paddle" ? 9 : 4;
    g.beginPath();
    g.arc(cx, cy, r, 0, 2 * Math.PI);
    g.fill();
  }
}

// The newest 600 of a per-frame figure.
function keep(list, value) {
  list.push(value);
  if (list.length > 600) list.shift();
}

const quantile = (list, q) => {
  const sorted = [...list].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : 0;
};

let lastReport = 0;
function report(player) {
  const now = performance.now();
  if (now - lastReport < 250) return;
  lastReport = now;
  // The latency model's frame is the browser's own: the median frame interval.
  state.frameMs = quantile(state.intervalsMs, 0.5);
  if (state.frameMs > 0) player.set_frame_us(Math.round(state.frameMs * 1000));
  const f = JSON.parse(player.figures());
  state.phase = player.phase();
  state.client = f.client;
  state.figures = f;
  const ended = state.phase.startsWith("ended");
  const over = state.transport ? ` over ${state.transport}${state.transportWhy ? ` (${state.transportWhy})` : ""}` : "";
  say(state.phase === "joined" ? `playing as player ${f.client}${over}` : state.phase, ended);
  const rows = [
    ["RTT", `${f.rtt_ms.toFixed(2)} ms`],
    ["loss", `${(f.loss * 100).toFixed(1)} %`],
    ["latency mean / p99", `${f.mean_ms.toFixed(1)} / ${f.p99_ms.toFixed(1)} ms`],
    ["model (best to worst)", `${f.best_ms.toFixed(1)} to ${f.worst_ms.toFixed(1)} ms`],
    ["within the model", `${(f.within * 100).toFixed(0)} % of ${f.samples} samples`],
    ["frame interval (median)", `${state.frameMs.toFixed(1)} ms`],
    ["page CPU per frame p50 / p99", `${quantile(state.cpuMs, 0.5).toFixed(2)} / ${quantile(state.cpuMs, 0.99).toFixed(2)} ms`],
  ];
  figuresList.replaceChildren(
    ...rows.map(([k, v]) => {
      // One <div> per figure, as the dashboard's style lays them out.
      const [div, dt, dd] = ["div", "dt", "dd"].map((t) => document.createElement(t));
      dt.textContent = k;
      dd.textContent = v;
      div.append(dt, dd);
      return div;
    }),
  );
}

start().catch((e) => {
  state.phase = `error: ${e.message}`;
  say(`cannot play: ${e.message}`, true);
});
