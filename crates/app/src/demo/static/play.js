// The browser player: Rally's own client session (crates/web-client, compiled to wasm) with the
// demo's gateway as its socket (transport.js, run in a Web Worker: net-worker.js), drawn in 3D
// with three.js. Each frame: timers and the session's turn, the hand's pose from the mouse (or
// a VR controller), every waiting datagram out, the state read (interpolated by the session)
// and `present` for the latency meter, then the table drawn.
import { loadClient } from "/play/rally-client.js";
import { openTransport, openTransportInWorker } from "/play/transport.js";
import * as THREE from "/play/three.min.js";

const statusLine = document.getElementById("status");
const figuresList = document.getElementById("figures");
const view = document.getElementById("view");
// What the browser test reads: the player's figures, the hand it sent, its frame CPU, and
// where on the screen a point over the table is.
const state = (window.rallyPlay = {
  phase: "loading", client: null, hand: null, frames: 0, cpuMs: [], sessionMs: [],
  intervalsMs: [], frameMs: 0, firstFrameMs: null, transport: null, transportWhy: null,
  worker: false, ring: false, screenOf: null,
});
const query = new URLSearchParams(location.search);
// `?present=drawn` counts a frame as presented when its draw call returns instead (with
// WebGL drawn in software, tens of ms later): docs/web.md compares the two.
const presentDrawn = query.get("present") === "drawn";

const say = (text, bad) => {
  statusLine.textContent = text;
  statusLine.className = bad ? "status" : "status live";
};

// The room's layout (docs/web.md): the table's long axis is z, the far end (z > 0) is the
// page's. The hand moves over the far half at a fixed height above the table.
const TABLE = { half: [0.76, 1.37], top: 0.72 };
const HAND_Y = TABLE.top + 0.3;
const REACH = { x: [-1.2, 1.2], z: [0.3, 2.0] };
const clamp = (v, [lo, hi]) => Math.max(lo, Math.min(hi, v));

// The scene: the camera stands behind the far end, looking down the table.
const renderer = new THREE.WebGLRenderer({ canvas: view, antialias: true });
renderer.setPixelRatio(Math.min(2, devicePixelRatio));
const scene = new THREE.Scene();
scene.background = new THREE.Color("#0b1020");
const camera = new THREE.PerspectiveCamera(55, 1, 0.05, 50);
// The rig carries the camera (and in VR the head and controllers) to the far end, facing -z.
const rig = new THREE.Group();
rig.position.set(0, 0, 2.7);
rig.add(camera);
camera.position.set(0, 1.55, 0);
const LOOK_AT = new THREE.Vector3(0, 0.2, -1.0); // down the table, towards the near end
camera.lookAt(LOOK_AT);
scene.add(rig, new THREE.HemisphereLight("#dbeafe", "#1e293b", 1.6));
const sun = new THREE.DirectionalLight("#ffffff", 1.8);
sun.position.set(1.5, 4, 2);
scene.add(sun);

const mesh = (geometry, color) =>
  new THREE.Mesh(geometry, new THREE.MeshStandardMaterial({ color, roughness: 0.6 }));
// Sizes from the room's bodies (crates/app/src/demo/table.rs, game.rs).
const shapes = {
  table: () => mesh(new THREE.BoxGeometry(2 * TABLE.half[0], 0.04, 2 * TABLE.half[1]), "#1d4ed8"),
  net: () => mesh(new THREE.BoxGeometry(2 * (TABLE.half[0] + 0.15), 0.152, 0.01), "#e5e7eb"),
  ball: () => mesh(new THREE.SphereGeometry(0.02, 16, 12), "#fbbf24"),
  hand: (mine) => mesh(new THREE.BoxGeometry(0.08, 0.08, 0.08), mine ? "#86efac" : "#fca5a5"),
  paddle: (mine) => {
    const blade = mesh(new THREE.CylinderGeometry(0.08, 0.08, 0.02, 24), mine ? "#22c55e" : "#ef4444");
    blade.rotation.x = Math.PI / 2; // the blade faces along z, towards the net
    return new THREE.Group().add(blade);
  },
};
// A floor and the table's white lines make depth readable.
const floor = mesh(new THREE.PlaneGeometry(12, 12), "#111827");
floor.rotation.x = -Math.PI / 2;
const centreLine = mesh(new THREE.BoxGeometry(0.006, 0.002, 2 * TABLE.half[1]), "#f8fafc");
scene.add(floor);

// One drawn object per entity id, made when its role is known, hidden when it is gone.
const drawn = new Map();
let roles = new Map();

function draw(entities) {
  const seen = new Set();
  for (let i = 0; i + 3 < entities.length; i += 4) {
    const id = entities[i];
    const role = roles.get(id);
    if (!role || !(role.role in shapes)) continue;
    let object = drawn.get(id);
    if (!object) {
      object = shapes[role.role](role.player === state.client);
      if (role.role === "table") {
        centreLine.position.y = 0.021;
        object.add(centreLine);
      }
      drawn.set(id, object);
      scene.add(object);
    }
    object.position.set(entities[i + 1], entities[i + 2], entities[i + 3]);
    object.visible = true;
    seen.add(id);
  }
  for (const [id, object] of drawn) if (!seen.has(id)) object.visible = false;
}

function fit() {
  const { clientWidth: w, clientHeight: h } = view;
  renderer.setSize(w, h, false);
  camera.aspect = w / h;
  camera.updateProjectionMatrix();
}
addEventListener("resize", fit);
fit();

// The hand follows the mouse or a finger: the point under it on the plane at hand height.
const handPlane = new THREE.Plane(new THREE.Vector3(0, 1, 0), -HAND_Y);
const raycaster = new THREE.Raycaster();
let pointer = null;
view.addEventListener("pointermove", (e) => {
  const r = view.getBoundingClientRect();
  const ndc = new THREE.Vector2(((e.clientX - r.left) / r.width) * 2 - 1, 1 - ((e.clientY - r.top) / r.height) * 2);
  raycaster.setFromCamera(ndc, camera);
  const at = raycaster.ray.intersectPlane(handPlane, new THREE.Vector3());
  if (at) pointer = [clamp(at.x, REACH.x), HAND_Y, clamp(at.z, REACH.z), 0];
});
view.style.touchAction = "none"; // a finger moves the paddle rather than the page

// Where on the screen (client pixels) the point over the table at (x, z) is drawn.
state.screenOf = (x, z) => {
  const p = new THREE.Vector3(x, HAND_Y, z).project(camera);
  const r = view.getBoundingClientRect();
  return [r.left + ((p.x + 1) / 2) * r.width, r.top + ((1 - p.y) / 2) * r.height];
};

// In VR the first controller with a pose is the hand: its place and its yaw.
const controllers = [0, 1].map((i) => renderer.xr.getControllerGrip(i));
rig.add(...controllers);
function controllerHand() {
  for (const c of controllers) {
    if (!c.visible) continue;
    const at = c.getWorldPosition(new THREE.Vector3());
    const yaw = new THREE.Euler().setFromQuaternion(c.getWorldQuaternion(new THREE.Quaternion()), "YXZ").y;
    return [at.x, at.y, at.z, yaw];
  }
  return null;
}

// "Enter VR" where the browser offers immersive-vr: the head moves the camera (the session's
// XR camera), a controller moves the paddle. Not testable here: no headset.
async function offerVr() {
  const button = document.getElementById("vr");
  if (!navigator.xr || !(await navigator.xr.isSessionSupported("immersive-vr").catch(() => false))) {
    button.title = "this browser offers no immersive VR";
    return;
  }
  renderer.xr.enabled = true;
  renderer.xr.setReferenceSpaceType("local-floor");
  button.hidden = false;
  button.onclick = async () => {
    const session = await navigator.xr.requestSession("immersive-vr", { optionalFeatures: ["local-floor"] });
    // In VR the head places the camera; the floor's origin is an arm's reach from the end.
    camera.position.set(0, 0, 0);
    rig.position.z = TABLE.half[1] + 0.7;
    await renderer.xr.setSession(session);
    session.addEventListener("end", () => {
      rig.position.z = 2.7;
      camera.position.set(0, 1.55, 0);
      camera.lookAt(LOOK_AT);
    });
  };
}

async function start() {
  const client = await loadClient("/play/rally_web_client.wasm");
  const info = await token();
  const bytes = Uint8Array.from(info.token.match(/../g) || [], (h) => parseInt(h, 16));
  const player = client.player(crypto.getRandomValues(new Uint8Array(24)), 16667);
  // A token the client refuses (expired, malformed) is said on the page before any I/O.
  player.connect(performance.now(), bytes, Date.now() / 1000);
  let transport = null;
  const flush = (now) => {
    if (!transport) return; // the handshake's first packet waits for the transport to open
    for (let d = player.poll_transmit(now); d; d = player.poll_transmit(now)) transport.send(d);
  };
  // WebTransport first, else the WebSocket (transport.js); the page says which, and why. In a
  // Web Worker unless the page says `?worker=0` (or the browser has no module workers).
  state.worker = query.get("worker") !== "0" && typeof Worker !== "undefined";
  const handlers = {
    // Every arrival is taken with the time it arrived and answered at once (its ack, a
    // handshake step), not at the next frame: a frame's wait would hold the room's resends.
    onDatagram: (d, at) => {
      player.receive(at, d);
      flush(performance.now());
    },
    onOpen: (kind, why) => {
      state.transport = kind;
      state.transportWhy = why;
    },
    onClose: (why) => say(why, true),
    forced: query.get("transport"),
    // The worker's datagrams through a shared ring the frame reads (`?ring=0`: messages only).
    ring: query.get("ring") !== "0",
  };
  // A browser whose workers cannot run the transport (no module workers) runs it here.
  const here = () => openTransport(info, handlers);
  transport = await (state.worker
    ? openTransportInWorker(info, handlers).catch(() => { state.worker = false; return here(); })
    : here());
  state.ring = Boolean(transport.ring);
  flush(performance.now());
  // A closing tab says goodbye, so that its player leaves at once rather than timing out.
  addEventListener("pagehide", () => {
    player.close();
    flush(performance.now());
    transport.close();
  });
  pollRoles();
  offerVr();
  // The renderer's loop is the window's requestAnimationFrame, or the XR session's in VR.
  renderer.setAnimationLoop(() => frame(player, flush, transport));
}

// The page's token: one given in the address (`/play?token=HEX`, from a game's own backend),
// else one from the demo's backend; either way the gateway is the demo's.
async function token() {
  const reply = await fetch("/play/token", { cache: "no-store" });
  if (!reply.ok) throw new Error(`no connect token: ${reply.status} ${await reply.text()}`);
  const info = await reply.json();
  const given = query.get("token");
  return given === null ? info : { ...info, token: given };
}

let lastFrame = 0;
function frame(player, flush, transport) {
  // What the worker has received and the page not yet heard of (transport.js's ring).
  transport.drain?.();
  const now = performance.now();
  if (lastFrame) keep(state.intervalsMs, now - lastFrame);
  lastFrame = now;
  player.update(now);
  const hand = renderer.xr.isPresenting ? controllerHand() : pointer;
  if (hand && player.send_hand(now, ...hand) !== undefined) state.hand = [hand[0], hand[2]];
  flush(now);
  const entities = player.entities(now);
  // This frame shows the state as it is now: the meter counts each input from its frame's
  // start to the start of the first frame that shows its effect, in whole frames, as the
  // model does (docs/web.md). Drawing it (render) comes on top, on every client alike.
  if (!presentDrawn) player.present(now);
  // The session's own share of the frame: its turn, the input, the datagrams, the state.
  keep(state.sessionMs, performance.now() - now);
  draw(entities);
  renderer.render(scene, camera);
  if (presentDrawn) player.present(performance.now());
  // Since the page was opened (performance.now's origin is the navigation).
  if (state.firstFrameMs === null) state.firstFrameMs = performance.now();
  report(player);
  keep(state.cpuMs, performance.now() - now);
  state.frames += 1;
}

// Which entity is which comes from the dashboard's view (the room tells the demo).
async function pollRoles() {
  try {
    const live = await (await fetch("/api/live", { cache: "no-store" })).json();
    roles = new Map(live.sandbox.entities.map((e) => [e.id, e]));
  } catch (e) {
    // The next poll tries again; the table is drawn with what is known.
  }
  setTimeout(pollRoles, 500);
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
  const f = player.figures();
  state.phase = player.phase();
  state.client = f.client;
  state.figures = f;
  const ended = state.phase.startsWith("ended");
  const over = state.transport ? ` over ${state.transport}${state.transportWhy ? ` (${state.transportWhy})` : ""}` : "";
  say(state.phase === "joined" ? `playing as player ${f.client}${over}` : state.phase, ended);
  const rows = [
    ["your total latency mean / p99", `${f.mean_ms.toFixed(1)} / ${f.p99_ms.toFixed(1)} ms`],
    ["the model (best to worst)", `${f.best_ms.toFixed(1)} to ${f.worst_ms.toFixed(1)} ms`],
    ["within the model (on this page's frames)", `${(f.within * 100).toFixed(0)} % of ${f.samples} samples`],
    ["at most the best frame + 1 ms", `${(f.at_best * 100).toFixed(0)} %`],
    ["RTT", `${f.rtt_ms.toFixed(2)} ms`],
    ["loss", `${(f.loss * 100).toFixed(1)} %`],
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
