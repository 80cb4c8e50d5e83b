"""Sockets inside a namespace, without a subprocess.

A socket belongs to the network namespace of the thread that created it, for
its whole life. So a short-lived helper thread that enters the namespace with
setns(2), creates the socket and exits gives the caller a socket on the
namespace's real datapath, usable from asyncio in the root namespace.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def enter_namespace(ns: str) -> None:
    """Move the calling thread into namespace `ns` for the rest of its life.

    Threads it starts later inherit the namespace, so a thread that enters
    one and then runs an event loop (with its executor threads) lives there
    entirely: one process can hold services in several namespaces.
    """
    fd = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
    try:
        _setns(fd)
    finally:
        os.close(fd)


def in_namespace(ns: str | None, fn, *args, **kw):
    """Call fn(*args, **kw) in a thread that has entered namespace `ns`.

    ``ns=None`` is the caller's own namespace: the same workload code then runs
    on a machine of its own (a VM), where the host is the client.
    """
    if ns is None:
        return fn(*args, **kw)
    box: dict = {}

    def worker() -> None:
        try:
            fd = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            box["value"] = fn(*args, **kw)
        except BaseException as exc:  # handed back to the caller
            box["error"] = exc

    t = threading.Thread(target=worker, name=f"setns-{ns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def ns_socket(
    ns: str | None, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM
) -> socket.socket:
    """A new, unconnected socket in namespace `ns` (None: this process's own)."""
    return in_namespace(ns, socket.socket, family, type)
