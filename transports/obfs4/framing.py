"""obfs4 link framing: NaCl secretbox frames with SipHash-masked lengths (Go: ``framing``).

Why a module of its own: this is the bulk-data hot path, and it has to be
byte-exact with obfs4proxy (docs/transports/obfs4.md §3, §7).

Key material, one 72-byte block per direction (Go ``framing.KeyLength``)::

    [ 0:32]  NaCl secretbox (XSalsa20-Poly1305) key
    [32:48]  nonce prefix
    [48:64]  SipHash-2-4 key  ─┐ the 24-byte HashDrbg seed of the length masks
    [64:72]  SipHash-2-4 IV   ─┘

The ntor KDF output is 144 bytes: ``okm[0:72]`` protects client→server and
``okm[72:144]`` server→client (the spec says the opposite; the code is what
interoperates). :func:`directional_key_material` does that split.

A frame on the wire::

    uint16 BE   secretbox length (16 + plaintext) XOR mask
    [16]        Poly1305 tag      ─┐ crypto_secretbox output, tag first
    [n]         XSalsa20 ciphertext ─┘ n ≤ 1430

* The nonce is ``prefix(16) | counter(8, big-endian)``; the counter starts at 1,
  is never sent, and counting past 2**64 - 1 is fatal.
* ``mask`` is the first two bytes (read big-endian) of the next block of that
  direction's cumulative-SipHash :class:`~transports.common.drbg.HashDrbg`.
* A decoded length outside [16, 1446] is not reported at once: like Go (Bider's
  countermeasure to length-oracle attacks) the decoder picks a random valid
  length, waits for that many bytes, and only then fails, as a tag mismatch.

Speed: encoding and decoding work on whole batches. The encoder lays frames out
in one ``bytearray`` and seals each in place with libsodium through PyNaCl's
cffi module (``nacl._sodium``); the decoder opens frames straight out of its
receive buffer. That skips PyNaCl's per-call padding and copies, roughly halving
the cost per frame. If ``nacl._sodium`` ever disappears, the public
``nacl.bindings`` functions are used instead (same bytes, slower).
"""

from __future__ import annotations

import secrets
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, Final

from nacl.bindings import crypto_secretbox_easy, crypto_secretbox_open_easy
from nacl.exceptions import CryptoError

from transports.common.drbg import SEED_LENGTH, HashDrbg

try:  # The fast path: libsodium itself, through PyNaCl's cffi module.
    from nacl._sodium import ffi as _ffi
    from nacl._sodium import lib as _lib
except ImportError:  # pragma: no cover - every PyNaCl release so far ships it
    _ffi = None
    _lib = None

MAXIMUM_SEGMENT_LENGTH: Final = 1500 - (40 + 12)  # 1448: a whole frame on the wire
LENGTH_LENGTH: Final = 2
TAG_LENGTH: Final = 16  # Poly1305, crypto_secretbox_MACBYTES
FRAME_OVERHEAD: Final = LENGTH_LENGTH + TAG_LENGTH  # 18
MAXIMUM_FRAME_PAYLOAD_LENGTH: Final = MAXIMUM_SEGMENT_LENGTH - FRAME_OVERHEAD  # 1430
MAX_FRAME_LENGTH: Final = MAXIMUM_SEGMENT_LENGTH - LENGTH_LENGTH  # 1446: largest secretbox
MIN_FRAME_LENGTH: Final = FRAME_OVERHEAD - LENGTH_LENGTH  # 16: an empty secretbox

SECRETBOX_KEY_LENGTH: Final = 32
NONCE_PREFIX_LENGTH: Final = 16
NONCE_COUNTER_LENGTH: Final = 8
KEY_LENGTH: Final = SECRETBOX_KEY_LENGTH + NONCE_PREFIX_LENGTH + SEED_LENGTH  # 72
MAX_NONCE_COUNTER: Final = (1 << 64) - 1

NONCE_LENGTH: Final = NONCE_PREFIX_LENGTH + NONCE_COUNTER_LENGTH  # 24

_MASK_BATCH: Final = 64  # length masks drawn ahead per refill
_MIN_RUN: Final = 4  # whole segments in the buffer before looking for a run of full frames
_SLOW_AFTER_MISS: Final = 3  # frames decoded one by one after a failed look

_pack_into = struct.pack_into
_BIG_ENDIAN_HOST = sys.byteorder == "big"


_FULL_FRAME_LENGTH_FIELD: Final = MAX_FRAME_LENGTH.to_bytes(LENGTH_LENGTH, "big")


def _masked_full_lengths(masks: Sequence[int], count: int) -> tuple[bytes, bytes]:
    """The masked length fields of ``count`` full frames (1446 XOR mask), as the
    column of high bytes and the column of low bytes."""
    packed = struct.pack(f">{count}H", *masks[:count])
    fields = (int.from_bytes(packed, "big")
              ^ int.from_bytes(_FULL_FRAME_LENGTH_FIELD * count, "big")).to_bytes(2 * count, "big")
    return fields[0::2], fields[1::2]


def _nonce_block(prefix: bytes, counter: int, count: int) -> bytearray:
    """``count`` nonces ``prefix | BE64(counter + i)`` back to back, built without a
    Python-level loop (the encoder's and decoder's per-frame work is the hot path)."""
    counters = array("Q", range(counter, counter + count))
    if not _BIG_ENDIAN_HOST:
        counters.byteswap()
    block = bytearray((prefix + bytes(NONCE_COUNTER_LENGTH)) * count)
    with memoryview(block) as view, view.cast("Q") as words:
        words[2::3] = counters  # the counter is the third 8-byte word of each nonce
    return block


class FramingError(Exception):
    """The peer's frame stream is unusable; the session must end (Go: all non-ErrAgain errors).

    What decoded cleanly in the same call before the failure rides along, so a
    connection can deliver it before closing, as obfs4proxy's ``Read`` does:
    ``partial`` holds frame payloads (set by :meth:`Decoder.feed`); ``data`` and
    ``seeds`` the application bytes and PRNG seeds (set by the packet layer's
    ``PacketDecoder.feed``).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.partial: list[bytes] = []
        self.data: bytes = b""
        self.seeds: list[bytes] = []


class TagMismatchError(FramingError):
    """A frame failed Poly1305 authentication (Go: ``ErrTagMismatch``)."""


class InvalidLengthError(TagMismatchError):
    """A de-masked frame length was outside [16, 1446].

    A subclass of :class:`TagMismatchError` because Go reports it as one, and
    only after waiting for a random number of further bytes.
    """


class NonceCounterWrappedError(FramingError):
    """More than 2**64 - 1 frames in one direction (Go: ``ErrNonceCounterWrapped``)."""


class InvalidPayloadLengthError(FramingError, ValueError):
    """The encoder was given a payload over :data:`MAXIMUM_FRAME_PAYLOAD_LENGTH` bytes.

    Raised before any state changes, so (unlike the others) it is recoverable.
    """


def split_key_material(key_material: bytes) -> tuple[bytes, bytes, bytes]:
    """Split 72 bytes into (secretbox key, nonce prefix, 24-byte DRBG seed)."""
    if len(key_material) != KEY_LENGTH:
        raise ValueError(f"obfs4 framing needs {KEY_LENGTH} bytes of key material, "
                         f"got {len(key_material)}")
    km = bytes(key_material)
    prefix_end = SECRETBOX_KEY_LENGTH + NONCE_PREFIX_LENGTH
    return km[:SECRETBOX_KEY_LENGTH], km[SECRETBOX_KEY_LENGTH:prefix_end], km[prefix_end:]


def directional_key_material(okm: bytes, *, server: bool) -> tuple[bytes, bytes]:
    """Split the 144-byte ntor KDF output into (encoder key material, decoder key material).

    ``okm[0:72]`` is client→server, ``okm[72:144]`` server→client (obfs4.go).
    """
    if len(okm) != 2 * KEY_LENGTH:
        raise ValueError(f"obfs4 KDF output must be {2 * KEY_LENGTH} bytes, got {len(okm)}")
    c2s, s2c = bytes(okm[:KEY_LENGTH]), bytes(okm[KEY_LENGTH:])
    return (s2c, c2s) if server else (c2s, s2c)


class Encoder:
    """Turns frame payloads into wire bytes for one direction of one connection.

    ``counter`` is the nonce counter of the next frame (starts at 1).
    """

    __slots__ = ("_key", "_prefix", "_drbg", "counter")

    def __init__(self, key_material: bytes) -> None:
        self._key, self._prefix, seed = split_key_material(key_material)
        self._drbg = HashDrbg(seed)
        self.counter = 1

    def encode(self, payload: bytes) -> bytes:
        """One frame carrying ``payload`` (at most 1430 bytes)."""
        return self.encode_many((payload,))

    def encode_many(self, payloads: Iterable[bytes]) -> bytes:
        """One frame per payload, concatenated into a single ``bytes``."""
        items = payloads if isinstance(payloads, list | tuple) else list(payloads)
        lengths = [len(p) for p in items]
        buf = bytearray(sum(lengths) + FRAME_OVERHEAD * len(lengths))
        off = FRAME_OVERHEAD
        for payload, n in zip(items, lengths, strict=True):
            buf[off:off + n] = payload
            off += n + FRAME_OVERHEAD
        self.seal_in_place(buf, lengths)
        return bytes(buf)

    def seal_in_place(self, buf: bytearray, lengths: Sequence[int], offset: int = 0) -> int:
        """Seal frames already laid out in ``buf``; return the offset just past the last.

        Frame *i* occupies ``18 + lengths[i]`` bytes starting where frame *i-1*
        ended (the first at ``offset``); its plaintext must already sit at
        byte 18 of its slot. Bytes 0..17 of each slot are overwritten with the
        masked length and the tag. This lets a caller (the packet layer) build
        plaintexts directly in the output buffer, with no per-frame copies.

        Validates everything before touching any state: on error nothing was
        encoded and the counter and DRBG are unchanged.
        """
        n_frames = len(lengths)
        if n_frames == 0:
            return offset
        longest = max(lengths)
        if longest > MAXIMUM_FRAME_PAYLOAD_LENGTH or min(lengths) < 0:
            raise InvalidPayloadLengthError(f"framing: Invalid payload length: {longest}")
        end = offset + sum(lengths) + FRAME_OVERHEAD * n_frames
        if offset < 0 or end > len(buf):
            raise ValueError(f"buffer too short: frames end at {end}, buffer is {len(buf)}")
        counter = self.counter
        if counter + n_frames - 1 > MAX_NONCE_COUNTER:
            raise NonceCounterWrappedError("framing: Nonce counter wrapped")

        key, prefix = self._key, self._prefix
        masks = self._drbg.length_masks(n_frames)
        off = offset
        if _lib is not None:
            seal = _lib.crypto_secretbox_easy
            nonces = _nonce_block(prefix, counter, n_frames)
            full = 0  # a bulk write is a run of full frames: their length fields go in at once
            for n in lengths:
                if n != MAXIMUM_FRAME_PAYLOAD_LENGTH:
                    break
                full += 1
            with _ffi.from_buffer("unsigned char[]", buf, require_writable=True) as ptr, \
                    _ffi.from_buffer(nonces) as nonce:
                # Tag goes to off+2, ciphertext over the plaintext at off+18:
                # libsodium's secretbox_easy encrypts in place when c+16 == m.
                tag_at, text_at = ptr + LENGTH_LENGTH, ptr + FRAME_OVERHEAD
                full_end = off + full * MAXIMUM_SEGMENT_LENGTH
                for o in range(off, full_end, MAXIMUM_SEGMENT_LENGTH):
                    seal(tag_at + o, text_at + o, MAXIMUM_FRAME_PAYLOAD_LENGTH, nonce, key)
                    nonce += NONCE_LENGTH
                if full:
                    hi, lo = _masked_full_lengths(masks, full)
                    buf[off:full_end:MAXIMUM_SEGMENT_LENGTH] = hi
                    buf[off + 1:full_end:MAXIMUM_SEGMENT_LENGTH] = lo
                off = full_end
                for i in range(full, n_frames):
                    n = lengths[i]
                    seal(tag_at + off, text_at + off, n, nonce, key)
                    nonce += NONCE_LENGTH
                    _pack_into(">H", buf, off, (n + TAG_LENGTH) ^ masks[i])
                    off += n + FRAME_OVERHEAD
            counter += n_frames
        else:  # the public-API fallback; the tests run it by monkeypatching _lib
            for n, mask in zip(lengths, masks, strict=True):
                body_start = off + FRAME_OVERHEAD
                box = crypto_secretbox_easy(bytes(buf[body_start:body_start + n]),
                                            prefix + counter.to_bytes(8, "big"), key)
                buf[off + LENGTH_LENGTH:body_start + n] = box
                counter += 1
                _pack_into(">H", buf, off, (n + TAG_LENGTH) ^ mask)
                off += n + FRAME_OVERHEAD
        self.counter = counter
        return off


Runs = list[tuple[int, int, int]]


class Decoder:
    """Turns received bytes into frame payloads for one direction of one connection.

    Partial frames are buffered across calls. Every failure is a
    :class:`FramingError` and is final: later calls raise it again.

    Speed: bulk data arrives as runs of full 1448-byte frames. The decoder
    checks a whole run's length fields at once (strided slices against
    precomputed masks) and then only opens the frames, so most frames cost one
    libsodium call and a few bytecodes; anything else takes the frame-by-frame
    path. Length masks are drawn from the DRBG ahead of use, in order.
    """

    __slots__ = ("_key", "_prefix", "_drbg", "counter", "_buf", "_next_length",
                 "_next_invalid", "_error", "_masks", "_mask_pos", "_slow")

    def __init__(self, key_material: bytes) -> None:
        self._key, self._prefix, seed = split_key_material(key_material)
        self._drbg = HashDrbg(seed)
        self.counter = 1
        self._buf = bytearray()
        self._next_length = 0  # 0: the next thing in _buf is a length field
        self._next_invalid = False
        self._error: FramingError | None = None
        self._masks = b""  # upcoming length masks, 2 bytes each, big-endian
        self._mask_pos = 0  # byte offset of the next unused mask in _masks
        self._slow = 0  # frames to take one by one before looking for a run again

    @property
    def buffered(self) -> int:
        """Bytes received but not yet decoded (at most one partial frame)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the payloads of every frame now complete."""
        block, spans = self.feed_spans(data)
        view = memoryview(block)
        return [view[start:end].tobytes() for start, end in spans]

    def feed_spans(self, data: bytes) -> tuple[bytearray, list[tuple[int, int]]]:
        """Like :meth:`feed`, without one object per frame: ``(block, spans)``.

        Frames are decrypted in place; payload *i* is ``block[spans[i][0]:spans[i][1]]``.
        ``block`` is handed over to the caller (the decoder keeps only the
        undecoded tail), so views into it stay valid.
        """
        block, runs = self.feed_runs(data)
        return block, spans_of(runs)

    def feed_runs(self, data: bytes) -> tuple[bytearray, Runs]:
        """Like :meth:`feed_spans`, with frames grouped in runs (see :meth:`decode_in_place`)."""
        buf = self._buf
        buf += data
        self._buf = bytearray()
        off, runs = self.decode_in_place(buf, len(buf))
        self._buf = buf[off:]
        return buf, runs

    def decode_in_place(self, buf: bytearray, end: int) -> tuple[int, Runs]:
        """Decode the frames in ``buf[:end]`` in place: ``(consumed, runs)``.

        The zero-copy form for a caller that owns a receive buffer (the session
        reads the socket straight into one). Each run ``(start, stop, count)``
        is ``count`` consecutive frames whose payloads are
        ``buf[start + i*1448:stop + i*1448]`` (``count`` > 1 only for full
        frames); they are valid until the caller reuses the buffer.
        ``buf[consumed:end]`` is an incomplete frame (its length field may
        already be consumed); the caller must put it at the front of the next
        call's buffer. Do not mix with :meth:`feed` on one decoder. Errors are
        final; a :class:`FramingError` carries the payloads decoded before it
        in ``partial``.
        """
        if self._error is not None:
            # A fresh instance, so nothing decoded earlier is reported twice.
            raise type(self._error)(str(self._error))
        if self._buf:
            raise ValueError("decode_in_place on a decoder holding fed bytes")
        runs: Runs = []
        try:
            if _lib is not None:
                with _ffi.from_buffer("unsigned char[]", buf, require_writable=True) as ptr:
                    off = self._decode_raw(buf, end, ptr, runs)
            else:
                off = self._decode_portable(buf, end, runs)
        except FramingError as err:
            view = memoryview(buf)
            err.partial = [view[start:stop].tobytes() for start, stop in spans_of(runs)]
            view.release()
            self._error = err
            raise
        return off, runs

    def _random_length(self) -> int:
        """Bider's countermeasure, as obfs4proxy: on a bad length, wait for a random
        valid length's worth of bytes before failing, so the failure point does not
        reveal the length field's value."""
        self._next_invalid = True
        return MIN_FRAME_LENGTH + secrets.randbelow(MAX_FRAME_LENGTH - MIN_FRAME_LENGTH + 1)

    def _need_masks(self, count: int) -> None:
        """At least ``count`` unused masks in ``_masks``."""
        have = (len(self._masks) - self._mask_pos) // LENGTH_LENGTH
        if have < count:
            more = count - have + _MASK_BATCH
            self._masks = self._masks[self._mask_pos:] + struct.pack(
                f">{more}H", *self._drbg.length_masks(more))
            self._mask_pos = 0

    def _next_mask(self) -> int:
        self._need_masks(1)
        pos = self._mask_pos
        self._mask_pos = pos + LENGTH_LENGTH
        return (self._masks[pos] << 8) | self._masks[pos + 1]

    def _full_run(self, buf: bytearray, off: int, count: int) -> int:
        """How many of the next ``count`` whole segments at ``off`` are full frames
        (a length field that decodes to 1446). Consumes no mask."""
        self._need_masks(count)
        stop = off + count * MAXIMUM_SEGMENT_LENGTH
        pos, masks = self._mask_pos, self._masks
        mask_stop = pos + count * LENGTH_LENGTH
        hi = (int.from_bytes(buf[off:stop:MAXIMUM_SEGMENT_LENGTH], "big")
              ^ int.from_bytes(masks[pos:mask_stop:2], "big")
              ^ int.from_bytes(_FULL_FRAME_LENGTH_FIELD[:1] * count, "big"))
        lo = (int.from_bytes(buf[off + 1:stop:MAXIMUM_SEGMENT_LENGTH], "big")
              ^ int.from_bytes(masks[pos + 1:mask_stop:2], "big")
              ^ int.from_bytes(_FULL_FRAME_LENGTH_FIELD[1:] * count, "big"))
        diff = hi | lo  # count bytes, big-endian: the first non-zero byte is the first miss
        return count - (diff.bit_length() + 7) // 8

    def _decode_raw(self, buf: bytearray, avail: int, ptr: Any, runs: Runs) -> int:
        # The hot path: everything in locals, state written back once (finally).
        open_easy = _lib.crypto_secretbox_open_easy
        key, prefix = self._key, self._prefix
        nonce = bytearray(prefix + bytes(NONCE_COUNTER_LENGTH))
        append = runs.append
        off = 0
        length = self._next_length
        counter = self.counter
        try:
            with _ffi.from_buffer(nonce) as nonce_ptr:
                while True:
                    if length == 0:
                        count = (avail - off) // MAXIMUM_SEGMENT_LENGTH
                        if (count >= _MIN_RUN and not self._slow
                                and counter + count - 1 <= MAX_NONCE_COUNTER):
                            count = self._full_run(buf, off, count)
                            if count:
                                good = self._open_run(buf, off, count, ptr, counter, runs)
                                counter += good
                                if good < count:
                                    raise TagMismatchError("framing: Poly1305 tag mismatch")
                                off += count * MAXIMUM_SEGMENT_LENGTH
                                continue
                            self._slow = _SLOW_AFTER_MISS
                        if avail - off < LENGTH_LENGTH:
                            return off
                        if counter > MAX_NONCE_COUNTER:  # checked here, as Go does
                            raise NonceCounterWrappedError("framing: Nonce counter wrapped")
                        length = ((buf[off] << 8) | buf[off + 1]) ^ self._next_mask()
                        off += LENGTH_LENGTH
                        if length < MIN_FRAME_LENGTH or length > MAX_FRAME_LENGTH:
                            length = self._random_length()
                    if avail - off < length:
                        return off
                    if self._next_invalid:
                        raise InvalidLengthError(
                            "framing: Poly1305 tag mismatch (invalid frame length)")
                    # Plaintext written over the ciphertext (m == c + 16 is libsodium's
                    # in-place case); on a bad tag nothing is written.
                    _pack_into(">Q", nonce, NONCE_PREFIX_LENGTH, counter)
                    start = off + TAG_LENGTH
                    if open_easy(ptr + start, ptr + off, length, nonce_ptr, key) != 0:
                        raise TagMismatchError("framing: Poly1305 tag mismatch")
                    off += length
                    append((start, off, 1))
                    length = 0
                    counter += 1
                    if self._slow:
                        self._slow -= 1
        finally:
            self._next_length = length
            self.counter = counter

    def _open_run(self, buf: bytearray, off: int, count: int, ptr: Any, counter: int,
                  runs: Runs) -> int:
        """Open ``count`` full frames at ``off`` (their lengths already checked) and
        add them to ``runs``; stop at a bad tag. How many opened."""
        open_easy = _lib.crypto_secretbox_open_easy
        key = self._key
        nonces = _nonce_block(self._prefix, counter, count)
        box_at, text_at = ptr + LENGTH_LENGTH, ptr + FRAME_OVERHEAD
        stop = off + count * MAXIMUM_SEGMENT_LENGTH
        good = count
        with _ffi.from_buffer(nonces) as nonce:
            for o in range(off, stop, MAXIMUM_SEGMENT_LENGTH):
                if open_easy(text_at + o, box_at + o, MAX_FRAME_LENGTH, nonce, key) != 0:
                    good = (o - off) // MAXIMUM_SEGMENT_LENGTH
                    self._mask_pos += LENGTH_LENGTH  # the bad frame's length was read
                    break
                nonce += NONCE_LENGTH
        self._mask_pos += good * LENGTH_LENGTH
        if good:
            runs.append((off + FRAME_OVERHEAD, off + MAXIMUM_SEGMENT_LENGTH, good))
        return good

    def _decode_portable(self, buf: bytearray, avail: int, runs: Runs) -> int:
        key, prefix = self._key, self._prefix
        off = 0
        while True:
            length = self._next_length
            if length == 0:
                if avail - off < LENGTH_LENGTH:
                    return off
                if self.counter > MAX_NONCE_COUNTER:
                    raise NonceCounterWrappedError("framing: Nonce counter wrapped")
                length = ((buf[off] << 8) | buf[off + 1]) ^ self._next_mask()
                off += LENGTH_LENGTH
                if length < MIN_FRAME_LENGTH or length > MAX_FRAME_LENGTH:
                    length = self._random_length()
                self._next_length = length
            if avail - off < length:
                return off
            if self._next_invalid:
                raise InvalidLengthError("framing: Poly1305 tag mismatch (invalid frame length)")
            try:
                plain = crypto_secretbox_open_easy(bytes(buf[off:off + length]),
                                                   prefix + self.counter.to_bytes(8, "big"), key)
            except CryptoError:
                raise TagMismatchError("framing: Poly1305 tag mismatch") from None
            start = off + TAG_LENGTH
            off += length
            buf[start:off] = plain
            runs.append((start, off, 1))
            self._next_length = 0
            self.counter += 1


def spans_of(runs: Runs) -> list[tuple[int, int]]:
    """Runs as one ``(start, stop)`` per frame."""
    spans: list[tuple[int, int]] = []
    for start, stop, count in runs:
        if count == 1:
            spans.append((start, stop))
        else:
            step = MAXIMUM_SEGMENT_LENGTH
            spans.extend(zip(range(start, start + count * step, step),
                             range(stop, stop + count * step, step), strict=True))
    return spans
