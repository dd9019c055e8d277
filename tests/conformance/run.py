#!/usr/bin/env python3
"""Rally's conformance client: checks `rally echo server` and `rally server` against
docs/protocol.md, docs/wire.md and docs/security.md, with 5% loss each way through
`rally-bench relay` (rally-netem's link model in real time). Plain output, one line a check;
exit status 1 if any fails.

Usage: python3 tests/conformance/run.py [--rally PATH] [--bench PATH]
(defaults: target/release/rally if built, else target/debug/rally; the same for rally-bench;
CARGO_TARGET_DIR is honoured)."""

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import client as c  # noqa: E402
import proto as p  # noqa: E402
import wire  # noqa: E402

KEY = bytes.fromhex("42" * 32)  # the token key given to `rally server` and `rally token issue`
GAME_ID = 1
LOSS = 0.05
SEED = 30
results = []


def check(name):
    def wrap(fn):
        def run(*args):
            start = time.monotonic()
            try:
                detail = fn(*args) or ""
                results.append(True)
                print(f"PASS {name} ({time.monotonic() - start:.2f} s) {detail}", flush=True)
            except Exception as err:  # a failed check is reported, the run goes on
                results.append(False)
                print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
        return run
    return wrap


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


# ---- processes ----

def binary(name, given):
    if given:
        return given
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    for profile in ("release", "debug"):
        path = os.path.join(target, profile, name)
        if os.path.exists(path):
            return path
    sys.exit(f"error: no {name} binary under {target}; build it (cargo build) or pass its path")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """`rally-bench relay` to `server`, LOSS each way: one client per relay."""

    def __init__(self, bench, server, seed):
        self.proc = subprocess.Popen(
            [bench, "relay", "--to", f"{server[0]}:{server[1]}", "--loss", str(LOSS),
             "--seed", str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        expect(line[:3] == ["relay", "listening", "on"], f"relay said {line}")
        host, port = line[3].rsplit(":", 1)
        self.address = (host, int(port))

    def stop(self):
        """What the relay applied: {"up": {...}, "down": {...}}."""
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        self.proc.wait(timeout=5)
        return json.loads(out.strip().splitlines()[-1])


def wait_udp_server(address, seconds=10.0):
    """Until the server answers a connect request (a plaintext one answers with a challenge;
    a sealed one drops a tokenless request, so for it we wait on its log instead)."""
    deadline = time.monotonic() + seconds
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.1)
        while time.monotonic() < deadline:
            s.sendto(p.connect_request(1, None), address)
            try:
                s.recvfrom(2048)
                return
            except socket.timeout:
                pass
    sys.exit(f"error: no server answered on {address}")


def token_issue(rally, *extra, server=None, game_id=GAME_ID, client_id=1):
    args = [rally, "token", "issue", "--key", KEY.hex(), "--protocol-id", str(game_id),
            "--client", str(client_id), "--room", "1", "--server", server, *extra]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return p.Token(bytes.fromhex(out.strip()))


def fresh_token(server, **fields):
    """A token sealed here, as a backend would (section 11), with `fields` overridden."""
    now = int(time.time())
    t = dict(game_id=GAME_ID, created_at=now, expires_at=now + 30, timeout_s=5, client_id=9,
             room_id=1, addresses=[server], nonce=os.urandom(24), c2s=os.urandom(32),
             s2c=os.urandom(32))
    t.update(fields)
    return p.Token(p.issue_token(KEY, **t))


# ---- the vectors (protocol.md section 18, wire.md) ----

@check("protocol vectors: token layout, sealing and opening (sections 11, 18)")
def token_vector(v):
    t = v["token"]
    token = p.Token(bytes.fromhex(t["bytes"]))
    expect(token.game_id == t["game_id"] and token.expires_at == t["expires_at"], "public part")
    expect(token.created_at == t["created_at"] and token.timeout_s == t["timeout_s"], "times")
    host, port = t["server"].rsplit(":", 1)
    expect(token.addresses == [(host, int(port))], f"addresses {token.addresses}")
    expect(token.client_to_server.hex() == t["client_to_server_key"], "client to server key")
    expect(token.server_to_client.hex() == t["server_to_client_key"], "server to client key")
    private = token.open(bytes.fromhex(t["token_key"]))
    expect(private["client_id"] == t["client_id"] and private["room_id"] == t["room_id"], "ids")
    expect(private["user_data"].rstrip(b"\0") == b"alice", "user data")
    again = p.issue_token(bytes.fromhex(t["token_key"]), t["game_id"], t["created_at"],
                          t["expires_at"], t["timeout_s"], t["client_id"], t["room_id"],
                          [(host, int(port))], bytes.fromhex(t["nonce"]),
                          token.client_to_server, token.server_to_client, b"alice")
    expect(again == token.raw, "a token sealed here differs from the vector")


@check("protocol vectors: handshake packets (section 12)")
def handshake_vectors(v):
    token = p.Token(bytes.fromhex(v["token"]["bytes"]))
    request = bytes.fromhex(v["connect_request"])
    nonce, = struct.unpack_from("<Q", request, 5)
    expect(p.connect_request(nonce, token) == request, "connect request")
    got_nonce, cookie = p.read_challenge(bytes.fromhex(v["challenge"]))
    expect(got_nonce == nonce, "the challenge carries the request's nonce")
    expect(p.challenge_response(nonce, cookie, token) == bytes.fromhex(v["challenge_response"]),
           "challenge response")


@check("protocol vectors: a sealed data packet and a sealed disconnect (section 13)")
def sealed_vectors(v):
    d = v["sealed_data"]
    key, number = bytes.fromhex(d["key"]), d["number"]
    expect(p.packet_nonce(number).hex() == d["nonce"], "nonce")
    datagram = bytes.fromhex(d["datagram"])
    _, seq, _, head = p.read_data_header(datagram)
    expect(p.seal(key, number, datagram[:head], bytes.fromhex(d["plaintext"])) == datagram,
           "sealing")
    expect(datagram[0] == p.DATA_SHORT and head == 8, "the short header (draft 2)")
    forms = []
    frames = p.read_frames(p.open_sealed(key, number, datagram, head), seq, forms)
    expect(frames == [("message", 0, 0, b"hello")], f"frames {frames}")
    expect(forms == ["last"], "the message in its last-frame form (draft 2)")
    s = v["sealed_disconnect"]
    expect(p.sealed_disconnect(bytes.fromhex(s["key"]), s["number"], 0).hex() == s["datagram"],
           "sealed disconnect")


@check("wire vectors: every snapshot of docs/wire-vectors.json decodes to its codes (item 3)")
def wire_vectors(vectors):
    for vector in vectors:
        got = wire.decode(bytes.fromhex(vector["hex"]), vector["baseline"])
        expect(got == vector["snapshot"], f"{vector['name']}: decoded differently")
    return f"{len(vectors)} vectors"


# ---- rally echo server ----

def exchange(conn, channel, count, size=200, first=0):
    """Sends `count` numbered messages one pump apart (a packet each); what it sent."""
    sent = [struct.pack("<I", i) + bytes([i % 251]) * (size - 4)
            for i in range(first, first + count)]
    for message in sent:
        conn.send(channel, message)
        conn.pump(0.004)
    return sent


def exchange_until_resent(conn, channel, count):
    """`exchange`, then 20 more at a time until the client has resent a reliable unit (a loss
    of the relay hit one), 1,000 messages at most; what it sent."""
    sent = exchange(conn, channel, count)
    while conn.stats["resent_units"] == 0 and len(sent) < 1000:
        conn.pump(0.1)
        sent += exchange(conn, channel, 20, first=len(sent))
    return sent


def no_0x15_after_0x13(conn):
    """Section 14: a side sends 0x15 only until it has a data packet from its peer, so once the
    server sends 0x13 it never goes back (the relay does not reorder)."""
    kinds = [kind for kind, _ in conn.received_log]
    acking = [i for i, kind in enumerate(kinds) if kind in (p.DATA, p.DATA_SHORT, p.DATA_NARROW)]
    first = acking[0] if acking else len(kinds)
    expect(p.DATA_NO_ACKS not in kinds[first:], "a 0x15 after a 0x13 or 0x17")


@check("echo: handshake, reliable-ordered echo of 100+ messages in order, once each, 5% loss")
def echo_reliable(conn):
    expect(conn.first_packet[0] == p.DATA_NO_ACKS, "the server's first packet is 0x15")
    sent = exchange_until_resent(conn, 0, 100)
    expect(conn.pump(10, until=lambda: len(conn.inbox[0]) >= len(sent)), "echoes missing")
    conn.pump(0.1)
    expect(conn.inbox[0] == sent, "echoes out of order, duplicated or altered")
    no_0x15_after_0x13(conn)
    conn.inbox[0].clear()
    return f"{len(sent)} messages, {conn.stats['resent_units']} units resent"


@check("echo: the server sends draft 2's short header and last-frame forms (sections 3, 4)")
def echo_draft_two(conn):
    # Echoes of single messages: each packet's one message is its last frame, and the acks of
    # a connection without much loss fit 16 bits.
    short, last = conn.kinds_in.get(p.DATA_SHORT, 0), conn.stats["last_frames_in"]
    expect(short > 0, f"no 0x17 among {conn.kinds_in}")
    expect(last > 0, "no message frame in its last-frame form")
    return f"{short} packets with the short header, {last} last-frame messages"


@check("echo: unreliable channel delivers each echo at most once, most of them")
def echo_unreliable(conn):
    sent = exchange(conn, 1, 50, size=100)
    conn.pump(0.5)
    got = conn.inbox[1]
    expect(len(got) == len(set(got)) and set(got) <= set(sent), "a duplicate or a stranger")
    expect(len(got) >= 30, f"only {len(got)} of 50 (two 5% losses each)")
    result = f"{len(got)} of 50"
    got.clear()
    return result


@check("echo: 3,000-byte messages fragment both ways, no datagram over the MTU")
def echo_fragments(conn):
    big = os.urandom(3000)
    conn.send(0, big)
    fragments_before = conn.stats["fragment_frames_in"]
    expect(conn.pump(10, until=lambda: conn.inbox[0]), "no echo")
    expect(conn.inbox[0][0] == big, "the echo differs")
    conn.inbox[0].clear()
    expect(conn.stats["fragment_frames_in"] - fragments_before >= 3, "the echo was not split")
    expect(conn.stats["pieces_in_max"] <= p.PIECE, f"a piece of {conn.stats['pieces_in_max']}")
    expect(conn.stats["largest_datagram"] <= p.MTU, "we sent over the MTU")


@check("echo: a fragment count over the limit closes that connection (PeerMisbehaved)")
def echo_fragment_bomb(server, honest):
    bad = c.Connection(server, c.ECHO_CHANNELS)
    bad.send_packet([p.fragment_frame(0, 0, 0, 255, bytes(p.PIECE))])
    expect(bad.pump(2, until=lambda: bad.closed), "no disconnect")
    expect(bad.closed == "PeerMisbehaved", f"closed with {bad.closed}")
    bad.close_socket()


def garbage(server, seed):
    """300 datagrams from a stranger: random bytes of random sizes, and real packet types with
    random bodies (a fixed seed, so a failure replays)."""
    rng = random.Random(seed)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(300):
            size = rng.choice([0, 1, 2, 3, 11, 20, 37, 640, rng.randrange(1, 1500)])
            body = bytes(rng.randrange(256) for _ in range(size))
            if i % 2 and size:
                body = bytes([rng.choice([0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16])]) + body[1:]
            s.sendto(body, server)


@check("echo: 300 garbage datagrams from a stranger change nothing")
def echo_garbage(server, honest):
    garbage(server, 1)
    honest.pump(0.1)
    expect(honest.closed is None, f"closed: {honest.closed}")


@check("echo: the honest connection still echoes after the bad peer")
def echo_still_serves(conn):
    conn.send(0, b"still there?")
    expect(conn.pump(5, until=lambda: conn.inbox[0]), "no echo")
    expect(conn.inbox[0] == [b"still there?"], f"got {conn.inbox[0]}")


@check("echo: disconnect, after which the server sends nothing")
def echo_disconnect(conn):
    conn.disconnect()
    time.sleep(0.2)
    while conn.recv() is not None:
        pass
    time.sleep(0.4)  # three keepalive intervals
    expect(conn.recv() is None, "the server still sends after our disconnect")


@check("echo: a request of 639 bytes or another magic gets no answer; 640 and 700 bytes a "
       "37-byte challenge with the request's nonce (section 12)")
def echo_padding(server):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.3)

        def answer(datagram):
            s.sendto(datagram, server)
            try:
                return s.recvfrom(2048)[0]
            except socket.timeout:
                return None
        request = p.connect_request(77, None)
        expect(answer(request[:639]) is None, "a 639-byte request was answered")
        other_magic = request[:1] + struct.pack("<I", p.MAGIC ^ 1) + request[5:]
        expect(answer(other_magic) is None, "a request with another magic was answered")
        for datagram in (request, request + bytes(60)):
            reply = answer(datagram)
            expect(reply is not None and len(reply) == 37, f"{len(datagram)} bytes: {reply}")
            expect(p.read_challenge(reply)[0] == 77, "the challenge's nonce")


def echo_suite(rally, bench):
    port = free_port()
    server = subprocess.Popen([rally, "echo", "server", "--bind", f"127.0.0.1:{port}",
                               "--duration", "60"], stdout=subprocess.DEVNULL)
    try:
        wait_udp_server(("127.0.0.1", port))
        echo_padding(("127.0.0.1", port))
        relay = Relay(bench, ("127.0.0.1", port), SEED)
        conn = c.Connection(relay.address, c.ECHO_CHANNELS, timeout=5)
        echo_reliable(conn)
        echo_draft_two(conn)
        echo_unreliable(conn)
        echo_fragments(conn)
        echo_fragment_bomb(("127.0.0.1", port), conn)
        echo_garbage(("127.0.0.1", port), conn)
        echo_still_serves(conn)
        echo_disconnect(conn)
        stats = relay.stop()
        lost(stats, conn)
    finally:
        server.terminate()
        server.wait(timeout=5)


@check("the relay lost datagrams both ways and every reliable message still arrived")
def lost(stats, conn):
    up, down = stats["up"], stats["down"]
    expect(up["lost"] > 0 and down["lost"] > 0, f"relay {stats}")
    expect(conn.stats["resent_units"] > 0, "nothing resent")
    return (f"up {up['lost']}/{up['sent']} lost, down {down['lost']}/{down['sent']} lost, "
            f"{conn.stats['resent_units']} units resent by the client")


# ---- rally server ----

def dropped(telemetry):
    """The server's count of dropped datagrams (unauthenticated, replayed, malformed...)."""
    with urllib.request.urlopen(f"http://{telemetry}/stats", timeout=5) as response:
        report = json.load(response)
    return sum(w["dropped"] for w in report["workers"])


@check("server: `rally token issue` output is the layout of section 11 and opens with the key")
def server_token(token, address):
    private = token.open(KEY)
    expect(token.game_id == GAME_ID and token.addresses == [address], "public part")
    expect(private["addresses"] == [address] and private["client_id"] == 1, "private part")
    expect(private["client_to_server"] == token.client_to_server, "keys")
    expect(token.expires_at - token.created_at == 30, "ttl")


@check("server: token handshake, sealed traffic both ways, 100+ reliable messages and a "
       "3,000-byte one acked, 5% loss")
def server_sealed(conn):
    expect(conn.first_packet[0] == p.DATA_NO_ACKS and conn.received_log[0] == (0x15, 0),
           "the first packet is a sealed 0x15 numbered 0")
    exchange_until_resent(conn, 0, 100)
    conn.send(0, os.urandom(3000))
    expect(conn.pump(10, until=conn.settled), "not everything was acked")
    expect(conn.stats["dropped"] == 0, f"{conn.stats['dropped']} server packets failed to open")
    expect(conn.stats["largest_datagram"] <= p.MTU, "we sent over the MTU")
    expect(conn.closed is None, f"closed: {conn.closed}")
    no_0x15_after_0x13(conn)
    # Sections 3 and 13: once acked, the server's sealed packets carry a one-byte sequence.
    narrow = conn.kinds_in.get(p.DATA_NARROW, 0)
    expect(narrow > 0, f"no narrow header (0x18) among {conn.kinds_in}")
    return (f"{len(conn.received_log)} sealed packets opened ({narrow} with a one-byte "
            f"sequence), {conn.stats['resent_units']} resent")


def refusal(server, token):
    """How a connection attempt with `token` ends: "connected" or the client's reason."""
    try:
        c.Connection(server, c.ENGINE_CHANNELS, token=token, timeout=0.5).close_socket()
    except c.Refused as err:
        return str(err)
    return "connected"


@check("server: a token sealed here connects (so the refusals below are the server's)")
def server_python_token(server):
    conn = c.Connection(server, c.ENGINE_CHANNELS, token=fresh_token(server), timeout=2)
    conn.disconnect()
    conn.close_socket()


@check("server: refusals without an answer: no token, expired, wrong server, wrong game id, "
       "byte flipped, in use from another address")
def server_refusals(rally, server, honest):
    now = int(time.time())
    cases = {
        "no token": None,
        "in use from another address": honest.token,
        "expired": fresh_token(server, created_at=now - 60, expires_at=now - 1),
        "wrong server": token_issue(rally, server="127.0.0.1:1"),
        "wrong game id": token_issue(rally, server=f"{server[0]}:{server[1]}", game_id=2),
    }
    good = fresh_token(server).raw
    flipped = bytearray(good)
    flipped[300] ^= 1  # in the sealed private part
    cases["byte flipped"] = p.Token(bytes(flipped))
    for name, token in cases.items():
        # A token is opened at the request (no challenge for a bad one); the claim of its
        # nonce by an address is made at the response (section 11).
        want = "challenged, never connected" if name.startswith("in use") else "no answer"
        got = refusal(server, token)
        expect(got == want, f"{name}: {got}, not {want}")
        honest.pump(0.05)


@check("server: full server refuses with ServerFull")
def server_full(server, honest):
    # connections_per_worker_max = 3: the honest one and two more fill it.
    extra = [c.Connection(server, c.ENGINE_CHANNELS, token=fresh_token(server)) for _ in range(2)]
    try:
        c.Connection(server, c.ENGINE_CHANNELS, token=fresh_token(server))
        raise AssertionError("a fourth connection got in")
    except c.Refused as err:
        expect(str(err) == "ServerFull", f"refused with {err}")
    finally:
        for conn in extra:
            conn.disconnect()
            conn.close_socket()
        honest.pump(0.3)


@check("server: a replayed packet and one sealed under the wrong key are dropped and counted")
def server_replay_wrong_key(server, telemetry, honest):
    conn = c.Connection(server, c.ENGINE_CHANNELS, token=fresh_token(server))
    conn.pump(0.1)
    packet = conn.send_packet([bytes([p.FRAME_PING])])
    conn.pump(0.2)
    before = dropped_settled(telemetry, 0)
    conn.send_raw(packet)  # replayed
    replayed = dropped_settled(telemetry, before + 1)
    expect(replayed == before + 1, f"replayed: dropped {before} -> {replayed}, not + 1")
    number = conn.tx_number
    conn.tx_number += 1
    conn.send_raw(p.seal(os.urandom(32), number, p.data_header(number & 0xFFFF, conn.acks()),
                         bytes([p.FRAME_PING])))
    after = dropped_settled(telemetry, replayed + 1)
    expect(after == replayed + 1, f"wrong key: dropped {replayed} -> {after}, not + 1")
    honest.pump(0.05)
    conn.send(0, b"after")
    expect(conn.pump(3, until=conn.settled), "the connection stopped acking")
    expect(conn.closed is None, f"closed: {conn.closed}")
    conn.disconnect()
    conn.close_socket()
    return f"dropped {before} -> {after}"


def dropped_settled(telemetry, at_least):
    """The server's dropped count once it reaches `at_least` and three more reports (published
    every 100 ms) have not moved it."""
    deadline = time.monotonic() + 5
    while dropped(telemetry) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.35)
    return dropped(telemetry)


@check("server: the replay window's edge: 128 below the largest is accepted once, 129 is not "
       "(section 13)")
def server_replay_edge(server, telemetry):
    conn = c.Connection(server, c.ENGINE_CHANNELS, token=fresh_token(server))
    held = {}
    for number in range(conn.tx_number, conn.tx_number + 131):
        if number in (1, 2):  # sealed now, sent once 130 is the largest
            conn.tx_number += 1
            header = p.data_header(number, conn.acks())
            held[number] = p.seal(conn.token.client_to_server, number, header, b"\3")
        else:
            conn.send_packet([])
    expect(conn.tx_number == 131, f"numbers up to {conn.tx_number - 1}")
    # No pump from here on: a keepalive would move the largest number past 130.
    before = dropped_settled(telemetry, 0)
    conn.send_raw(held[2])  # 130 - 128: unseen, accepted
    conn.send_raw(held[1])  # 130 - 129: refused
    after = dropped_settled(telemetry, before + 1)
    expect(after == before + 1, f"dropped {before} -> {after}, not + 1")
    conn.send_raw(held[2])  # now seen: refused
    again = dropped_settled(telemetry, after + 1)
    expect(again == after + 1, f"a second 128-below: dropped {after} -> {again}, not + 1")
    expect(conn.closed is None, f"closed: {conn.closed}")
    conn.disconnect()
    conn.close_socket()


@check("server: a fragment count over the limit gets a sealed disconnect (PeerMisbehaved)")
def server_fragment_bomb(server):
    bad = c.Connection(server, c.ENGINE_CHANNELS, token=fresh_token(server))
    bad.send_packet([p.fragment_frame(0, 0, 0, 255, bytes(p.PIECE))])
    expect(bad.pump(2, until=lambda: bad.closed), "no (authenticated) sealed disconnect")
    expect(bad.closed == "PeerMisbehaved", f"closed with {bad.closed}")
    bad.close_socket()


@check("server: 300 garbage datagrams from a stranger change nothing")
def server_garbage(server, honest):
    garbage(server, 2)
    honest.pump(0.1)
    expect(honest.closed is None, f"closed: {honest.closed}")


@check("server: the honest connection is still served (acks, keepalives) after the bad peers")
def server_still_serves(conn):
    received = len(conn.received_log)
    conn.send(0, os.urandom(3000))
    expect(conn.pump(5, until=conn.settled), "not acked")
    conn.pump(0.3)
    expect(len(conn.received_log) > received + 2, "the server went quiet")
    expect(conn.closed is None, f"closed: {conn.closed}")


HELLO = b"\0\0"  # protocol.md section 16: the engine's hello without a session to resume


def state_snapshot(message):
    """Section 16: a state message is a prefix (varints: input reflected + 1, a count of at
    most four, that many holds) and then a snapshot of wire.md."""
    _, pos = p.read_varint(message, 0)
    count, pos = p.read_varint(message, pos)
    expect(count <= 4, f"{count} holds")
    for _ in range(count):
        _, pos = p.read_varint(message, pos)
    return message[pos:]


@check("server: the hello joins the room: a reliable welcome, then snapshots on the sequenced "
       "channel that decode per wire.md, ticks ascending, 5% loss")
def server_join(conn):
    conn.send(0, HELLO)
    expect(conn.pump(5, until=lambda: conn.inbox[0] and len(conn.inbox[1]) >= 20),
           f"{len(conn.inbox[0])} welcome, {len(conn.inbox[1])} snapshots")
    ticks, sizes = [], set()
    for message in conn.inbox[1]:
        snapshot = state_snapshot(message)
        expect(snapshot[0] == 1, f"format {snapshot[0]} before any snapshot was acknowledged")
        decoded = wire.decode(snapshot)
        ticks.append(decoded["tick"])
        sizes.add(len(decoded["entities"]))
    expect(ticks == sorted(set(ticks)), "a snapshot older than one delivered before")
    expect(min(sizes) > 0, "an empty room")
    return f"{len(ticks)} snapshots of {sorted(sizes)} entities, ticks {ticks[0]}..{ticks[-1]}"


@check("server: sealed disconnect, after which the server sends nothing")
def server_disconnect(conn):
    conn.disconnect()
    time.sleep(0.2)
    while conn.recv() is not None:
        pass
    time.sleep(0.4)
    expect(conn.recv() is None, "the server still sends after our disconnect")


def server_suite(rally, bench):
    port, http = free_port(), free_tcp_port()
    address = ("127.0.0.1", port)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
        config.write(f"""[host]
workers = 1
port = {port}
connections_per_worker_max = 3
[security]
key = "{KEY.hex()}"
protocol_id = {GAME_ID}
[telemetry]
listen = "127.0.0.1:{http}"
""")
    server = subprocess.Popen([rally, "server", "--config", config.name], stdout=subprocess.PIPE,
                              text=True)
    try:
        for line in server.stdout:  # wait for it to say it runs
            if "running; SIGTERM" in line:  # the log's "running" event, text or JSON
                break
        # Keep reading what it prints, so that a full pipe never blocks it.
        threading.Thread(target=server.stdout.read, daemon=True).start()
        telemetry = f"127.0.0.1:{http}"
        token = token_issue(rally, server=f"127.0.0.1:{port}")
        server_token(token, address)
        relay = Relay(bench, address, SEED + 1)
        honest = c.Connection(relay.address, c.ENGINE_CHANNELS, token=token, timeout=5)
        server_sealed(honest)
        server_python_token(address)
        server_refusals(rally, address, honest)
        server_full(address, honest)
        server_replay_wrong_key(address, telemetry, honest)
        server_replay_edge(address, telemetry)
        honest.pump(0.1)
        server_fragment_bomb(address)
        server_garbage(address, honest)
        server_still_serves(honest)
        server_join(honest)
        server_disconnect(honest)
        lost(relay.stop(), honest)
    finally:
        server.terminate()
        server.wait(timeout=10)
        os.unlink(config.name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rally")
    parser.add_argument("--bench")
    args = parser.parse_args()
    rally, bench = binary("rally", args.rally), binary("rally-bench", args.bench)
    start = time.monotonic()
    with open(os.path.join(ROOT, "docs", "protocol-vectors.json")) as f:
        vectors = json.load(f)
    token_vector(vectors)
    handshake_vectors(vectors)
    sealed_vectors(vectors)
    with open(os.path.join(ROOT, "docs", "wire-vectors.json")) as f:
        wire_vectors(json.load(f))
    print("-- rally echo server (plaintext), through the relay", flush=True)
    echo_suite(rally, bench)
    print("-- rally server (tokens, sealed), through the relay", flush=True)
    server_suite(rally, bench)
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed in {time.monotonic() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
