// How the page's datagrams reach the room: a WebSocket to the demo's gateway, one binary
// message per datagram (crates/app/src/gateway.rs). `info` is the page's /play/token reply
// (`gateway`: the WebSocket's URL). Returns at once; `onOpen` says when `send` works,
// `onClose(why)` when it stopped (`why` is text for the page).
export function openTransport(info, { onDatagram, onOpen, onClose }) {
  const socket = new WebSocket(info.gateway);
  socket.binaryType = "arraybuffer";
  let opened = false;
  socket.onopen = () => {
    opened = true;
    onOpen();
  };
  socket.onmessage = (m) => {
    if (m.data instanceof ArrayBuffer) onDatagram(new Uint8Array(m.data));
  };
  socket.onclose = () =>
    onClose(opened ? "the gateway closed the connection" : `the gateway at ${info.gateway} did not answer`);
  return {
    kind: "WebSocket",
    send: (bytes) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(bytes);
    },
    close: () => socket.close(),
  };
}
