// Rally's client session in the browser: a thin wrapper over the wasm module's C ABI
// (crates/web-client/src/abi.rs). The module imports nothing; bytes cross through its memory:
// this file copies arguments in (rally_alloc) and results out (rally_out), and makes new views
// after every call, since a call may grow the memory and detach the old ones.

const decoder = new TextDecoder();

// Loads the module at `url` and returns a factory of players.
export async function loadClient(url) {
  const reply = await fetch(url);
  if (!reply.ok) throw new Error(`${url}: ${reply.status} ${await reply.text()}`);
  const { instance } = await WebAssembly.instantiateStreaming(reply, {});
  const abi = instance.exports;
  return { player: (random, frameUs) => new Player(abi, random, frameUs) };
}

// Copies `bytes` into the module's memory for one call of `use(ptr, len)`.
function withBytes(abi, bytes, use) {
  const ptr = abi.rally_alloc(bytes.length);
  try {
    new Uint8Array(abi.memory.buffer, ptr, bytes.length).set(bytes);
    return use(ptr, bytes.length);
  } finally {
    abi.rally_free(ptr, bytes.length);
  }
}

// One player: its calls are the Rust `Player`'s (crates/web-client/src/player.rs).
export class Player {
  constructor(abi, random, frameUs) {
    this.abi = abi;
    this.web = withBytes(abi, random, (ptr, len) => abi.rally_player_new(ptr, len, frameUs));
    if (!this.web) throw new Error("the client refused its arguments (24 random bytes, a frame time)");
  }

  // The `len` bytes the last call wrote at rally_out, copied (the memory is the module's).
  out(len) {
    return new Uint8Array(this.abi.memory.buffer, this.abi.rally_out(this.web), len).slice();
  }

  text(len) {
    return decoder.decode(this.out(len));
  }

  // Starts connecting with a connect token's bytes; throws the reason it was refused.
  connect(now, token, unixNow) {
    const len = withBytes(this.abi, token, (p, n) => this.abi.rally_connect(this.web, now, p, n, unixNow));
    if (len) throw new Error(this.text(len));
  }

  receive(now, datagram) {
    withBytes(this.abi, datagram, (p, n) => this.abi.rally_receive(this.web, now, p, n));
  }

  update(now) {
    this.abi.rally_update(this.web, now);
  }

  // The next datagram to send, or undefined.
  poll_transmit(now) {
    const len = this.abi.rally_poll_transmit(this.web, now);
    return len ? this.out(len) : undefined;
  }

  // The input's sequence number, or undefined before the room has welcomed this player.
  send_hand(now, x, y, z, yaw) {
    const seq = this.abi.rally_send_hand(this.web, now, x, y, z, yaw);
    return seq < 0 ? undefined : seq;
  }

  present(now) {
    this.abi.rally_present(this.web, now);
  }

  // Every entity as `id, x, y, z`, interpolated for `now`, in one Float32Array.
  entities(now) {
    const len = this.abi.rally_entities(this.web, now);
    const at = this.abi.rally_entities_out(this.web);
    return new Float32Array(this.abi.memory.buffer, at, len).slice();
  }

  set_frame_us(frameUs) {
    this.abi.rally_set_frame_us(this.web, frameUs);
  }

  close() {
    this.abi.rally_close(this.web);
  }

  // `idle`, `connecting`, `joined` or `ended: REASON`.
  phase() {
    return this.text(this.abi.rally_phase(this.web));
  }

  // The connection's and the latency meter's figures (see player.rs `Figures`).
  figures() {
    return JSON.parse(this.text(this.abi.rally_figures(this.web)));
  }
}
