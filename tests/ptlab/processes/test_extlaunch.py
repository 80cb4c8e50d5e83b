"""The external-tool launcher's readiness checks: a UDP port the tool's own process
has bound, a probe command, and the /proc tables they are read from."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptlab.processes import extlaunch


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path: Path, check: list[str], tool: str) -> tuple[list[dict], int]:
    """Run the launcher over a Python tool until the tool exits; its events and status."""
    out = subprocess.run([sys.executable, "-m", "ptlab.processes.extlaunch", *check,
                          "--component", "t", "--interval", "0.02", "--",
                          sys.executable, "-c", tool],
                         capture_output=True, text=True, timeout=30, cwd=tmp_path)
    return [json.loads(x) for x in out.stdout.splitlines()], out.returncode


def test_a_udp_server_is_ready_once_it_has_bound_its_port(tmp_path: Path):
    port = _free_udp_port()
    tool = ("import socket, time\n"
            "time.sleep(0.3)\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.bind(('127.0.0.1', {port}))\n"
            "open('bound', 'w').write(repr(time.monotonic()))\n"
            "time.sleep(0.5)\n")
    events, status = _launch(tmp_path, ["--ready-udp", f"127.0.0.1:{port}"], tool)
    assert [e["event"] for e in events] == ["ready", "exited"] and status == 0
    assert events[0]["on"] == f"udp 127.0.0.1:{port}"


@pytest.mark.parametrize("tool", [
    # A TCP listener on the same port number is not a UDP server.
    "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
    "time.sleep(0.6)\n",
    # A UDP socket on another port is not this one.
    "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.bind(('127.0.0.1', 0)); time.sleep(0.6)\n",
])
def test_a_tcp_listener_or_another_udp_port_is_not_ready(tmp_path: Path, tool: str):
    port = _free_udp_port()
    events, status = _launch(tmp_path, ["--ready-udp", f"127.0.0.1:{port}"],
                             tool.format(port=port))
    assert [e["event"] for e in events] == ["exited"] and status == 0


def test_a_udp_port_held_by_another_process_is_not_the_tools(tmp_path: Path):
    """The socket must belong to the tool or a child of it, not to whoever holds
    the port in the same namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(("127.0.0.1", 0))
        port = other.getsockname()[1]
        events, _ = _launch(tmp_path, ["--ready-udp", f"127.0.0.1:{port}"],
                            "import time; time.sleep(0.5)")
        assert [e["event"] for e in events] == ["exited"]
        assert extlaunch.udp_bound("127.0.0.1", port, os.getpid())


def test_a_child_of_the_tool_and_the_wildcard_address_count(tmp_path: Path):
    port = _free_udp_port()
    tool = ("import subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', \"import socket, time; "
            "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); "
            f"s.bind(('::', {port})); time.sleep(0.6)\"])\n")
    events, _ = _launch(tmp_path, ["--ready-udp", f"127.0.0.1:{port}"], tool)
    assert [e["event"] for e in events] == ["ready", "exited"]


def test_a_probe_the_row_names_decides(tmp_path: Path):
    tool = "import time, pathlib\ntime.sleep(0.3)\npathlib.Path('up').touch()\ntime.sleep(0.5)\n"
    started = time.monotonic()
    events, _ = _launch(tmp_path, ["--ready-cmd", f"test -e {tmp_path / 'up'}"], tool)
    assert [e["event"] for e in events] == ["ready", "exited"]
    assert events[0]["on"] == f"test -e {tmp_path / 'up'}"
    assert time.monotonic() - started >= 0.3
    events, _ = _launch(tmp_path, ["--ready-cmd", "false"], "import time; time.sleep(0.3)")
    assert [e["event"] for e in events] == ["exited"]


@pytest.mark.parametrize(("args", "message"), [
    (["--ready-udp", "nowhere", "--", "true"], "--ready-udp: expected HOST:PORT"),
    (["--ready-cmd", "", "--", "true"], "--ready-cmd: empty command"),
    (["--ready-cmd", "'x", "--", "true"], "--ready-cmd: No closing quotation"),
])
def test_bad_arguments_are_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        extlaunch.main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_proc_tables_are_read_as_the_kernel_writes_them(tmp_path: Path):
    """/proc/net/udp{,6}: 32-bit words in the host's byte order, the port in hex, the
    state 07 for a bound, unconnected socket; anything connected is left out."""
    net = tmp_path / "net"
    net.mkdir()
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  " \
           "timeout inode ref pointer drops\n"

    def word(ip: str) -> str:
        raw = socket.inet_pton(socket.AF_INET6, ip)
        return "".join(f"{int.from_bytes(raw[i:i + 4], sys.byteorder):08X}"
                       for i in range(0, 16, 4))

    v4 = f"{int.from_bytes(socket.inet_aton('198.18.3.2'), sys.byteorder):08X}"
    (net / "udp").write_text(
        head + f" 1: {v4}:01BB 00000000:0000 07 0:0 00:0 0 0 0 4242 2 0 0\n"
        f" 2: {v4}:2672 C6120002:9C40 01 0:0 00:0 0 0 0 4343 2 0 0\n")
    (net / "udp6").write_text(
        head + f" 1: {word('2001:db8:3::2')}:2672 {'0' * 32}:0000 07 0:0 00:0 0 0 0 4444 2 0 0\n")
    assert list(extlaunch.udp_sockets(tmp_path)) == [("198.18.3.2", 443, 4242),
                                                     ("2001:db8:3::2", 9842, 4444)]
