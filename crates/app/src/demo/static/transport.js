// The page's way to the room: WebTransport datagrams first, a WebSocket if the browser has no
// WebTransport, the gateway does not answer over it, or the page was opened with
// `?transport=ws`. Each datagram is one Rally datagram either way (the gateways carry them to
// the room over UDP), so the client session above does not know which it has.
//
// The page runs the transport in a Web Worker (net-worker.js, `openTransportInWorker`) so that
// a slow frame on the page's main thread cannot hold the socket: the worker stamps each
// datagram with the moment it arrived, on the page's clock, and the session takes that time
// whenever the main thread gets to it. `openTransport` runs it where it is called (the worker,
// or the page with `?worker=0`).
//
//   const t = await openTransport(info, { onDatagram, onOpen, onClose, forced });
//   t.kind   // "webtransport" or "websocket"
//   t.send(bytes); t.close();
//
// `info` is `/play/token`'s reply: `gateway` (the WebSocket's URL), and `webtransport` with
// `certificate_hash` (the gateway's URL and its self-signed certificate's SHA-256 in hex, or
// null). `onDatagram(bytes, at)` gets each datagram as a Uint8Array and its arrival time
// (`performance.now()` where the socket is); `onOpen(kind, why)` is called once, with why
// WebTransport was not used (null when it was); `onClose(reason)` once, when the transport
// closes for any reason after it opened. `forced` is the page's `?transport=` ("ws" turns
// WebTransport off). Rejects when neither opens.

import { newRing, ringDrain } from "/play/ring.js";

// How long WebTransport may take to open before the page falls back.
const WEBTRANSPORT_WAIT_MS = 3000;

export async function openTransport(info, { onDatagram, onOpen, onClose, forced }) {
  let why = null;
  if (forced === "ws") why = "WebTransport turned off (?transport=ws)";
  else if (typeof WebTransport === "undefined") why = "this browser has no WebTransport";
  else if (!info.webtransport) {
    why = "the server offers no WebTransport";
    if (info.webtransport_off) why += `: ${info.webtransport_off}`;
  }
  if (!why) {
    try {
      const t = await openWebTransport(info, onDatagram, onClose);
      onOpen(t.kind, null);
      return t;
    } catch (e) {
      why = `WebTransport failed (${e.message || e})`;
    }
  }
  const t = await openWebSocket(info.gateway, onDatagram, onClose);
  onOpen(t.kind, why);
  return t;
}

const hexBytes = (hex) => Uint8Array.from(hex.match(/../g), (h) => parseInt(h, 16));

async function openWebTransport(info, onDatagram, onClose) {
  const wt = new WebTransport(info.webtransport, {
    serverCertificateHashes: [{ algorithm: "sha-256", value: hexBytes(info.certificate_hash) }],
  });
  let timer;
  const late = new Promise((_, fail) => {
    timer = setTimeout(() => fail(new Error("no answer in time")), WEBTRANSPORT_WAIT_MS);
  });
  try {
    await Promise.race([wt.ready, late]);
  } catch (e) {
    wt.ready.catch(() => {});
    wt.closed.catch(() => {});
    try { wt.close(); } catch (_) { /* not open: nothing to close */ }
    throw e;
  } finally {
    clearTimeout(timer);
  }
  const writer = wt.datagrams.writable.getWriter();
  let open = true;
  const closed = (reason) => {
    if (!open) return;
    open = false;
    onClose(reason);
  };
  wt.closed.then(() => closed("the gateway closed the session"), (e) => closed(`the session broke: ${e.message || e}`));
  (async () => {
    const reader = wt.datagrams.readable.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onDatagram(value, performance.now());
    }
  })().catch(() => {});
  return {
    kind: "webtransport",
    // A datagram the path cannot take now is dropped, as on any network: Rally resends.
    send: (bytes) => { if (open) writer.write(bytes).catch(() => {}); },
    close: () => { if (open) { open = false; wt.close(); } },
  };
}

async function openWebSocket(url, onDatagram, onClose) {
  const socket = new WebSocket(url);
  socket.binaryType = "arraybuffer";
  await new Promise((ok, fail) => {
    socket.onopen = ok;
    socket.onerror = () => fail(new Error(`the gateway at ${url} did not answer`));
  });
  socket.onmessage = (m) => onDatagram(new Uint8Array(m.data), performance.now());
  socket.onclose = () => onClose("the gateway closed the connection");
  return {
    kind: "websocket",
    send: (bytes) => { if (socket.readyState === WebSocket.OPEN) socket.send(bytes); },
    close: () => socket.close(),
  };
}

// The same transport, run in a Web Worker (net-worker.js): the same handlers, called on the
// page's thread, with each datagram's arrival time converted to the page's clock (a worker's
// `performance.now()` counts from its own origin). Sends cross to the worker as transferred
// buffers. Where the page is cross-origin isolated (and `ring` is not false), datagrams come
// through a shared ring (ring.js) which the page also reads with `drain()` at the start of each
// frame: a datagram that arrived before the frame began is in it, even when the worker's
// message has not reached the page yet. `ring` in the result says whether it is used. Rejects
// as `openTransport` does.
export function openTransportInWorker(info, { onDatagram, onOpen, onClose, forced, ring = true }) {
  const worker = new Worker("/play/net-worker.js", { type: "module" });
  const shared = ring ? newRing() : null;
  const drain = () => { if (shared) ringDrain(shared, onDatagram); };
  return new Promise((ok, fail) => {
    worker.onerror = (e) => fail(new Error(`the network worker failed: ${e.message || "no reason given"}`));
    worker.onmessage = ({ data: m }) => {
      if (m.wake) drain();
      else if (m.datagram) onDatagram(m.datagram, m.at);
      else if (m.opened) {
        onOpen(m.opened, m.why);
        ok({
          kind: m.opened,
          ring: shared !== null,
          drain,
          send: (bytes) => worker.postMessage({ send: bytes }, [bytes.buffer]),
          close: () => worker.postMessage({ close: true }),
        });
      } else if (m.closed) onClose(m.closed);
      else if (m.failed) fail(new Error(m.failed));
    };
    worker.postMessage({ open: info, forced, origin: performance.timeOrigin, ring: shared });
  });
}
