// The datagram ring between the network worker and the page (net-worker.js, transport.js): a
// SharedArrayBuffer the worker writes each datagram into, with its arrival time, and the page
// reads at the start of each frame. A message from the worker can reach the page's main thread
// only between its tasks, so a datagram that arrived just before a frame began could wait for
// the next frame (docs/web.md measured up to 5 ms of such waits); the ring is read at once.
// Needs a cross-origin isolated page (the demo serves /play with COOP and COEP headers).
//
// Layout: two Int32 counters (datagrams written, datagrams read; they only grow, and wrap
// as Int32 does), then SLOTS slots of SLOT_BYTES: the arrival time (Float64), the length
// (Uint32), the bytes. One writer (the worker) and one reader (the page).
const SLOTS = 256;
const SLOT_BYTES = 2048;
const HEAD = 16; // the slot's time and length, 8-aligned
const COUNTERS = 8;
const WRITTEN = 0;
const READ = 1;

// A new ring, or null where the page is not cross-origin isolated (no SharedArrayBuffer).
export function newRing() {
  if (!globalThis.crossOriginIsolated || typeof SharedArrayBuffer === "undefined") return null;
  return new SharedArrayBuffer(COUNTERS + SLOTS * SLOT_BYTES);
}

// Writes a datagram that arrived `at`; false when it does not fit (the ring is full, or the
// datagram is larger than a slot): the caller sends it another way.
export function ringWrite(ring, bytes, at) {
  const counters = new Int32Array(ring, 0, 2);
  const written = Atomics.load(counters, WRITTEN);
  // Int32 arithmetic (`| 0`), so that the counters' wrap changes nothing.
  const full = ((written - Atomics.load(counters, READ)) | 0) >= SLOTS;
  if (full || bytes.length > SLOT_BYTES - HEAD) return false;
  const slot = COUNTERS + (((written % SLOTS) + SLOTS) % SLOTS) * SLOT_BYTES;
  const view = new DataView(ring, slot, HEAD);
  view.setFloat64(0, at, true);
  view.setUint32(8, bytes.length, true);
  new Uint8Array(ring, slot + HEAD, bytes.length).set(bytes);
  // The store publishes the slot: Atomics orders the writes above before it.
  Atomics.store(counters, WRITTEN, (written + 1) | 0);
  return true;
}

// Hands every datagram written and not yet read to `onDatagram(bytes, at)`, oldest first.
export function ringDrain(ring, onDatagram) {
  const counters = new Int32Array(ring, 0, 2);
  const written = Atomics.load(counters, WRITTEN);
  for (let read = Atomics.load(counters, READ); read !== written; read = (read + 1) | 0) {
    const slot = COUNTERS + (((read % SLOTS) + SLOTS) % SLOTS) * SLOT_BYTES;
    const view = new DataView(ring, slot, HEAD);
    const at = view.getFloat64(0, true);
    // A copy: the slot is the worker's again once the counter moves.
    const bytes = new Uint8Array(ring, slot + HEAD, view.getUint32(8, true)).slice();
    Atomics.store(counters, READ, (read + 1) | 0);
    onDatagram(bytes, at);
  }
}
