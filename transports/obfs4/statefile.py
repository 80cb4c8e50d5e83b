"""obfs4 server identity on disk, and the client's view of it (Go: ``statefile.go``).

Why byte-compatible with obfs4proxy: a bridge operator (or an interop test) can
point our server at obfs4proxy's state directory, or the reverse, and keep the
same cert, so bridge lines stay valid whichever implementation runs.

Files in the state directory, both mode 0600 (docs/transports/obfs4.md §6.2):

* ``obfs4_state.json``: Go's ``json.Marshal`` output, compact, keys in this
  order, no trailing newline::

    {"node-id":"<40 hex>","private-key":"<64 hex>","public-key":"<64 hex>",
     "drbg-seed":"<48 hex>","iat-mode":0}

  As in Go, the public key actually used is recomputed from the private key;
  the stored ``public-key`` is carried along unchanged.
* ``obfs4_bridgeline.txt``: a fixed comment block, then
  ``Bridge obfs4 <IP ADDRESS>:<PORT> <FINGERPRINT> cert=... iat-mode=N``.
  obfs4proxy rewrites it with those placeholders on every start; so does
  :func:`load_or_create`, and :meth:`ServerState.write_bridgeline` can fill them in.

The cert is base64 (standard alphabet) of ``node-id(20) | public-key(32)``
with the trailing ``==`` stripped: 70 characters.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from transports.common.drbg import SEED_LENGTH, DrbgSeed
from transports.common.probdist import WeightedDist
from transports.obfs4.framing import MAXIMUM_SEGMENT_LENGTH

STATE_FILE: Final = "obfs4_state.json"
BRIDGE_FILE: Final = "obfs4_bridgeline.txt"

NODE_ID_LENGTH: Final = 20
PUBLIC_KEY_LENGTH: Final = 32
PRIVATE_KEY_LENGTH: Final = 32
CERT_LENGTH: Final = NODE_ID_LENGTH + PUBLIC_KEY_LENGTH  # 52 bytes, 70 base64 characters

IAT_NONE, IAT_ENABLED, IAT_PARANOID = 0, 1, 2

# Argument names, as in obfs4.go (server transport options and client SOCKS args).
NODE_ID_ARG: Final = "node-id"
PUBLIC_KEY_ARG: Final = "public-key"
PRIVATE_KEY_ARG: Final = "private-key"
SEED_ARG: Final = "drbg-seed"
IAT_ARG: Final = "iat-mode"
CERT_ARG: Final = "cert"

_BRIDGE_PREFIX: Final = (
    "# obfs4 torrc client bridge line\n"
    "#\n"
    "# This file is an automatically generated bridge line based on\n"
    "# the current obfs4proxy configuration.  EDITING IT WILL HAVE\n"
    "# NO EFFECT.\n"
    "#\n"
    "# Before distributing this Bridge, edit the placeholder fields\n"
    "# to contain the actual values:\n"
    "#  <IP ADDRESS>  - The public IP address of your obfs4 bridge.\n"
    "#  <PORT>        - The TCP/IP port of your obfs4 bridge.\n"
    "#  <FINGERPRINT> - The bridge's fingerprint.\n\n"
)

_INT_RE = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi accepts
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")


class StateError(ValueError):
    """The state file or the server's obfs4 options are unusable."""


class ArgsError(ValueError):
    """A client's bridge-line / SOCKS arguments are missing or malformed."""


def _public_from_private(private: bytes) -> bytes:
    # X25519 clamps the scalar, exactly like Go's curve25519.ScalarBaseMult, so
    # an unclamped stored private key gives the same public key.
    key = X25519PrivateKey.from_private_bytes(private)
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _unhex(value: object, name: str, length: int, error: type[ValueError]) -> bytes:
    # Strict like Go's hex.DecodeString: no whitespace, even length.
    if not isinstance(value, str):
        raise error(f"{name}: expected a hex string, got {type(value).__name__}")
    if not _HEX_RE.fullmatch(value):
        raise error(f"{name}: not valid hex: {value!r}")
    raw = bytes.fromhex(value)
    if len(raw) != length:
        raise error(f"{name}: must be {length} bytes ({2 * length} hex digits), got {len(raw)}")
    return raw


def _parse_iat(value: object, error: type[ValueError]) -> int:
    if isinstance(value, bool):
        raise error(f"invalid iat-mode {value!r}")
    if isinstance(value, int):
        mode = value
    elif isinstance(value, str) and _INT_RE.fullmatch(value):
        mode = int(value)
    else:
        raise error(f"malformed iat-mode {value!r}")
    if not IAT_NONE <= mode <= IAT_PARANOID:
        raise error(f"invalid iat-mode '{mode}' (must be 0, 1 or 2)")
    return mode


def encode_cert(node_id: bytes, public_key: bytes) -> str:
    """The 70-character ``cert=`` value for a node ID and identity public key."""
    if len(node_id) != NODE_ID_LENGTH or len(public_key) != PUBLIC_KEY_LENGTH:
        raise ValueError("cert needs a 20-byte node ID and a 32-byte public key")
    return base64.b64encode(node_id + public_key).decode("ascii").removesuffix("==")


def parse_cert(cert: str) -> tuple[bytes, bytes]:
    """(node_id, public_key) from a ``cert=`` value; :class:`ArgsError` if malformed.

    obfs4proxy appends ``==`` and base64-decodes; we also accept the padding
    already present.
    """
    text = cert.strip()
    if text.endswith("=="):
        text = text[:-2]
    try:
        raw = base64.b64decode(text + "==", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ArgsError(f"failed to decode cert: {exc}") from None
    if len(raw) != CERT_LENGTH:
        raise ArgsError(f"cert length {len(raw)} is invalid (must decode to {CERT_LENGTH} bytes)")
    return raw[:NODE_ID_LENGTH], raw[NODE_ID_LENGTH:]


@dataclass(frozen=True)
class ServerState:
    """Everything a bridge needs to be the same bridge across restarts."""

    node_id: bytes
    identity_private: bytes
    identity_public: bytes
    drbg_seed: bytes
    iat_mode: int = IAT_NONE

    def __post_init__(self) -> None:
        if len(self.node_id) != NODE_ID_LENGTH:
            raise StateError(f"node-id must be {NODE_ID_LENGTH} bytes")
        if len(self.identity_private) != PRIVATE_KEY_LENGTH:
            raise StateError(f"private-key must be {PRIVATE_KEY_LENGTH} bytes")
        if len(self.identity_public) != PUBLIC_KEY_LENGTH:
            raise StateError(f"public-key must be {PUBLIC_KEY_LENGTH} bytes")
        if len(self.drbg_seed) != SEED_LENGTH:
            raise StateError(f"drbg-seed must be {SEED_LENGTH} bytes")
        _parse_iat(self.iat_mode, StateError)

    @classmethod
    def generate(cls, iat_mode: int = IAT_NONE) -> ServerState:
        """A fresh identity from the OS CSPRNG (Go: ``newJSONServerState``).

        The identity key is a plain X25519 key: it is never sent, so it needs no
        Elligator representative.

        The DRBG seed is drawn until its length table lacks 0 (see
        :func:`paranoid_safe_seed`), so obfs4proxy clients in iat-mode 2 never
        meet the table that makes them panic.
        """
        private = os.urandom(PRIVATE_KEY_LENGTH)
        seed = bytes(DrbgSeed.new())
        while not paranoid_safe_seed(seed):
            seed = bytes(DrbgSeed.new())
        return cls(node_id=os.urandom(NODE_ID_LENGTH), identity_private=private,
                   identity_public=_public_from_private(private),
                   drbg_seed=seed, iat_mode=iat_mode)

    @property
    def cert(self) -> str:
        """The bridge line's ``cert=`` value."""
        return encode_cert(self.node_id, self.identity_public)

    def client_args(self) -> dict[str, str]:
        """What goes in SMETHOD ``ARGS:`` and in bridge lines: cert and iat-mode."""
        return {CERT_ARG: self.cert, IAT_ARG: str(self.iat_mode)}

    def bridge_line(self, addr: str = "<IP ADDRESS>", port: int | str = "<PORT>",
                    fingerprint: str = "<FINGERPRINT>") -> str:
        """``Bridge obfs4 ADDR:PORT FINGERPRINT cert=... iat-mode=N`` (no newline)."""
        host = f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr
        return (f"Bridge obfs4 {host}:{port} {fingerprint} "
                f"{CERT_ARG}={self.cert} {IAT_ARG}={self.iat_mode}")

    def write_bridgeline(self, state_dir: Path | str, addr: str = "<IP ADDRESS>",
                         port: int | str = "<PORT>", fingerprint: str = "<FINGERPRINT>") -> Path:
        """Write ``obfs4_bridgeline.txt`` as obfs4proxy does; with the defaults, byte-identical."""
        path = Path(state_dir) / BRIDGE_FILE
        _write_private(path, _BRIDGE_PREFIX + self.bridge_line(addr, port, fingerprint) + "\n")
        return path

    def to_json(self, stored_public_hex: str | None = None) -> str:
        """The state file's exact bytes (as text), in Go's key order and compact form."""
        doc = {
            NODE_ID_ARG: self.node_id.hex(),
            PRIVATE_KEY_ARG: self.identity_private.hex(),
            PUBLIC_KEY_ARG: (stored_public_hex if stored_public_hex is not None
                             else self.identity_public.hex()),
            SEED_ARG: self.drbg_seed.hex(),
            IAT_ARG: self.iat_mode,
        }
        return json.dumps(doc, separators=(",", ":"))


def paranoid_safe_seed(seed: bytes) -> bool:
    """Whether ``seed``'s packet-length table leaves out 0.

    Why it matters: in iat-mode 2, obfs4proxy 0.0.14 (and lyrebird) draw a write
    size from this table for every write and panic ("BUG: Write(), iat length
    was 0") when they draw 0. A server's seed becomes its clients' table, so a
    bridge with such a seed crashes obfs4proxy clients, and obfs4proxy bridges
    with one crash themselves. About 3.4 % of seeds hold a 0 (one of ~50 values
    out of 0..1448). Only the values matter, not ``distBias``'s weights, which
    are drawn after them.
    """
    return 0 not in WeightedDist(seed, 0, MAXIMUM_SEGMENT_LENGTH).values


def _write_private(path: Path, text: str) -> None:
    """Write a file with mode 0600, as Go's ``ioutil.WriteFile(..., 0600)``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii", newline="") as f:
        f.write(text)


def _state_from_fields(node_id_hex: object, private_hex: object, seed_hex: object,
                       iat_mode: object) -> ServerState:
    node_id = _unhex(node_id_hex, NODE_ID_ARG, NODE_ID_LENGTH, StateError)
    private = _unhex(private_hex, PRIVATE_KEY_ARG, PRIVATE_KEY_LENGTH, StateError)
    if not isinstance(seed_hex, str) or not _HEX_RE.fullmatch(seed_hex):
        raise StateError(f"{SEED_ARG}: not valid hex: {seed_hex!r}")
    try:
        seed = DrbgSeed.from_hex(seed_hex)  # Go truncates a longer seed, as DrbgSeed does
    except ValueError as exc:
        raise StateError(f"{SEED_ARG}: {exc}") from None
    return ServerState(node_id=node_id, identity_private=private,
                       identity_public=_public_from_private(private),
                       drbg_seed=bytes(seed), iat_mode=_parse_iat(iat_mode, StateError))


def load_or_create(state_dir: Path | str, iat_mode: int | None = None,
                   args: Mapping[str, str] | None = None) -> ServerState:
    """Load (or create) the server state the way obfs4proxy's ``serverStateFromArgs`` does.

    * ``args`` are the server's obfs4 transport options (``TOR_PT_SERVER_TRANSPORT_OPTIONS``
      without the ``obfs4:`` prefix). ``node-id``, ``private-key`` and
      ``drbg-seed`` must be given all together, and then replace the state file;
      otherwise the state file is read, or created with a fresh identity.
    * An ``iat-mode`` in ``args``, or the ``iat_mode`` parameter (which wins),
      overrides the stored one. ``None`` keeps the stored value; a new state
      starts at 0, as obfs4proxy's does.
    * As obfs4proxy does, the (possibly updated) state file and the bridge-line
      file are then written back.
    """
    state_dir = Path(state_dir)
    args = dict(args or {})
    given = [k for k in (NODE_ID_ARG, PRIVATE_KEY_ARG, SEED_ARG) if k in args]
    stored_public: str | None = None
    if given:
        missing = [k for k in (PRIVATE_KEY_ARG, NODE_ID_ARG, SEED_ARG) if k not in args]
        if missing:
            raise StateError(f"missing argument '{missing[0]}' (node-id, private-key and "
                             "drbg-seed must be given together)")
        state = _state_from_fields(args[NODE_ID_ARG], args[PRIVATE_KEY_ARG], args[SEED_ARG],
                                   IAT_NONE)
    else:
        path = state_dir / STATE_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            state_dir.mkdir(parents=True, exist_ok=True)
            state = ServerState.generate()
            _write_private(path, state.to_json())
        else:
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise StateError(f"failed to load statefile '{path}': {exc}") from None
            if not isinstance(doc, dict):
                raise StateError(f"failed to load statefile '{path}': not a JSON object")
            # Go's json.Unmarshal leaves absent fields empty (and then fails on them).
            state = _state_from_fields(doc.get(NODE_ID_ARG, ""), doc.get(PRIVATE_KEY_ARG, ""),
                                       doc.get(SEED_ARG, ""), doc.get(IAT_ARG, IAT_NONE))
            public = doc.get(PUBLIC_KEY_ARG)
            stored_public = public if isinstance(public, str) else ""
    mode = iat_mode if iat_mode is not None else args.get(IAT_ARG)
    if mode is not None:
        state = ServerState(state.node_id, state.identity_private, state.identity_public,
                            state.drbg_seed, _parse_iat(mode, StateError))
    state_dir.mkdir(parents=True, exist_ok=True)
    state.write_bridgeline(state_dir)
    _write_private(state_dir / STATE_FILE, state.to_json(stored_public))
    return state


class ClientArgs(NamedTuple):
    """A client's view of a bridge: ``(node_id, public_key, iat_mode)``."""

    node_id: bytes
    public_key: bytes
    iat_mode: int

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> ClientArgs:
        """From SOCKS / bridge-line arguments, as obfs4proxy's ``ParseArgs``.

        ``cert=`` (0.0.3 and later) wins; otherwise the old ``node-id=`` (40 hex)
        plus ``public-key=`` (64 hex) form. ``iat-mode`` is required: 0, 1 or 2.
        """
        if CERT_ARG in args:
            node_id, public_key = parse_cert(args[CERT_ARG])
        elif NODE_ID_ARG in args or PUBLIC_KEY_ARG in args:
            if NODE_ID_ARG not in args:
                raise ArgsError(f"missing argument '{NODE_ID_ARG}'")
            if PUBLIC_KEY_ARG not in args:
                raise ArgsError(f"missing argument '{PUBLIC_KEY_ARG}'")
            node_id = _unhex(args[NODE_ID_ARG], NODE_ID_ARG, NODE_ID_LENGTH, ArgsError)
            public_key = _unhex(args[PUBLIC_KEY_ARG], PUBLIC_KEY_ARG, PUBLIC_KEY_LENGTH,
                                ArgsError)
        else:
            raise ArgsError(f"missing argument '{CERT_ARG}' (or '{NODE_ID_ARG}' and "
                            f"'{PUBLIC_KEY_ARG}')")
        if IAT_ARG not in args:
            raise ArgsError(f"missing argument '{IAT_ARG}'")
        return cls(node_id, public_key, _parse_iat(args[IAT_ARG], ArgsError))
