"""A Rally client connection over a real UDP socket, from docs/protocol.md: the handshake
(section 12), data packets with acks (3, 14, 15), channels (5, 16), fragments (4, 17),
sealing (13) and disconnects (8). Simple where the spec leaves the sender free: a reliable
unit is resent every RESEND seconds until acked, and every ack-eliciting packet is acked at
once."""

import os
import socket
import struct
import time

from cryptography.exceptions import InvalidTag

import proto as p

RESEND = 0.05
KEEPALIVE = 0.1
HANDSHAKE_RESEND = 0.1

# Channel kinds (section 5).
RELIABLE_ORDERED, UNRELIABLE, UNRELIABLE_SEQUENCED = "reliable ordered", "unreliable", "sequenced"
ECHO_CHANNELS = [RELIABLE_ORDERED, UNRELIABLE]  # section 16, rally echo server
ENGINE_CHANNELS = [RELIABLE_ORDERED, UNRELIABLE_SEQUENCED, UNRELIABLE, UNRELIABLE]  # rally server


class Refused(Exception):
    """The handshake did not complete: no answer, or a disconnect with a reason."""


class Connection:
    def __init__(self, server, channels, token=None, timeout=3.0):
        self.server = server
        self.channels = channels
        self.token = token
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.005)
        # Sending.
        self.tx_number = 0  # packet number (sealed) and sequence source
        self.tx_message_seq = [0] * len(channels)
        self.unacked = {}  # packet number -> [(channel, frame bytes)] reliable units in it
        self.pending = []  # reliable frames waiting for a packet (resends first)
        self.last_sent = 0.0
        self.sent_at = {}  # packet number -> when it went out, for the unacked ones
        # Receiving.
        self.window = p.ReplayWindow()
        self.rx_newest = None  # newest data sequence received (the `ack` field)
        self.rx_newest_at = 0.0
        self.rx_seqs = set()  # data sequences received, for the ack bits
        self.heard_data = False
        self.ack_owed = False
        self.next_deliver = [0] * len(channels)  # reliable ordered: next sequence to deliver
        self.held = [dict() for _ in channels]  # reliable ordered: messages past a gap
        self.delivered = [set() for _ in channels]  # (unreliable) sequences delivered once
        self.newest_sequenced = [None] * len(channels)
        self.assembling = {}  # (channel, seq) -> {index: piece}, count
        self.inbox = [[] for _ in channels]
        # What the checks look at.
        self.closed = None  # a disconnect reason from the server
        self.stats = {"sent": 0, "received": 0, "resent_units": 0, "largest_datagram": 0,
                      "fragment_frames_in": 0, "pieces_in_max": 0, "dropped": 0,
                      "last_frames_in": 0}
        self.kinds_in = {}  # data packets received, by type
        self.received_log = []  # (kind, number) of every authenticated data packet
        self.handshake(timeout)

    # ---- handshake (section 12) ----

    def handshake(self, timeout):
        self.nonce = int.from_bytes(os.urandom(8), "little")
        start = time.monotonic()
        cookie, next_send = None, 0.0
        while time.monotonic() - start < timeout:
            now = time.monotonic()
            if now >= next_send:
                packet = (p.connect_request(self.nonce, self.token) if cookie is None else
                          p.challenge_response(self.nonce, cookie, self.token))
                self.send_raw(packet)
                next_send = now + HANDSHAKE_RESEND
            datagram = self.recv()
            if datagram is None:
                continue
            kind = datagram[0]
            if kind == p.CHALLENGE:
                nonce, got = p.read_challenge(datagram)
                if nonce == self.nonce and cookie is None:
                    cookie, next_send = got, 0.0
            elif kind == p.DISCONNECT and len(datagram) == 2:
                raise Refused(p.REASONS.get(datagram[1], datagram[1]))
            elif kind in (p.DATA, p.DATA_NO_ACKS) and cookie is not None:
                if self.on_data(datagram):
                    self.connected_at = time.monotonic()
                    self.first_packet = datagram
                    return
        raise Refused("no answer" if cookie is None else "challenged, never connected")

    # ---- sockets ----

    def send_raw(self, datagram):
        self.sock.sendto(datagram, self.server)
        self.stats["sent"] += 1
        self.stats["largest_datagram"] = max(self.stats["largest_datagram"], len(datagram))
        self.last_sent = time.monotonic()

    def recv(self):
        try:
            datagram, _ = self.sock.recvfrom(65536)
        except (socket.timeout, BlockingIOError):
            return None
        self.stats["received"] += 1
        return datagram

    # ---- receiving ----

    def rx_key(self):
        return self.token.server_to_client if self.token else None

    def on_datagram(self, datagram):
        kind = datagram[0]
        if kind in p.DATA_KINDS:
            self.on_data(datagram)
        elif kind == p.DISCONNECT and len(datagram) == 2 and not self.token:
            self.closed = p.REASONS.get(datagram[1], datagram[1])
        elif kind == p.SEALED_DISCONNECT and len(datagram) == 20 and self.token:
            seq, = struct.unpack_from("<H", datagram, 2)
            number = p.restore_number(self.window.largest, seq)
            try:
                p.open_sealed(self.rx_key(), number, datagram, 4)
            except InvalidTag:
                self.stats["dropped"] += 1
                return
            self.closed = p.REASONS.get(datagram[1], datagram[1])
        else:
            self.stats["dropped"] += 1

    def on_data(self, datagram):
        """Reads a data packet; whether it was accepted."""
        try:
            kind, seq, acks, head = p.read_data_header(datagram)
        except p.Malformed:
            self.stats["dropped"] += 1
            return False
        payload = datagram[head:]
        number = seq
        if kind == p.DATA_NARROW and not self.token:
            self.stats["dropped"] += 1  # a narrow sequence is only for sealed connections
            return False
        if self.token:
            bits = 8 if kind == p.DATA_NARROW else 16
            number = p.restore_number(self.window.largest, seq, bits)
            seq = number & 0xFFFF
            if not self.window.fresh(number):
                self.stats["dropped"] += 1
                return False
            try:
                payload = p.open_sealed(self.rx_key(), number, datagram, head)
            except InvalidTag:
                self.stats["dropped"] += 1
                return False
            self.window.record(number)
        self.received_log.append((kind, number))
        self.heard_data = True
        if seq not in self.rx_seqs:
            self.rx_seqs.add(seq)
            if self.rx_newest is None or p.newer(seq, self.rx_newest):
                self.rx_newest, self.rx_newest_at = seq, time.monotonic()
        if acks is not None:
            self.on_acks(*acks)
        self.kinds_in[kind] = self.kinds_in.get(kind, 0) + 1
        forms = []
        frames = p.read_frames(payload, seq, forms)
        self.stats["last_frames_in"] += forms.count("last")
        if frames:
            self.ack_owed = True
        for frame in frames:
            self.on_frame(frame)
        return True

    def on_acks(self, ack, bits, _delay):
        acked = {ack} | {(ack - 1 - i) % 65536 for i in range(32) if bits >> i & 1}
        for number in list(self.unacked):
            if number & 0xFFFF in acked and not p.newer(number & 0xFFFF, ack):
                del self.unacked[number]

    def on_frame(self, frame):
        if frame[0] in ("ping", "repair", "repair_ack"):
            return  # this client neither asks for repairs nor decodes them (section 6a)
        channel, seq = frame[1], frame[2]
        if frame[0] == "fragment":
            _, _, _, index, count, piece = frame
            self.stats["fragment_frames_in"] += 1
            self.stats["pieces_in_max"] = max(self.stats["pieces_in_max"], len(piece))
            pieces = self.assembling.setdefault((channel, seq), {})
            pieces[index] = piece
            if len(pieces) < count:
                return
            del self.assembling[(channel, seq)]
            self.deliver(channel, seq, b"".join(pieces[i] for i in range(count)))
        else:
            self.deliver(channel, seq, frame[3])

    def deliver(self, channel, seq, message):
        kind = self.channels[channel]
        if kind == RELIABLE_ORDERED:
            ahead = (seq - self.next_deliver[channel]) % 65536
            if ahead >= 32768:
                return  # a duplicate of a delivered message
            self.held[channel][seq] = message
            while self.next_deliver[channel] in self.held[channel]:
                self.inbox[channel].append(self.held[channel].pop(self.next_deliver[channel]))
                self.next_deliver[channel] = (self.next_deliver[channel] + 1) % 65536
        elif kind == UNRELIABLE_SEQUENCED:
            newest = self.newest_sequenced[channel]
            if newest is None or p.newer(seq, newest):
                self.newest_sequenced[channel] = seq
                self.inbox[channel].append(message)
        elif seq not in self.delivered[channel]:
            self.delivered[channel].add(seq)
            self.inbox[channel].append(message)

    # ---- sending ----

    def send(self, channel, message):
        seq = self.tx_message_seq[channel]
        self.tx_message_seq[channel] = (seq + 1) % 65536
        frames = p.split(channel, seq, message)
        if self.channels[channel] == RELIABLE_ORDERED:
            self.pending += [(channel, f) for f in frames]
        else:
            for frame in frames:
                self.send_packet([frame])

    def acks(self):
        if self.rx_newest is None:
            return None
        bits = 0
        for i in range(32):
            if (self.rx_newest - 1 - i) % 65536 in self.rx_seqs:
                bits |= 1 << i
        delay = int((time.monotonic() - self.rx_newest_at) / 8e-6)
        return self.rx_newest, bits, delay

    def send_packet(self, frames, reliable=()):
        """Sends one data packet holding `frames` (the reliable ones also in `reliable`)."""
        number = self.tx_number
        self.tx_number += 1
        header = p.data_header(number & 0xFFFF, self.acks() if self.heard_data else None)
        # Draft 2 (section 4): the last frame of the packet in its last-frame form.
        payload = b"".join(frames[:-1] + [p.as_last(f) for f in frames[-1:]])
        if self.token:
            datagram = p.seal(self.token.client_to_server, number, header, payload)
        else:
            datagram = header + payload
        if reliable:
            self.unacked[number] = list(reliable)
            self.sent_at[number] = time.monotonic()
        self.ack_owed = False
        self.send_raw(datagram)
        return datagram

    def flush(self):
        """Sends waiting reliable frames, as many per packet as the MTU holds."""
        room = p.MTU - 11 - (p.TAG if self.token else 0)
        if any(len(frame) > room for _, frame in self.pending):
            # Sending empty packets for ever instead is the bug section 17 tells of.
            raise ValueError("a frame larger than the room a packet has for frames")
        while self.pending:
            batch, size = [], 0
            while self.pending and size + len(self.pending[0][1]) <= room:
                unit = self.pending.pop(0)
                batch.append(unit)
                size += len(unit[1])
            self.send_packet([f for _, f in batch], reliable=batch)

    def service(self):
        """Resends overdue reliable units, sends owed acks and keepalives."""
        now = time.monotonic()
        for number in list(self.unacked):
            if now - self.sent_at[number] >= RESEND:
                units = self.unacked.pop(number)
                self.stats["resent_units"] += len(units)
                self.pending = units + self.pending
        self.flush()
        if self.ack_owed or now - self.last_sent >= KEEPALIVE:
            self.send_packet([])

    def pump(self, seconds=0.0, until=None):
        """Runs the connection for `seconds`, or until `until()` holds (False on timeout)."""
        deadline = time.monotonic() + seconds
        while True:
            datagram = self.recv()
            while datagram is not None:
                self.on_datagram(datagram)
                datagram = self.recv()
            self.service()
            if until is not None and until():
                return True
            if time.monotonic() >= deadline:
                return until is None

    def settled(self):
        return not self.pending and not self.unacked

    def disconnect(self):
        """Closes as section 8 says: three disconnect packets, sealed when the connection is."""
        for _ in range(3):
            if self.token:
                number = self.tx_number
                self.tx_number += 1
                self.send_raw(p.sealed_disconnect(self.token.client_to_server, number, 0))
            else:
                self.send_raw(bytes([p.DISCONNECT, 0]))

    def close_socket(self):
        self.sock.close()
