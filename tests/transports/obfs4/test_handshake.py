"""The obfs4 handshake messages: round trips, acceptance rules, robustness, and obfs4proxy interop.

The acceptance rules mirror what was measured against Debian's obfs4proxy 0.0.14
(docs/transports/obfs4.md §2.6): client pad 77..8128 accepted, 76 and 8129 not; epoch hour ±1
accepted, ±2 not; replays and trailing bytes not.
"""

import base64
import hashlib
import hmac
import json
import os
import queue
import shutil
import socket
import socketserver
import subprocess
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.secret import SecretBox
from siphash24 import siphash24

from transports.common import ntor
from transports.common.elligator2 import Keypair, new_keypair
from transports.common.replayfilter import ReplayFilter
from transports.obfs4.handshake import (
    CLIENT_MAX_PAD_LENGTH,
    CLIENT_MIN_PAD_LENGTH,
    INLINE_SEED_FRAME_LENGTH,
    MAX_HANDSHAKE_LENGTH,
    SERVER_MAX_PAD_LENGTH,
    SERVER_MIN_PAD_LENGTH,
    ClientHandshake,
    ClientHello,
    HandshakeError,
    ServerKey,
    parse_client_hello,
    server_response,
)

NOW = 1_700_000_000.0
HOUR = 3600


def make_server_key() -> ServerKey:
    return ServerKey(node_id=os.urandom(20), identity=new_keypair())


KEY = make_server_key()
OTHER_KEYS = [make_server_key() for _ in range(4)]
# Elligator keypairs are slowish to make inside hypothesis loops; a pool is enough
# because every handshake below uses fresh padding and a fresh replay filter.
SESSION_POOL = [new_keypair(elligator=True) for _ in range(16)]


def client_for(key: ServerKey, session: Keypair | None = None) -> ClientHandshake:
    return ClientHandshake(key.node_id, key.identity.public,
                           session or new_keypair(elligator=True))


def hand_built_request(key: ServerKey, representative: bytes, pad_len: int, hour: int) -> bytes:
    """A request built from the spec text alone, independent of the module under test."""
    mac_key = key.identity.public + key.node_id
    body = representative + os.urandom(pad_len)
    body += hmac.new(mac_key, representative, hashlib.sha256).digest()[:16]
    return body + hmac.new(mac_key, body + str(hour).encode(), hashlib.sha256).digest()[:16]


def full_handshake(key=KEY, keys=None, pad_len=None, server_pad=None, session=None):
    client = client_for(key, session)
    request = client.generate(pad_len=pad_len, now=NOW)
    hello = parse_client_hello(request, keys or [key], NOW, ReplayFilter())
    assert isinstance(hello, ClientHello)
    response, server_seed = server_response(hello, pad_len=server_pad)
    # Frames follow the response in the same write; the client must stop at MAC_S.
    trailer = os.urandom(INLINE_SEED_FRAME_LENGTH)
    consumed, client_seed = client.parse_server_response(response + trailer)
    assert consumed == len(response)
    return request, hello, response, client_seed, server_seed


def test_constants_are_obfs4proxys_code_values():
    assert (CLIENT_MIN_PAD_LENGTH, CLIENT_MAX_PAD_LENGTH) == (77, 8128)
    assert (SERVER_MIN_PAD_LENGTH, SERVER_MAX_PAD_LENGTH) == (0, 8051)
    assert MAX_HANDSHAKE_LENGTH == 8192
    assert INLINE_SEED_FRAME_LENGTH == 45


def test_round_trip_agrees_on_key_seed():
    request, hello, response, client_seed, server_seed = full_handshake()
    assert client_seed == server_seed
    assert hello.key == KEY
    assert hello.consumed == len(request)
    assert hello.epoch_hour == int(NOW) // HOUR
    assert 141 <= len(request) <= 8192


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(CLIENT_MIN_PAD_LENGTH, CLIENT_MAX_PAD_LENGTH), st.integers(0, 15))
def test_every_client_pad_length_is_accepted(pad_len, which):
    request, *_, c, s = full_handshake(pad_len=pad_len, session=SESSION_POOL[which])
    assert len(request) == 64 + pad_len
    assert c == s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(SERVER_MIN_PAD_LENGTH, SERVER_MAX_PAD_LENGTH), st.integers(0, 15))
def test_every_server_pad_length_is_accepted(pad_len, which):
    *_, response, c, s = full_handshake(server_pad=pad_len, session=SESSION_POOL[which])
    assert len(response) == 96 + pad_len
    assert len(response) + INLINE_SEED_FRAME_LENGTH <= MAX_HANDSHAKE_LENGTH
    assert c == s


@pytest.mark.parametrize("pad_len", [CLIENT_MIN_PAD_LENGTH, CLIENT_MAX_PAD_LENGTH])
def test_hand_built_request_at_the_limits_is_accepted(pad_len):
    kp = new_keypair(elligator=True)
    request = hand_built_request(KEY, kp.representative, pad_len, int(NOW) // HOUR)
    hello = parse_client_hello(request, [KEY], NOW, None)
    assert hello is not None and hello.consumed == len(request)


def test_pad_76_is_never_accepted():
    kp = new_keypair(elligator=True)
    request = hand_built_request(KEY, kp.representative, 76, int(NOW) // HOUR)
    assert parse_client_hello(request, [KEY], NOW, None) is None  # waits forever (times out)
    with pytest.raises(ValueError):
        client_for(KEY).generate(pad_len=76)


def test_pad_8129_is_rejected():
    kp = new_keypair(elligator=True)
    request = hand_built_request(KEY, kp.representative, 8129, int(NOW) // HOUR)
    assert len(request) == 8193
    with pytest.raises(HandshakeError):
        parse_client_hello(request, [KEY], NOW, None)
    with pytest.raises(ValueError):
        client_for(KEY).generate(pad_len=8129)


def test_server_pad_out_of_range_is_refused():
    client = client_for(KEY)
    hello = parse_client_hello(client.generate(now=NOW), [KEY], NOW, None)
    with pytest.raises(ValueError):
        server_response(hello, pad_len=SERVER_MAX_PAD_LENGTH + 1)


def test_server_picks_the_right_key_from_a_set():
    for index in range(5):
        keys = OTHER_KEYS[:index] + [KEY] + OTHER_KEYS[index:]
        _, hello, _, client_seed, server_seed = full_handshake(key=KEY, keys=keys)
        assert hello.key == KEY and client_seed == server_seed
    for key in OTHER_KEYS:
        _, hello, *_ = full_handshake(key=key, keys=[KEY, *OTHER_KEYS])
        assert hello.key == key


def test_unknown_key_is_never_accepted():
    request = client_for(make_server_key()).generate(pad_len=100, now=NOW)
    assert parse_client_hello(request, [KEY, *OTHER_KEYS], NOW, None) is None
    padded = request + os.urandom(MAX_HANDSHAKE_LENGTH - len(request))
    with pytest.raises(HandshakeError):
        parse_client_hello(padded, [KEY, *OTHER_KEYS], NOW, None)


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_epoch_hour_within_one_is_accepted_and_echoed(offset):
    client = client_for(KEY)
    request = client.generate(now=NOW + offset * HOUR)
    hello = parse_client_hello(request, [KEY], NOW, None)
    assert hello is not None
    assert hello.epoch_hour == int(NOW) // HOUR + offset
    response, seed = server_response(hello)
    assert client.parse_server_response(response) == (len(response), seed)


@pytest.mark.parametrize("offset", [-2, 2])
def test_epoch_hour_two_away_is_rejected(offset):
    request = client_for(KEY).generate(now=NOW + offset * HOUR)
    with pytest.raises(HandshakeError, match="MAC_C"):
        parse_client_hello(request, [KEY], NOW, None)


def test_replay_is_rejected():
    replay = ReplayFilter()
    request = client_for(KEY).generate(now=NOW)
    assert parse_client_hello(request, [KEY], NOW, replay) is not None
    with pytest.raises(HandshakeError, match="replay"):
        parse_client_hello(request, [KEY], NOW, replay)


def test_split_request_waits_then_completes():
    request = client_for(KEY).generate(pad_len=300, now=NOW)
    for cut in (1, 63, 64, 140, 141, len(request) - 1):
        assert parse_client_hello(request[:cut], [KEY], NOW, None) is None
    assert parse_client_hello(request, [KEY], NOW, None) is not None


def test_trailing_byte_is_not_accepted():
    request = client_for(KEY).generate(now=NOW)
    assert parse_client_hello(request + b"\x00", [KEY], NOW, None) is None


def test_low_order_client_key_fails_ntor():
    """A cert holder can send representative 0 (u = 0): marks pass, ntor must not."""
    request = hand_built_request(KEY, bytes(32), 100, int(NOW) // HOUR)
    hello = parse_client_hello(request, [KEY], NOW, None)
    assert hello is not None
    with pytest.raises(HandshakeError, match="ntor"):
        server_response(hello)


def test_truncated_response_waits():
    client = client_for(KEY)
    hello = parse_client_hello(client.generate(now=NOW), [KEY], NOW, None)
    response, _ = server_response(hello, pad_len=200)
    for cut in range(0, len(response), 7):
        assert client.parse_server_response(response[:cut]) is None


def test_tampered_response_is_rejected():
    client = client_for(KEY)
    hello = parse_client_hello(client.generate(now=NOW), [KEY], NOW, None)
    response, _ = server_response(hello, pad_len=200)
    tampered = bytearray(response)
    tampered[40] ^= 1  # inside AUTH, covered by MAC_S
    with pytest.raises(HandshakeError, match="MAC_S"):
        client.parse_server_response(bytes(tampered))


def test_wrong_identity_private_key_fails_auth():
    """Someone who knows the cert but not the identity private key cannot impersonate."""
    client = client_for(KEY)
    hello = parse_client_hello(client.generate(now=NOW), [KEY], NOW, None)
    impostor = ServerKey(KEY.node_id, Keypair(os.urandom(32), KEY.identity.public))
    forged = ClientHello(impostor, hello.representative, hello.client_public,
                         hello.epoch_hour, hello.consumed, hello.mac)
    response, _ = server_response(forged)
    with pytest.raises(HandshakeError, match="AUTH"):
        client.parse_server_response(response)


def test_oversized_response_without_mark_is_rejected():
    client = client_for(KEY)
    client.generate(now=NOW)
    assert client.parse_server_response(os.urandom(MAX_HANDSHAKE_LENGTH - 1)) is None
    with pytest.raises(HandshakeError):
        client.parse_server_response(os.urandom(MAX_HANDSHAKE_LENGTH))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=9000))
def test_garbage_request_gives_none_or_handshake_error(data):
    try:
        result = parse_client_hello(data, [KEY, *OTHER_KEYS], NOW, ReplayFilter())
    except HandshakeError:
        return
    assert result is None


_GARBAGE_CLIENT = client_for(KEY)
_GARBAGE_CLIENT.generate(now=NOW)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=9000))
def test_garbage_response_gives_none_or_handshake_error(data):
    try:
        result = _GARBAGE_CLIENT.parse_server_response(data)
    except HandshakeError:
        return
    assert result is None


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=2000), st.integers(0, 15))
def test_garbage_after_a_valid_mark_gives_none_or_handshake_error(junk, which):
    """Junk spliced into a real request (mark still in place) never crashes the parser."""
    request = client_for(KEY, SESSION_POOL[which]).generate(pad_len=100, now=NOW)
    data = request[:32] + junk + request[-32:]
    try:
        result = parse_client_hello(data, [KEY], NOW, None)
    except HandshakeError:
        return
    assert result is None or result.key == KEY


# --- interop with Debian's obfs4proxy 0.0.14 -------------------------------------------

OBFS4PROXY = "/usr/bin/obfs4proxy"


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Framer:
    """Just enough obfs4 framing (docs/transports/obfs4.md §3–4) to check the derived
    keys end to end."""

    def __init__(self, half: bytes) -> None:
        self.box = SecretBox(half[:32])
        self.prefix = half[32:48]
        self.sip_key = half[48:64]
        self.blocks = [half[64:72]]
        self.counter = 0
        self.pending: int | None = None  # decoded length of a frame not yet complete

    def _mask(self) -> int:
        # The length mask hashes ALL previous blocks (obfs4proxy never resets SipHash).
        block = siphash24(b"".join(self.blocks), key=self.sip_key).digest()
        self.blocks.append(block)
        return int.from_bytes(block[:2], "big")

    def _nonce(self) -> bytes:
        self.counter += 1
        return self.prefix + self.counter.to_bytes(8, "big")

    def encode(self, kind: int, payload: bytes) -> bytes:
        packet = bytes([kind]) + len(payload).to_bytes(2, "big") + payload
        sealed = self.box.encrypt(packet, self._nonce()).ciphertext
        return (len(sealed) ^ self._mask()).to_bytes(2, "big") + sealed

    def decode(self, buf: bytearray) -> tuple[int, bytes] | None:
        if len(buf) < 2:
            return None
        if self.pending is None:
            self.pending = int.from_bytes(buf[:2], "big") ^ self._mask()
        if len(buf) < 2 + self.pending:
            return None
        sealed = bytes(buf[2 : 2 + self.pending])
        del buf[: 2 + self.pending]
        self.pending = None
        packet = self.box.decrypt(sealed, self._nonce())
        size = int.from_bytes(packet[1:3], "big")
        return packet[0], packet[3 : 3 + size]


def _start_obfs4proxy(tmp_path):
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    echo.daemon_threads = True
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    state = tmp_path / "state"
    env = {
        "PATH": "/usr/bin:/bin",
        "TOR_PT_MANAGED_TRANSPORT_VER": "1",
        "TOR_PT_SERVER_TRANSPORTS": "obfs4",
        "TOR_PT_SERVER_BINDADDR": "obfs4-127.0.0.1:0",
        "TOR_PT_ORPORT": f"127.0.0.1:{echo.server_address[1]}",
        "TOR_PT_STATE_LOCATION": str(state),
        "TOR_PT_EXIT_ON_STDIN_CLOSE": "1",
    }
    proc = subprocess.Popen([OBFS4PROXY], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()
    return echo, proc, lines, state


@pytest.mark.interop
@pytest.mark.skipif(not shutil.which(OBFS4PROXY), reason="obfs4proxy is not installed")
def test_interop_with_obfs4proxy_server(tmp_path):
    echo, proc, lines, state = _start_obfs4proxy(tmp_path)
    try:
        smethod = None
        while True:
            line = lines.get(timeout=10).strip()
            if line.startswith("SMETHOD obfs4 "):
                smethod = line
            if line.startswith(("SMETHODS DONE", "ENV-ERROR", "SMETHOD-ERROR")):
                break
        assert smethod is not None, line
        _, _, address, args = smethod.split(" ", 3)
        host, port = address.rsplit(":", 1)
        cert = dict(kv.split("=", 1) for kv in args.removeprefix("ARGS:").split(","))["cert"]
        raw = base64.b64decode(cert + "==")
        node_id, id_public = raw[:20], raw[20:]
        saved = json.loads((state / "obfs4_state.json").read_text())
        assert (node_id.hex(), id_public.hex()) == (saved["node-id"], saved["public-key"])

        for pad_len in (CLIENT_MIN_PAD_LENGTH, CLIENT_MAX_PAD_LENGTH, None, None, None):
            client = ClientHandshake(node_id, id_public, new_keypair(elligator=True))
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(client.generate(pad_len=pad_len))
                buf = b""
                result = None
                while result is None:
                    chunk = sock.recv(65536)
                    assert chunk, "obfs4proxy closed the connection"
                    buf += chunk
                    result = client.parse_server_response(buf)
                consumed, key_seed = result

                c2s, s2c = ntor.derive_session_keys(key_seed)
                rx, tx = _Framer(s2c), _Framer(c2s)
                pending = bytearray(buf[consumed:])
                # First frame: the PRNG seed, which is the bridge's drbg-seed.
                frame = None
                while frame is None:
                    frame = rx.decode(pending)
                    if frame is None:
                        pending += sock.recv(65536)
                assert frame == (1, bytes.fromhex(saved["drbg-seed"]))

                # A payload frame must reach the echo server and come back.
                message = os.urandom(500)
                sock.sendall(tx.encode(0, message))
                echoed = b""
                while len(echoed) < len(message):
                    frame = rx.decode(pending)
                    if frame is None:
                        chunk = sock.recv(65536)
                        assert chunk, "obfs4proxy closed the connection"
                        pending += chunk
                    elif frame[0] == 0:
                        echoed += frame[1]
                assert echoed == message
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        echo.shutdown()
        echo.server_close()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def _serve_one_obfs4(listener: socket.socket, key: ServerKey, out: dict) -> None:
    """Our server side for one connection: handshake, seed frame, then read one payload."""
    try:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            buf = b""
            hello = None
            while hello is None:
                buf += conn.recv(65536)
                hello = parse_client_hello(buf, [key], time.time(), ReplayFilter())
            response, key_seed = server_response(hello)
            c2s, s2c = ntor.derive_session_keys(key_seed)
            seed_frame = _Framer(s2c).encode(1, os.urandom(24))
            assert len(seed_frame) == INLINE_SEED_FRAME_LENGTH
            conn.sendall(response + seed_frame)
            rx, pending, payload = _Framer(c2s), bytearray(), b""
            while len(payload) < out["expect"]:
                frame = rx.decode(pending)
                if frame is None:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    pending += chunk
                elif frame[0] == 0:
                    payload += frame[1]
            out["payload"] = payload
    except Exception as exc:  # reported by the test thread
        out["error"] = exc


@pytest.mark.interop
@pytest.mark.skipif(not shutil.which(OBFS4PROXY), reason="obfs4proxy is not installed")
def test_interop_obfs4proxy_client_against_our_server(tmp_path):
    key = make_server_key()
    cert = base64.b64encode(key.node_id + key.identity.public).decode().rstrip("=")
    listener = socket.create_server(("127.0.0.1", 0))
    message = os.urandom(3000)
    out: dict = {"expect": len(message)}
    server = threading.Thread(target=_serve_one_obfs4, args=(listener, key, out), daemon=True)
    server.start()
    env = {
        "PATH": "/usr/bin:/bin",
        "TOR_PT_MANAGED_TRANSPORT_VER": "1",
        "TOR_PT_CLIENT_TRANSPORTS": "obfs4",
        "TOR_PT_STATE_LOCATION": str(tmp_path / "client-state"),
        "TOR_PT_EXIT_ON_STDIN_CLOSE": "1",
    }
    proc = subprocess.Popen([OBFS4PROXY], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()
    try:
        socks_addr = None
        while True:
            line = lines.get(timeout=10).strip()
            if line.startswith("CMETHOD obfs4 socks5 "):
                socks_addr = line.split()[-1]
            if line.startswith(("CMETHODS DONE", "ENV-ERROR", "CMETHOD-ERROR")):
                break
        assert socks_addr is not None, line
        host, port = socks_addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"\x05\x01\x02")
            assert _recv_exact(sock, 2) == b"\x05\x02"
            uname = f"cert={cert};iat-mode=0".encode()
            sock.sendall(b"\x01" + bytes([len(uname)]) + uname + b"\x01\x00")
            assert _recv_exact(sock, 2) == b"\x01\x00"
            target_port = listener.getsockname()[1]
            sock.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1")
                         + target_port.to_bytes(2, "big"))
            # obfs4proxy replies success only once it has verified our response.
            reply = _recv_exact(sock, 10)
            assert reply[1] == 0, f"SOCKS reply {reply.hex()}: {out.get('error')!r}"
            sock.sendall(message)
            server.join(timeout=10)
        assert "error" not in out, out["error"]
        assert out["payload"] == message
    finally:
        listener.close()
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
