"""obfs4 server state and client args, including obfs4proxy's own state directories."""

import json
import os
import random
import selectors
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from transports.common.probdist import WeightedDist
from transports.obfs4 import statefile
from transports.obfs4.statefile import (
    ArgsError,
    ClientArgs,
    ServerState,
    StateError,
    load_or_create,
    parse_cert,
)

OBFS4PROXY = "/usr/bin/obfs4proxy"


def test_create_then_load(tmp_path):
    created = load_or_create(tmp_path / "state")
    state_file = tmp_path / "state" / "obfs4_state.json"
    assert state_file.stat().st_mode & 0o777 == 0o600
    doc = json.loads(state_file.read_text())
    assert list(doc) == ["node-id", "private-key", "public-key", "drbg-seed", "iat-mode"]
    assert doc["iat-mode"] == 0 and len(doc["drbg-seed"]) == 48
    loaded = load_or_create(tmp_path / "state")
    assert loaded == created
    assert len(created.cert) == 70
    assert parse_cert(created.cert) == (created.node_id, created.identity_public)
    pub = X25519PrivateKey.from_private_bytes(created.identity_private).public_key()
    assert pub.public_bytes(Encoding.Raw, PublicFormat.Raw) == created.identity_public


def test_json_is_go_compact_form(tmp_path):
    state = load_or_create(tmp_path)
    text = (tmp_path / "obfs4_state.json").read_text()
    assert text == (f'{{"node-id":"{state.node_id.hex()}",'
                    f'"private-key":"{state.identity_private.hex()}",'
                    f'"public-key":"{state.identity_public.hex()}",'
                    f'"drbg-seed":"{state.drbg_seed.hex()}","iat-mode":0}}')


def test_bridgeline_file(tmp_path):
    state = load_or_create(tmp_path)
    text = (tmp_path / "obfs4_bridgeline.txt").read_text()
    assert text.startswith("# obfs4 torrc client bridge line\n#\n")
    assert text.endswith(f"\n\nBridge obfs4 <IP ADDRESS>:<PORT> <FINGERPRINT> "
                         f"cert={state.cert} iat-mode=0\n")
    path = state.write_bridgeline(tmp_path, "198.18.0.1", 443, "A" * 40)
    assert path.read_text().splitlines()[-1] == (
        f"Bridge obfs4 198.18.0.1:443 {'A' * 40} cert={state.cert} iat-mode=0")
    assert path.stat().st_mode & 0o777 == 0o600
    assert state.bridge_line("2001:db8::1", 80).startswith("Bridge obfs4 [2001:db8::1]:80 ")
    assert state.client_args() == {"cert": state.cert, "iat-mode": "0"}


def test_iat_override_is_written_back(tmp_path):
    first = load_or_create(tmp_path)
    assert load_or_create(tmp_path, iat_mode=2).iat_mode == 2
    assert load_or_create(tmp_path).iat_mode == 2  # persisted, like obfs4:iat-mode=N
    assert load_or_create(tmp_path, args={"iat-mode": "1"}).iat_mode == 1
    assert load_or_create(tmp_path).cert == first.cert
    with pytest.raises(StateError):
        load_or_create(tmp_path, iat_mode=3)
    with pytest.raises(StateError):
        load_or_create(tmp_path, args={"iat-mode": "one"})


def test_identity_from_args(tmp_path):
    src = ServerState.generate()
    args = {"node-id": src.node_id.hex(), "private-key": src.identity_private.hex(),
            "drbg-seed": src.drbg_seed.hex()}
    got = load_or_create(tmp_path, args=args)
    assert (got.node_id, got.identity_public, got.drbg_seed) == (
        src.node_id, src.identity_public, src.drbg_seed)
    assert load_or_create(tmp_path).cert == src.cert  # and it is now the state file
    partial = dict(args)
    del partial["drbg-seed"]
    with pytest.raises(StateError, match="drbg-seed"):
        load_or_create(tmp_path, args=partial)


@pytest.mark.parametrize("mutate", [
    lambda d: d.update({"node-id": "abc"}),
    lambda d: d.update({"private-key": "zz" * 32}),
    lambda d: d.update({"drbg-seed": "00" * 23}),
    lambda d: d.update({"iat-mode": 7}),
    lambda d: d.pop("private-key"),
])
def test_bad_state_files(tmp_path, mutate):
    load_or_create(tmp_path)
    path = tmp_path / "obfs4_state.json"
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(StateError):
        load_or_create(tmp_path)


def test_unparseable_state_file(tmp_path):
    (tmp_path / "obfs4_state.json").write_text("{not json")
    with pytest.raises(StateError, match="failed to load statefile"):
        load_or_create(tmp_path)


def test_public_key_is_recomputed_from_private_like_go(tmp_path):
    load_or_create(tmp_path)
    path = tmp_path / "obfs4_state.json"
    doc = json.loads(path.read_text())
    real_public = doc["public-key"]
    doc["public-key"] = "00" * 32
    path.write_text(json.dumps(doc, separators=(",", ":")))
    state = load_or_create(tmp_path)
    assert state.identity_public.hex() == real_public
    assert json.loads(path.read_text())["public-key"] == "00" * 32  # carried along unchanged


def test_client_args():
    state = ServerState.generate()
    assert ClientArgs.parse({"cert": state.cert, "iat-mode": "1"}) == (
        state.node_id, state.identity_public, 1)
    old = ClientArgs.parse({"node-id": state.node_id.hex(),
                            "public-key": state.identity_public.hex(), "iat-mode": "0"})
    assert old == ClientArgs(state.node_id, state.identity_public, 0)
    assert ClientArgs.parse({"cert": state.cert + "==", "iat-mode": "2"}).iat_mode == 2


@pytest.mark.parametrize(("args", "message"), [
    ({"iat-mode": "0"}, "missing argument 'cert'"),
    ({"cert": "AAAA", "iat-mode": "0"}, "cert length"),
    ({"cert": "!" * 70, "iat-mode": "0"}, "failed to decode cert"),
    ({"cert": "A" * 70}, "missing argument 'iat-mode'"),
    ({"cert": "A" * 70, "iat-mode": "3"}, "invalid iat-mode"),
    ({"cert": "A" * 70, "iat-mode": "x"}, "malformed iat-mode"),
    ({"node-id": "00" * 20, "iat-mode": "0"}, "missing argument 'public-key'"),
    ({"public-key": "00" * 32, "iat-mode": "0"}, "missing argument 'node-id'"),
    ({"node-id": "00" * 19, "public-key": "00" * 32, "iat-mode": "0"}, "node-id"),
])
def test_client_args_errors(args, message):
    with pytest.raises(ArgsError, match=message):
        ClientArgs.parse(args)


# --- the real obfs4proxy -------------------------------------------------------------

needs_obfs4proxy = pytest.mark.skipif(not os.access(OBFS4PROXY, os.X_OK),
                                      reason="obfs4proxy is not installed")


def run_obfs4proxy(state_dir: Path, timeout: float = 20.0) -> str:
    """Start obfs4proxy as a managed obfs4 server; return its SMETHOD line; stop it."""
    env = {
        "PATH": "/usr/bin:/bin",
        "TOR_PT_MANAGED_TRANSPORT_VER": "1",
        "TOR_PT_SERVER_TRANSPORTS": "obfs4",
        "TOR_PT_SERVER_BINDADDR": "obfs4-127.0.0.1:0",
        "TOR_PT_ORPORT": "127.0.0.1:9",
        "TOR_PT_STATE_LOCATION": str(state_dir),
        "TOR_PT_EXIT_ON_STDIN_CLOSE": "1",
    }
    proc = subprocess.Popen([OBFS4PROXY, "-enableLogging"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    out = b""
    lines: list[str] = []
    try:
        # Raw reads from the pipe: a buffered readline() could swallow the last line
        # while select() waits for more.
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while "SMETHODS DONE" not in lines:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sel.select(remaining):
                raise AssertionError(f"obfs4proxy did not finish SMETHODS: {out!r}")
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"obfs4proxy exited early: {out!r}")
            out += chunk
            lines = [line.strip() for line in out.decode(errors="replace").splitlines()]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    smethods = [line for line in lines if line.startswith("SMETHOD obfs4 ")]
    assert len(smethods) == 1, lines
    return smethods[0]


def smethod_args(line: str) -> dict[str, str]:
    # "SMETHOD obfs4 127.0.0.1:PORT ARGS:cert=...,iat-mode=0"; ',' and '=' are \-escaped
    # in values, and a base64 cert contains neither.
    args_field = next(f for f in line.split(" ") if f.startswith("ARGS:"))
    return dict(item.split("=", 1) for item in args_field[len("ARGS:"):].split(","))


@needs_obfs4proxy
def test_load_obfs4proxys_state(tmp_path):
    state_dir = tmp_path / "obfs4proxy-state"
    args = smethod_args(run_obfs4proxy(state_dir))
    state_json = (state_dir / "obfs4_state.json").read_bytes()
    bridge_txt = (state_dir / "obfs4_bridgeline.txt").read_bytes()
    bridge_cert = bridge_txt.decode().split("cert=")[1].split()[0]

    state = load_or_create(state_dir)
    assert state.cert == args["cert"] == bridge_cert
    assert state.iat_mode == int(args["iat-mode"]) == 0
    # Our writer reproduces obfs4proxy's files byte for byte.
    assert (state_dir / "obfs4_state.json").read_bytes() == state_json
    assert (state_dir / "obfs4_bridgeline.txt").read_bytes() == bridge_txt
    assert state.to_json().encode() == state_json
    assert (state_dir / "obfs4_state.json").stat().st_mode & 0o777 == 0o600


@needs_obfs4proxy
def test_obfs4proxy_loads_our_state(tmp_path):
    state_dir = tmp_path / "ours"
    ours = load_or_create(state_dir, iat_mode=1)
    ours_json = (state_dir / "obfs4_state.json").read_bytes()
    ours_bridge = (state_dir / "obfs4_bridgeline.txt").read_bytes()
    args = smethod_args(run_obfs4proxy(state_dir))
    assert args == {"cert": ours.cert, "iat-mode": "1"}
    assert (state_dir / "obfs4_state.json").read_bytes() == ours_json
    assert (state_dir / "obfs4_bridgeline.txt").read_bytes() == ours_bridge
    shutil.rmtree(state_dir)


def test_module_constants():
    assert statefile.STATE_FILE == "obfs4_state.json"
    assert statefile.BRIDGE_FILE == "obfs4_bridgeline.txt"
    assert statefile.CERT_LENGTH == 52


def test_paranoid_safe_seed_spots_a_length_table_holding_zero():
    """~3 % of seeds put 0 among the lengths, and obfs4proxy panics on drawing it in iat-mode 2."""
    rng = random.Random(7)
    seeds = [rng.randbytes(24) for _ in range(400)]
    unsafe = [s for s in seeds if not statefile.paranoid_safe_seed(s)]
    assert 2 <= len(unsafe) <= 30, len(unsafe)
    for s in unsafe:
        assert 0 in WeightedDist(s, 0, 1448).values
    for s in seeds[:20]:
        if s not in unsafe:
            assert 0 not in WeightedDist(s, 0, 1448).values


def test_generated_and_created_states_have_paranoid_safe_seeds(tmp_path):
    for _ in range(60):
        assert statefile.paranoid_safe_seed(ServerState.generate(iat_mode=2).drbg_seed)
    for i in range(10):
        state = load_or_create(tmp_path / str(i), iat_mode=2)
        assert statefile.paranoid_safe_seed(state.drbg_seed)
