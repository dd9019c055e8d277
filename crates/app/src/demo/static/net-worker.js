// The browser player's network thread: the page's transport (transport.js), run in a Web
// Worker so that the page's frame, however long it draws, cannot hold its datagrams. Each
// datagram goes to the page stamped with the moment it arrived here, on the page's clock, so
// the session's round trips and the latency meter's arrivals are the network's, not the wait
// for the page's main thread.
//
// From the page: `{open: info, forced, origin, ring}` once (the page's `performance.timeOrigin`;
// `ring`, a SharedArrayBuffer of ring.js, or null), then `{send: bytes}` and `{close: true}`.
// To the page: `{opened: kind, why}`, `{datagram, at}` (no ring, or it was full), `{wake: true}`
// (a datagram is in the ring: the page reads it now, or its next frame does, whichever comes
// first), `{closed: reason}`, or `{failed: message}` when no transport opened.
import { openTransport } from "/play/transport.js";
import { ringWrite } from "/play/ring.js";

let transport = null;
// The page's `performance.now()` at this worker's `performance.now()`: their origins differ.
let offset = 0;

onmessage = async ({ data: m }) => {
  if (m.open) {
    offset = performance.timeOrigin - m.origin;
    try {
      transport = await openTransport(m.open, {
        onDatagram: (d, at) => {
          if (m.ring && ringWrite(m.ring, d, at + offset)) postMessage({ wake: true });
          else postMessage({ datagram: d, at: at + offset }, [d.buffer]);
        },
        onOpen: (kind, why) => postMessage({ opened: kind, why }),
        onClose: (reason) => postMessage({ closed: reason }),
        forced: m.forced,
      });
    } catch (e) {
      postMessage({ failed: e.message || String(e) });
    }
  } else if (m.send && transport) {
    transport.send(m.send);
  } else if (m.close && transport) {
    transport.close();
  }
};
