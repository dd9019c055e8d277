"""The Rally transport's datagrams, written from docs/protocol.md alone (section numbers below
are that page's). Pure encoding and decoding: no sockets, no clocks."""

import struct

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

MAGIC = 0x31594C52  # section 10: the magic, "RLY1" on the wire
MTU = 1200
HANDSHAKE_SIZE = 640  # section 12: the whole datagram, type byte included
PIECE = MTU - 11 - 9 - 16  # section 17: 1,164 bytes, sealed or not
TAG = 16
MESSAGE_BYTES_MAX = 65536
TOKEN_VERSION = b"RALLY01\0"

CONNECT_REQUEST, CHALLENGE, CHALLENGE_RESPONSE = 0x10, 0x11, 0x12
DATA, DISCONNECT, DATA_NO_ACKS, SEALED_DISCONNECT, DATA_SHORT = 0x13, 0x14, 0x15, 0x16, 0x17
DATA_NARROW = 0x18  # the short header with the sequence's low 8 bits: sealed only
DATA_KINDS = (DATA, DATA_NO_ACKS, DATA_SHORT, DATA_NARROW)
FRAME_MESSAGE, FRAME_FRAGMENT, FRAME_PING = 0x01, 0x02, 0x03
FRAME_REPAIR, FRAME_REPAIR_ACK = 0x04, 0x05
# Draft 2's last-frame forms (section 4): the type byte's low six bits are the channel.
FRAME_MESSAGE_LAST, FRAME_REPAIR_LAST = 0x80, 0xC0
# The longest ack delay the short header carries, in 8 us units (section 3).
SHORT_DELAY_MAX = 129 * 128

# Section 8.
REASONS = {0: "Closed", 1: "TimedOut", 2: "PeerMisbehaved", 3: "ServerFull",
           4: "ServerShutdown", 5: "RoomFailed"}


class Malformed(Exception):
    """A datagram or token this module cannot decode."""


# ---- varint (LEB128, the page's preamble) ----

def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(buf, pos):
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Malformed("varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


# ---- XChaCha20-Poly1305 (the token's AEAD, section 11) ----
# `cryptography` has the IETF ChaCha20-Poly1305 only; XChaCha20 is HChaCha20 of the first 16
# nonce bytes as the key and four zero bytes and the last 8 nonce bytes as the nonce.

def _rotl(v, c):
    return ((v << c) & 0xFFFFFFFF) | (v >> (32 - c))


def _quarter(s, a, b, c, d):
    s[a] = (s[a] + s[b]) & 0xFFFFFFFF
    s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & 0xFFFFFFFF
    s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b]) & 0xFFFFFFFF
    s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & 0xFFFFFFFF
    s[b] = _rotl(s[b] ^ s[c], 7)


def hchacha20(key, nonce16):
    s = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574]
    s += list(struct.unpack("<8I", key)) + list(struct.unpack("<4I", nonce16))
    for _ in range(10):
        for a, b, c, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                           (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
            _quarter(s, a, b, c, d)
    return struct.pack("<8I", *(s[0:4] + s[12:16]))


def xchacha_seal(key, nonce24, plaintext, ad):
    sub = ChaCha20Poly1305(hchacha20(key, nonce24[:16]))
    return sub.encrypt(b"\0" * 4 + nonce24[16:], plaintext, ad)


def xchacha_open(key, nonce24, sealed, ad):
    sub = ChaCha20Poly1305(hchacha20(key, nonce24[:16]))
    return sub.decrypt(b"\0" * 4 + nonce24[16:], sealed, ad)  # raises InvalidTag


# ---- connect tokens (section 11) ----

def encode_addresses(addresses):
    out = bytearray([len(addresses)])
    for ip, port in addresses:
        out += bytes([4]) + bytes(int(o) for o in ip.split(".")) + struct.pack("<H", port)
    return bytes(out)


def read_addresses(buf, pos):
    if pos >= len(buf) or not 1 <= buf[pos] <= 8:
        raise Malformed("address count")
    count, pos, out = buf[pos], pos + 1, []
    for _ in range(count):
        kind = buf[pos] if pos < len(buf) else None
        size = {4: 4, 6: 16}.get(kind)
        if size is None or pos + 1 + size + 2 > len(buf):
            raise Malformed("address")
        raw = buf[pos + 1:pos + 1 + size]
        ip = ".".join(str(b) for b in raw) if kind == 4 else raw.hex()
        out.append((ip, struct.unpack_from("<H", buf, pos + 1 + size)[0]))
        pos += 1 + size + 2
    return out, pos


class Token:
    """A connect token as the backend hands it to the client (section 11)."""

    def __init__(self, raw):
        if len(raw) < 588 + 8 + 64 or raw[:8] != TOKEN_VERSION:
            raise Malformed("token header")
        self.raw = bytes(raw)
        self.game_id, self.created_at, self.expires_at = struct.unpack_from("<QQQ", raw, 8)
        self.timeout_s, = struct.unpack_from("<I", raw, 32)
        self.nonce = raw[36:60]
        self.sealed = raw[60:588]
        self.addresses, pos = read_addresses(raw, 588)
        self.client_to_server = raw[pos:pos + 32]
        self.server_to_client = raw[pos + 32:pos + 64]
        if len(raw) != pos + 64:
            raise Malformed("bytes after the keys")

    def handshake_field(self):
        """What a connect request and a challenge response carry (568 bytes after the flag)."""
        return struct.pack("<QQ", self.game_id, self.expires_at) + self.nonce + self.sealed

    def open(self, key):
        """The private part, as a server opens it (raises InvalidTag)."""
        ad = TOKEN_VERSION + struct.pack("<QQ", self.game_id, self.expires_at)
        private = xchacha_open(key, self.nonce, self.sealed, ad)
        client_id, room_id, timeout_s = struct.unpack_from("<QQI", private, 0)
        addresses, pos = read_addresses(private, 20)
        return {"client_id": client_id, "room_id": room_id, "timeout_s": timeout_s,
                "addresses": addresses, "client_to_server": private[pos:pos + 32],
                "server_to_client": private[pos + 32:pos + 64],
                "user_data": private[pos + 64:pos + 320]}


def issue_token(key, game_id, created_at, expires_at, timeout_s, client_id, room_id,
                addresses, nonce, c2s, s2c, user_data=b""):
    """A token sealed as a backend seals one (section 11), for the refusal cases."""
    addrs = encode_addresses(addresses)
    private = struct.pack("<QQI", client_id, room_id, timeout_s) + addrs + c2s + s2c
    private += user_data.ljust(256, b"\0")
    private = private.ljust(512, b"\0")
    ad = TOKEN_VERSION + struct.pack("<QQ", game_id, expires_at)
    sealed = xchacha_seal(key, nonce, private, ad)
    public = TOKEN_VERSION + struct.pack("<QQQI", game_id, created_at, expires_at, timeout_s)
    return public + nonce + sealed + addrs + c2s + s2c


# ---- handshake packets (sections 1, 2, 12) ----

def token_field(token):
    return b"\0" if token is None else b"\1" + token.handshake_field()


def connect_request(nonce, token):
    body = struct.pack("<BIQ", CONNECT_REQUEST, MAGIC, nonce) + token_field(token)
    return body.ljust(HANDSHAKE_SIZE, b"\0")


def challenge_response(nonce, cookie, token):
    body = struct.pack("<BIQ", CHALLENGE_RESPONSE, MAGIC, nonce) + cookie + token_field(token)
    return body.ljust(HANDSHAKE_SIZE, b"\0")


def read_challenge(datagram):
    """(nonce, cookie) of a challenge."""
    if len(datagram) != 37 or datagram[0] != CHALLENGE:
        raise Malformed("challenge size")
    magic, nonce = struct.unpack_from("<IQ", datagram, 1)
    if magic != MAGIC:
        raise Malformed("magic")
    return nonce, datagram[13:37]


# ---- sealing (section 13) ----

def packet_nonce(number):
    return b"\0" * 4 + struct.pack("<Q", number)


def header_size(kind):
    return {DATA: 11, DATA_NO_ACKS: 3}[kind]


def restore_number(largest, seq, bits=16):
    """The packet number a sequence of `bits` bits (16, or 8 in a narrow header) stands for,
    given the largest authenticated."""
    span, half = 1 << bits, 1 << (bits - 1)
    seq &= span - 1
    if largest is None:
        return seq
    e = largest + 1
    c = (e & ~(span - 1)) | seq
    if c + half <= e:
        return c + span
    if c > e + half and c >= span:
        return c - span
    return c


class ReplayWindow:
    """Section 13's replay window: above the largest, or within 128 below and unseen."""

    def __init__(self):
        self.largest = None
        self.seen = set()

    def fresh(self, n):
        if self.largest is None or n > self.largest:
            return True
        return self.largest - 128 <= n <= self.largest - 1 and n not in self.seen

    def record(self, n):
        self.seen.add(n)
        if self.largest is None or n > self.largest:
            self.largest = n
        self.seen = {s for s in self.seen if s >= self.largest - 128}


def seal(key, number, header, frames):
    return header + AESGCM(key).encrypt(packet_nonce(number), frames, header)


def open_sealed(key, number, datagram, header_len):
    header = datagram[:header_len]
    return AESGCM(key).decrypt(packet_nonce(number), datagram[header_len:], header)


def sealed_disconnect(key, number, reason):
    head = struct.pack("<BBH", SEALED_DISCONNECT, reason, number & 0xFFFF)
    return head + AESGCM(key).encrypt(packet_nonce(number), b"", head)


# ---- data packets and frames (sections 3, 4, 15) ----

def short_delay(units):
    """Section 3: the short header's delay byte for a delay in 8 us units, rounded down."""
    return units // 2 if units < 256 else units // 128 + 126


def short_delay_units(byte):
    return byte * 2 if byte < 128 else (byte - 126) * 128


def data_header(seq, acks):
    """`acks` is None (type 0x15) or (ack, ack_bits, ack_delay_units): the short header 0x17
    when bits 16 to 31 are clear and the delay fits it, else 0x13."""
    if acks is None:
        return struct.pack("<BH", DATA_NO_ACKS, seq)
    ack, bits, delay = acks
    if bits < 1 << 16 and delay <= SHORT_DELAY_MAX:
        return struct.pack("<BHHHB", DATA_SHORT, seq, ack, bits, short_delay(delay))
    return struct.pack("<BHHIH", DATA, seq, ack, bits, min(delay, 0xFFFF))


def read_data_header(datagram):
    """(kind, seq, acks or None, header length)."""
    kind = datagram[0]
    if kind == DATA and len(datagram) >= 11:
        seq, ack, bits, delay = struct.unpack_from("<HHIH", datagram, 1)
        return kind, seq, (ack, bits, delay), 11
    if kind == DATA_SHORT and len(datagram) >= 8:
        seq, ack, bits, delay = struct.unpack_from("<HHHB", datagram, 1)
        return kind, seq, (ack, bits, short_delay_units(delay)), 8
    if kind == DATA_NARROW and len(datagram) >= 7:
        # `seq` is the number's low 8 bits: restore it with restore_number(largest, seq, 8).
        seq, ack, bits, delay = struct.unpack_from("<BHHB", datagram, 1)
        return kind, seq, (ack, bits, short_delay_units(delay)), 7
    if kind == DATA_NO_ACKS and len(datagram) >= 3:
        return kind, struct.unpack_from("<H", datagram, 1)[0], None, 3
    raise Malformed("data header")


def message_frame(channel, seq, payload):
    return struct.pack("<BBH", FRAME_MESSAGE, channel, seq) + varint(len(payload)) + payload


def as_last(frame):
    """A message frame's last-frame form (section 4), for the last frame of a packet; any
    other frame as it is."""
    if not frame or frame[0] != FRAME_MESSAGE or frame[1] >= 64:
        return frame
    _, pos = read_varint(frame, 4)
    return bytes([FRAME_MESSAGE_LAST | frame[1]]) + frame[2:4] + frame[pos:]


def fragment_frame(channel, seq, index, count, piece):
    head = struct.pack("<BBHBB", FRAME_FRAGMENT, channel, seq, index, count)
    return head + varint(len(piece)) + piece


def split(channel, seq, payload):
    """The frames a message goes out in (section 17)."""
    if len(payload) <= PIECE:
        return [message_frame(channel, seq, payload)]
    count = -(-len(payload) // PIECE)
    return [fragment_frame(channel, seq, i, count, payload[i * PIECE:(i + 1) * PIECE])
            for i in range(count)]


def read_frames(payload, packet_seq=0, forms=None):
    """Frames as tuples: ("message", ch, seq, bytes), ("fragment", ch, seq, i, n, bytes),
    ("ping",), ("repair", ch, start, count, seed, bytes), ("repair_ack", ch, next, shortfall).
    `packet_seq` is the packet's sequence: the seed of a repair in its last-frame form. With
    `forms` a list, "last" or "draft1" is appended to it for each frame."""
    forms = [] if forms is None else forms
    frames, pos = [], 0
    while pos < len(payload):
        kind = payload[pos]
        if kind == FRAME_PING:
            frames.append(("ping",))
            forms.append("draft1")
            pos += 1
            continue
        if kind >= FRAME_MESSAGE_LAST:
            # A last-frame form: the rest of the packet is its payload.
            channel = kind & 0x3F
            if kind >= FRAME_REPAIR_LAST and pos + 4 <= len(payload):
                start, count = struct.unpack_from("<HB", payload, pos + 1)
                frames.append(("repair", channel, start, count, packet_seq,
                               bytes(payload[pos + 4:])))
            elif kind < FRAME_REPAIR_LAST and pos + 3 <= len(payload):
                seq, = struct.unpack_from("<H", payload, pos + 1)
                frames.append(("message", channel, seq, bytes(payload[pos + 3:])))
            else:
                raise Malformed("last frame")
            forms.append("last")
            return frames
        if kind == FRAME_REPAIR_ACK and pos + 5 <= len(payload):
            frames.append(("repair_ack",) + struct.unpack_from("<BHB", payload, pos + 1))
            forms.append("draft1")
            pos += 5
            continue
        if kind == FRAME_REPAIR and pos + 7 <= len(payload):
            channel, start, count, seed = struct.unpack_from("<BHBH", payload, pos + 1)
            length, pos = read_varint(payload, pos + 7)
            head = ("repair", channel, start, count, seed)
        elif kind == FRAME_MESSAGE and pos + 4 <= len(payload):
            channel, seq = struct.unpack_from("<BH", payload, pos + 1)
            length, pos = read_varint(payload, pos + 4)
            head = ("message", channel, seq)
        elif kind == FRAME_FRAGMENT and pos + 6 <= len(payload):
            channel, seq, index, count = struct.unpack_from("<BHBB", payload, pos + 1)
            length, pos = read_varint(payload, pos + 6)
            head = ("fragment", channel, seq, index, count)
        else:
            raise Malformed(f"frame type {kind:#x}")
        if pos + length > len(payload):
            raise Malformed("frame length")
        frames.append(head + (bytes(payload[pos:pos + length]),))
        forms.append("draft1")
        pos += length
    return frames


def newer(a, b):
    """Section 3's serial arithmetic: whether sequence `a` is newer than `b`."""
    return 0 < (a - b) % 65536 < 32768
