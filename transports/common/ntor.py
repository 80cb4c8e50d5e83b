"""The ntor key exchange as obfs4 uses it, and the KDF that turns its seed into keys.

obfs4 borrows Tor's ntor (proposal 216) but orders the hashed transcript
differently: ``B | B | X | Y | PROTOID | NODEID`` (the identity key twice, the node
ID last) instead of Tor's ``ID | B | X | Y | PROTOID``.  Only this order
reproduces obfs4proxy's keys, so it must not be "corrected" to Tor's.

Both sides compute ``secret_input = EXP(Y,x) | EXP(B,x) | suffix`` (the server as
``EXP(X,y) | EXP(X,b) | suffix``), then ``KEY_SEED = H(secret_input, t_key)`` and
``AUTH = H(H(secret_input, t_verify) | suffix | "Server", t_mac)`` with
``H(x, t) = HMAC-SHA256(key=t, msg=x)``.  An all-zero Diffie-Hellman output
(a low-order peer key) makes the handshake fail, as in obfs4proxy; the values
are still computed so that the failure costs the same time.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from nacl.bindings import crypto_scalarmult
from nacl.exceptions import CryptoError

from transports.common.elligator2 import Keypair

PROTO_ID = b"ntor-curve25519-sha256-1"
T_MAC = PROTO_ID + b":mac"
T_KEY = PROTO_ID + b":key_extract"
T_VERIFY = PROTO_ID + b":key_verify"
M_EXPAND = PROTO_ID + b":key_expand"

PUBLIC_KEY_LENGTH = 32
NODE_ID_LENGTH = 20
KEY_SEED_LENGTH = 32
AUTH_LENGTH = 32

# One 72-byte half per direction: secretbox key 32 | nonce prefix 16 |
# SipHash-2-4 key 16 | SipHash OFB IV 8.  obfs4proxy puts client→server FIRST,
# the reverse of what obfs4-spec.txt says.
SESSION_KEY_HALF_LENGTH = 72
SESSION_KEY_LENGTH = 2 * SESSION_KEY_HALF_LENGTH

_ZERO = bytes(32)


def _check_length(name: str, value: bytes, length: int) -> None:
    if len(value) != length:
        raise ValueError(f"{name} must be {length} bytes, got {len(value)}")


def _dh(private: bytes, public: bytes) -> bytes:
    """X25519, mapping libsodium's refusal of an all-zero result to zeros."""
    try:
        return crypto_scalarmult(private, public)
    except CryptoError:
        return _ZERO


def _h(message: bytes, tweak: bytes) -> bytes:
    return hmac.new(tweak, message, hashlib.sha256).digest()


def _finish(
    exp1: bytes, exp2: bytes, node_id: bytes, b: bytes, x: bytes, y: bytes
) -> tuple[bool, bytes, bytes]:
    _check_length("node_id", node_id, NODE_ID_LENGTH)
    ok = not (hmac.compare_digest(exp1, _ZERO) | hmac.compare_digest(exp2, _ZERO))
    suffix = b + b + x + y + PROTO_ID + node_id
    secret_input = exp1 + exp2 + suffix
    key_seed = _h(secret_input, T_KEY)
    verify = _h(secret_input, T_VERIFY)
    auth = _h(verify + suffix + b"Server", T_MAC)
    return ok, key_seed, auth


def client_handshake(
    client: Keypair, server_public: bytes, id_public: bytes, node_id: bytes
) -> tuple[bool, bytes, bytes]:
    """Client side: returns ``(ok, KEY_SEED, AUTH)``; the caller compares AUTH."""
    _check_length("server_public", server_public, PUBLIC_KEY_LENGTH)
    _check_length("id_public", id_public, PUBLIC_KEY_LENGTH)
    return _finish(
        _dh(client.private, server_public),
        _dh(client.private, id_public),
        node_id,
        id_public,
        client.public,
        server_public,
    )


def server_handshake(
    client_public: bytes, server: Keypair, id_keypair: Keypair, node_id: bytes
) -> tuple[bool, bytes, bytes]:
    """Server side: returns ``(ok, KEY_SEED, AUTH)``; AUTH goes into the response."""
    _check_length("client_public", client_public, PUBLIC_KEY_LENGTH)
    return _finish(
        _dh(server.private, client_public),
        _dh(id_keypair.private, client_public),
        node_id,
        id_keypair.public,
        client_public,
        server.public,
    )


def kdf(key_seed: bytes, okm_len: int) -> bytes:
    """HKDF-SHA256 with salt ``t_key`` and info ``m_expand`` (obfs4proxy's ``ntor.Kdf``)."""
    return HKDF(
        algorithm=hashes.SHA256(), length=okm_len, salt=T_KEY, info=M_EXPAND
    ).derive(key_seed)


def derive_session_keys(key_seed: bytes) -> tuple[bytes, bytes]:
    """Split the 144-byte KDF output into ``(client_to_server, server_to_client)``."""
    okm = kdf(key_seed, SESSION_KEY_LENGTH)
    return okm[:SESSION_KEY_HALF_LENGTH], okm[SESSION_KEY_HALF_LENGTH:]
