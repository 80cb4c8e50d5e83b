"""The few libbpf calls the censor's kernel fast path needs, through ctypes.

Why ctypes on Debian's libbpf1 rather than a Python package: no maintained
wheel wraps libbpf for loading an object and attaching it to tc, and libbpf is
already on every lab machine (iproute2 links it). The ring buffer is read
without it (ringbuf.py). These
wrappers turn libbpf's negative error codes and NULLs into exceptions that
name the call and the errno.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from functools import cache
from pathlib import Path

from .build import BpfUnavailable

BPF_TC_INGRESS = 1
BPF_TC_EGRESS = 2
BPF_ANY = 0


class BpfError(OSError):
    """A libbpf call failed; errno is set."""


class _TestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts (libbpf 1.x, bpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


class _TcHook(ctypes.Structure):
    """struct bpf_tc_hook (libbpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("ifindex", ctypes.c_int),
                ("attach_point", ctypes.c_int), ("parent", ctypes.c_uint32)]


class _TcOpts(ctypes.Structure):
    """struct bpf_tc_opts (libbpf.h)."""

    _fields_ = [("sz", ctypes.c_size_t), ("prog_fd", ctypes.c_int),
                ("flags", ctypes.c_uint32), ("prog_id", ctypes.c_uint32),
                ("handle", ctypes.c_uint32), ("priority", ctypes.c_uint32)]


_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "bpf_object__open_file": (ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_void_p]),
    "bpf_object__load": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_object__close": (None, [ctypes.c_void_p]),
    "bpf_object__find_program_by_name": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]),
    "bpf_object__find_map_fd_by_name": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "bpf_program__fd": (ctypes.c_int, [ctypes.c_void_p]),
    "bpf_map_update_elem": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_uint64]),
    "bpf_map_lookup_elem": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
    "bpf_prog_test_run_opts": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(_TestRunOpts)]),
    "libbpf_num_possible_cpus": (ctypes.c_int, []),
    "bpf_enable_stats": (ctypes.c_int, [ctypes.c_int]),
    "bpf_obj_get_info_by_fd": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_uint32)]),
    "bpf_tc_hook_create": (ctypes.c_int, [ctypes.POINTER(_TcHook)]),
    "bpf_tc_hook_destroy": (ctypes.c_int, [ctypes.POINTER(_TcHook)]),
    "bpf_tc_attach": (ctypes.c_int, [ctypes.POINTER(_TcHook), ctypes.POINTER(_TcOpts)]),
    "bpf_tc_detach": (ctypes.c_int, [ctypes.POINTER(_TcHook), ctypes.POINTER(_TcOpts)]),
}


@cache
def lib() -> ctypes.CDLL:
    """Debian's libbpf1 with every signature this module uses declared (a pointer
    left to ctypes' default int would be cut to 32 bits)."""
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        handle = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise BpfUnavailable(f"libbpf is not installed ({e}): apt-get install libbpf1") from e
    for fn, (restype, argtypes) in _SIGNATURES.items():
        f = getattr(handle, fn)
        f.restype, f.argtypes = restype, argtypes
    return handle


def _check(rc: int, what: str) -> int:
    """libbpf 1.x returns -errno on failure."""
    if rc < 0:
        raise BpfError(-rc, f"{what}: {os.strerror(-rc)}")
    return rc


def possible_cpus() -> int:
    """How many values a per-CPU map holds per key."""
    return _check(lib().libbpf_num_possible_cpus(), "libbpf_num_possible_cpus")


BPF_STATS_RUN_TIME = 0
# struct bpf_prog_info's run_time_ns and run_cnt (two u64s at offset 192 since
# Linux 5.1; the UAPI struct only grows at its end). tests/censor_sim/bpf checks
# the offset against the installed header.
_PROG_INFO_RUN_STATS = 192
_RUN_STATS = struct.Struct("=QQ")


def enable_run_time_stats() -> int:
    """Count every program's run time and runs until the returned descriptor is
    closed (BPF_ENABLE_STATS): nothing global is left behind if the process dies,
    unlike the kernel.bpf_stats_enabled sysctl."""
    rc = lib().bpf_enable_stats(BPF_STATS_RUN_TIME)
    if rc < 0:
        err = ctypes.get_errno() or -rc
        raise BpfError(err, f"bpf_enable_stats: {os.strerror(err)}")
    return rc


def program_run_stats(prog_fd: int) -> tuple[int, int]:
    """(nanoseconds run, runs) of a program, while run-time stats are enabled."""
    size = _PROG_INFO_RUN_STATS + _RUN_STATS.size
    info = ctypes.create_string_buffer(size)
    length = ctypes.c_uint32(size)
    _check(lib().bpf_obj_get_info_by_fd(prog_fd, info, ctypes.byref(length)),
           "bpf_obj_get_info_by_fd")
    return _RUN_STATS.unpack_from(info.raw, _PROG_INFO_RUN_STATS)


class BpfObject:
    """One loaded object file: its programs and maps live until :meth:`close`
    (or while tc holds an attached program)."""

    def __init__(self, path: Path) -> None:
        ptr = lib().bpf_object__open_file(str(path).encode(), None)
        if not ptr:
            err = ctypes.get_errno() or 22
            raise BpfError(err, f"bpf_object__open_file {path}: {os.strerror(err)}")
        self._ptr: int | None = ptr
        try:
            _check(lib().bpf_object__load(ptr),
                   f"bpf_object__load {path.name} (libbpf printed the verifier's log)")
        except BaseException:
            self.close()
            raise

    def program_fd(self, name: str) -> int:
        prog = lib().bpf_object__find_program_by_name(self._live(), name.encode())
        if not prog:
            raise KeyError(f"no program {name!r} in the object")
        return _check(lib().bpf_program__fd(prog), f"bpf_program__fd {name}")

    def map_fd(self, name: str) -> int:
        return _check(lib().bpf_object__find_map_fd_by_name(self._live(), name.encode()),
                      f"map {name}")

    def _live(self) -> int:
        if self._ptr is None:
            raise ValueError("the BPF object is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr is not None:
            lib().bpf_object__close(self._ptr)
            self._ptr = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def map_update(fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    _check(lib().bpf_map_update_elem(fd, key, value, flags), "bpf_map_update_elem")


def map_lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    """The value under ``key``, or None when the map has no such key."""
    out = ctypes.create_string_buffer(value_size)
    rc = lib().bpf_map_lookup_elem(fd, key, out)
    if rc == -2:  # ENOENT
        return None
    _check(rc, "bpf_map_lookup_elem")
    return out.raw


def test_run(prog_fd: int, data: bytes, repeat: int = 1) -> tuple[int, int]:
    """Run a tc program on one frame in the kernel (BPF_PROG_TEST_RUN), maps and
    all, without a network: (its return code, mean nanoseconds per run)."""
    buf = ctypes.create_string_buffer(data, len(data))
    opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), data_in=ctypes.addressof(buf),
                        data_size_in=len(data), repeat=repeat)
    _check(lib().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)), "bpf_prog_test_run_opts")
    return opts.retval, opts.duration


BPF_TC_F_REPLACE = 1
TC_HANDLE, TC_PRIORITY = 0x7074, 0x7074  # "pt": the lab's one slot on an interface


class TcAttachment:
    """A tc program on an interface's ingress (clsact), in the calling thread's
    network namespace. The clsact qdisc is made if the interface lacks one and
    then removed with the program; one that was there already is left.

    The filter always takes the same handle and priority, replacing what holds
    them: a censor that was killed leaves its program on the interface until the
    lab's namespace goes, and the next censor there takes its place instead of
    running beside it."""

    def __init__(self, ifname: str, prog_fd: int) -> None:
        ifindex = _ifindex(ifname)
        self._hook = _TcHook(sz=ctypes.sizeof(_TcHook), ifindex=ifindex,
                             attach_point=BPF_TC_INGRESS)
        rc = lib().bpf_tc_hook_create(ctypes.byref(self._hook))
        if rc < 0 and rc != -17:  # EEXIST: a clsact qdisc was there already
            _check(rc, f"bpf_tc_hook_create {ifname}")
        self._made_qdisc = rc == 0
        self._opts = _TcOpts(sz=ctypes.sizeof(_TcOpts), prog_fd=prog_fd,
                             flags=BPF_TC_F_REPLACE, handle=TC_HANDLE, priority=TC_PRIORITY)
        try:
            _check(lib().bpf_tc_attach(ctypes.byref(self._hook), ctypes.byref(self._opts)),
                   f"bpf_tc_attach {ifname}")
        except BaseException:
            self._drop_qdisc()
            raise
        self._attached = True
        self.ifname = ifname

    def detach(self) -> None:
        """Idempotent; quiet if the interface has gone (its namespace was removed)."""
        if not self._attached:
            return
        self._attached = False
        detach = _TcOpts(sz=ctypes.sizeof(_TcOpts), handle=self._opts.handle,
                         priority=self._opts.priority)
        lib().bpf_tc_detach(ctypes.byref(self._hook), ctypes.byref(detach))
        self._drop_qdisc()

    def _drop_qdisc(self) -> None:
        if self._made_qdisc:
            self._made_qdisc = False
            hook = _TcHook(sz=ctypes.sizeof(_TcHook), ifindex=self._hook.ifindex,
                           attach_point=BPF_TC_INGRESS | BPF_TC_EGRESS)
            lib().bpf_tc_hook_destroy(ctypes.byref(hook))


def _ifindex(ifname: str) -> int:
    try:
        return int(Path(f"/sys/class/net/{ifname}/ifindex").read_text())
    except (OSError, ValueError) as e:
        raise BpfError(19, f"no interface {ifname!r} in this namespace") from e
